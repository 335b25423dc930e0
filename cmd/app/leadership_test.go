package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/app/access"
	"hearth/app/command"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
	"hearth/leader"
	httpport "hearth/ports/http"
)

// orderWriter creates a merchant and a customer in the event store at url
// and returns a function that creates an order (through the real event
// store and publisher) and returns its id.
func orderWriter(t *testing.T, url string) func() string {
	t.Helper()
	es := pgtest.Open(t, url)
	merchantID, customerID := uuid.New(), uuid.New()
	_, err := es.DB.Exec(`INSERT INTO merchants (id, name) VALUES ($1, $2)`, merchantID, "m-"+merchantID)
	require.NoError(t, err)
	_, err = es.DB.Exec(`INSERT INTO customers (id, merchant_id, name) VALUES ($1, $2, 'Ada')`, customerID, merchantID)
	require.NoError(t, err)
	store, err := pubsub.NewStore(es, nil)
	require.NoError(t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	orders, err := command.NewOrderHandlers(tx)
	require.NoError(t, err)
	return func() string {
		w, err := orders.Create(context.Background(), command.CreateOrder{CustomerID: customerID,
			Meta: event.Meta{MerchantID: merchantID, Actor: "key:test", CorrelationID: uuid.New(), OccurredAt: time.Now()}})
		require.NoError(t, err)
		return w.Stream[0].StreamID
	}
}

// worker is Hearth wired in process on urls the way serve wires a worker,
// with its elector.
type worker struct {
	cfg     Config
	log     *slog.Logger
	dbs     databases
	w       wiring
	elector *leader.Elector
}

func newWorker(t *testing.T, urls pgtest.URLs) *worker {
	t.Helper()
	p := &worker{
		cfg: Config{DatabaseURL: urls.EventStore, ReadModelDatabaseURL: urls.ReadModel, Mode: ModeWorker, PollInterval: 20 * time.Millisecond},
		log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	var err error
	p.dbs, err = openDatabases(t.Context(), p.cfg)
	require.NoError(t, err)
	t.Cleanup(p.dbs.close)
	p.w, err = wire(p.dbs, p.log)
	require.NoError(t, err)
	p.elector, err = newElector(p.cfg, p.dbs, p.log)
	require.NoError(t, err)
	return p
}

// run runs the elector with lead until the test ends.
func (p *worker) run(t *testing.T, lead func(ctx context.Context, term int64) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.elector.Run(ctx, lead) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// A leader whose term is no longer current (here it is bumped behind its
// back, as a takeover it missed would) has its next projection write
// refused inside the transaction, steps down, and leads again under a new
// term. The event is applied once, under the new term.
func TestStaleTermStepsDown(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t) // the terms live in the read-model database
	p := newWorker(t, urls)
	elector := p.elector
	p.run(t, func(ctx context.Context, term int64) error {
		return lead(ctx, term, p.cfg, elector.Lease(), p.w, p.log)
	})
	createOrder := orderWriter(t, urls.EventStore)
	rm := pgtest.Open(t, urls.ReadModel)
	// changeTerm returns the term of id's change-log rows and their number
	// (0 on an error: it runs inside Eventually).
	changeTerm := func(id string) (term int64, rows int) {
		_ = rm.DB.QueryRow(`SELECT coalesce(max(term), 0), count(*) FROM change_log WHERE aggregate_id = $1`, id).Scan(&term, &rows)
		return term, rows
	}

	first := createOrder()
	require.Eventually(t, func() bool { _, n := changeTerm(first); return n == 1 }, 10*time.Second, 5*time.Millisecond)
	stale := elector.Status().Term
	term, _ := changeTerm(first)
	require.Equal(t, stale, term, "change_log records the term of the write")

	_, err := rm.DB.Exec(`UPDATE projection_leader SET term = term + 1 WHERE name = $1`, leader.LockName)
	require.NoError(t, err)
	second := createOrder()
	require.Eventually(t, func() bool { _, n := changeTerm(second); return n == 1 }, 10*time.Second, 5*time.Millisecond)
	term, _ = changeTerm(second)
	require.Greater(t, term, stale+1, "applied under a term begun after the stale one was refused")
	require.Equal(t, leader.RoleLeader, elector.Status().Role)
	require.Equal(t, term, elector.Status().Term)
}

// /readyz (for an admin key), /admin/leadership and /metrics report the
// role, the term and since when.
func TestLeadershipVisible(t *testing.T) {
	t.Parallel()
	p := newWorker(t, pgtest.NewDB(t))
	elector := p.elector
	require.NoError(t, p.w.telemetry.leader(elector, p.w.liveTerm))
	handler, err := httpport.NewHandler(httpport.Config{
		App: p.w.app, Auth: p.w.refdata, Log: p.log, Ready: readiness(p.cfg, p.dbs, elector, p.w.liveTerm),
		Leadership: leadership(elector), Metrics: p.w.telemetry.handler(),
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
	var body struct {
		Role    string `json:"role"`
		Term    int64  `json:"term"`
		Since   string `json:"since"`
		Holder  string `json:"holder"`
		Current struct {
			Term   int64  `json:"term"`
			Holder string `json:"holder"`
		} `json:"current"`
	}

	status, raw := get("/admin/leadership", admin.Secret)
	require.Equal(t, http.StatusOK, status, raw)
	require.NoError(t, json.Unmarshal([]byte(raw), &body))
	require.Equal(t, "standby", body.Role)
	require.Zero(t, body.Term)
	require.Zero(t, body.Current.Term, "no term begun yet")
	status, _ = get("/admin/leadership", operator.Secret)
	require.Equal(t, http.StatusForbidden, status)
	status, _ = get("/admin/leadership", "")
	require.Equal(t, http.StatusUnauthorized, status)
	_, raw = get("/metrics", "")
	require.Contains(t, raw, "hearth_leader_is_leader 0\n")

	p.run(t, func(ctx context.Context, term int64) error { <-ctx.Done(); return nil })
	require.Eventually(t, func() bool { return elector.Status().Role == leader.RoleLeader }, 10*time.Second, 5*time.Millisecond)
	st := elector.Status()

	status, raw = get("/admin/leadership", admin.Secret)
	require.Equal(t, http.StatusOK, status, raw)
	require.NoError(t, json.Unmarshal([]byte(raw), &body))
	require.Equal(t, "leader", body.Role)
	require.Equal(t, st.Term, body.Term)
	require.Equal(t, st.Since.UTC().Format(time.RFC3339Nano), body.Since)
	require.Equal(t, elector.Holder(), body.Holder)
	require.Equal(t, st.Term, body.Current.Term)
	require.Equal(t, elector.Holder(), body.Current.Holder)

	status, raw = get("/readyz", admin.Secret) // the details are for admin keys
	require.Equal(t, http.StatusOK, status, raw)
	require.NoError(t, json.Unmarshal([]byte(raw), &body))
	require.Equal(t, "leader", body.Role)
	require.Equal(t, st.Term, body.Term)

	_, raw = get("/metrics", "")
	require.Contains(t, raw, "hearth_leader_is_leader 1\n")
	require.Contains(t, raw, fmt.Sprintf("hearth_leader_term %d\n", st.Term))
	require.Contains(t, raw, "hearth_leader_since_seconds ")
	require.Contains(t, raw, "hearth_projections_live 0\n", "leading, its projections not live yet")
	p.w.liveTerm.Store(st.Term)
	_, raw = get("/metrics", "")
	require.Contains(t, raw, "hearth_projections_live 1\n")
}
