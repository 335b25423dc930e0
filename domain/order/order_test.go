package order_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
)

func newOrder(t *testing.T) *order.Order {
	t.Helper()
	o, err := order.New(order.NewOrder{ID: uuid.New(), CustomerID: uuid.New(), AmountCents: 1000})
	require.NoError(t, err)
	// Reload, as a command would: only the stored events count.
	o, err = order.Rehydrate(o.Changes())
	require.NoError(t, err)
	return o
}

// at moves a fresh order to status s through legal transitions.
func at(t *testing.T, s order.Status) *order.Order {
	t.Helper()
	o := newOrder(t)
	path := map[order.Status][]order.Status{
		order.StatusPending:     nil,
		order.StatusConfirmed:   {order.StatusConfirmed},
		order.StatusDispatching: {order.StatusDispatching},
		order.StatusInService:   {order.StatusInService},
		order.StatusCompleted:   {order.StatusInService, order.StatusCompleted},
	}
	if s == order.StatusCancelled {
		require.NoError(t, o.Cancel("test"))
	}
	for _, step := range path[s] {
		require.NoError(t, o.ChangeStatus(step, time.Now()))
	}
	require.Equal(t, s, o.Status())
	return rehydrateAll(t, o)
}

func rehydrateAll(t *testing.T, o *order.Order) *order.Order {
	t.Helper()
	// The stream so far is OrderCreated plus the recorded changes.
	created, err := order.New(order.NewOrder{ID: o.ID(), CustomerID: o.CustomerID(), AmountCents: 1000})
	require.NoError(t, err)
	stream := append([]event.Event{}, created.Changes()...)
	stream = append(stream, o.Changes()...)
	r, err := order.Rehydrate(stream)
	require.NoError(t, err)
	require.Equal(t, o.Status(), r.Status())
	return r
}

func TestTransitions(t *testing.T) {
	allowed := map[order.Status][]order.Status{
		order.StatusPending:     {order.StatusConfirmed, order.StatusDispatching, order.StatusInService},
		order.StatusConfirmed:   {order.StatusDispatching, order.StatusInService},
		order.StatusDispatching: {order.StatusConfirmed, order.StatusInService},
		order.StatusInService:   {order.StatusCompleted},
	}
	for _, from := range order.Statuses {
		for _, to := range order.Statuses {
			if to == order.StatusCancelled || to == from {
				continue
			}
			t.Run(string(from)+"->"+string(to), func(t *testing.T) {
				o := at(t, from)
				err := o.ChangeStatus(to, time.Now())
				legal := false
				for _, a := range allowed[from] {
					legal = legal || a == to
				}
				if legal {
					require.NoError(t, err)
					require.Len(t, o.Changes(), 1)
					require.Equal(t, to, o.Status())
					return
				}
				var inv *order.InvalidTransitionError
				require.ErrorAs(t, err, &inv)
				require.Equal(t, "order.invalid_transition", inv.Rule())
				require.Empty(t, o.Changes(), "a broken rule records nothing")
			})
		}
	}
}

func TestCompletedAtIsSet(t *testing.T) {
	o := at(t, order.StatusInService)
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.FixedZone("x", 3600))
	require.NoError(t, o.ChangeStatus(order.StatusCompleted, now))
	ev := o.Changes()[0].(order.StatusChanged)
	require.NotNil(t, ev.CompletedAt)
	require.True(t, ev.CompletedAt.Equal(now))
	require.Equal(t, time.UTC, ev.CompletedAt.Location())
}

func TestNoOpRecordsNothing(t *testing.T) {
	o := at(t, order.StatusConfirmed)
	require.NoError(t, o.ChangeStatus(order.StatusConfirmed, time.Now()))
	require.NoError(t, o.UpdateDetails(o.Details()))
	require.Empty(t, o.Changes())

	c := at(t, order.StatusCancelled)
	require.NoError(t, c.Cancel("again"), "cancelling a cancelled order changes nothing")
	require.Empty(t, c.Changes())
}

func TestCancel(t *testing.T) {
	for _, s := range order.Statuses {
		t.Run(string(s), func(t *testing.T) {
			o := at(t, s)
			err := o.Cancel("customer called")
			switch s {
			case order.StatusCompleted:
				require.ErrorAs(t, err, new(*order.InvalidTransitionError))
			case order.StatusCancelled:
				require.NoError(t, err)
				require.Empty(t, o.Changes())
			default:
				require.NoError(t, err)
				require.Equal(t, order.StatusCancelled, o.Status())
			}
		})
	}
	var v *apperr.ValidationError
	require.ErrorAs(t, newOrder(t).Cancel("   "), &v)
	require.Equal(t, "reason", v.Fields[0].Field)
}

func TestValidation(t *testing.T) {
	_, err := order.New(order.NewOrder{ID: uuid.New(), CustomerID: "nope", AmountCents: -1})
	var v *apperr.ValidationError
	require.ErrorAs(t, err, &v)
	fields := map[string]bool{}
	for _, f := range v.Fields {
		fields[f.Field] = true
	}
	require.Equal(t, map[string]bool{"customer_id": true, "amount_cents": true}, fields)

	o := at(t, order.StatusCompleted)
	d := o.Details()
	d.AmountCents = 5
	var rule *apperr.RuleError
	require.ErrorAs(t, o.UpdateDetails(d), &rule)
	require.Equal(t, "order.final", rule.Rule)
}

func TestAssign(t *testing.T) {
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	a := order.Assignment{StaffID: uuid.New(), StartAt: start, EndAt: start.Add(2 * time.Hour)}

	o := at(t, order.StatusPending)
	require.NoError(t, o.Assign(a))
	require.Len(t, o.Changes(), 2, "assignment and the move to dispatching")
	require.IsType(t, order.AssignmentUpdated{}, o.Changes()[0])
	require.Equal(t, order.StatusDispatching, o.Status())

	again := rehydrateAll(t, o)
	require.NoError(t, again.Assign(a))
	require.Empty(t, again.Changes(), "the same assignment again changes nothing")

	bad := a
	bad.EndAt = start
	var v *apperr.ValidationError
	require.ErrorAs(t, at(t, order.StatusPending).Assign(bad), &v)
	require.Equal(t, "end_at", v.Fields[0].Field)

	var rule *apperr.RuleError
	require.ErrorAs(t, at(t, order.StatusInService).Assign(a), &rule)
	require.Equal(t, "order.assignment_not_allowed", rule.Rule)
}

func TestDecodeRejectsUnknownAndCorrupt(t *testing.T) {
	_, err := order.Decode("OrderExploded", []byte(`{}`))
	require.Error(t, err)
	_, err = order.Decode("OrderCreated", []byte(`{"amount_cents":"ten"}`))
	require.Error(t, err)
	e, err := order.Decode("OrderCancelled", []byte(`{"from":"pending","reason":"x"}`))
	require.NoError(t, err)
	require.Equal(t, order.Cancelled{From: order.StatusPending, Reason: "x"}, e)
}

func TestRehydrateNeedsCreatedFirst(t *testing.T) {
	_, err := order.Rehydrate([]event.Event{order.Cancelled{Reason: "x"}})
	require.Error(t, err)
	require.False(t, errors.Is(err, apperr.ErrNotFound))
}

// Free text refuses control characters: multi-line fields allow tab and
// line breaks, the payment method none.
func TestControlCharacters(t *testing.T) {
	field := func(err error) string {
		var v *apperr.ValidationError
		require.ErrorAs(t, err, &v)
		require.Len(t, v.Fields, 1, "%v", err)
		return v.Fields[0].Field
	}
	_, err := order.New(order.NewOrder{ID: uuid.New(), CustomerID: uuid.New(), Notes: "a\x00b"})
	require.Equal(t, "notes", field(err))
	_, err = order.New(order.NewOrder{ID: uuid.New(), CustomerID: uuid.New(), Notes: "line one\r\n\tline two"})
	require.NoError(t, err)
	require.Equal(t, "reason", field(at(t, order.StatusPending).Cancel("no\x1bway")))

	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	a := order.Assignment{StaffID: uuid.New(), StartAt: start, EndAt: start.Add(time.Hour), DispatchNote: "x\x7f"}
	require.Equal(t, "dispatch_note", field(a.Validate()))

	s := order.Settlement{Status: order.Settled, PaymentMethod: "card\n"}
	require.Equal(t, "payment_method", field(at(t, order.StatusPending).Settle(s)))
	s = order.Settlement{Status: order.Settled, PaymentMethod: "card", Note: "\x00"}
	require.Equal(t, "settlement_note", field(at(t, order.StatusPending).Settle(s)))
}
