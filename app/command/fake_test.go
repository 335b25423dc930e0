package command_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
	"hearth/domain/uuid"
	"hearth/internal/apptest"
)

// env is the use cases on an in-memory store (apptest), with one merchant's
// customer, active and inactive staff members and catalog item.
type env struct {
	tx                        *apptest.Transactor
	orders                    command.OrderHandlers
	requests                  command.ServiceRequestHandlers
	schedules                 command.ScheduleHandlers
	merchant, other           string // other is a second merchant
	customer, staff, inactive string
	staff2, item              string
}

const price = 12_500

func newEnv(t *testing.T) env {
	t.Helper()
	e := env{tx: apptest.New(), merchant: uuid.New(), other: uuid.New(), customer: uuid.New(),
		staff: uuid.New(), inactive: uuid.New(), staff2: uuid.New(), item: uuid.New()}
	e.tx.AddCustomer(e.merchant, e.customer, "Carla Customer")
	e.tx.AddStaff(e.merchant, e.staff, true)
	e.tx.AddStaff(e.merchant, e.staff2, true)
	e.tx.AddStaff(e.merchant, e.inactive, false)
	e.tx.AddCatalogItem(e.merchant, e.item, price)
	var err error
	e.orders, err = command.NewOrderHandlers(e.tx)
	require.NoError(t, err)
	e.requests, err = command.NewServiceRequestHandlers(e.tx)
	require.NoError(t, err)
	e.schedules, err = command.NewScheduleHandlers(e.tx)
	require.NoError(t, err)
	return e
}

var t0 = time.Date(2030, 5, 6, 9, 0, 0, 0, time.UTC)

func (e env) meta() event.Meta {
	return event.Meta{MerchantID: e.merchant, Actor: "key:test", CorrelationID: uuid.New(), OccurredAt: t0}
}

func (e env) target(id string, expected *int) command.OrderTarget {
	return command.OrderTarget{Meta: e.meta(), OrderID: id, ExpectedVersion: expected}
}

func ptr[T any](v T) *T { return &v }

// createOrder creates a pending order.
func (e env) createOrder(t *testing.T) string {
	t.Helper()
	w, err := e.orders.Create(t.Context(), command.CreateOrder{Meta: e.meta(), CustomerID: e.customer, AmountCents: 1000})
	require.NoError(t, err)
	return w.Stream[0].StreamID
}

// assign assigns the order to staff for [start, start+1h) and returns the
// schedule's id.
func (e env) assign(t *testing.T, orderID, staff string, start time.Time) string {
	t.Helper()
	out, err := e.orders.Assign(t.Context(), command.AssignOrder{OrderTarget: e.target(orderID, nil), StaffID: staff,
		StartAt: start, EndAt: start.Add(time.Hour)})
	require.NoError(t, err)
	require.NotZero(t, out.Appended)
	return e.liveSchedule(t, orderID)
}

// liveSchedule is the order's live schedule.
func (e env) liveSchedule(t *testing.T, orderID string) string {
	t.Helper()
	var id string
	_, err := e.tx.Run(t.Context(), e.meta(), func(ctx context.Context, s command.Session) error {
		sch, found, err := s.LiveSchedule(ctx, orderID)
		require.True(t, found, "order %s has a live schedule", orderID)
		id = sch.ID()
		return err
	})
	require.NoError(t, err)
	return id
}

// createRequest creates a new service request for the catalog item.
func (e env) createRequest(t *testing.T) string {
	t.Helper()
	start := t0.Add(24 * time.Hour)
	w, err := e.requests.Create(t.Context(), command.CreateServiceRequest{Meta: e.meta(), CustomerID: e.customer, Source: "phone",
		Details: servicerequest.Details{CatalogItemID: e.item, Content: "Deep clean", Notes: "ring twice",
			AppointmentStartAt: &start, AppointmentEndAt: ptr(start.Add(2 * time.Hour))}})
	require.NoError(t, err)
	return w.Stream[0].StreamID
}

// unchanged checks that the store has not moved since before.
func (e env) unchanged(t *testing.T, before int64) {
	t.Helper()
	require.Equal(t, before, e.tx.Position(), "nothing appended")
}

// requireField checks that err is a ValidationError naming field.
func requireField(t *testing.T, err error, field string) {
	t.Helper()
	var v *apperr.ValidationError
	require.ErrorAs(t, err, &v)
	var fields []string
	for _, f := range v.Fields {
		fields = append(fields, f.Field)
	}
	require.Contains(t, fields, field)
}

// requireRule checks that err breaks the named rule (a RuleError or a
// TransitionError).
func requireRule(t *testing.T, err error, rule string) {
	t.Helper()
	var r *apperr.RuleError
	if errors.As(err, &r) {
		require.Equal(t, rule, r.Rule)
		return
	}
	var ruled interface{ Rule() string }
	require.ErrorAs(t, err, &ruled, "a rule error, got %v", err)
	require.Equal(t, rule, ruled.Rule())
}

// requireVersion checks that err is a VersionError with the versions.
func requireVersion(t *testing.T, err error, expected, actual int) {
	t.Helper()
	var v *apperr.VersionError
	require.ErrorAs(t, err, &v)
	require.Equal(t, expected, v.Expected)
	require.Equal(t, actual, v.Actual)
}

// orderStatus and scheduleStatus read the current status.
func (e env) orderStatus(t *testing.T, id string) order.Status {
	t.Helper()
	var st order.Status
	_, err := e.tx.Run(t.Context(), e.meta(), func(ctx context.Context, s command.Session) error {
		o, err := s.Order(ctx, id)
		if err == nil {
			st = o.Status()
		}
		return err
	})
	require.NoError(t, err)
	return st
}

func (e env) scheduleStatus(t *testing.T, id string) schedule.Status {
	t.Helper()
	var st schedule.Status
	_, err := e.tx.Run(t.Context(), e.meta(), func(ctx context.Context, s command.Session) error {
		sch, err := s.Schedule(ctx, id)
		if err == nil {
			st = sch.Status()
		}
		return err
	})
	require.NoError(t, err)
	return st
}
