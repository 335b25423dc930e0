package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/app/access"
	"hearth/app/command"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/plan"
	"hearth/domain/servicerequest"
	"hearth/domain/uuid"
	"hearth/internal/advisory"
	"hearth/internal/aggregates"
	"hearth/internal/pgtest"
	"hearth/leader"
	httpport "hearth/ports/http"
)

// orderWriter creates a merchant and a customer in the event store at url
// and returns a function that creates an order (through the real event
// store and publisher) and returns its id.
func orderWriter(t *testing.T, url string) func() string { return newWriters(t, url).createOrder }

// writers write through the real event store and publisher, for one
// merchant with a customer and a staff member.
type writers struct {
	t                               *testing.T
	merchantID, customerID, staffID string
	itemID                          string
	orders                          command.OrderHandlers
	requests                        command.ServiceRequestHandlers
	plans                           command.PlanHandlers
	slot                            atomic.Int64 // the last hour booked
}

func newWriters(t *testing.T, url string) *writers {
	t.Helper()
	es := pgtest.Open(t, url)
	w := &writers{t: t, merchantID: uuid.New(), customerID: uuid.New(), staffID: uuid.New(), itemID: uuid.New()}
	_, err := es.DB.Exec(`INSERT INTO merchants (id, name) VALUES ($1, $2)`, w.merchantID, "m-"+w.merchantID)
	require.NoError(t, err)
	_, err = es.DB.Exec(`INSERT INTO customers (id, merchant_id, name) VALUES ($1, $2, 'Ada')`, w.customerID, w.merchantID)
	require.NoError(t, err)
	_, err = es.DB.Exec(`INSERT INTO staff (id, merchant_id, name) VALUES ($1, $2, 'Grace')`, w.staffID, w.merchantID)
	require.NoError(t, err)
	_, err = es.DB.Exec(`INSERT INTO catalog_items (id, merchant_id, name, base_price_cents) VALUES ($1, $2, 'Clean', 100)`, w.itemID, w.merchantID)
	require.NoError(t, err)
	store, err := pubsub.NewStore(es, nil, nil)
	require.NoError(t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	w.orders, err = command.NewOrderHandlers(tx)
	require.NoError(t, err)
	w.requests, err = command.NewServiceRequestHandlers(tx)
	require.NoError(t, err)
	w.plans, err = command.NewPlanHandlers(tx)
	require.NoError(t, err)
	return w
}

func (w *writers) meta() event.Meta {
	return event.Meta{MerchantID: w.merchantID, Actor: "key:test", CorrelationID: uuid.New(), OccurredAt: time.Now()}
}

// createOrder creates an order and returns its id.
func (w *writers) createOrder() string {
	written, err := w.orders.Create(context.Background(), command.CreateOrder{CustomerID: w.customerID, Meta: w.meta()})
	require.NoError(w.t, err)
	return written.Stream[0].StreamID
}

// every writes one event for every projection: an order, a service
// request, a service plan, and the order's assignment (its schedule). It
// returns the order's id.
func (w *writers) every() string {
	id := w.createOrder()
	_, err := w.requests.Create(context.Background(), command.CreateServiceRequest{Meta: w.meta(), CustomerID: w.customerID,
		Source: "phone", Details: servicerequest.Details{Content: "a leaking tap"}})
	require.NoError(w.t, err)
	_, err = w.plans.Create(context.Background(), command.CreatePlan{Meta: w.meta(), CustomerID: w.customerID, CatalogItemID: w.itemID,
		Window:     plan.Window{Start: civil.At(9, 0), End: civil.At(10, 0)},
		Recurrence: plan.Recurrence{Frequency: plan.Monthly, Interval: 1, Start: civil.DateOf(time.Now(), time.UTC).AddDays(1)}})
	require.NoError(w.t, err)
	w.assign(id)
	return id
}

// assign assigns order id to the staff member in the next free hour: an
// event of the order and one of its schedule.
func (w *writers) assign(id string) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(w.slot.Add(1)) * time.Hour)
	_, err := w.orders.Assign(context.Background(), command.AssignOrder{OrderTarget: command.OrderTarget{Meta: w.meta(), OrderID: id},
		StaffID: w.staffID, StartAt: start, EndAt: start.Add(time.Hour)})
	require.NoError(w.t, err)
}

// projectionsLive reports whether /metrics (its text) shows every
// projection led and live on this instance.
func projectionsLive(metrics string) bool {
	for _, name := range aggregates.Projections() {
		if !strings.Contains(metrics, fmt.Sprintf("\nhearth_projections_live{projection=%q} 1\n", name)) {
			return false
		}
	}
	return true
}

// worker is Hearth wired in process on urls the way serve wires a worker,
// with its scheduler.
type worker struct {
	cfg   Config
	log   *slog.Logger
	dbs   databases
	w     wiring
	sched *leader.Scheduler
}

func newWorker(t *testing.T, urls pgtest.URLs, holder string, options ...func(*wiring)) *worker {
	t.Helper()
	p := &worker{
		cfg: Config{DatabaseURL: urls.EventStore, ReadModelDatabaseURL: urls.ReadModel, Mode: ModeWorker, PollInterval: 20 * time.Millisecond},
		log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})).With("worker", holder),
	}
	webhookTestSettings(&p.cfg)
	var err error
	p.dbs, err = openDatabases(t.Context(), p.cfg)
	require.NoError(t, err)
	t.Cleanup(p.dbs.close)
	p.w, err = wire(p.cfg, p.dbs, p.log)
	require.NoError(t, err)
	p.w.holder = holder
	for _, o := range options {
		o(&p.w)
	}
	p.sched, err = newScheduler(p.cfg, p.dbs, p.w, p.log)
	require.NoError(t, err)
	return p
}

// run runs the scheduler until stop is called or the test ends.
func (p *worker) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.sched.Run(ctx) }()
	var once atomic.Bool
	stop = func() {
		if once.CompareAndSwap(false, true) {
			cancel()
			require.NoError(t, <-done)
		}
	}
	t.Cleanup(stop)
	return stop
}

// unit returns this worker's status of a projection's unit.
func (p *worker) unit(projection string) leader.UnitStatus {
	for _, u := range p.sched.Status().Units {
		if u.Name == advisory.Projection(projection) {
			return u
		}
	}
	return leader.UnitStatus{}
}

// A leader whose term of one projection is no longer current (here it is
// bumped behind its back, as a takeover it missed would) has its next write
// to that projection refused inside the transaction, steps down from that
// projection, and leads it again under a new term. The event is applied
// once, under the new term; the other projections keep their terms.
func TestStaleTermStepsDown(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t) // the terms live in the read-model database
	p := newWorker(t, urls, "solo")
	p.run(t)
	write := newWriters(t, urls.EventStore)
	rm := pgtest.Open(t, urls.ReadModel)
	es := pgtest.Open(t, urls.EventStore)
	// changeTerm returns the term of id's latest change-log row and the
	// number of rows (0 on an error: it runs inside Eventually).
	changeTerm := func(id string) (term int64, rows int) {
		_ = rm.DB.QueryRow(`SELECT coalesce(max(term), 0), count(*) FROM change_log WHERE aggregate_id = $1`, id).Scan(&term, &rows)
		return term, rows
	}
	caughtUp := func() bool {
		var events, changes int
		_ = es.DB.QueryRow(`SELECT count(*) FROM events`).Scan(&events)
		_ = rm.DB.QueryRow(`SELECT count(*) FROM change_log`).Scan(&changes)
		return events == changes
	}

	first := write.createOrder()
	require.Eventually(t, func() bool { _, n := changeTerm(first); return n == 1 }, 10*time.Second, 5*time.Millisecond)
	stale := p.unit("orders").Term
	term, _ := changeTerm(first)
	require.Equal(t, stale, term, "change_log records the term of the orders projection's write")
	// The worker takes its units one by one: orders may lead before the
	// others have begun their terms.
	others := map[string]int64{}
	for _, name := range []string{"schedules", "service_requests"} {
		require.Eventually(t, func() bool { return p.unit(name).Role == leader.RoleLeader && p.unit(name).Term != 0 },
			10*time.Second, 5*time.Millisecond, "the only worker leads %s too", name)
		others[name] = p.unit(name).Term
	}

	_, err := rm.DB.Exec(`UPDATE projection_leader SET term = term + 1 WHERE name = $1`, advisory.Projection("orders"))
	require.NoError(t, err)
	second := write.every() // an event for each projection: only orders' term is stale
	require.Eventually(t, func() bool { _, n := changeTerm(second); return n == 3 && caughtUp() }, 20*time.Second, 5*time.Millisecond)
	term, _ = changeTerm(second)
	require.Greater(t, term, stale+1, "applied under a term begun after the stale one was refused")
	require.Equal(t, leader.RoleLeader, p.unit("orders").Role)
	require.Equal(t, term, p.unit("orders").Term)
	for name, term := range others {
		require.Equal(t, term, p.unit(name).Term, "%s keeps its term", name)
	}
}

// Four workers share the four projections, one each, every projection
// writing under its own term; when one worker stops, another takes its
// projection over; every event is applied exactly once.
func TestProjectionsSpreadOverWorkers(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	var workers []*worker
	var stops []func()
	for _, name := range []string{"w1", "w2", "w3", "w4"} { // one per projection
		w := newWorker(t, urls, name)
		workers = append(workers, w)
		stops = append(stops, w.run(t))
	}
	// leaders returns the worker leading each projection, when each has one.
	leaders := func(ws []*worker) (map[string]*worker, bool) {
		out := map[string]*worker{}
		for _, name := range aggregates.Projections() {
			for _, w := range ws {
				if w.unit(name).Role == leader.RoleLeader {
					if out[name] != nil {
						return nil, false
					}
					out[name] = w
				}
			}
			if out[name] == nil {
				return nil, false
			}
		}
		return out, true
	}
	var lead map[string]*worker
	require.Eventually(t, func() bool {
		var ok bool
		if lead, ok = leaders(workers); !ok {
			return false
		}
		for _, w := range workers {
			if w.sched.Status().Leading != 1 {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "each worker leads one projection")

	write := newWriters(t, urls.EventStore).every
	es := pgtest.Open(t, urls.EventStore)
	// applied reports whether every event has exactly one change-log row
	// and each projection's latest row was written under that projection's
	// own term, as its leader reports it.
	applied := func(lead map[string]*worker) bool {
		var events, changes int
		_ = es.DB.QueryRow(`SELECT count(*) FROM events`).Scan(&events)
		_ = es.DB.QueryRow(`SELECT count(*) FROM change_log`).Scan(&changes)
		if events == 0 || events != changes {
			return false
		}
		for _, f := range aggregates.All() {
			var term int64
			_ = es.DB.QueryRow(`SELECT coalesce(term, 0) FROM change_log WHERE aggregate_type = $1 ORDER BY id DESC LIMIT 1`, f.Type).Scan(&term)
			if term != lead[f.Projection].unit(f.Projection).Term {
				return false
			}
		}
		return true
	}
	write()
	require.Eventually(t, func() bool { return applied(lead) }, 20*time.Second, 10*time.Millisecond)

	// Sessions left behind by earlier leaders: the next leader of orders
	// ends the one named for orders, and only that one.
	leftover := func(projection string) *pgx.Conn {
		cfg, err := pgx.ParseConfig(urls.EventStore)
		require.NoError(t, err)
		cfg.RuntimeParams["application_name"] = projectionSessions(projection)
		conn, err := pgx.ConnectConfig(t.Context(), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	ordersLeftover, schedulesLeftover := leftover("orders"), leftover("schedules")

	gone := lead["orders"]
	ordersTerm := gone.unit("orders").Term
	stops[slices.Index(workers, gone)]()
	rest := slices.DeleteFunc(slices.Clone(workers), func(w *worker) bool { return w == gone })
	require.Eventually(t, func() bool {
		var ok bool
		lead, ok = leaders(rest)
		return ok
	}, 30*time.Second, 10*time.Millisecond, "the three left lead all four projections")
	require.Greater(t, lead["orders"].unit("orders").Term, ordersTerm)
	_, err := ordersLeftover.Exec(t.Context(), "SELECT 1")
	require.Error(t, err, "the new leader of orders ended the session left for orders")
	_, err = schedulesLeftover.Exec(t.Context(), "SELECT 1")
	require.NoError(t, err, "and left the schedules one alone")
	write()
	require.Eventually(t, func() bool { return applied(lead) }, 20*time.Second, 10*time.Millisecond)
}

// /readyz (for an admin key), /admin/leadership and /metrics report, per
// unit, the role, the term and since when, and /admin/leadership the
// holder of each unit's current term.
func TestLeadershipVisible(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	p := newWorker(t, urls, "visible")
	require.NoError(t, p.w.telemetry.leadership(p.sched, p.w.live))
	handler, err := httpport.NewHandler(httpport.Config{
		App: p.w.app, Auth: p.w.refdata, Log: p.log, Ready: readiness(p.cfg, p.dbs, p.sched, p.w.live),
		Leadership: leadership(p.sched), Metrics: p.w.telemetry.handler(),
	})
	require.NoError(t, err)
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	admin, err := p.w.refdata.CreateKey(t.Context(), "", access.Admin, "")
	require.NoError(t, err)
	operator, err := p.w.refdata.CreateKey(t.Context(), "visible", access.Operator, "")
	require.NoError(t, err)

	get := func(path, key string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}
	type unit struct {
		Name       string `json:"name"`
		Role       string `json:"role"`
		Term       int64  `json:"term"`
		Since      string `json:"since"`
		Projection string `json:"projection"`
		State      string `json:"state"`
		Current    *struct {
			Term   int64  `json:"term"`
			Holder string `json:"holder"`
		} `json:"current"`
	}
	var body struct {
		Mode      string `json:"mode"`
		Holder    string `json:"holder"`
		Workers   int    `json:"workers"`
		FairShare int    `json:"fair_share"`
		Leading   int    `json:"leading"`
		Units     []unit `json:"units"`
	}
	decode := func(raw string) {
		body.Units = nil
		require.NoError(t, json.Unmarshal([]byte(raw), &body))
		require.Len(t, body.Units, len(aggregates.Projections()), raw)
	}

	status, raw := get("/admin/leadership", admin.Secret)
	require.Equal(t, http.StatusOK, status, raw)
	decode(raw)
	require.Equal(t, "visible", body.Holder)
	for i, name := range aggregates.Projections() {
		require.Equal(t, advisory.Projection(name), body.Units[i].Name)
		require.Equal(t, "standby", body.Units[i].Role)
		require.Zero(t, body.Units[i].Term)
		require.Nil(t, body.Units[i].Current, "no term begun yet")
	}
	status, _ = get("/admin/leadership", operator.Secret)
	require.Equal(t, http.StatusForbidden, status)
	status, _ = get("/admin/leadership", "")
	require.Equal(t, http.StatusUnauthorized, status)
	_, raw = get("/metrics", "")
	require.Contains(t, raw, `hearth_leader_is_leader{unit="hearth/projections/orders"} 0`+"\n")

	p.run(t)
	require.Eventually(t, func() bool {
		st := p.sched.Status()
		return st.Leading == len(aggregates.Projections()) && st.Workers == 1
	}, 10*time.Second, 5*time.Millisecond)
	st := p.sched.Status()
	// Each projection's lock session holds the older versions' lock shared,
	// which keeps an older leader out during a rollout.
	guard := advisory.Key(advisory.Projections)
	var guarded int
	require.NoError(t, p.dbs.es.DB.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND mode = 'ShareLock' AND objsubid = 1 AND classid = $1 AND objid = $2
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, uint32(uint64(guard)>>32), uint32(uint64(guard))).Scan(&guarded))
	require.Equal(t, len(aggregates.Projections()), guarded)

	status, raw = get("/admin/leadership", admin.Secret)
	require.Equal(t, http.StatusOK, status, raw)
	decode(raw)
	require.Equal(t, 1, body.Workers)
	require.Equal(t, len(aggregates.Projections()), body.FairShare)
	require.Equal(t, len(aggregates.Projections()), body.Leading)
	for i, u := range st.Units {
		got := body.Units[i]
		require.Equal(t, u.Name, got.Name)
		require.Equal(t, "leader", got.Role)
		require.Equal(t, u.Term, got.Term)
		require.Equal(t, u.Since.UTC().Format(time.RFC3339Nano), got.Since)
		require.NotNil(t, got.Current)
		require.Equal(t, u.Term, got.Current.Term)
		require.Equal(t, "visible", got.Current.Holder)
	}

	report, err := leadership(p.sched)(t.Context())
	require.NoError(t, err)
	require.IsType(t, []any{}, report["units"], "the console reads the report as JSON decodes it")

	status, raw = get("/readyz", admin.Secret) // the details are for admin keys
	require.Equal(t, http.StatusOK, status, raw)
	decode(raw)
	require.Equal(t, ModeWorker, body.Mode)
	require.Equal(t, "orders", body.Units[0].Projection)
	require.Equal(t, st.Units[0].Term, body.Units[0].Term)
	require.Contains(t, []string{"catching_up", "live"}, body.Units[0].State)

	require.Eventually(t, func() bool {
		_, raw = get("/metrics", "")
		return strings.Contains(raw, `hearth_projections_live{projection="orders"} 1`+"\n")
	}, 10*time.Second, 5*time.Millisecond, "the projection goes live")
	require.Contains(t, raw, `hearth_leader_is_leader{unit="hearth/projections/orders"} 1`+"\n")
	require.Contains(t, raw, fmt.Sprintf(`hearth_leader_term{unit="hearth/projections/orders"} %d`+"\n", st.Units[0].Term))
	require.Contains(t, raw, `hearth_leader_since_seconds{unit="hearth/projections/orders"} `)
	require.Contains(t, raw, "hearth_leader_workers 1\n")
	require.Contains(t, raw, fmt.Sprintf("hearth_leader_fair_share %d\n", len(aggregates.Projections())))
	require.Eventually(t, func() bool { // /readyz answers from a check at most readyFor old
		_, raw = get("/readyz", admin.Secret)
		decode(raw)
		return body.Units[0].State == "live"
	}, 10*time.Second, 5*time.Millisecond)
}

// The operator's tools work beside leadership per projection: an orders
// event that cannot be applied is parked by the orders leader (its write
// fenced by the orders term) while the other aggregates flow; once the
// cause is gone the operator replays it, rebuilds the orders table while
// the projections run, and verifies; every projection keeps writing under
// its own term.
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction (architecture.md).
func TestOperatorToolsUnderProjectionLeadership(t *testing.T) {
	urls := pgtest.NewSplitDBs(t)
	write := newWriters(t, urls.EventStore)
	p := newWorker(t, urls, "ops", func(w *wiring) { w.retryInitial = time.Millisecond })
	p.run(t)
	es, rm := pgtest.Open(t, urls.EventStore), pgtest.Open(t, urls.ReadModel)
	version := func(id string) (v int) {
		_ = rm.DB.QueryRow(`SELECT coalesce(max(version), 0) FROM change_log WHERE aggregate_id = $1`, id).Scan(&v)
		return v
	}
	bad, good := write.createOrder(), write.createOrder()
	require.Eventually(t, func() bool { return version(bad) == 1 && version(good) == 1 }, 20*time.Second, 5*time.Millisecond)

	_, err := rm.DB.Exec(fmt.Sprintf(`ALTER TABLE orders ADD CONSTRAINT test_cause CHECK (id <> '%s' OR version < 2)`, bad))
	require.NoError(t, err)
	write.assign(bad) // v2 and v3: the assignment, and the status it moves to
	require.Eventually(t, func() bool {
		var n int
		_ = es.DB.QueryRow(`SELECT count(*) FROM parked_aggregates WHERE projection = 'orders' AND stream_id = $1`, bad).Scan(&n)
		return n == 1
	}, 30*time.Second, 10*time.Millisecond, "the orders leader parks the order")
	write.assign(good)
	require.Eventually(t, func() bool { return version(good) == 3 }, 20*time.Second, 5*time.Millisecond, "other orders flow")

	_, err = rm.DB.Exec(`ALTER TABLE orders DROP CONSTRAINT test_cause`)
	require.NoError(t, err)
	out, err := cli(t.Context(), urls, "parked", "replay", "orders", bad)
	require.NoError(t, err, out)
	require.Equal(t, 3, version(bad), "the assignment and the status change it made, replayed")
	out, err = cli(t.Context(), urls, "rebuild", "orders")
	require.NoError(t, err, out)
	require.Contains(t, out, "rebuild orders: done")

	write.assign(bad)
	last := write.every()
	require.Eventually(t, func() bool { return version(bad) == 4 && version(last) == 3 }, 20*time.Second, 5*time.Millisecond)
	for _, f := range aggregates.All() {
		// every() wrote an event of each aggregate type; the order's says
		// nothing of when the other projections apply theirs.
		require.Eventually(t, func() bool {
			var term int64
			err := rm.DB.QueryRow(`SELECT coalesce(term, 0) FROM change_log WHERE aggregate_type = $1 ORDER BY id DESC LIMIT 1`, f.Type).Scan(&term)
			return err == nil && term == p.unit(f.Projection).Term
		}, 20*time.Second, 5*time.Millisecond, "%s writes under its own term", f.Projection)
	}
	out, err = cli(t.Context(), urls, "verify", "--recheck", "2s")
	require.NoError(t, err, out)
}
