package command_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/order"
	"hearth/domain/uuid"
)

func TestCreateOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, err := e.orders.Create(t.Context(), command.CreateOrder{Meta: e.meta(), CustomerID: e.customer, AmountCents: 4200, Notes: "gate code 12"})
	require.NoError(t, err)
	require.Equal(t, 1, w.Appended)
	require.Equal(t, []string{"OrderCreated"}, e.tx.Types(w.Stream[0].StreamID))
	require.Equal(t, order.Created{OrderID: w.Stream[0].StreamID, CustomerID: e.customer, AmountCents: 4200, Notes: "gate code 12",
		Status: order.StatusPending}, w.Stream[0].Event)
	require.Equal(t, map[string]string{e.customer: "Carla Customer"}, w.Names, "the name the check read")
	require.Equal(t, e.tx.Position(), w.Position)

	// An order may name its customer's service request.
	request := e.createRequest(t)
	w, err = e.orders.Create(t.Context(), command.CreateOrder{Meta: e.meta(), RequestID: request, CustomerID: e.customer})
	require.NoError(t, err)
	require.Equal(t, request, w.Stream[0].Event.(order.Created).RequestID)
	otherCustomer := uuid.New()
	e.tx.AddCustomer(e.merchant, otherCustomer, "Otto Other")
	e.tx.AddCustomer(e.other, otherCustomer, "Otto Other")

	for name, tc := range map[string]struct {
		cmd      command.CreateOrder
		merchant string // default e.merchant
		field    string
	}{
		"unknown customer":            {cmd: command.CreateOrder{CustomerID: uuid.New()}, field: "customer_id"},
		"another merchant's customer": {cmd: command.CreateOrder{CustomerID: e.customer}, merchant: e.other, field: "customer_id"},
		"customer not a uuid":         {cmd: command.CreateOrder{CustomerID: "nope"}, field: "customer_id"},
		"negative amount":             {cmd: command.CreateOrder{CustomerID: e.customer, AmountCents: -1}, field: "amount_cents"},
		"half a window":               {cmd: command.CreateOrder{CustomerID: e.customer, ScheduledStartAt: &t0}, field: "scheduled_end_at"},
		"unknown request":             {cmd: command.CreateOrder{CustomerID: e.customer, RequestID: uuid.New()}, field: "request_id"},
		"another merchant's request":  {cmd: command.CreateOrder{CustomerID: otherCustomer, RequestID: request}, merchant: e.other, field: "request_id"},
		"another customer's request":  {cmd: command.CreateOrder{CustomerID: otherCustomer, RequestID: request}, field: "request_id"},
	} {
		t.Run(name, func(t *testing.T) {
			before := e.tx.Position()
			tc.cmd.Meta = e.meta()
			if tc.merchant != "" {
				tc.cmd.Meta.MerchantID = tc.merchant
			}
			_, err := e.orders.Create(t.Context(), tc.cmd)
			requireField(t, err, tc.field)
			e.unchanged(t, before)
		})
	}
}

// Each order command appends its events; a command that changes nothing
// appends nothing.
func TestOrderCommandsAppend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	paidAt := t0.Add(time.Hour)
	for name, tc := range map[string]struct {
		run  func(id string) (command.Written, error)
		want []string // events appended; none: a no-op
	}{
		"update details": {func(id string) (command.Written, error) {
			return e.orders.UpdateDetails(t.Context(), command.UpdateOrderDetails{OrderTarget: e.target(id, nil), AmountCents: ptr[int64](5)})
		}, []string{"OrderDetailsUpdated"}},
		"update details to the same": {func(id string) (command.Written, error) {
			return e.orders.UpdateDetails(t.Context(), command.UpdateOrderDetails{OrderTarget: e.target(id, nil), AmountCents: ptr[int64](1000),
				CustomerID: &e.customer})
		}, nil},
		"confirm": {func(id string) (command.Written, error) {
			return e.orders.ChangeStatus(t.Context(), command.ChangeOrderStatus{OrderTarget: e.target(id, ptr(1)), Status: "confirmed"})
		}, []string{"OrderStatusChanged"}},
		"to the same status": {func(id string) (command.Written, error) {
			return e.orders.ChangeStatus(t.Context(), command.ChangeOrderStatus{OrderTarget: e.target(id, nil), Status: "pending"})
		}, nil},
		"cancel": {func(id string) (command.Written, error) {
			return e.orders.Cancel(t.Context(), command.CancelOrder{OrderTarget: e.target(id, nil), Reason: "moved away"})
		}, []string{"OrderCancelled"}},
		"settle": {func(id string) (command.Written, error) {
			return e.orders.Settle(t.Context(), command.SettleOrder{OrderTarget: e.target(id, nil), SettlementStatus: "settled",
				PaidAmountCents: 1000, PaymentMethod: "card", PaidAt: &paidAt})
		}, []string{"OrderSettlementUpdated"}},
		"settle as it is": {func(id string) (command.Written, error) {
			return e.orders.Settle(t.Context(), command.SettleOrder{OrderTarget: e.target(id, nil), SettlementStatus: "unsettled"})
		}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			id := e.createOrder(t)
			before := e.tx.Position()
			w, err := tc.run(id)
			require.NoError(t, err)
			require.Equal(t, len(tc.want), w.Appended)
			require.Equal(t, append([]string{"OrderCreated"}, tc.want...), e.tx.Types(id))
			require.Len(t, w.Stream, 1+len(tc.want), "the whole stream")
			require.Equal(t, before+int64(len(tc.want)), e.tx.Position())
		})
	}
}

// Commands that break a rule, or name a stale version or a missing order,
// fail and append nothing.
func TestOrderCommandsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cancelled := e.createOrder(t)
	_, err := e.orders.Cancel(t.Context(), command.CancelOrder{OrderTarget: e.target(cancelled, nil), Reason: "gone"})
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		run   func(id string) (command.Written, error)
		check func(t *testing.T, err error)
	}{
		"unknown status": {func(id string) (command.Written, error) {
			return e.orders.ChangeStatus(t.Context(), command.ChangeOrderStatus{OrderTarget: e.target(id, nil), Status: "lost"})
		}, func(t *testing.T, err error) { requireField(t, err, "status") }},
		"cancel through status": {func(id string) (command.Written, error) {
			return e.orders.ChangeStatus(t.Context(), command.ChangeOrderStatus{OrderTarget: e.target(id, nil), Status: "cancelled"})
		}, func(t *testing.T, err error) { requireRule(t, err, "order.cancel_needs_reason") }},
		"pending to completed": {func(id string) (command.Written, error) {
			return e.orders.ChangeStatus(t.Context(), command.ChangeOrderStatus{OrderTarget: e.target(id, nil), Status: "completed"})
		}, func(t *testing.T, err error) {
			var tr *order.InvalidTransitionError
			require.ErrorAs(t, err, &tr)
			require.Equal(t, order.StatusPending, tr.From)
			require.Equal(t, order.StatusCompleted, tr.To)
			requireRule(t, err, "order.invalid_transition")
		}},
		"cancel without reason": {func(id string) (command.Written, error) {
			return e.orders.Cancel(t.Context(), command.CancelOrder{OrderTarget: e.target(id, nil), Reason: "  "})
		}, func(t *testing.T, err error) { requireField(t, err, "reason") }},
		"update to an unknown customer": {func(id string) (command.Written, error) {
			return e.orders.UpdateDetails(t.Context(), command.UpdateOrderDetails{OrderTarget: e.target(id, nil), CustomerID: ptr(uuid.New())})
		}, func(t *testing.T, err error) { requireField(t, err, "customer_id") }},
		"stale version": {func(id string) (command.Written, error) {
			return e.orders.ChangeStatus(t.Context(), command.ChangeOrderStatus{OrderTarget: e.target(id, ptr(0)), Status: "confirmed"})
		}, func(t *testing.T, err error) { requireVersion(t, err, 0, 1) }},
		"stale version of a no-op": {func(id string) (command.Written, error) {
			return e.orders.ChangeStatus(t.Context(), command.ChangeOrderStatus{OrderTarget: e.target(id, ptr(2)), Status: "pending"})
		}, func(t *testing.T, err error) { requireVersion(t, err, 2, 1) }},
		"unknown order": {func(string) (command.Written, error) {
			return e.orders.ChangeStatus(t.Context(), command.ChangeOrderStatus{OrderTarget: e.target(uuid.New(), nil), Status: "confirmed"})
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, apperr.ErrNotFound) }},
		"another merchant's order": {func(id string) (command.Written, error) {
			tg := e.target(id, nil)
			tg.Meta.MerchantID = e.other
			return e.orders.ChangeStatus(t.Context(), command.ChangeOrderStatus{OrderTarget: tg, Status: "confirmed"})
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, apperr.ErrNotFound) }},
		"update a cancelled order": {func(string) (command.Written, error) {
			return e.orders.UpdateDetails(t.Context(), command.UpdateOrderDetails{OrderTarget: e.target(cancelled, nil), Notes: ptr("late")})
		}, func(t *testing.T, err error) { requireRule(t, err, "order.final") }},
		"assign a cancelled order": {func(string) (command.Written, error) {
			return e.orders.Assign(t.Context(), command.AssignOrder{OrderTarget: e.target(cancelled, nil), StaffID: e.staff,
				StartAt: t0, EndAt: t0.Add(time.Hour)})
		}, func(t *testing.T, err error) { requireRule(t, err, "order.assignment_not_allowed") }},
		"assign an inactive staff member": {func(id string) (command.Written, error) {
			return e.orders.Assign(t.Context(), command.AssignOrder{OrderTarget: e.target(id, nil), StaffID: e.inactive,
				StartAt: t0, EndAt: t0.Add(time.Hour)})
		}, func(t *testing.T, err error) { requireRule(t, err, "order.staff_inactive") }},
		"assign an unknown staff member": {func(id string) (command.Written, error) {
			return e.orders.Assign(t.Context(), command.AssignOrder{OrderTarget: e.target(id, nil), StaffID: uuid.New(),
				StartAt: t0, EndAt: t0.Add(time.Hour)})
		}, func(t *testing.T, err error) { requireField(t, err, "staff_id") }},
		"assign an empty window": {func(id string) (command.Written, error) {
			return e.orders.Assign(t.Context(), command.AssignOrder{OrderTarget: e.target(id, nil), StaffID: e.staff, StartAt: t0, EndAt: t0})
		}, func(t *testing.T, err error) { requireField(t, err, "end_at") }},
	} {
		t.Run(name, func(t *testing.T) {
			id := e.createOrder(t)
			before := e.tx.Position()
			_, err := tc.run(id)
			tc.check(t, err)
			e.unchanged(t, before)
		})
	}
}

// Assign is a flow: the order takes the assignment and moves to
// dispatching, and a schedule is created and booked; reassigning updates
// that schedule; an overlapping booking of the staff member is a conflict
// naming the other schedule, and then neither the order nor a schedule
// changes.
func TestAssignOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.createOrder(t)
	w, err := e.orders.Assign(t.Context(), command.AssignOrder{OrderTarget: e.target(id, ptr(1)), StaffID: e.staff,
		StartAt: t0, EndAt: t0.Add(time.Hour), DispatchNote: "van 2"})
	require.NoError(t, err)
	require.Equal(t, 2, w.Appended)
	require.Equal(t, []string{"OrderCreated", "OrderAssignmentUpdated", "OrderStatusChanged"}, e.tx.Types(id))
	require.Equal(t, order.StatusDispatching, e.orderStatus(t, id))
	sch := e.liveSchedule(t, id)
	require.Equal(t, []string{"ScheduleCreated"}, e.tx.Types(sch))
	b, ok := e.tx.Booking(sch)
	require.True(t, ok)
	require.Equal(t, e.staff, b.StaffID)
	require.True(t, b.Live)

	// Reassign: the same schedule follows.
	later := t0.Add(3 * time.Hour)
	_, err = e.orders.Assign(t.Context(), command.AssignOrder{OrderTarget: e.target(id, nil), StaffID: e.staff2, StartAt: later, EndAt: later.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, sch, e.liveSchedule(t, id))
	require.Equal(t, []string{"ScheduleCreated", "ScheduleAssignmentUpdated"}, e.tx.Types(sch))
	require.Equal(t, []string{"OrderCreated", "OrderAssignmentUpdated", "OrderStatusChanged", "OrderAssignmentUpdated"}, e.tx.Types(id),
		"already dispatching: no second status change")

	// Another order in an overlapping window of the same staff member.
	other := e.createOrder(t)
	before := e.tx.Position()
	_, err = e.orders.Assign(t.Context(), command.AssignOrder{OrderTarget: e.target(other, nil), StaffID: e.staff2,
		StartAt: later.Add(30 * time.Minute), EndAt: later.Add(2 * time.Hour)})
	var conflict *apperr.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, sch, conflict.With["conflicting_schedule_id"])
	e.unchanged(t, before)
	require.Equal(t, []string{"OrderCreated"}, e.tx.Types(other))

	// Back to back is no overlap (half-open windows); another staff member
	// in the same window is none either.
	_, err = e.orders.Assign(t.Context(), command.AssignOrder{OrderTarget: e.target(other, nil), StaffID: e.staff2,
		StartAt: later.Add(time.Hour), EndAt: later.Add(2 * time.Hour)})
	require.NoError(t, err)
	third := e.createOrder(t)
	e.assign(t, third, e.staff, later)
}

// Restating an order's assignment changes nothing and succeeds, as every
// command that changes nothing does, even once its staff member has been
// made inactive: that refuses them a new assignment (another window), not
// the one they have.
func TestAssignOrderAgainOnceItsStaffMemberIsInactiveChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.createOrder(t)
	cmd := command.AssignOrder{OrderTarget: e.target(id, nil), StaffID: e.staff, StartAt: t0, EndAt: t0.Add(time.Hour), DispatchNote: "van 2"}
	_, err := e.orders.Assign(t.Context(), cmd)
	require.NoError(t, err)
	e.tx.AddStaff(e.merchant, e.staff, false)

	before := e.tx.Position()
	w, err := e.orders.Assign(t.Context(), cmd)
	require.NoError(t, err)
	require.Zero(t, w.Appended)
	e.unchanged(t, before)

	cmd.EndAt = t0.Add(2 * time.Hour)
	_, err = e.orders.Assign(t.Context(), cmd)
	var rule *apperr.RuleError
	require.ErrorAs(t, err, &rule)
	require.Equal(t, "order.staff_inactive", rule.Rule)
	e.unchanged(t, before)
}

// Cancelling an assigned order cancels its schedule and frees the staff
// member's window; cancelling a completed order fails and changes neither.
func TestCancelOrderFreesItsSchedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.createOrder(t)
	sch := e.assign(t, id, e.staff, t0)
	w, err := e.orders.Cancel(t.Context(), command.CancelOrder{OrderTarget: e.target(id, ptr(3)), Reason: "customer called"})
	require.NoError(t, err)
	require.Equal(t, 1, w.Appended, "the order's own events")
	require.Equal(t, "OrderCancelled", e.tx.Types(id)[3])
	require.Equal(t, []string{"ScheduleCreated", "ScheduleStatusChanged"}, e.tx.Types(sch))
	b, _ := e.tx.Booking(sch)
	require.False(t, b.Live)
	e.assign(t, e.createOrder(t), e.staff, t0) // the window is free again

	done := e.createOrder(t)
	dsch := e.assign(t, done, e.staff2, t0)
	for _, st := range []string{"in_service", "done"} {
		_, err := e.schedules.ChangeStatus(t.Context(), command.ChangeScheduleStatus{Meta: e.meta(), ScheduleID: dsch, Status: st})
		require.NoError(t, err)
	}
	require.Equal(t, order.StatusCompleted, e.orderStatus(t, done))
	before := e.tx.Position()
	_, err = e.orders.Cancel(t.Context(), command.CancelOrder{OrderTarget: e.target(done, nil), Reason: "too late"})
	requireRule(t, err, "order.invalid_transition")
	e.unchanged(t, before)
}

// A stream that moves on between load and append is a conflict, and the
// losing command appends nothing.
func TestConcurrentAppendConflicts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.createOrder(t)
	e.tx.BeforeCommit = func() {
		e.tx.BeforeCommit = nil
		_, err := e.orders.UpdateDetails(t.Context(), command.UpdateOrderDetails{OrderTarget: e.target(id, nil), Notes: ptr("first")})
		require.NoError(t, err)
	}
	_, err := e.orders.UpdateDetails(t.Context(), command.UpdateOrderDetails{OrderTarget: e.target(id, nil), Notes: ptr("second")})
	var conflict *apperr.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, []string{"OrderCreated", "OrderDetailsUpdated"}, e.tx.Types(id))
	require.Equal(t, order.DetailsUpdated{CustomerID: e.customer, AmountCents: 1000, Notes: "first"}, e.tx.Stream(id)[1].Event)
}
