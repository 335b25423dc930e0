package pubsub_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/order"
	"hearth/domain/schedule"
	"hearth/domain/servicerequest"
	"hearth/domain/uuid"
	"hearth/internal/database"
	"hearth/internal/pgtest"
)

// flows is the fixture of the flows that touch several aggregates: the
// command handlers on the real Transactor, a staff member and a catalog item.
type flows struct {
	fixture
	requests  command.ServiceRequestHandlers
	schedules command.ScheduleHandlers
	staffID   string
	itemID    string
	price     int64
}

func setupFlows(t *testing.T, urls pgtest.URLs) flows {
	t.Helper()
	f := flows{fixture: setup(t, urls), price: 12_500}
	f.useTransactor(t, f.Tx)
	f.staffID, f.itemID = f.newStaff(t), uuid.New()
	_, err := f.ES.DB.Exec(`INSERT INTO catalog_items (id, merchant_id, name, base_price_cents) VALUES ($1, $2, 'Deep clean', $3)`,
		f.itemID, f.MerchantID, f.price)
	require.NoError(t, err)
	return f
}

// useTransactor points every handler at tx.
func (f *flows) useTransactor(t *testing.T, tx *pubsub.Transactor) {
	t.Helper()
	var err error
	f.Tx = tx
	f.OrderCmds, err = command.NewOrderHandlers(tx)
	require.NoError(t, err)
	f.requests, err = command.NewServiceRequestHandlers(tx)
	require.NoError(t, err)
	f.schedules, err = command.NewScheduleHandlers(tx)
	require.NoError(t, err)
}

// widePool gives the handlers a pool as large as the number of concurrent
// writers, so that every writer really holds its own transaction at once.
func (f *flows) widePool(t *testing.T, url string, conns int) {
	t.Helper()
	db, err := database.Open(context.Background(), url, conns)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := pubsub.NewStore(db, nil, nil)
	require.NoError(t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	f.useTransactor(t, tx)
}

func (f flows) newStaff(t *testing.T) string {
	t.Helper()
	id := uuid.New()
	_, err := f.ES.DB.Exec(`INSERT INTO staff (id, merchant_id, name) VALUES ($1, $2, $3)`, id, f.MerchantID, "Staff "+id[:8])
	require.NoError(t, err)
	return id
}

var day = time.Date(2030, 5, 6, 0, 0, 0, 0, time.UTC)

func at(hour, minute int) time.Time {
	return day.Add(time.Duration(hour)*time.Hour + time.Duration(minute)*time.Minute)
}

// confirmedRequest creates a request for the fixture's catalog item with an
// appointment window and confirms it.
func (f flows) confirmedRequest(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	start, end := at(9, 0), at(11, 0)
	w, err := f.requests.Create(ctx, command.CreateServiceRequest{Meta: f.Meta(), CustomerID: f.CustomerID, Source: "phone",
		Details: servicerequest.Details{CatalogItemID: f.itemID, Content: "Deep clean of a flat", Notes: "cat inside",
			AppointmentStartAt: &start, AppointmentEndAt: &end}})
	require.NoError(t, err)
	id := w.Stream[0].StreamID
	_, err = f.requests.ChangeStatus(ctx, command.ChangeServiceRequestStatus{
		RequestTarget: command.RequestTarget{Meta: f.Meta(), RequestID: id}, Status: "confirmed"})
	require.NoError(t, err)
	return id
}

func (f flows) assign(ctx context.Context, orderID, staffID string, start, end time.Time) error {
	_, err := f.OrderCmds.Assign(ctx, command.AssignOrder{OrderTarget: command.OrderTarget{Meta: f.Meta(), OrderID: orderID},
		StaffID: staffID, StartAt: start, EndAt: end, DispatchNote: "ring twice"})
	return err
}

// liveSchedule is the schedule id of the order's live booking ("" when none).
func (f flows) liveSchedule(t *testing.T, orderID string) string {
	t.Helper()
	var id string
	err := f.ES.DB.QueryRow(`SELECT coalesce(max(schedule_id::text), '') FROM bookings WHERE order_id = $1 AND live`, orderID).Scan(&id)
	require.NoError(t, err)
	return id
}

func (f flows) scheduleStatus(t *testing.T, scheduleID, status string) error {
	t.Helper()
	_, err := f.schedules.ChangeStatus(context.Background(), command.ChangeScheduleStatus{Meta: f.Meta(), ScheduleID: scheduleID, Status: status})
	return err
}

// load rebuilds an aggregate from the store.
func (f flows) loadOrder(t *testing.T, id string) *order.Order {
	t.Helper()
	var o *order.Order
	_, err := f.Tx.Run(context.Background(), f.Meta(), func(ctx context.Context, s command.Session) (err error) {
		o, err = s.Order(ctx, id)
		return err
	})
	require.NoError(t, err)
	return o
}

func (f flows) loadSchedule(t *testing.T, id string) *schedule.Schedule {
	t.Helper()
	var sch *schedule.Schedule
	_, err := f.Tx.Run(context.Background(), f.Meta(), func(ctx context.Context, s command.Session) (err error) {
		sch, err = s.Schedule(ctx, id)
		return err
	})
	require.NoError(t, err)
	return sch
}

func (f flows) loadRequest(t *testing.T, id string) *servicerequest.Request {
	t.Helper()
	var r *servicerequest.Request
	_, err := f.Tx.Run(context.Background(), f.Meta(), func(ctx context.Context, s command.Session) (err error) {
		r, err = s.ServiceRequest(ctx, id)
		return err
	})
	require.NoError(t, err)
	return r
}

func (f flows) eventsOfType(t *testing.T, typ string) int {
	t.Helper()
	var n int
	require.NoError(t, f.ES.DB.QueryRow(`SELECT count(*) FROM events WHERE type = $1`, typ).Scan(&n))
	return n
}

// storeCounts is what a flow can write on the write side: events, the
// three topics' messages and the bookings (all of them, live or not).
type storeCounts struct {
	Events, OrderMsgs, RequestMsgs, ScheduleMsgs, Bookings, LiveBookings int
}

func (f flows) counts(t *testing.T) storeCounts {
	t.Helper()
	var c storeCounts
	err := f.ES.DB.QueryRow(`SELECT
		(SELECT count(*) FROM events), (SELECT count(*) FROM watermill_orders),
		(SELECT count(*) FROM watermill_service_requests), (SELECT count(*) FROM watermill_schedules),
		(SELECT count(*) FROM bookings), (SELECT count(*) FROM bookings WHERE live)`).
		Scan(&c.Events, &c.OrderMsgs, &c.RequestMsgs, &c.ScheduleMsgs, &c.Bookings, &c.LiveBookings)
	require.NoError(t, err)
	return c
}

// failOn installs a trigger that makes every insert of an event of type typ
// fail: a real failure in the middle of a flow, raised by the database
// after the flow's earlier events (and its booking) were written.
func (f flows) failOn(t *testing.T, typ string) {
	t.Helper()
	_, err := f.ES.DB.Exec(fmt.Sprintf(`
		CREATE FUNCTION test_fail_event() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.type = '%s' THEN
				RAISE EXCEPTION 'injected failure on %%', NEW.type;
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_fail_event BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION test_fail_event();`, typ))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = f.ES.DB.Exec(`DROP TRIGGER IF EXISTS test_fail_event ON events; DROP FUNCTION IF EXISTS test_fail_event()`)
	})
}

func (f flows) noFailure(t *testing.T) {
	t.Helper()
	_, err := f.ES.DB.Exec(`DROP TRIGGER test_fail_event ON events; DROP FUNCTION test_fail_event()`)
	require.NoError(t, err)
}

// 50 clients convert one confirmed request at the same moment: exactly one
// order exists afterwards, and the request is converted once.
func TestConcurrentConversionsCreateOneOrder(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	f := setupFlows(t, urls)
	const clients = 50
	f.widePool(t, urls.EventStore, clients)
	requestID := f.confirmedRequest(t)

	start := make(chan struct{})
	orders := make([]string, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			<-start
			w, err := f.requests.Convert(context.Background(), command.RequestTarget{Meta: f.Meta(), RequestID: requestID})
			errs[i] = err
			if err == nil {
				orders[i] = w.Stream[0].StreamID
			}
		})
	}
	close(start)
	wg.Wait()

	var won []string
	for i, err := range errs {
		if err == nil {
			won = append(won, orders[i])
			continue
		}
		// A loser either lost the race on the request's stream (409) or
		// read it after the winner committed (422: no longer confirmed).
		var conflict *apperr.ConflictError
		var rule *apperr.RuleError
		switch {
		case errors.As(err, &conflict):
		case errors.As(err, &rule):
			require.Equal(t, "service_request.not_confirmed", rule.Rule)
		default:
			t.Fatalf("client %d: want a conflict or service_request.not_confirmed, got %v", i, err)
		}
	}
	require.Len(t, won, 1, "exactly one conversion wins: %v", errs)
	require.Equal(t, 1, f.eventsOfType(t, "OrderCreated"))
	require.Equal(t, 1, f.eventsOfType(t, "ServiceRequestConverted"))
	require.Equal(t, storeCounts{Events: 4, OrderMsgs: 1, RequestMsgs: 3}, f.counts(t))

	r := f.loadRequest(t, requestID)
	require.Equal(t, servicerequest.StatusConverted, r.Status())
	o := f.loadOrder(t, won[0])
	require.Equal(t, order.StatusPending, o.Status())
	require.Equal(t, f.CustomerID, o.CustomerID())
	require.Equal(t, f.price, o.Details().AmountCents, "amount is the catalog item's base price")
	require.Equal(t, "cat inside", o.Details().Notes)
	stream := f.Stream(t, won[0])
	require.Len(t, stream, 1)
	require.Equal(t, "OrderCreated", stream[0].Type)
	require.Equal(t, f.MerchantID, stream[0].MerchantID)
}

// 50 clients assign 50 different orders to one staff member in windows
// that all overlap: exactly one live schedule remains, and every other
// assignment is a conflict that names it.
func TestConcurrentOverlappingAssignmentsBookOnce(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	f := setupFlows(t, urls)
	const clients = 50
	f.widePool(t, urls.EventStore, clients)
	orderIDs := make([]string, clients)
	for i := range orderIDs {
		orderIDs[i] = f.CreateOrder(t)
	}
	before := f.counts(t)

	start := make(chan struct{})
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			<-start
			// Every window contains 10:00-10:01; each starts a minute apart.
			errs[i] = f.assign(context.Background(), orderIDs[i], f.staffID, at(9, i), at(10, 1+i))
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "a second assignment succeeded: orders %d and %d", winner, i)
			winner = i
		}
	}
	require.NotEqual(t, -1, winner, "one assignment wins: %v", errs)
	winnerSchedule := f.liveSchedule(t, orderIDs[winner])
	require.NotEmpty(t, winnerSchedule)
	for i, err := range errs {
		if i == winner {
			continue
		}
		var conflict *apperr.ConflictError
		require.ErrorAs(t, err, &conflict, "order %d", i)
		require.Equal(t, winnerSchedule, conflict.With["conflicting_schedule_id"], "order %d: %v", i, err)
		require.Contains(t, conflict.Detail, winnerSchedule)
	}
	after := f.counts(t)
	require.Equal(t, 1, after.Bookings)
	require.Equal(t, 1, after.LiveBookings)
	require.Equal(t, before.Events+3, after.Events, "OrderAssignmentUpdated, OrderStatusChanged, ScheduleCreated of the winner only")
	require.Equal(t, 1, f.eventsOfType(t, "ScheduleCreated"))
	require.Equal(t, 1, f.eventsOfType(t, "OrderAssignmentUpdated"))
	for i, id := range orderIDs {
		want := order.StatusPending
		if i == winner {
			want = order.StatusDispatching
		}
		require.Equal(t, want, f.loadOrder(t, id).Status(), "order %d", i)
	}
}

// Half-open windows: one that ends when the next starts does not clash;
// another staff member may take the same window; overlapping by a minute
// clashes, also when an existing schedule is moved onto another one.
func TestBookingWindows(t *testing.T) {
	t.Parallel()
	f := setupFlows(t, pgtest.NewDB(t))
	ctx := context.Background()
	a, b, c, d := f.CreateOrder(t), f.CreateOrder(t), f.CreateOrder(t), f.CreateOrder(t)
	require.NoError(t, f.assign(ctx, a, f.staffID, at(10, 0), at(11, 0)))
	require.NoError(t, f.assign(ctx, b, f.staffID, at(11, 0), at(12, 0)), "touching windows do not overlap")
	require.NoError(t, f.assign(ctx, c, f.newStaff(t), at(10, 0), at(11, 0)), "another staff member is free")

	var conflict *apperr.ConflictError
	require.ErrorAs(t, f.assign(ctx, d, f.staffID, at(10, 59), at(11, 1)), &conflict)
	require.Contains(t, []string{f.liveSchedule(t, a), f.liveSchedule(t, b)}, conflict.With["conflicting_schedule_id"])

	// Moving b's planned schedule onto a's window clashes with a; moving it
	// later keeps the same schedule and frees the old window.
	scheduleB := f.liveSchedule(t, b)
	conflict = nil
	require.ErrorAs(t, f.assign(ctx, b, f.staffID, at(10, 30), at(11, 30)), &conflict)
	require.Equal(t, f.liveSchedule(t, a), conflict.With["conflicting_schedule_id"])
	require.NoError(t, f.assign(ctx, b, f.staffID, at(13, 0), at(14, 0)))
	require.Equal(t, scheduleB, f.liveSchedule(t, b), "the planned schedule is updated, not replaced")
	sch := f.loadSchedule(t, scheduleB)
	require.Equal(t, at(13, 0), sch.Window().StartAt)
	require.Equal(t, 2, sch.Version(), "ScheduleCreated, ScheduleAssignmentUpdated")
	require.NoError(t, f.assign(ctx, d, f.staffID, at(11, 0), at(12, 0)), "b's old window is free again")

	// An in-service schedule cannot be moved.
	require.NoError(t, f.scheduleStatus(t, f.liveSchedule(t, a), "in_service"))
	var rule *apperr.RuleError
	require.ErrorAs(t, f.assign(ctx, a, f.staffID, at(15, 0), at(16, 0)), &rule)
	require.Equal(t, "order.assignment_not_allowed", rule.Rule)
}

// Schedule status drives the order: in_service -> in_service, done ->
// completed, cancelled -> the order loses its assignment and returns to
// confirmed; the booking follows. Run with the projections in both layouts:
// the read models show the same.
func TestScheduleStatusDrivesOrder(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setupFlows(t, newDB(t))
			requests, err := readmodel.NewServiceRequests(f.RM)
			require.NoError(t, err)
			schedules, err := readmodel.NewSchedules(f.RM)
			require.NoError(t, err)
			f.RunRouter(t,
				projector.Projection{Name: "orders", Topic: pubsub.TopicOrders, Decode: order.Decode, Apply: f.Orders.Apply},
				projector.Projection{Name: "service_requests", Topic: pubsub.TopicServiceRequests, Decode: servicerequest.Decode, Apply: requests.Apply},
				projector.Projection{Name: "schedules", Topic: pubsub.TopicSchedules, Decode: schedule.Decode, Apply: schedules.Apply},
			)
			ctx := context.Background()
			scope := query.Scope{MerchantID: f.MerchantID}

			// Done: request -> order -> schedule -> in service -> done.
			requestID := f.confirmedRequest(t)
			w, err := f.requests.Convert(ctx, command.RequestTarget{Meta: f.Meta(), RequestID: requestID})
			require.NoError(t, err)
			done := w.Stream[0].StreamID
			require.NoError(t, f.assign(ctx, done, f.staffID, at(9, 0), at(11, 0)))
			scheduleDone := f.liveSchedule(t, done)
			require.Equal(t, order.StatusDispatching, f.loadOrder(t, done).Status())
			require.NoError(t, f.scheduleStatus(t, scheduleDone, "in_service"))
			require.Equal(t, order.StatusInService, f.loadOrder(t, done).Status())
			require.Equal(t, scheduleDone, f.liveSchedule(t, done), "in service still holds the booking")
			require.NoError(t, f.scheduleStatus(t, scheduleDone, "done"))
			require.Equal(t, order.StatusCompleted, f.loadOrder(t, done).Status())
			require.Empty(t, f.liveSchedule(t, done), "done frees the booking")
			var rule interface{ Rule() string }
			require.ErrorAs(t, f.scheduleStatus(t, scheduleDone, "cancelled"), &rule, "done is final")
			require.Equal(t, "schedule.invalid_transition", rule.Rule())

			// Cancelled while planned, and while in service: the order returns
			// to confirmed without staff; the window is free again.
			var cancelled []string
			for _, via := range [][]string{{"cancelled"}, {"in_service", "cancelled"}} {
				id := f.CreateOrder(t)
				require.NoError(t, f.assign(ctx, id, f.staffID, at(12, 0), at(13, 0)))
				sch := f.liveSchedule(t, id)
				for _, st := range via {
					require.NoError(t, f.scheduleStatus(t, sch, st))
				}
				o := f.loadOrder(t, id)
				require.Equal(t, order.StatusConfirmed, o.Status(), "via %v", via)
				require.Empty(t, o.Assignment().StaffID, "via %v", via)
				require.Empty(t, f.liveSchedule(t, id))
				cancelled = append(cancelled, id)
			}
			// The order can be assigned again: a new schedule.
			again := cancelled[0]
			require.NoError(t, f.assign(ctx, again, f.staffID, at(12, 0), at(13, 0)))
			require.NotEmpty(t, f.liveSchedule(t, again))
			require.Equal(t, order.StatusDispatching, f.loadOrder(t, again).Status())

			// The read models reach the same state as the store.
			for _, id := range []string{done, cancelled[0], cancelled[1]} {
				want, err := query.FoldOrder(f.Stream(t, id))
				require.NoError(t, err)
				require.EventuallyWithT(t, func(c *assert.CollectT) {
					got, err := f.Orders.Get(ctx, scope, id)
					require.NoError(c, err)
					require.Equal(c, want, got)
				}, 10*time.Second, 10*time.Millisecond)
			}
			got, err := f.Orders.Get(ctx, scope, done)
			require.NoError(t, err)
			require.Equal(t, "completed", got.Status)
			require.NotNil(t, got.CompletedAt)
			require.Equal(t, f.price, got.AmountCents)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				sch, err := schedules.Get(ctx, scope, scheduleDone)
				require.NoError(c, err)
				require.Equal(c, "done", sch.Status)
				require.Equal(c, 3, sch.Version)
				req, err := requests.Get(ctx, scope, requestID)
				require.NoError(c, err)
				require.Equal(c, "converted", req.Status)
				require.NotNil(c, req.OrderID)
				require.Equal(c, done, *req.OrderID)
			}, 10*time.Second, 10*time.Millisecond)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				list, err := schedules.List(ctx, scope, query.ScheduleFilter{Statuses: []string{"cancelled"}}, query.Page{Number: 1, Size: 10})
				require.NoError(c, err)
				require.Equal(c, 2, list.Total)
				require.Len(c, list.Items, 2)
			}, 10*time.Second, 10*time.Millisecond)
			// One change-log row per event of every aggregate.
			var events, changes int
			require.NoError(t, f.ES.DB.QueryRow(`SELECT count(*) FROM events`).Scan(&events))
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				require.NoError(c, f.RM.DB.QueryRow(`SELECT count(*) FROM change_log`).Scan(&changes))
				require.Equal(c, events, changes)
			}, 10*time.Second, 10*time.Millisecond)
		})
	}
}

// Cancelling an order cancels its live schedule and frees the booking: an
// overlapping assignment of another order then succeeds.
func TestCancelOrderCancelsSchedule(t *testing.T) {
	t.Parallel()
	f := setupFlows(t, pgtest.NewDB(t))
	ctx := context.Background()
	for _, inService := range []bool{false, true} {
		id, other := f.CreateOrder(t), f.CreateOrder(t)
		require.NoError(t, f.assign(ctx, id, f.staffID, at(14, 0), at(15, 0)))
		sch := f.liveSchedule(t, id)
		if inService {
			require.NoError(t, f.scheduleStatus(t, sch, "in_service"))
		}
		var conflict *apperr.ConflictError
		require.ErrorAs(t, f.assign(ctx, other, f.staffID, at(14, 30), at(15, 30)), &conflict)
		require.Equal(t, sch, conflict.With["conflicting_schedule_id"])

		_, err := f.OrderCmds.Cancel(ctx, command.CancelOrder{OrderTarget: command.OrderTarget{Meta: f.Meta(), OrderID: id}, Reason: "customer called"})
		require.NoError(t, err)
		require.Equal(t, order.StatusCancelled, f.loadOrder(t, id).Status())
		require.Equal(t, schedule.StatusCancelled, f.loadSchedule(t, sch).Status())
		require.Empty(t, f.liveSchedule(t, id))
		require.NoError(t, f.assign(ctx, other, f.staffID, at(14, 30), at(15, 30)), "the window is free")

		// The cancelled schedule cannot be revived.
		require.Error(t, f.scheduleStatus(t, sch, "in_service"))
		// Cancel the other order too, so the next round starts free.
		_, err = f.OrderCmds.Cancel(ctx, command.CancelOrder{OrderTarget: command.OrderTarget{Meta: f.Meta(), OrderID: other}, Reason: "done with it"})
		require.NoError(t, err)
	}
	// An order without a schedule cancels alone.
	id := f.CreateOrder(t)
	before := f.counts(t)
	_, err := f.OrderCmds.Cancel(ctx, command.CancelOrder{OrderTarget: command.OrderTarget{Meta: f.Meta(), OrderID: id}, Reason: "no longer needed"})
	require.NoError(t, err)
	after := f.counts(t)
	require.Equal(t, before.Events+1, after.Events)
	require.Equal(t, before.ScheduleMsgs, after.ScheduleMsgs)
}

// A failure raised by the database in the middle of each flow, after some of
// its events (and its booking) were written, leaves nothing of the flow.
func TestFlowFailureAppendsNothing(t *testing.T) {
	t.Parallel()
	type flow struct {
		name    string
		prepare func(t *testing.T, f flows) func() error // sets up; returns the flow
		failOn  string                                   // an event type the flow appends after others
	}
	for _, fl := range []flow{
		{
			name:   "convert",
			failOn: "OrderCreated", // appended after ServiceRequestConverted
			prepare: func(t *testing.T, f flows) func() error {
				id := f.confirmedRequest(t)
				return func() error {
					_, err := f.requests.Convert(context.Background(), command.RequestTarget{Meta: f.Meta(), RequestID: id})
					return err
				}
			},
		},
		{
			name:   "assign",
			failOn: "ScheduleCreated", // after the order's two events and the booking
			prepare: func(t *testing.T, f flows) func() error {
				id := f.CreateOrder(t)
				return func() error { return f.assign(context.Background(), id, f.staffID, at(8, 0), at(9, 0)) }
			},
		},
		{
			name:   "reassign",
			failOn: "ScheduleAssignmentUpdated", // after OrderAssignmentUpdated and the moved booking
			prepare: func(t *testing.T, f flows) func() error {
				id := f.CreateOrder(t)
				require.NoError(t, f.assign(context.Background(), id, f.staffID, at(8, 0), at(9, 0)))
				return func() error { return f.assign(context.Background(), id, f.staffID, at(10, 0), at(11, 0)) }
			},
		},
		{
			name:   "schedule in_service",
			failOn: "OrderStatusChanged", // after ScheduleStatusChanged
			prepare: func(t *testing.T, f flows) func() error {
				id := f.CreateOrder(t)
				require.NoError(t, f.assign(context.Background(), id, f.staffID, at(8, 0), at(9, 0)))
				sch := f.liveSchedule(t, id)
				return func() error { return f.scheduleStatus(t, sch, "in_service") }
			},
		},
		{
			name:   "schedule done",
			failOn: "OrderStatusChanged", // after ScheduleStatusChanged and the freed booking
			prepare: func(t *testing.T, f flows) func() error {
				id := f.CreateOrder(t)
				require.NoError(t, f.assign(context.Background(), id, f.staffID, at(8, 0), at(9, 0)))
				sch := f.liveSchedule(t, id)
				require.NoError(t, f.scheduleStatus(t, sch, "in_service"))
				return func() error { return f.scheduleStatus(t, sch, "done") }
			},
		},
		{
			name:   "schedule cancelled",
			failOn: "OrderStatusChanged", // after ScheduleStatusChanged, the freed booking and OrderAssignmentUpdated
			prepare: func(t *testing.T, f flows) func() error {
				id := f.CreateOrder(t)
				require.NoError(t, f.assign(context.Background(), id, f.staffID, at(8, 0), at(9, 0)))
				sch := f.liveSchedule(t, id)
				return func() error { return f.scheduleStatus(t, sch, "cancelled") }
			},
		},
		{
			name:   "cancel order",
			failOn: "ScheduleStatusChanged", // after OrderCancelled
			prepare: func(t *testing.T, f flows) func() error {
				id := f.CreateOrder(t)
				require.NoError(t, f.assign(context.Background(), id, f.staffID, at(8, 0), at(9, 0)))
				return func() error {
					_, err := f.OrderCmds.Cancel(context.Background(), command.CancelOrder{
						OrderTarget: command.OrderTarget{Meta: f.Meta(), OrderID: id}, Reason: "customer called"})
					return err
				}
			},
		},
	} {
		t.Run(fl.name, func(t *testing.T) {
			t.Parallel()
			f := setupFlows(t, pgtest.NewDB(t))
			run := fl.prepare(t, f)
			before := f.counts(t)
			var liveBefore []string
			liveBefore = f.liveBookings(t)

			f.failOn(t, fl.failOn)
			err := run()
			require.ErrorContains(t, err, "injected failure on "+fl.failOn)
			require.Equal(t, before, f.counts(t), "nothing of the flow is stored")
			require.Equal(t, liveBefore, f.liveBookings(t), "the bookings are as they were")

			// Without the failure the same flow goes through and appends
			// more than one event: the failure really was in its middle.
			f.noFailure(t)
			require.NoError(t, run())
			after := f.counts(t)
			require.Greater(t, after.Events, before.Events+1)
		})
	}
}

// liveBookings lists the live bookings as schedule/staff/period strings.
func (f flows) liveBookings(t *testing.T) []string {
	t.Helper()
	var out []string
	err := f.ES.NewRaw(`SELECT schedule_id || ' ' || staff_id || ' ' || period::text FROM bookings WHERE live ORDER BY 1`).Scan(context.Background(), &out)
	require.NoError(t, err)
	return out
}
