package command_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/order"
	"hearth/domain/schedule"
)

func (e env) scheduleStatusCmd(id, status string) command.ChangeScheduleStatus {
	return command.ChangeScheduleStatus{Meta: e.meta(), ScheduleID: id, Status: status}
}

// A schedule's status change is a flow: the schedule moves, its booking
// follows, and the order follows the schedule.
func TestScheduleStatusFlows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, tc := range map[string]struct {
		steps       []string
		orderEvents []string // the order's events after OrderCreated, OrderAssignmentUpdated, OrderStatusChanged
		order       order.Status
		schedule    schedule.Status
		live        bool
	}{
		"in service": {[]string{"in_service"}, []string{"OrderStatusChanged"}, order.StatusInService, schedule.StatusInService, true},
		"done": {[]string{"in_service", "done"}, []string{"OrderStatusChanged", "OrderStatusChanged"},
			order.StatusCompleted, schedule.StatusDone, false},
		"cancelled while planned": {[]string{"cancelled"}, []string{"OrderAssignmentUpdated", "OrderStatusChanged"},
			order.StatusConfirmed, schedule.StatusCancelled, false},
		"cancelled in service": {[]string{"in_service", "cancelled"}, []string{"OrderStatusChanged", "OrderAssignmentUpdated", "OrderStatusChanged"},
			order.StatusConfirmed, schedule.StatusCancelled, false},
	} {
		t.Run(name, func(t *testing.T) {
			id := e.createOrder(t)
			sch := e.assign(t, id, e.staff, t0.Add(time.Duration(len(name))*24*time.Hour))
			for _, st := range tc.steps {
				w, err := e.schedules.ChangeStatus(t.Context(), e.scheduleStatusCmd(sch, st))
				require.NoError(t, err)
				require.Equal(t, 1, w.Appended, "the schedule's own event")
				require.Equal(t, sch, w.Stream[0].StreamID, "the answer is the schedule")
			}
			require.Equal(t, append([]string{"OrderCreated", "OrderAssignmentUpdated", "OrderStatusChanged"}, tc.orderEvents...), e.tx.Types(id))
			require.Equal(t, tc.order, e.orderStatus(t, id))
			require.Equal(t, tc.schedule, e.scheduleStatus(t, sch))
			require.Len(t, e.tx.Types(sch), 1+len(tc.steps))
			b, _ := e.tx.Booking(sch)
			require.Equal(t, tc.live, b.Live)
		})
	}
	t.Run("cancelled assignment clears staff", func(t *testing.T) {
		id := e.createOrder(t)
		sch := e.assign(t, id, e.staff, t0.Add(100*24*time.Hour))
		_, err := e.schedules.ChangeStatus(t.Context(), e.scheduleStatusCmd(sch, "cancelled"))
		require.NoError(t, err)
		require.Equal(t, order.AssignmentUpdated{}, e.tx.Stream(id)[3].Event)
	})
}

// A worker key moves only its own schedules, and only to in_service or
// done; another worker's schedule is not even found. Refused changes
// append nothing.
func TestScheduleStatusRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	day := 0
	assigned := func(t *testing.T) (orderID, sch string) {
		day++
		orderID = e.createOrder(t)
		return orderID, e.assign(t, orderID, e.staff, t0.Add(time.Duration(day)*24*time.Hour))
	}
	for name, tc := range map[string]struct {
		cmd   func(t *testing.T, sch string) command.ChangeScheduleStatus
		check func(t *testing.T, err error)
	}{
		"worker of another staff member": {func(t *testing.T, sch string) command.ChangeScheduleStatus {
			c := e.scheduleStatusCmd(sch, "in_service")
			c.WorkerStaffID = e.staff2
			return c
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, apperr.ErrNotFound) }},
		"worker cancels": {func(t *testing.T, sch string) command.ChangeScheduleStatus {
			c := e.scheduleStatusCmd(sch, "cancelled")
			c.WorkerStaffID = e.staff
			return c
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, apperr.ErrForbidden) }},
		"worker to planned": {func(t *testing.T, sch string) command.ChangeScheduleStatus {
			c := e.scheduleStatusCmd(sch, "planned")
			c.WorkerStaffID = e.staff
			return c
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, apperr.ErrForbidden) }},
		"unknown status": {func(t *testing.T, sch string) command.ChangeScheduleStatus {
			return e.scheduleStatusCmd(sch, "lost")
		}, func(t *testing.T, err error) { requireField(t, err, "status") }},
		"planned to done": {func(t *testing.T, sch string) command.ChangeScheduleStatus {
			return e.scheduleStatusCmd(sch, "done")
		}, func(t *testing.T, err error) { requireRule(t, err, "schedule.invalid_transition") }},
		"stale version": {func(t *testing.T, sch string) command.ChangeScheduleStatus {
			c := e.scheduleStatusCmd(sch, "in_service")
			c.ExpectedVersion = ptr(2)
			return c
		}, func(t *testing.T, err error) { requireVersion(t, err, 2, 1) }},
		"named with another order": {func(t *testing.T, sch string) command.ChangeScheduleStatus {
			c := e.scheduleStatusCmd(sch, "in_service")
			c.OrderID = e.createOrder(t)
			return c
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, apperr.ErrNotFound) }},
		"another merchant": {func(t *testing.T, sch string) command.ChangeScheduleStatus {
			c := e.scheduleStatusCmd(sch, "in_service")
			c.Meta.MerchantID = e.other
			return c
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, apperr.ErrNotFound) }},
	} {
		t.Run(name, func(t *testing.T) {
			_, sch := assigned(t)
			cmd := tc.cmd(t, sch)
			before := e.tx.Position()
			_, err := e.schedules.ChangeStatus(t.Context(), cmd)
			tc.check(t, err)
			e.unchanged(t, before)
			require.Equal(t, schedule.StatusPlanned, e.scheduleStatus(t, sch))
			b, _ := e.tx.Booking(sch)
			require.True(t, b.Live, "still booked")
		})
	}

	t.Run("worker's own schedule", func(t *testing.T) {
		orderID, sch := assigned(t)
		for _, st := range []string{"in_service", "done"} {
			c := e.scheduleStatusCmd(sch, st)
			c.WorkerStaffID = e.staff
			_, err := e.schedules.ChangeStatus(t.Context(), c)
			require.NoError(t, err)
		}
		require.Equal(t, order.StatusCompleted, e.orderStatus(t, orderID))
	})
	t.Run("to the same status", func(t *testing.T) {
		_, sch := assigned(t)
		before := e.tx.Position()
		w, err := e.schedules.ChangeStatus(t.Context(), e.scheduleStatusCmd(sch, "planned"))
		require.NoError(t, err)
		require.Zero(t, w.Appended)
		e.unchanged(t, before)
	})
}

// An order taken into service and completed through its own status takes
// its schedule along: in service, then done, and no longer booked; the
// schedule then takes no other status.
func TestOrderStatusMovesItsSchedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	orderID := e.createOrder(t)
	sch := e.assign(t, orderID, e.staff, t0)
	_, err := e.orders.ChangeStatus(t.Context(), command.ChangeOrderStatus{OrderTarget: e.target(orderID, nil), Status: "in_service"})
	require.NoError(t, err)
	require.Equal(t, schedule.StatusInService, e.scheduleStatus(t, sch))
	_, err = e.orders.ChangeStatus(t.Context(), command.ChangeOrderStatus{OrderTarget: e.target(orderID, nil), Status: "completed"})
	require.NoError(t, err)
	require.Equal(t, schedule.StatusDone, e.scheduleStatus(t, sch))
	b, _ := e.tx.Booking(sch)
	require.False(t, b.Live, "no longer booked")
	_, err = e.schedules.ChangeStatus(t.Context(), e.scheduleStatusCmd(sch, "in_service"))
	requireRule(t, err, "schedule.invalid_transition")
}

// An order taken back from dispatching to confirmed is no longer
// dispatched: its planned schedule is cancelled, the booking released, and
// the order has no staff member, as when its schedule is cancelled.
func TestOrderBackToConfirmedCancelsItsSchedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	orderID := e.createOrder(t)
	sch := e.assign(t, orderID, e.staff, t0)
	require.Equal(t, order.StatusDispatching, e.orderStatus(t, orderID))
	_, err := e.orders.ChangeStatus(t.Context(), command.ChangeOrderStatus{OrderTarget: e.target(orderID, nil), Status: "confirmed"})
	require.NoError(t, err)
	require.Equal(t, schedule.StatusCancelled, e.scheduleStatus(t, sch))
	b, _ := e.tx.Booking(sch)
	require.False(t, b.Live, "no longer booked")
	_, err = e.tx.Run(t.Context(), e.meta(), func(ctx context.Context, s command.Session) error {
		o, err := s.Order(ctx, orderID)
		if err == nil {
			require.Equal(t, order.StatusConfirmed, o.Status())
			require.Empty(t, o.Assignment().StaffID, "the order lost its staff member")
		}
		return err
	})
	require.NoError(t, err)
	// The staff member's window takes another order.
	e.assign(t, e.createOrder(t), e.staff, t0)
}
