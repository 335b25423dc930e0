package main

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/readmodel"
	"hearth/adapters/vault"
	"hearth/adapters/webhooks"
	"hearth/app/command"
	"hearth/domain/availability"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/schedule"
	"hearth/internal/advisory"
)

// The visit generator re-plans a moved visit whose order has no schedule
// any more (cancelled by hand), while a dispatcher assigns that order: the
// assignment commits between the generator's look for the order's live
// schedule and its booking of the visit's new window, which then meets the
// order's new live schedule. The generator loses that race as a conflict
// (the next run looks again), never as an error of the plan's round, and
// the dispatcher's assignment stands.
func TestVisitGeneratorLosesARaceWithAnAssignmentAsAConflict(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	day0, orderID, scheduleID := e.firstVisitBooked(t)
	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+scheduleID+"/status", a.opA, map[string]any{"status": "cancelled"})
	e.move(t, day0.Format(time.DateOnly), day0.Format(time.DateOnly), "13:00")

	assigned := day0.Add(16 * time.Hour)
	g, err := command.NewVisitGenerator(&bookHook{Transactor: e.transactor(t), hook: func() {
		a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+orderID+"/assignment", a.opA, map[string]any{
			"staff_id": a.staffA, "start_at": assigned, "end_at": assigned.Add(time.Hour)})
	}})
	require.NoError(t, err)
	_, err = e.run(t, g)
	require.NoError(t, err, "the generator's round")

	var start time.Time
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT lower(period) FROM bookings WHERE order_id = $1 AND live`,
		orderID).Scan(&start))
	require.True(t, assigned.Equal(start), "the dispatcher's assignment stands: %s", start)
}

// firstVisitBooked runs the generator once (four visits, each booked) and
// returns the first visit's day, order and schedule.
func (e generatorEnv) firstVisitBooked(t *testing.T) (day0 time.Time, orderID, scheduleID string) {
	t.Helper()
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)
	day0 = e.firstDay()
	require.NoError(t, e.a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT v.order_id::text, b.schedule_id::text
		FROM plan_visits v JOIN bookings b ON b.order_id = v.order_id AND b.live WHERE v.visit_key = $1`,
		e.planID+"/"+day0.Format(time.DateOnly)).Scan(&orderID, &scheduleID))
	return day0, orderID, scheduleID
}

// transactor is a Transactor on the event store, sealing as serve does.
func (e generatorEnv) transactor(t *testing.T) *pubsub.Transactor {
	t.Helper()
	vlt, err := vault.New(e.a.dbs.es.DB, e.a.cfg.MasterKeys)
	require.NoError(t, err)
	store, err := pubsub.NewStore(e.a.dbs.es, nil, vlt)
	require.NoError(t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	return tx
}

// bookHook is a Transactor whose sessions run hook (once) before their
// first booking, before their first look at working hours (atHours), or
// before they load order (when set).
type bookHook struct {
	command.Transactor
	atHours bool
	order   string
	once    sync.Once
	hook    func()
}

func (b *bookHook) Run(ctx context.Context, meta event.Meta, fn func(ctx context.Context, s command.Session) error) (command.Outcome, error) {
	return b.Transactor.Run(ctx, meta, func(ctx context.Context, s command.Session) error {
		return fn(ctx, &bookHookSession{Session: s, b: b})
	})
}

type bookHookSession struct {
	command.Session
	b *bookHook
}

func (s *bookHookSession) Book(ctx context.Context, sch *schedule.Schedule) error {
	if !s.b.atHours && s.b.order == "" {
		s.b.once.Do(s.b.hook)
	}
	return s.Session.Book(ctx, sch)
}

func (s *bookHookSession) Order(ctx context.Context, id string) (*order.Order, error) {
	if id == s.b.order {
		s.b.once.Do(s.b.hook)
	}
	return s.Session.Order(ctx, id)
}

func (s *bookHookSession) StaffHours(ctx context.Context, id string) (availability.WorkingHours, *time.Location, bool, error) {
	if s.b.atHours {
		s.b.once.Do(s.b.hook)
	}
	return s.Session.StaffHours(ctx, id)
}

// A dispatcher moved a visit's order by hand to 13:00, and the plan then
// moves the visit there too: the generator re-plans it to the window its
// schedule holds already. The schedule is cancelled by hand between the
// generator's read of it and its booking decision. The cancelled
// schedule's booking stays released: the staff member's time is free, and
// no booking outlives its schedule.
func TestVisitGeneratorNeverBooksAScheduleCancelledMeanwhile(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	day0, orderID, scheduleID := e.firstVisitBooked(t)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+orderID+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": day0.Add(13 * time.Hour), "end_at": day0.Add(15 * time.Hour)})
	e.move(t, day0.Format(time.DateOnly), day0.Format(time.DateOnly), "13:00")

	g, err := command.NewVisitGenerator(&bookHook{Transactor: e.transactor(t), atHours: true, hook: func() {
		a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+scheduleID+"/status", a.opA, map[string]any{"status": "cancelled"})
	}})
	require.NoError(t, err)
	_, err = e.run(t, g)
	require.NoError(t, err, "the generator's round")

	var live bool
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT live FROM bookings WHERE schedule_id = $1`, scheduleID).Scan(&live))
	require.False(t, live, "the cancelled schedule holds no booking")
}

// As above, but the dispatcher moves the schedule again (to 17:00) between
// the generator's read of it and its booking decision: the booking holds the
// schedule's window, the dispatcher's, so the staff member cannot be
// booked twice for it.
func TestVisitGeneratorNeverMovesABookingAwayFromItsSchedule(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	day0, orderID, scheduleID := e.firstVisitBooked(t)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+orderID+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": day0.Add(13 * time.Hour), "end_at": day0.Add(15 * time.Hour)})
	e.move(t, day0.Format(time.DateOnly), day0.Format(time.DateOnly), "13:00")

	moved := day0.Add(17 * time.Hour)
	g, err := command.NewVisitGenerator(&bookHook{Transactor: e.transactor(t), atHours: true, hook: func() {
		a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+orderID+"/assignment", a.opA, map[string]any{
			"staff_id": a.staffA, "start_at": moved, "end_at": moved.Add(2 * time.Hour)})
	}})
	require.NoError(t, err)
	_, err = e.run(t, g)
	require.NoError(t, err, "the generator's round")

	stream := a.stream(scheduleID)
	var start time.Time
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT lower(period) FROM bookings WHERE schedule_id = $1 AND live`,
		scheduleID).Scan(&start))
	require.True(t, moved.Equal(start), "the booking holds the schedule's window, the dispatcher's (%d events): %s", len(stream), start)
}

// The fenced generator (its term checked in every transaction, as
// leadPlans runs it) re-plans a visit the plan moved, while a dispatcher
// confirms the visit's order: the confirmation commits after the
// generator's transaction began and before it loads the order. The
// generator reads the confirmed order, so nothing it appends follows a
// version it did not see: the move is re-planned in this round, not left
// for a later one (the confirmation is no conflict, as it is to an
// unfenced run).
func TestFencedVisitGeneratorReplansAnOrderChangedBeforeItsLoad(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	day0, orderID, _ := e.firstVisitBooked(t)
	e.move(t, day0.Format(time.DateOnly), day0.Format(time.DateOnly), "13:00")

	fence := readmodel.Fence{Lock: advisory.Plans, Term: 1, Lease: 5 * time.Second, Function: webhooks.FenceFunction}
	require.NoError(t, webhooks.BeginTerm(t.Context(), a.dbs.es.DB, fence))
	g, err := command.NewVisitGenerator(&bookHook{Transactor: e.transactor(t), order: orderID, hook: func() {
		a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+orderID+"/status", a.opA, map[string]any{"status": "confirmed"})
	}})
	require.NoError(t, err)
	g.Fatal = func(err error) bool { return errors.Is(readmodel.StaleTerm(err), readmodel.ErrStaleTerm) } // as leadPlans
	done, err := g.All(planFenced(t.Context(), fence), e.plans, e.now, 8*7*24*time.Hour)
	require.NoError(t, err, "the generator's round")
	require.Equal(t, command.VisitsDone{Replanned: 1}, done, "the moved visit is re-planned in this round")

	var start time.Time
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT lower(period) FROM bookings WHERE order_id = $1 AND live`,
		orderID).Scan(&start))
	require.True(t, day0.Add(13*time.Hour).Equal(start), "the order is booked at the visit's new window: %s", start)
}

// As above, for a visit the plan skipped: the generator cancels its order,
// confirmed meanwhile, in this round.
func TestFencedVisitGeneratorCancelsAnOrderChangedBeforeItsLoad(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	day0, orderID, _ := e.firstVisitBooked(t)
	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+e.planID+"/skip", a.opA, map[string]any{"date": day0.Format(time.DateOnly)})

	fence := readmodel.Fence{Lock: advisory.Plans, Term: 1, Lease: 5 * time.Second, Function: webhooks.FenceFunction}
	require.NoError(t, webhooks.BeginTerm(t.Context(), a.dbs.es.DB, fence))
	g, err := command.NewVisitGenerator(&bookHook{Transactor: e.transactor(t), order: orderID, hook: func() {
		a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+orderID+"/status", a.opA, map[string]any{"status": "confirmed"})
	}})
	require.NoError(t, err)
	g.Fatal = func(err error) bool { return errors.Is(readmodel.StaleTerm(err), readmodel.ErrStaleTerm) } // as leadPlans
	done, err := g.All(planFenced(t.Context(), fence), e.plans, e.now, 8*7*24*time.Hour)
	require.NoError(t, err, "the generator's round")
	require.Equal(t, command.VisitsDone{Cancelled: 1}, done, "the skipped visit's order is cancelled in this round")
	var withdrawn bool
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT withdrawn FROM plan_visits WHERE order_id = $1`, orderID).Scan(&withdrawn))
	require.True(t, withdrawn)
}
