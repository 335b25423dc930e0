package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/readmodel"
	"hearth/adapters/vault"
	"hearth/app/command"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
	"hearth/internal/database"
	"hearth/internal/pgtest"
	"hearth/migrations"
)

// generatorEnv is a plan of four weekly visits, preferring staff member A,
// and generators on the real event store.
type generatorEnv struct {
	a      *api
	planID string
	plans  *pubsub.Plans
	now    time.Time
}

func newGeneratorEnv(t *testing.T) generatorEnv {
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	item := a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Weekly clean", "base_price_cents": 4500})
	start := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	r := a.must(http.StatusCreated, http.MethodPost, "/v1/plans", a.opA, map[string]any{
		"customer_id": customer, "catalog_item_id": item, "staff_id": a.staffA,
		"window":     map[string]any{"start": "09:00", "end": "11:00"},
		"recurrence": map[string]any{"frequency": "weekly", "interval": 1, "start": start, "count": 4}})
	plans, err := pubsub.NewPlans(a.dbs.es.DB)
	require.NoError(t, err)
	return generatorEnv{a: a, planID: r.Body["id"].(string), plans: plans, now: time.Now().UTC()}
}

// generator is the visit generator as leadPlans builds it: its store opens
// and seals personal fields with the master keys.
func (e generatorEnv) generator(t *testing.T) *command.VisitGenerator {
	vlt, err := vault.New(e.a.dbs.es.DB, e.a.cfg.MasterKeys)
	require.NoError(t, err)
	store, err := pubsub.NewStore(e.a.dbs.es, nil, vlt)
	require.NoError(t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	g, err := command.NewVisitGenerator(tx)
	require.NoError(t, err)
	return g
}

func (e generatorEnv) run(t *testing.T, g *command.VisitGenerator) (command.VisitsDone, error) {
	return g.All(t.Context(), e.plans, e.now, 8*7*24*time.Hour)
}

// orders counts the OrderCreated events of the plan's visits, and the
// ledger's rows: exactly one per occurrence is the promise.
func (e generatorEnv) orders(t *testing.T) (created, ledger int) {
	ctx, db := t.Context(), e.a.dbs.es.DB
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE type = 'OrderCreated'
		AND stream_id IN (SELECT order_id FROM plan_visits WHERE plan_id = $1)`, e.planID).Scan(&created))
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM plan_visits WHERE plan_id = $1`, e.planID).Scan(&ledger))
	var all int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM events WHERE type = 'OrderCreated' AND actor = $1`, command.GeneratorActor).Scan(&all))
	require.Equal(t, created, all, "no generated order outside the ledger")
	return created, ledger
}

// Twice in a row and then two generators at once: one order per visit.
func TestVisitGeneratorExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{}, done, "a second run creates nothing")

	// Two concurrent runs on a fresh plan, meeting before each visit (a
	// barrier), so that both attempt every visit at the same time.
	e2 := newGeneratorEnv(t)
	_, errs := e2.runTwoAtOnce(t)
	require.NoError(t, errors.Join(errs...))
	created, ledger := e2.orders(t)
	require.Equal(t, 4, created)
	require.Equal(t, 4, ledger)
	created, ledger = e.orders(t)
	require.Equal(t, 4, created)
	require.Equal(t, 4, ledger)
}

// A run stopped between two visits (its leader gone) leaves what it
// committed; the next run creates the rest, one order per visit.
func TestVisitGeneratorStoppedMidRun(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	g := e.generator(t)
	ctx, cancel := context.WithCancel(t.Context())
	seen := 0
	g.Between = func(context.Context) {
		if seen++; seen == 3 {
			cancel() // after two visits' transactions
		}
	}
	done, err := g.All(ctx, e.plans, e.now, 8*7*24*time.Hour)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 2, done.Created)
	created, _ := e.orders(t)
	require.Equal(t, 2, created)

	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 2, done.Created)
	created, ledger := e.orders(t)
	require.Equal(t, 4, created)
	require.Equal(t, 4, ledger)
}

// A visit whose window collides with the preferred staff member's other
// work is created unassigned with the reason; a visit the plan drops
// (skipped) loses its order; the others stay booked.
func TestVisitGeneratorCollisionAndReplan(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	first := time.Now().UTC().AddDate(0, 0, 1)
	london := time.UTC
	day := func(n int) time.Time {
		d := first.AddDate(0, 0, 7*n)
		return time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, london)
	}
	// Staff member A is busy 10:00-12:00 on the second visit's day.
	customer := a.createCustomer(a.opA, "Bob")
	other := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{"customer_id": customer, "amount_cents": 1})
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+other.Body["id"].(string)+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": day(1).Add(10 * time.Hour).Format(time.RFC3339), "end_at": day(1).Add(12 * time.Hour).Format(time.RFC3339)})

	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Created: 4, Unassigned: 1}, done)
	var reason string
	var staff *string
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT unassigned_reason, staff_id::text FROM plan_visits
		WHERE plan_id = $1 AND visit_key = $2`, e.planID, e.planID+"/"+day(1).Format(time.DateOnly)).Scan(&reason, &staff))
	require.Contains(t, reason, "already booked")
	require.Nil(t, staff)
	var booked int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM bookings WHERE staff_id = $1 AND live`, a.staffA).Scan(&booked))
	require.Equal(t, 4, booked, "three visits and the other job: no double booking")

	// Skip the third visit: its order is cancelled and its booking freed.
	third := day(2).Format(time.DateOnly)
	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+e.planID+"/skip", a.opA, map[string]any{"date": third})
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Cancelled: 1}, done)
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM bookings WHERE staff_id = $1 AND live`, a.staffA).Scan(&booked))
	require.Equal(t, 3, booked)
	created, _ := e.orders(t)
	require.Equal(t, 4, created, "cancelled, not a new one")

	// The generated visits go out as public events naming their plan. The
	// feed shows an event once every older transaction of the cluster has
	// ended (parallel tests share it): the other order comes first, so the
	// page is whole once it holds five.
	feed := a.awaitFeed(a.opA, "types=order.created&limit=100", 5)
	var dates []string
	for _, ev := range feed.Events {
		if ev.Data["plan_id"] == e.planID {
			dates = append(dates, ev.Data["visit_date"].(string))
		}
	}
	require.Equal(t, []string{day(0).Format(time.DateOnly), day(1).Format(time.DateOnly), day(2).Format(time.DateOnly),
		day(3).Format(time.DateOnly)}, dates)
}

// ledgerRow reads one visit's ledger row: its start, staff member and
// reason.
func (e generatorEnv) ledgerRow(t *testing.T, date time.Time) (start time.Time, staff *string, reason string) {
	require.NoError(t, e.a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT start_at, staff_id::text, unassigned_reason FROM plan_visits
		WHERE visit_key = $1`, e.planID+"/"+date.Format(time.DateOnly)).Scan(&start, &staff, &reason))
	return start.UTC(), staff, reason
}

// Changing a plan re-plans the orders of its future visits: a moved visit's
// schedule moves with it, a move into the staff member's other work leaves
// the order unassigned with the reason, and a change from a visit on moves
// that visit and the following ones only.
func TestVisitGeneratorReplansChanges(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	first := time.Now().UTC().AddDate(0, 0, 1)
	day := func(n int) time.Time {
		d := first.AddDate(0, 0, 7*n)
		return time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC)
	}
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)
	booked := func() []string {
		rows, err := a.dbs.es.DB.QueryContext(t.Context(), `SELECT lower(period) FROM bookings WHERE staff_id = $1 AND live ORDER BY 1`, a.staffA)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var at time.Time
			require.NoError(t, rows.Scan(&at))
			out = append(out, at.UTC().Format("01-02 15:04"))
		}
		return out
	}
	at := func(n, h int) string { return day(n).Add(time.Duration(h) * time.Hour).Format("01-02 15:04") }
	require.Equal(t, []string{at(0, 9), at(1, 9), at(2, 9), at(3, 9)}, booked())

	// Move the first visit to 14:00 the day after.
	e.move(t, day(0).Format(time.DateOnly), day(0).AddDate(0, 0, 1).Format(time.DateOnly), "14:00")
	// Another job of staff member A over the second visit's new time.
	customer := a.createCustomer(a.opA, "Bob")
	other := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{"customer_id": customer, "amount_cents": 1})
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+other.Body["id"].(string)+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": day(1).Add(15 * time.Hour).Format(time.RFC3339), "end_at": day(1).Add(16 * time.Hour).Format(time.RFC3339)})
	e.move(t, day(1).Format(time.DateOnly), day(1).Format(time.DateOnly), "15:00")
	// From the third visit on, 07:00 to 08:00.
	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+e.planID+"/change", a.opA,
		map[string]any{"from": day(2).Format(time.DateOnly), "window": map[string]any{"start": "07:00", "end": "08:00"}})

	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Replanned: 4}, done)
	require.Equal(t, []string{day(0).AddDate(0, 0, 1).Add(14 * time.Hour).Format("01-02 15:04"), at(1, 15), at(2, 7), at(3, 7)}, booked(),
		"the moved and changed visits, and the other job; the clashing visit holds nothing")
	start, staff, reason := e.ledgerRow(t, day(1))
	require.Equal(t, day(1).Add(15*time.Hour), start)
	require.Nil(t, staff)
	require.Contains(t, reason, "already booked")
	_, staff, _ = e.ledgerRow(t, day(2))
	require.NotNil(t, staff)
	created, _ := e.orders(t)
	require.Equal(t, 4, created, "re-planned, never re-created")

	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{}, done, "nothing left to re-plan")
}

// The generator's leader writes under its term: once a newer term is begun
// in the event store (another worker took the lock), its next transaction
// fails, it steps down with ErrStaleTerm, and it created nothing after.
func TestVisitGeneratorFencedByTerm(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	cfg := e.a.cfg
	cfg.PlanInterval, cfg.PlanHorizon = time.Second, 8*7*24*time.Hour
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var mu sync.Mutex
	visits := 0
	bumped := make(chan struct{})
	between := func(context.Context) {
		mu.Lock()
		defer mu.Unlock()
		if visits++; visits == 3 { // two visits created under term 1: a newer term begins
			_, err := e.a.dbs.es.DB.Exec(`UPDATE event_store_terms SET term = 2 WHERE name = 'hearth/plans'`)
			require.NoError(t, err)
			close(bumped)
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- leadPlans(ctx, 1, cfg, 5*time.Second, between, slog.New(slog.DiscardHandler)) }()
	var err error
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("the generator's leader never stepped down")
	}
	require.ErrorIs(t, err, readmodel.ErrStaleTerm)
	<-bumped
	created, ledger := e.orders(t)
	require.Equal(t, 2, created, "nothing written after the term went stale")
	require.Equal(t, 2, ledger)
}

// A plan's visits are read within plan.HorizonDays of today: a read far
// ahead is refused (422 naming from), since the plan's dates are walked
// from its start. A range without a visit is an empty list.
func TestPlanVisitsReadWithinTheHorizon(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	item := a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Daily clean", "base_price_cents": 4500})
	a.must(http.StatusOK, http.MethodPut, "/v1/settings", a.opA, map[string]any{"time_zone": "Europe/London"})
	start := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	created := a.must(http.StatusCreated, http.MethodPost, "/v1/plans", a.opA, map[string]any{
		"customer_id": customer, "catalog_item_id": item, "staff_id": a.staffA,
		"window":     map[string]any{"start": "09:00", "end": "11:00"},
		"recurrence": map[string]any{"frequency": "daily", "interval": 1, "start": start}})
	visits := "/v1/plans/" + created.Body["id"].(string) + "/visits"
	r := a.do(http.MethodGet, visits+"?from=9999-12-20T00:00:00Z", a.opA, nil)
	require.Equal(t, []string{"from"}, invalidFields(t, r))
	near := time.Now().UTC().AddDate(9, 0, 0).Format(time.RFC3339)
	require.Len(t, a.must(http.StatusOK, http.MethodGet, visits+"?from="+near, a.opA, nil).Body["items"], 56, "eight weeks of daily visits")
	none := a.must(http.StatusOK, http.MethodGet, visits+"?from=2020-01-01T00:00:00Z", a.opA, nil)
	require.JSONEq(t, `{"items":[]}`, none.Raw)
}

// One plan that fails on every run (here: its order's notes, which the
// merchant filled, once left no room for what a re-plan appends) does not
// stop the generator for the plans listed after it, every merchant's.
func TestVisitGeneratorGoesOnPastAFailingPlan(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	first := time.Now().UTC().AddDate(0, 0, 1)
	start := first.Format(time.DateOnly)
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)

	var orderID string
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT order_id::text FROM plan_visits WHERE visit_key = $1`,
		e.planID+"/"+start).Scan(&orderID))
	a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+orderID, a.opA, map[string]any{"notes": strings.Repeat("x", order.MaxNotes-10)})
	// Moved into the staff member's other job: the re-plan leaves the order
	// unassigned and notes the move, when the note fits.
	next := first.AddDate(0, 0, 1)
	busy := time.Date(next.Year(), next.Month(), next.Day(), 14, 0, 0, 0, time.UTC)
	other := a.createOrder(a.opA, a.createCustomer(a.opA, "Bob"), 1)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+other+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": busy.Format(time.RFC3339), "end_at": busy.Add(time.Hour).Format(time.RFC3339)})
	e.move(t, start, next.Format(time.DateOnly), "14:00")

	// A plan whose round cannot pass: its plan id names no plan.
	failing := staticPlans{{MerchantID: a.merchantA, PlanID: uuid.New()}}
	listed, err := e.plans.ListPlans(t.Context())
	require.NoError(t, err)
	done, err = e.generator(t).All(t.Context(), append(failing, listed...), e.now, 8*7*24*time.Hour)
	require.ErrorContains(t, err, "plan "+failing[0].PlanID)
	require.Equal(t, 1, done.Replanned, "the plans after the failing one were run: %+v", done)
	at, staff, reason := e.ledgerRow(t, first) // the row of the first visit, keyed by its date
	require.Equal(t, busy, at, "moved")
	require.Nil(t, staff, "unassigned: %s", reason)
	r := a.crmAwait(a.opA, "/v1/orders/"+orderID, func(r response) bool {
		return r.Status == http.StatusOK && r.Body["staff_id"] == nil // the re-plan, projected
	})
	require.Len(t, []rune(r.Body["notes"].(string)), order.MaxNotes-10, "the merchant's notes as they were: the move's note did not fit")
}

// staticPlans lists the plans it holds.
type staticPlans []command.PlanRef

func (p staticPlans) ListPlans(context.Context) ([]command.PlanRef, error) { return p, nil }

// A visit moved away and back to a start it was re-planned to before is
// re-planned each time: the stand-in schedule of the earlier move, since
// cancelled, does not stand in the way.
func TestVisitGeneratorReplansBackToAnEarlierStart(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	day0 := e.firstDay()
	date := day0.Format(time.DateOnly)
	e.otherJob(t, day0.Add(16*time.Hour), time.Hour) // the plan's staff member's, that day
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)
	for i, hour := range []int{16, 14, 16, 14} {
		e.move(t, date, date, fmt.Sprintf("%02d:00", hour))
		done, err := e.run(t, e.generator(t))
		require.NoError(t, err)
		require.Equal(t, 1, done.Replanned, "move %d to %02d:00", i, hour)
		start, staff, reason := e.ledgerRow(t, day0)
		require.Equal(t, day0.Add(time.Duration(hour)*time.Hour), start, "move %d", i)
		require.Equal(t, hour == 14, staff != nil, "move %d: booked when the staff member is free (%q)", i, reason)
	}
}

// A plan paused and resumed has its visits after the resume again, and the
// generator, which cancelled their orders during the pause, gives each a
// new order (a cancelled order is final), which the plan's visits name.
// An order cancelled by hand is not brought back.
func TestVisitGeneratorGivesResumedVisitsNewOrders(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	visits := func() []any {
		return a.must(http.StatusOK, http.MethodGet, "/v1/plans/"+e.planID+"/visits", a.opA, nil).Body["items"].([]any)
	}
	first := visits()
	require.Len(t, first, 4)
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)
	byHand := first[3].(map[string]any)["order_id"].(string)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+byHand+"/cancel", a.opA, map[string]any{"reason": "the customer called"})

	e.lifecycle(t, "pause")
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 3, done.Cancelled, "the by-hand cancelled one was cancelled already")
	e.lifecycle(t, "resume")
	for range 2 { // the second run finds nothing more to do
		done, err = e.run(t, e.generator(t))
		require.NoError(t, err)
	}
	require.Equal(t, command.VisitsDone{}, done)

	again := visits()
	require.Len(t, again, 4, "the plan lists its four visits again")
	for i, v := range again[:3] {
		id := v.(map[string]any)["order_id"].(string)
		require.NotEqual(t, first[i].(map[string]any)["order_id"], id, "visit %d has a new order", i)
		var types []string
		for _, ev := range a.stream(id) {
			types = append(types, ev.Type)
		}
		require.Equal(t, []string{"OrderCreated", "OrderAssignmentUpdated", "OrderStatusChanged"}, types, "visit %d: a new order, booked", i)
	}
	require.Equal(t, byHand, again[3].(map[string]any)["order_id"], "cancelled by hand: not brought back")
	var live int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM plan_visits WHERE plan_id = $1 AND NOT cancelled`,
		e.planID).Scan(&live))
	require.Equal(t, 3, live)
}

// A visit withdrawn (a pause) and given a new order (the resume), then
// moved to a start its first order was re-planned to before, is re-planned:
// the first order's stand-in schedule does not stand in the way.
func TestVisitGeneratorReplansANewOrderWhereAnEarlierOneWas(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	day0 := e.firstDay()
	date := day0.Format(time.DateOnly)
	e.otherJob(t, day0.Add(9*time.Hour), 2*time.Hour) // over the first visit: it is created unassigned
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Created: 4, Unassigned: 1}, done)

	// Moved to 14:00: the re-plan books a stand-in (key, 14:00, order version 1).
	e.move(t, date, date, "14:00")
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 1, done.Replanned)
	_, staff, _ := e.ledgerRow(t, day0)
	require.NotNil(t, staff)

	// Paused (withdrawn), moved back to 09:00, resumed: a new order, unassigned (the other job).
	e.lifecycle(t, "pause")
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Cancelled)
	e.move(t, date, date, "09:00")
	e.lifecycle(t, "resume")
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Created: 4, Unassigned: 1}, done)

	// Moved to 14:00 again: the new order's re-plan should book it.
	e.move(t, date, date, "14:00")
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	start, staff, reason := e.ledgerRow(t, day0)
	require.Equal(t, 1, done.Replanned, "the second generation's re-plan (ledger: %s, staff %v, %q)", start, staff, reason)
	require.Equal(t, day0.Add(14*time.Hour), start)
	require.NotNil(t, staff)
}

// A visit moved beyond the horizon is re-planned at once: its order's
// window and its booking move there (its old slot is freed), and when the
// horizon reaches it, twenty days on, it is not re-planned again.
func TestVisitGeneratorReplansAVisitMovedBeyondTheHorizonAtOnce(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	day0 := e.firstDay()
	horizon := 8 * 7 * 24 * time.Hour
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)
	far := day0.AddDate(0, 0, 70).Add(9 * time.Hour) // the runs' horizon is 56 days
	e.move(t, day0.Format(time.DateOnly), far.Format(time.DateOnly), "09:00")
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Replanned: 1}, done, "the moved visit's order follows it beyond the horizon")
	start, staff, reason := e.ledgerRow(t, day0)
	require.Equal(t, far, start, "ledger: staff %v, %q", staff, reason)
	require.NotNil(t, staff)
	require.Equal(t, []string{day0.AddDate(0, 0, 7).Add(9 * time.Hour).Format("01-02 15:04"),
		day0.AddDate(0, 0, 14).Add(9 * time.Hour).Format("01-02 15:04"), day0.AddDate(0, 0, 21).Add(9 * time.Hour).Format("01-02 15:04"),
		far.Format("01-02 15:04")}, e.liveBookings(t, e.a.staffA), "the old slot is freed, the new one held")

	// Twenty days on (the visit's old start long past), the horizon
	// reaches the visit's new date: its order is there already.
	later := day0.AddDate(0, 0, 20)
	require.True(t, far.Before(later.Add(horizon)))
	done, err = e.generator(t).All(t.Context(), e.plans, later, horizon)
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{}, done)
	start, _, _ = e.ledgerRow(t, day0)
	require.Equal(t, far, start)
	require.Contains(t, e.liveBookings(t, e.a.staffA), far.Format("01-02 15:04"))
	created, _ := e.orders(t)
	require.Equal(t, 4, created, "re-planned, never re-created")
}

// A visit moved to a later start is re-planned even when no run happened
// between the move and its old start (a generator outage, a leader change,
// a PLAN_INTERVAL longer than the time left): "started" is the visit's
// current start and its order's status, not the start the ledger recorded.
// The order and the staff member's booking follow the visit to its new
// start.
func TestVisitGeneratorReplansAMovedVisitAfterItsOldStartHasPassed(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	day0 := e.firstDay()
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)

	// Tomorrow 09:00 moves to the day after at 14:00 (both in the future).
	newStart := day0.AddDate(0, 0, 1).Add(14 * time.Hour)
	e.move(t, day0.Format(time.DateOnly), newStart.Format(time.DateOnly), "14:00")

	// The next run happens at 09:30 tomorrow: after the old start, well
	// before the new one.
	later := day0.Add(9*time.Hour + 30*time.Minute)
	done, err = e.generator(t).All(t.Context(), e.plans, later, 8*7*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, 1, done.Replanned)

	start, staff, reason := e.ledgerRow(t, day0)
	require.Equal(t, newStart, start, "the moved visit's order follows it to its new start (ledger: staff %v, %q)", staff, reason)
	require.NotNil(t, staff)
	bookings := e.liveBookings(t, e.a.staffA)
	require.Contains(t, bookings, newStart.Format("01-02 15:04"), "the staff member is booked at the visit's new time")
	require.NotContains(t, bookings, day0.Add(9*time.Hour).Format("01-02 15:04"), "and no longer at the old one")
	var orderID string
	var startAt time.Time
	require.NoError(t, e.a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT order_id::text FROM plan_visits WHERE visit_key = $1`,
		e.planID+"/"+day0.Format(time.DateOnly)).Scan(&orderID))
	require.NoError(t, e.a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT lower(period) FROM bookings WHERE order_id = $1 AND live`,
		orderID).Scan(&startAt))
	require.Equal(t, newStart, startAt.UTC(), "the booking is the visit's order's")
}

// A visit moved later and then skipped before any run came between (an
// outage, a leader change, a long PLAN_INTERVAL) loses its order at the
// next run, even when that run comes after the visit's old start: "not
// started" is the visit's current start, as for a re-plan, not the start
// its order still has. Its order is cancelled and the staff member's time
// freed, rather than left pending at a time the visit never had again.
func TestVisitGeneratorCancelsAMovedVisitDroppedAfterItsOldStartHasPassed(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	day0 := e.firstDay()
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)

	// Tomorrow 09:00 moves to the day after at 14:00, and is then skipped.
	date := day0.Format(time.DateOnly)
	e.move(t, date, day0.AddDate(0, 0, 1).Format(time.DateOnly), "14:00")
	e.a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+e.planID+"/skip", e.a.opA, map[string]any{"date": date})
	var orderID string
	require.NoError(t, e.a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT order_id::text FROM plan_visits WHERE visit_key = $1`,
		e.planID+"/"+date).Scan(&orderID))
	version := e.orderVersion(t, orderID)

	// The next run happens at 09:30 tomorrow: after the old start, well
	// before the new one.
	later := day0.Add(9*time.Hour + 30*time.Minute)
	done, err = e.generator(t).All(t.Context(), e.plans, later, 8*7*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Cancelled: 1}, done, "the skipped visit's order is withdrawn")
	require.Equal(t, []string{"OrderCancelled"}, e.orderEvents(t, orderID, version))
	require.NotContains(t, e.liveBookings(t, e.a.staffA), day0.Add(9*time.Hour).Format("01-02 15:04"), "its booking is freed")
	var withdrawn bool
	require.NoError(t, e.a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT cancelled AND withdrawn FROM plan_visits WHERE visit_key = $1`,
		e.planID+"/"+date).Scan(&withdrawn))
	require.True(t, withdrawn)
}

// The generator books the preferred staff member only within their working
// hours (when they have any set): a visit on their holiday, or outside the
// day's shifts, is created unassigned with the reason, as for a clash, and
// availability agrees that they are not free then.
func TestVisitGeneratorBooksNoOneOutsideTheirWorkingHours(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	day0 := e.firstDay()
	week := map[string]any{}
	for _, d := range []string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"} {
		week[d] = []map[string]any{{"start": "08:00", "end": "18:00"}}
	}
	a.must(http.StatusOK, http.MethodPut, "/v1/staff/"+a.staffA+"/working-hours", a.opA, map[string]any{
		"week": week, "exceptions": []map[string]any{
			{"date": day0.Format(time.DateOnly), "reason": "holiday"},
			{"date": day0.AddDate(0, 0, 7).Format(time.DateOnly), "reason": "changed_hours",
				"shifts": []map[string]any{{"start": "10:00", "end": "18:00"}}}}})
	// Availability agrees: staff member A has no slot on the holiday.
	slots := a.must(http.StatusOK, http.MethodGet, "/v1/availability?duration=2h&staff_id="+a.staffA+
		"&from="+day0.Format(time.RFC3339)+"&to="+day0.AddDate(0, 0, 1).Format(time.RFC3339), a.opA, nil)
	require.Empty(t, slots.Body["items"])

	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Created: 4, Unassigned: 2}, done)
	_, staff, reason := e.ledgerRow(t, day0)
	require.Nil(t, staff, "the visit on the preferred staff member's holiday is not assigned to them")
	require.Contains(t, reason, "not working then (off on "+day0.Format(time.DateOnly)+")")
	_, staff, reason = e.ledgerRow(t, day0.AddDate(0, 0, 7))
	require.Nil(t, staff, "09:00 is before the day's shift")
	require.Contains(t, reason, "outside their working hours")
	_, staff, _ = e.ledgerRow(t, day0.AddDate(0, 0, 14))
	require.NotNil(t, staff, "an ordinary day: booked")
	require.Equal(t, []string{day0.AddDate(0, 0, 14).Add(9 * time.Hour).Format("01-02 15:04"),
		day0.AddDate(0, 0, 21).Add(9 * time.Hour).Format("01-02 15:04")}, e.liveBookings(t, a.staffA))
	var orderID string
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT order_id::text FROM plan_visits WHERE visit_key = $1`,
		e.planID+"/"+day0.Format(time.DateOnly)).Scan(&orderID))
	order := a.crmAwait(a.opA, "/v1/orders/"+orderID, func(r response) bool { return r.Status == http.StatusOK }) // the read model follows
	require.Contains(t, order.Body["notes"], "Not assigned: the preferred staff member "+a.staffA+" is not working then (off on "+day0.Format(time.DateOnly)+")")
}

// Working hours are written in the merchant's time zone, and availability
// reads them in the zone the merchant has now; a plan keeps the zone it was
// created in. After the merchant moves from UTC (where the plan was made)
// to Tokyo (+09:00, no daylight saving), the staff member's 08:00-18:00 is
// 23:00-09:00 UTC, and the plan's 09:00-11:00 UTC visits (18:00-20:00 in
// Tokyo) fall outside it: availability shows no slot then, and the
// generator must not book them then either.
func TestVisitGeneratorReadsWorkingHoursInTheMerchantsZone(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	a.must(http.StatusOK, http.MethodPut, "/v1/settings", a.opA, map[string]any{"time_zone": "Asia/Tokyo"})
	week := map[string]any{}
	for _, d := range []string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"} {
		week[d] = []map[string]any{{"start": "08:00", "end": "18:00"}}
	}
	a.must(http.StatusOK, http.MethodPut, "/v1/staff/"+a.staffA+"/working-hours", a.opA, map[string]any{"week": week})
	visit := e.firstDay().Add(9 * time.Hour)
	slots := a.must(http.StatusOK, http.MethodGet, "/v1/availability?duration=2h&staff_id="+a.staffA+
		"&from="+visit.Format(time.RFC3339)+"&to="+visit.Add(2*time.Hour).Format(time.RFC3339), a.opA, nil)
	require.Equal(t, "Asia/Tokyo", slots.Body["time_zone"])
	require.Empty(t, slots.Body["items"], "availability: 18:00 in Tokyo is after the shift")

	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Empty(t, e.liveBookings(t, a.staffA), "the generator booked the staff member outside the working hours availability shows")
	require.Equal(t, command.VisitsDone{Created: 4, Unassigned: 4}, done)
	_, staff, reason := e.ledgerRow(t, e.firstDay())
	require.Nil(t, staff)
	require.Contains(t, reason, "outside their working hours")
}

// handAssigned gives the first visit's order to a new staff member B by
// hand (the dispatcher's PUT /v1/orders/{id}/assignment) and gives A
// another job at that time; it returns B and the order's id.
func (e generatorEnv) handAssigned(t *testing.T) (staffB, orderID string) {
	t.Helper()
	a := e.a
	day0 := e.firstDay()
	staffB = a.crmCreate(a.opA, "/v1/staff", map[string]any{"name": "Bea Backup"})
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT order_id::text FROM plan_visits WHERE visit_key = $1`,
		e.planID+"/"+day0.Format(time.DateOnly)).Scan(&orderID))
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+orderID+"/assignment", a.opA, map[string]any{
		"staff_id": staffB, "start_at": day0.Add(9 * time.Hour).Format(time.RFC3339), "end_at": day0.Add(11 * time.Hour).Format(time.RFC3339)})
	e.otherJob(t, day0.Add(9*time.Hour), 2*time.Hour)
	return staffB, orderID
}

// orderEvents lists the types of the order's events after version after.
func (e generatorEnv) orderEvents(t *testing.T, orderID string, after int) []string {
	t.Helper()
	rows, err := e.a.dbs.es.DB.QueryContext(t.Context(), `SELECT type FROM events WHERE stream_id = $1 AND version > $2 ORDER BY version`, orderID, after)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		out = append(out, typ)
	}
	require.NoError(t, rows.Err())
	return out
}

func (e generatorEnv) orderVersion(t *testing.T, orderID string) int {
	t.Helper()
	var v int
	require.NoError(t, e.a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT max(version) FROM events WHERE stream_id = $1`, orderID).Scan(&v))
	return v
}

// A change of price alone changes only the amount of the visits' orders:
// an order the dispatcher gave to staff member B by hand (A being needed
// elsewhere then) stays with B, and is not unassigned.
func TestVisitGeneratorChangesOnlyTheAmountOnAPriceChange(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	day0 := e.firstDay()
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)
	staffB, orderID := e.handAssigned(t)
	version := e.orderVersion(t, orderID)

	// The merchant raises the price from the first visit on.
	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+e.planID+"/change", a.opA,
		map[string]any{"from": day0.Format(time.DateOnly), "price_cents": 5000})
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Replanned: 4}, done)

	_, staff, reason := e.ledgerRow(t, day0)
	require.Equal(t, []string{day0.Add(9 * time.Hour).Format("01-02 15:04")}, e.liveBookings(t, staffB),
		"the order stays with the staff member the dispatcher chose (ledger now: staff %v, reason %q)", staff, reason)
	require.Empty(t, reason)
	require.Equal(t, []string{"OrderDetailsUpdated"}, e.orderEvents(t, orderID, version), "the amount, and nothing else")
	var price int64
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT price_cents FROM plan_visits WHERE order_id = $1`, orderID).Scan(&price))
	require.EqualValues(t, 5000, price)

	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{}, done, "nothing left to re-plan")
}

// When a visit's window changes, its order keeps the staff member it is
// assigned to (here B, chosen by hand) where they can take the new
// window; only a change of the plan's preferred staff member books the
// preferred one instead.
func TestVisitGeneratorKeepsTheAssigneeWhenAVisitMoves(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	day0 := e.firstDay()
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)
	staffB, orderID := e.handAssigned(t)

	// The first visit moves to 14:00 the day after: B goes then.
	newStart := day0.AddDate(0, 0, 1).Add(14 * time.Hour)
	e.move(t, day0.Format(time.DateOnly), newStart.Format(time.DateOnly), "14:00")
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Replanned: 1}, done)
	require.Equal(t, []string{newStart.Format("01-02 15:04")}, e.liveBookings(t, staffB), "the assignee follows the visit")
	require.NotContains(t, e.liveBookings(t, a.staffA), newStart.Format("01-02 15:04"))
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{}, done, "nothing left to re-plan")

	// The plan now prefers staff member C from the first visit on: the
	// plan's new choice is booked.
	staffC := a.crmCreate(a.opA, "/v1/staff", map[string]any{"name": "Cy Carer"})
	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+e.planID+"/change", a.opA,
		map[string]any{"from": day0.Format(time.DateOnly), "staff_id": staffC})
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Replanned: 4}, done)
	require.Empty(t, e.liveBookings(t, staffB))
	require.Len(t, e.liveBookings(t, staffC), 4)
	var staffOf string
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT staff_id::text FROM bookings WHERE order_id = $1 AND live`,
		orderID).Scan(&staffOf))
	require.Equal(t, staffC, staffOf)
}

// Staff member A leaves (made inactive) while the plan prefers them: the
// visits already booked keep A, the ones generated since are created
// unassigned ("not active"). The merchant then gives the plan to staff
// member B from its first visit on: the plan's new choice is booked for
// every visit not started yet, the ones left unassigned included, and the
// next run has nothing left to do.
func TestVisitGeneratorBooksANewPreferredStaffMemberForVisitsLeftUnassigned(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	day0 := e.firstDay()
	// The first run reaches the first two visits only: booked with A.
	done, err := e.generator(t).All(t.Context(), e.plans, e.now, 9*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Created: 2}, done)
	a.must(http.StatusOK, http.MethodPatch, "/v1/staff/"+a.staffA, a.opA, map[string]any{"active": false})
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Created: 2, Unassigned: 2}, done)
	_, staff, reason := e.ledgerRow(t, day0.AddDate(0, 0, 14))
	require.Nil(t, staff)
	require.Contains(t, reason, "is not active")

	staffB := a.crmCreate(a.opA, "/v1/staff", map[string]any{"name": "Bea Backup"})
	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+e.planID+"/change", a.opA,
		map[string]any{"from": day0.Format(time.DateOnly), "staff_id": staffB})
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	at := func(days int) string { return day0.AddDate(0, 0, days).Add(9 * time.Hour).Format("01-02 15:04") }
	require.Equal(t, []string{at(0), at(7), at(14), at(21)}, e.liveBookings(t, staffB),
		"the plan's new preferred staff member takes every visit not started yet, the two left unassigned when A left included (run: %+v)", done)
	require.Empty(t, e.liveBookings(t, a.staffA))
	require.Equal(t, command.VisitsDone{Replanned: 4}, done)
	for _, days := range []int{14, 21} {
		_, staff, reason = e.ledgerRow(t, day0.AddDate(0, 0, days))
		require.NotNil(t, staff)
		require.Equal(t, staffB, *staff)
		require.Empty(t, reason)
	}
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{}, done, "nothing left to re-plan")
}

// A re-plan writes to a visit's order what the plan changed, nothing else:
// a visit moved keeps the amount the dispatcher gave its order by hand (a
// discount on that visit; the plan's price did not change), and the order
// of a visit whose new preferred staff member is busy then says why it is
// unassigned, not that the visit moved (it did not).
func TestVisitGeneratorReplanWritesOnlyWhatThePlanChanged(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	day0 := e.firstDay()
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)
	orderOf := func(d time.Time) string {
		var id string
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT order_id::text FROM plan_visits WHERE visit_key = $1`,
			e.planID+"/"+d.Format(time.DateOnly)).Scan(&id))
		return id
	}
	first, second := orderOf(day0), orderOf(day0.AddDate(0, 0, 7))
	a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+first, a.opA, map[string]any{"amount_cents": 3000})
	newStart := day0.Add(14 * time.Hour)
	e.move(t, day0.Format(time.DateOnly), day0.Format(time.DateOnly), "14:00")
	// From the second visit on the plan prefers C, who has another job then.
	staffC := a.crmCreate(a.opA, "/v1/staff", map[string]any{"name": "Cy Carer"})
	other := a.createOrder(a.opA, a.createCustomer(a.opA, "Bob"), 1)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+other+"/assignment", a.opA, map[string]any{"staff_id": staffC,
		"start_at": day0.AddDate(0, 0, 7).Add(9 * time.Hour).Format(time.RFC3339), "end_at": day0.AddDate(0, 0, 7).Add(11 * time.Hour).Format(time.RFC3339)})
	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+e.planID+"/change", a.opA,
		map[string]any{"from": day0.AddDate(0, 0, 7).Format(time.DateOnly), "staff_id": staffC})
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{Replanned: 4}, done)

	moved := a.crmAwait(a.opA, "/v1/orders/"+first, func(r response) bool {
		return r.Status == http.StatusOK && r.Body["scheduled_start_at"] == newStart.Format(time.RFC3339)
	})
	require.EqualValues(t, 3000, moved.Body["amount_cents"], "the move keeps the amount the dispatcher set: the plan's price did not change")
	unassigned := a.crmAwait(a.opA, "/v1/orders/"+second, func(r response) bool {
		return r.Status == http.StatusOK && r.Body["staff_id"] == nil
	})
	require.Contains(t, unassigned.Body["notes"], "Not assigned: staff member "+staffC+" is already booked")
	require.NotContains(t, unassigned.Body["notes"], "Moved to", "the visit did not move: only its preferred staff member changed")
}

// A plan that stops preferring a staff member (staff_id "") leaves its
// visits' orders with whoever they are assigned to: A keeps the visits the
// generator gave them, and B the one the dispatcher gave them by hand. The
// plan names nobody new to book, so nothing is unassigned.
func TestVisitGeneratorKeepsTheAssigneesWhenThePlanDropsItsStaffMember(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	day0 := e.firstDay()
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)
	staffB, _ := e.handAssigned(t)

	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+e.planID+"/change", a.opA,
		map[string]any{"from": day0.Format(time.DateOnly), "staff_id": ""})
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	at := func(days int) string { return day0.AddDate(0, 0, days).Add(9 * time.Hour).Format("01-02 15:04") }
	require.Equal(t, []string{at(0)}, e.liveBookings(t, staffB), "the dispatcher's choice stays (run: %+v)", done)
	require.Equal(t, []string{at(0), at(7), at(14), at(21)}, e.liveBookings(t, a.staffA),
		"A keeps the visits they were booked for, and the other job (run: %+v)", done)
	done, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{}, done, "nothing left to re-plan")
}

// liveBookings lists the live bookings' starts of staff member staff
// (UTC, "01-02 15:04").
func (e generatorEnv) liveBookings(t *testing.T, staff string) []string {
	t.Helper()
	rows, err := e.a.dbs.es.DB.QueryContext(t.Context(), `SELECT lower(period) FROM bookings WHERE staff_id = $1 AND live ORDER BY 1`, staff)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var at time.Time
		require.NoError(t, rows.Scan(&at))
		out = append(out, at.UTC().Format("01-02 15:04"))
	}
	require.NoError(t, rows.Err())
	return out
}

// countingTx counts the transactions the generator begins.
type countingTx struct {
	command.Transactor
	n int
}

func (c *countingTx) Run(ctx context.Context, meta event.Meta, fn func(context.Context, command.Session) error) (command.Outcome, error) {
	c.n++
	return c.Transactor.Run(ctx, meta, fn)
}

// A round whose plans keep failing for a reason none of them owns (here the
// generator's pool is gone: every transaction fails) ends after a few, not
// after one attempt per plan.
func TestVisitGeneratorEndsARoundWhenTheDatabaseFails(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	db, err := database.OpenWith(t.Context(), e.a.cfg.DatabaseURL, 2, database.Options{ApplicationName: "review"})
	require.NoError(t, err)
	store, err := pubsub.NewStore(db, nil, nil)
	require.NoError(t, err)
	ptx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	tx := &countingTx{Transactor: ptx}
	g, err := command.NewVisitGenerator(tx)
	require.NoError(t, err)
	g.Fatal = func(err error) bool { return errors.Is(readmodel.StaleTerm(err), readmodel.ErrStaleTerm) } // as leadPlans
	db.Close()                                                                                            // the database is gone for this generator
	var refs staticPlans
	for range 50 {
		refs = append(refs, command.PlanRef{MerchantID: e.a.merchantA, PlanID: e.planID})
	}
	_, err = g.All(t.Context(), refs, e.now, 8*7*24*time.Hour)
	require.Error(t, err)
	require.Equal(t, 3, tx.n, "transactions begun with the database gone: %v", err)
	require.ErrorContains(t, err, "3 plans in a row failed")
}

// Plans whose streams hold an event this release cannot read (here a type
// a newer release writes, as during a rolling upgrade; or a corrupt row)
// fail each on its own, as a plan a rule refuses does: the round goes on to
// the other plans, every merchant's, and its error names the event. Taken
// for the database's failures, three such plans in a row ended the round,
// and every round after at the same plans, so that no later plan of any
// merchant had its visits generated again.
func TestVisitGeneratorGoesOnPastPlansItCannotRead(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	customer := a.createCustomer(a.opB, "Gus")
	item := a.crmCreate(a.opB, "/v1/catalog-items", map[string]any{"name": "Boiler service", "base_price_cents": 9000})
	start := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	var refs staticPlans
	for range 3 {
		r := a.must(http.StatusCreated, http.MethodPost, "/v1/plans", a.opB, map[string]any{
			"customer_id": customer, "catalog_item_id": item,
			"window":     map[string]any{"start": "09:00", "end": "11:00"},
			"recurrence": map[string]any{"frequency": "weekly", "interval": 1, "start": start, "count": 4}})
		id := r.Body["id"].(string)
		_, err := a.dbs.es.DB.ExecContext(t.Context(), `
			INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, actor)
			SELECT gen_random_uuid(), stream_type, stream_id, 2, merchant_id, 'ServicePlanRescheduled', '{"by":"a newer release"}',
			       occurred_at, correlation_id, actor
			FROM events WHERE stream_id = $1 AND version = 1`, id)
		require.NoError(t, err)
		refs = append(refs, command.PlanRef{MerchantID: a.merchantB, PlanID: id})
	}
	refs = append(refs, command.PlanRef{MerchantID: a.merchantA, PlanID: e.planID})

	done, err := e.generator(t).All(t.Context(), refs, e.now, 8*7*24*time.Hour)
	require.Equal(t, 4, done.Created, "the visits of merchant A's plan, after the three: %v", err)
	require.ErrorContains(t, err, "ServicePlanRescheduled")
	require.NotContains(t, err.Error(), "in a row")
}

// A withdrawn visit the plan has again (resumed, the generator not run
// yet) is shown with the id of the order the generator will give it, not
// its cancelled one's.
func TestPlanVisitsNameTheOrderToCome(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	visits := func() []any {
		return a.must(http.StatusOK, http.MethodGet, "/v1/plans/"+e.planID+"/visits", a.opA, nil).Body["items"].([]any)
	}
	_, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	e.lifecycle(t, "pause")
	_, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	e.lifecycle(t, "resume")
	before := visits()[0].(map[string]any)["order_id"]
	_, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	after := visits()[0].(map[string]any)["order_id"]
	require.Equal(t, after, before, "the read named the order to come before the generator ran")
}

// Two generators giving a resumed plan's visits their new orders at once
// (meeting before each visit): one new order per visit, no second live one.
func TestVisitGeneratorRegeneratesExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	_, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	e.lifecycle(t, "pause")
	_, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	e.lifecycle(t, "resume")
	dones, errs := e.runTwoAtOnce(t)
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, 4, dones[0].Created+dones[1].Created)
	var created int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM events WHERE type = 'OrderCreated' AND actor = $1`,
		command.GeneratorActor).Scan(&created))
	require.Equal(t, 8, created, "four first orders and four new ones")
	var live int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM bookings WHERE staff_id = $1 AND live`, a.staffA).Scan(&live))
	require.Equal(t, 4, live)
}

// runTwoAtOnce runs two generators on e's plans at once, meeting before
// each visit (a barrier), so that both attempt every visit at the same
// time; it returns what each did and its error.
func (e generatorEnv) runTwoAtOnce(t *testing.T) ([]command.VisitsDone, []error) {
	var mu sync.Mutex
	arrived, release, opened := map[int]int{}, map[int]chan struct{}{}, map[int]bool{}
	running := 2          // once one run has ended, the other meets nobody
	open := func(r int) { // with mu held
		if !opened[r] {
			opened[r] = true
			close(release[r])
		}
	}
	meet := func() func(context.Context) {
		round := 0
		return func(context.Context) {
			mu.Lock()
			r := round
			round++
			if release[r] == nil {
				release[r] = make(chan struct{})
			}
			if arrived[r]++; arrived[r] >= running {
				open(r)
			}
			ch := release[r]
			mu.Unlock()
			<-ch
		}
	}
	ended := func() {
		mu.Lock()
		defer mu.Unlock()
		running--
		for r := range release {
			open(r) // the other may wait there alone
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	dones := make([]command.VisitsDone, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer ended()
			g := e.generator(t)
			g.Between = meet()
			dones[i], errs[i] = e.run(t, g)
		}()
	}
	wg.Wait()
	return dones, errs
}

// firstDay is the midnight (UTC) of the plan's first visit's day.
func (e generatorEnv) firstDay() time.Time {
	first := time.Now().UTC().AddDate(0, 0, 1)
	return time.Date(first.Year(), first.Month(), first.Day(), 0, 0, 0, 0, time.UTC)
}

// otherJob books the plan's staff member for another customer's order
// from start for d.
func (e generatorEnv) otherJob(t *testing.T, start time.Time, d time.Duration) {
	t.Helper()
	a := e.a
	other := a.createOrder(a.opA, a.createCustomer(a.opA, "Bob"), 1)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+other+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": start.Format(time.RFC3339), "end_at": start.Add(d).Format(time.RFC3339)})
}

// Migration 020's backfill marks withdrawn the cancelled visits whose
// orders the generator cancelled, not one cancelled by hand, on rows as the
// earlier release left them.
func TestMigration020MarksTheGeneratorsCancellationsWithdrawn(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 4, done.Created)
	items := a.must(http.StatusOK, http.MethodGet, "/v1/plans/"+e.planID+"/visits", a.opA, nil).Body["items"].([]any)
	byHand := items[3].(map[string]any)["order_id"].(string)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+byHand+"/cancel", a.opA, map[string]any{"reason": "the customer called"})
	e.lifecycle(t, "pause")
	_, err = e.run(t, e.generator(t))
	require.NoError(t, err)
	_, err = a.dbs.es.DB.ExecContext(t.Context(), `UPDATE plan_visits SET withdrawn = false WHERE plan_id = $1`, e.planID)
	require.NoError(t, err)

	all, err := migrations.List(migrations.EventStore)
	require.NoError(t, err)
	i := slices.IndexFunc(all, func(m migrations.Migration) bool { return m.Version == 20 })
	require.GreaterOrEqual(t, i, 0)
	backfill := all[i].SQL[strings.Index(all[i].SQL, "UPDATE plan_visits"):]
	_, err = a.dbs.es.DB.ExecContext(t.Context(), backfill)
	require.NoError(t, err)
	rows, err := a.dbs.es.DB.QueryContext(t.Context(), `SELECT order_id::text FROM plan_visits WHERE plan_id = $1 AND withdrawn`, e.planID)
	require.NoError(t, err)
	defer rows.Close()
	var withdrawn []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		withdrawn = append(withdrawn, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, withdrawn, 3, "the three the generator cancelled")
	require.NotContains(t, withdrawn, byHand)
}

// move moves the plan's visit of date to toDate at start (local times).
func (e generatorEnv) move(t *testing.T, date, toDate, start string) {
	t.Helper()
	e.a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+e.planID+"/move", e.a.opA,
		map[string]any{"date": date, "to_date": toDate, "start": start})
}

// lifecycle pauses, resumes or ends the plan (action).
func (e generatorEnv) lifecycle(t *testing.T, action string) {
	t.Helper()
	e.a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+e.planID+"/"+action, e.a.opA, nil)
}

// generatedBy counts the orders the generator created for a merchant.
func (e generatorEnv) generatedBy(t *testing.T, merchantID string) int {
	var n int
	require.NoError(t, e.a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM events
		WHERE type = 'OrderCreated' AND actor = $1 AND merchant_id = $2`, command.GeneratorActor, merchantID).Scan(&n))
	return n
}

// The generator serves every merchant in one round, one plan after
// another. A merchant with many plans (each a transaction per visit in its
// first round) must not keep another's plans waiting behind all of its
// own: the round takes the merchants' plans in turn. Here merchant A's
// three plans come first in the list, merchant B's one last; the round,
// stopped after two plans' visits, has served B's plan.
func TestVisitGeneratorTakesTheMerchantsPlansInTurn(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	start := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	weekly := func(key, customer, item string) {
		a.must(http.StatusCreated, http.MethodPost, "/v1/plans", key, map[string]any{
			"customer_id": customer, "catalog_item_id": item,
			"window":     map[string]any{"start": "13:00", "end": "14:00"},
			"recurrence": map[string]any{"frequency": "weekly", "interval": 1, "start": start, "count": 4}})
	}
	customerA := a.createCustomer(a.opA, "Many Plans")
	itemA := a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Weekly visit", "base_price_cents": 1000})
	weekly(a.opA, customerA, itemA)
	weekly(a.opA, customerA, itemA)
	customerB := a.createCustomer(a.opB, "One Plan")
	itemB := a.crmCreate(a.opB, "/v1/catalog-items", map[string]any{"name": "Weekly visit", "base_price_cents": 1000})
	weekly(a.opB, customerB, itemB)

	g := e.generator(t)
	ctx, cancel := context.WithCancel(t.Context())
	seen := 0
	g.Between = func(context.Context) {
		if seen++; seen == 9 {
			cancel() // after two plans' four visits each
		}
	}
	_, err := g.All(ctx, e.plans, e.now, 8*7*24*time.Hour)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 4, e.generatedBy(t, a.merchantB), "merchant B's plan was served before merchant A's second plan (A has %d orders)", e.generatedBy(t, a.merchantA))
	require.Equal(t, 4, e.generatedBy(t, a.merchantA))
}

// A merchant with more plans than PLAN_MERCHANT_SHARE has that many run a
// round, the next ones the round after, wrapping around; the other
// merchants' plans run every round.
func TestVisitGeneratorRunsAMerchantsShareOfItsPlansARound(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	start := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	weekly := func(key, customer, item string) string {
		return a.must(http.StatusCreated, http.MethodPost, "/v1/plans", key, map[string]any{
			"customer_id": customer, "catalog_item_id": item,
			"window":     map[string]any{"start": "13:00", "end": "14:00"},
			"recurrence": map[string]any{"frequency": "weekly", "interval": 1, "start": start, "count": 4}}).Body["id"].(string)
	}
	customerA := a.createCustomer(a.opA, "Many Plans")
	itemA := a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Weekly visit", "base_price_cents": 1000})
	weekly(a.opA, customerA, itemA)
	weekly(a.opA, customerA, itemA)
	customerB := a.createCustomer(a.opB, "One Plan")
	itemB := a.crmCreate(a.opB, "/v1/catalog-items", map[string]any{"name": "Weekly visit", "base_price_cents": 1000})
	planB := weekly(a.opB, customerB, itemB)

	g := e.generator(t)
	g.MerchantShare = 2
	done, err := g.All(t.Context(), e.plans, e.now, 8*7*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, 12, done.Created, "two of A's three plans and B's")
	require.Equal(t, 8, e.generatedBy(t, a.merchantA))
	require.Equal(t, 4, e.generatedBy(t, a.merchantB))

	// B's plan ends, and A creates a fourth plan. The next round runs
	// A's new plan first (its first visit may be close), then A's third
	// one, and B's, whose visits are cancelled: its plans run every round.
	a.must(http.StatusOK, http.MethodPost, "/v1/plans/"+planB+"/end", a.opB, nil)
	weekly(a.opA, customerA, itemA)
	done, err = g.All(t.Context(), e.plans, e.now, 8*7*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, 8, done.Created, "A's new plan and its third one")
	require.Equal(t, 4, done.Cancelled, "B's plan's visits")
	require.Equal(t, 16, e.generatedBy(t, a.merchantA))

	// Then the rotation goes on (A's fourth plan, then its first): nothing
	// left to do.
	done, err = g.All(t.Context(), e.plans, e.now, 8*7*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, command.VisitsDone{}, done)
}

// The share never stretches a merchant's rotation past what the horizon
// covers: a plan run every k rounds orders its visits up to a horizon
// ahead, so with k rounds longer than that, the visits between one run's
// horizon and the next run would get no order. With PLAN_HORIZON at twice
// PLAN_INTERVAL (the least it may be) every plan runs every round,
// whatever the share; with rounds eight times as frequent as the horizon
// is long, a plan may wait seven rounds, and the share holds.
func TestVisitGeneratorShareNeverOutlastsTheHorizon(t *testing.T) {
	t.Parallel()
	horizon := 8 * 7 * 24 * time.Hour
	for _, tc := range []struct {
		interval time.Duration
		created  int
	}{
		{horizon / 2, 16}, // the env's plan and three more, four visits each: all of them
		{horizon / 8, 4},  // ceil(4 / 7) = 1, the share: one plan
	} {
		t.Run(tc.interval.String(), func(t *testing.T) {
			t.Parallel()
			e := newGeneratorEnv(t)
			a := e.a
			start := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
			customer := a.createCustomer(a.opA, "Many Plans")
			item := a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Weekly visit", "base_price_cents": 1000})
			for range 3 {
				a.must(http.StatusCreated, http.MethodPost, "/v1/plans", a.opA, map[string]any{
					"customer_id": customer, "catalog_item_id": item,
					"window":     map[string]any{"start": "13:00", "end": "14:00"},
					"recurrence": map[string]any{"frequency": "weekly", "interval": 1, "start": start, "count": 4}})
			}
			g := e.generator(t)
			g.MerchantShare = 1
			g.Interval = tc.interval
			done, err := g.All(t.Context(), e.plans, e.now, horizon)
			require.NoError(t, err)
			require.Equal(t, tc.created, done.Created, "visits ordered in the round, rounds every %s with a horizon of %s", tc.interval, horizon)
		})
	}
}

// roundsLogged hands the visit generator's "generated visits" records to a
// test, with their numbers by key.
type roundsLogged chan map[string]int64

func (h roundsLogged) Enabled(context.Context, slog.Level) bool { return true }
func (h roundsLogged) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h roundsLogged) WithGroup(string) slog.Handler            { return h }
func (h roundsLogged) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "generated visits" {
		return nil
	}
	n := map[string]int64{}
	r.Attrs(func(a slog.Attr) bool {
		if a.Value.Kind() == slog.KindInt64 {
			n[a.Key] = a.Value.Int64()
		}
		return true
	})
	h <- n
	return nil
}

// The generator's leader logs what a round did, re-plans included, as
// operations.md says: a round that only re-planned a moved visit says so,
// not that it did nothing.
func TestVisitGeneratorLogsWhatARoundReplanned(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	cfg := e.a.cfg
	cfg.PlanInterval, cfg.PlanHorizon = time.Second, 8*7*24*time.Hour
	ctx, cancel := context.WithCancel(t.Context())
	rounds := make(roundsLogged, 64)
	errc := make(chan error, 1)
	go func() { errc <- leadPlans(ctx, 1, cfg, 5*time.Second, nil, slog.New(rounds)) }()
	defer func() {
		cancel()
		require.NoError(t, <-errc)
	}()
	next := func() map[string]int64 {
		t.Helper()
		select {
		case n := <-rounds:
			return n
		case err := <-errc:
			t.Fatalf("the generator's leader stopped: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("no round logged what it did")
		}
		return nil
	}
	require.Equal(t, map[string]int64{"created": 4, "unassigned": 0, "replanned": 0, "cancelled": 0}, next())
	day0 := e.firstDay()
	e.move(t, day0.Format(time.DateOnly), day0.Format(time.DateOnly), "14:00")
	require.Equal(t, map[string]int64{"created": 0, "unassigned": 0, "replanned": 1, "cancelled": 0}, next())
}
