package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/adapters/readmodel"
	"hearth/app/ops"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
	httpport "hearth/ports/http"
)

// cli runs one subcommand of the binary against the test's databases and
// returns its standard output.
func cli(ctx context.Context, urls pgtest.URLs, args ...string) (string, error) {
	env := map[string]string{"DATABASE_URL": urls.EventStore, "READMODEL_DATABASE_URL": urls.ReadModel, "LOG_LEVEL": "warn", "USER": "tester", "MASTER_KEY": testMasterKey}
	var stdout, stderr bytes.Buffer
	err := run(ctx, args, func(k string) string { return env[k] }, &stdout, &stderr)
	return stdout.String(), err
}

func (a *api) urls() pgtest.URLs {
	return pgtest.URLs{EventStore: a.cfg.DatabaseURL, ReadModel: a.cfg.ReadModelDatabaseURL}
}

// seedOrders creates a customer of merchant A and n orders, and waits
// until the read model shows them.
func (a *api) seedOrders(n int) (customerID string, ids []string) {
	a.t.Helper()
	customerID = a.createCustomer(a.opA, "Ada")
	for i := range n {
		ids = append(ids, a.createOrder(a.opA, customerID, 100+i))
	}
	for _, id := range ids {
		a.awaitOrder(a.opA, id, 1)
	}
	return customerID, ids
}

// caughtUp reports whether every event has its change-log row (the
// projections have applied everything).
func (a *api) caughtUp() bool {
	var events, changes int
	if a.dbs.es.DB.QueryRow(`SELECT count(*) FROM events`).Scan(&events) != nil ||
		a.dbs.rm.DB.QueryRow(`SELECT count(*) FROM change_log`).Scan(&changes) != nil {
		return false
	}
	return events == changes
}

// `app verify` passes on a consistent read model and reports, with a
// non-zero exit, a difference planted in a row and one planted in the
// change log; in both layouts.
func TestVerifyReportsPlantedDifference(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := setup(t, newDB(t))
			c := a.createCustomer(a.opA, "Ada")
			var ids []string
			for i := range 5 {
				id := a.createOrder(a.opA, c, 1000+i)
				a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+id+"/status", a.opA, map[string]any{"status": "confirmed"})
				ids = append(ids, id)
			}
			for _, id := range ids {
				a.awaitOrder(a.opA, id, 2)
			}
			out, err := cli(t.Context(), a.urls(), "verify", "--recheck", "0")
			require.NoError(t, err, out)
			require.Contains(t, out, "verify orders: 5 streams, 10 events, 0 differences")

			_, err = a.dbs.rm.DB.Exec(`UPDATE orders SET amount_cents = 7 WHERE id = $1`, ids[1])
			require.NoError(t, err)
			_, err = a.dbs.rm.DB.Exec(`DELETE FROM change_log WHERE aggregate_id = $1 AND version = 2`, ids[3])
			require.NoError(t, err)
			out, err = cli(t.Context(), a.urls(), "verify", "--recheck", "0")
			require.ErrorAs(t, err, new(differencesError), out)
			require.Contains(t, out, "orders "+ids[1]+" amount_cents: read model 7, event log 1001")
			require.Contains(t, out, "orders "+ids[3]+" change_log: read model 1 rows, event log 2 events")
			require.Contains(t, out, "verify orders: 5 streams, 10 events, 2 differences")
		})
	}
}

// `app rebuild orders` under a steady write load: it finishes, reads
// answer throughout, no change-log row is written twice, the indexes keep
// their names, and `app verify` passes once the load stops.
func TestRebuildUnderWriteLoad(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := setup(t, newDB(t))
			c, seeded := a.seedOrders(30)

			stop := make(chan struct{})
			var wg sync.WaitGroup
			var writes, reads atomic.Int64
			var failures []string
			var mu sync.Mutex
			fail := func(format string, args ...any) {
				mu.Lock()
				failures = append(failures, fmt.Sprintf(format, args...))
				mu.Unlock()
			}
			wg.Go(func() { // writer: new orders and status changes, one after another
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					r, err := a.send(http.MethodPost, "/v1/orders", auth(a.opA), map[string]any{"customer_id": c, "amount_cents": i})
					if err != nil || r.Status != http.StatusCreated {
						fail("create: %v %v", err, r)
						return
					}
					id, _ := r.Body["id"].(string)
					r, err = a.send(http.MethodPost, "/v1/orders/"+id+"/status", auth(a.opA), map[string]any{"status": "confirmed"})
					if err != nil || r.Status != http.StatusOK {
						fail("status: %v %v", err, r)
						return
					}
					writes.Add(2)
				}
			})
			wg.Go(func() { // reader: details of seeded orders and the list
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					path := "/v1/orders/" + seeded[i%len(seeded)]
					if i%3 == 0 {
						path = "/v1/orders?page_size=5"
					}
					r, err := a.send(http.MethodGet, path, auth(a.opA), nil)
					if err != nil || r.Status != http.StatusOK {
						fail("GET %s: %v %v", path, err, r)
						return
					}
					reads.Add(1)
				}
			})
			// Let the load run before, during and after the rebuild.
			require.Eventually(t, func() bool { return writes.Load() >= 20 }, 10*time.Second, 5*time.Millisecond)
			before := writes.Load()
			out, err := cli(t.Context(), a.urls(), "rebuild", "orders")
			require.NoError(t, err)
			require.Contains(t, out, "rebuild orders: done")
			during := writes.Load() - before
			require.Eventually(t, func() bool { return writes.Load() >= before+during+20 }, 10*time.Second, 5*time.Millisecond)
			close(stop)
			wg.Wait()
			require.Empty(t, failures, "every read and write answered")
			t.Logf("%d writes during the rebuild, %d writes and %d reads in all", during, writes.Load(), reads.Load())

			require.Eventually(t, a.caughtUp, 10*time.Second, 10*time.Millisecond)
			var dupes int
			require.NoError(t, a.dbs.rm.DB.QueryRow(`SELECT count(*) FROM (SELECT event_id FROM change_log GROUP BY event_id HAVING count(*) > 1) d`).Scan(&dupes))
			require.Zero(t, dupes)
			var indexes []string
			rows, err := a.dbs.rm.DB.Query(`SELECT indexname FROM pg_indexes WHERE tablename = 'orders' ORDER BY indexname`)
			require.NoError(t, err)
			for rows.Next() {
				var n string
				require.NoError(t, rows.Scan(&n))
				indexes = append(indexes, n)
			}
			require.NoError(t, rows.Close())
			require.Equal(t, []string{"orders_merchant_created", "orders_merchant_customer", "orders_merchant_scheduled", "orders_merchant_settlement",
				"orders_merchant_staff", "orders_merchant_status", "orders_pkey"}, indexes)

			out, err = cli(t.Context(), a.urls(), "verify", "--recheck", "0")
			require.NoError(t, err, out)
		})
	}
}

// The operator's tools over HTTP and the CLI: a deterministic failure
// (a constraint planted in the read model) parks one order; the detail
// shows it is behind; other orders flow; the admin API lists it, replays
// it (still failing, then, with the cause removed, applied in order), and
// /metrics shows what happened.
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction (architecture.md).
func TestParkedAdminAPIAndCLI(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	c := a.createCustomer(a.opA, "Ada")
	bad, good := a.createOrder(a.opA, c, 100), a.createOrder(a.opA, c, 200)
	a.awaitOrder(a.opA, bad, 1)
	a.awaitOrder(a.opA, good, 1)

	_, err := a.dbs.rm.DB.Exec(fmt.Sprintf(`ALTER TABLE orders ADD CONSTRAINT test_cause CHECK (id <> '%s' OR status = 'pending')`, bad))
	require.NoError(t, err)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+bad+"/status", a.opA, map[string]any{"status": "confirmed"})
	var list response
	require.Eventually(t, func() bool {
		list, err = a.send(http.MethodGet, "/admin/parked", auth(a.admin), nil)
		return err == nil && list.Status == http.StatusOK && intOf(list.Body["total"]) == 1
	}, 20*time.Second, 10*time.Millisecond)
	item := list.Body["items"].([]any)[0].(map[string]any)
	assert.Equal(t, "orders", item["projection"])
	assert.Equal(t, bad, item["stream_id"])
	assert.Equal(t, 2, intOf(item["first_version"]))
	assert.Contains(t, item["reason"], "test_cause")

	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+bad+"/cancel", a.opA, map[string]any{"reason": "customer called"})
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+good+"/status", a.opA, map[string]any{"status": "confirmed"})
	a.awaitOrder(a.opA, good, 2)
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, "/admin/parked/orders/"+bad, auth(a.admin), nil)
		return err == nil && r.Status == http.StatusOK && intOf(r.Body["waiting"]) == 2
	}, 10*time.Second, 10*time.Millisecond)
	detail := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+bad, a.opA, nil)
	assert.Equal(t, 1, intOf(detail.Body["version"]))
	assert.Contains(t, detail.Header.Get(httpport.ParkedHeader), "waiting=2, first_version=2")
	assert.Empty(t, a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+good, a.opA, nil).Header.Get(httpport.ParkedHeader))
	a.must(http.StatusNotFound, http.MethodGet, "/v1/orders/"+bad, a.opB, nil)

	// Admin keys only.
	requireProblem(t, a.do(http.MethodGet, "/admin/parked", a.opA, nil), http.StatusForbidden, "/problems/forbidden")
	requireProblem(t, a.do(http.MethodGet, "/admin/parked", "", nil), http.StatusUnauthorized, "/problems/unauthenticated")
	requireProblem(t, a.do(http.MethodGet, "/admin/parked?projection=nope", a.admin, nil), http.StatusUnprocessableEntity, "/problems/validation-failed")

	// The CLI sees the same.
	out, err := cli(t.Context(), a.urls(), "parked", "list")
	require.NoError(t, err)
	require.Contains(t, out, bad)
	require.Contains(t, out, "1 parked")

	// Replay with the cause still there: still parked.
	r := a.must(http.StatusOK, http.MethodPost, "/admin/parked/orders/"+bad+"/replay", a.admin, nil)
	assert.Equal(t, false, r.Body["unparked"])
	assert.Equal(t, 2, intOf(r.Body["waiting"]))
	out, err = cli(t.Context(), a.urls(), "parked", "replay", "orders", bad)
	require.Error(t, err)
	require.Contains(t, out, "still parked with 2 waiting")

	// The cause is removed: replay applies v2 and v3 in order.
	_, err = a.dbs.rm.DB.Exec(`ALTER TABLE orders DROP CONSTRAINT test_cause`)
	require.NoError(t, err)
	r = a.must(http.StatusOK, http.MethodPost, "/admin/parked/replay", a.admin, nil)
	require.Equal(t, 1, intOf(r.Body["total"]))
	res := r.Body["items"].([]any)[0].(map[string]any)
	assert.Equal(t, true, res["unparked"])
	assert.Equal(t, 2, intOf(res["applied"]))
	detail = a.awaitOrder(a.opA, bad, 3)
	assert.Equal(t, "cancelled", detail.Body["status"])
	assert.Empty(t, detail.Header.Get(httpport.ParkedHeader))
	changes := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+bad+"/changes", a.opA, nil).Body["items"].([]any)
	require.Len(t, changes, 3, "one change-log row per event, in order")
	for i, c := range changes {
		assert.Equal(t, i+1, intOf(c.(map[string]any)["version"]))
	}
	a.must(http.StatusNotFound, http.MethodGet, "/admin/parked/orders/"+bad, a.admin, nil)

	out, err = cli(t.Context(), a.urls(), "verify", "--recheck", "0")
	require.NoError(t, err, out)

	// /metrics, without a key.
	m, err := http.Get(a.base + "/metrics")
	require.NoError(t, err)
	defer m.Body.Close()
	raw, err := io.ReadAll(m.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, m.StatusCode)
	body := string(raw)
	for _, want := range []string{
		`hearth_projection_poisoned_events_total{projection="orders"} 1`,
		`hearth_projection_parked_aggregates{projection="orders"} 0`,
		`hearth_projection_lag_events{projection="orders"}`,
		`hearth_projection_lag_seconds{projection="orders"}`,
		`hearth_projection_parked_oldest_age_seconds{projection="orders"} 0`,
		`hearth_projection_retries_total{projection="orders"}`,
		`hearth_projection_events_applied_total{projection="orders"}`,
		`hearth_projection_handler_duration_seconds_bucket{outcome="ok",projection="orders"`,
		`hearth_watermill_`,
		`hearth_http_requests_total{code="200",method="GET",route="GET /v1/orders/{id}"}`,
	} {
		assert.Contains(t, body, want)
	}
}

// POST /admin/rebuilds/{projection} starts a rebuild in the background;
// GET shows its progress until it is done; an unknown projection is
// refused. The rebuild repairs a row that was damaged behind the
// projection's back.
func TestRebuildAdminAPI(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	_, ids := a.seedOrders(10)
	_, err := a.dbs.rm.DB.Exec(`UPDATE orders SET amount_cents = 7 WHERE id = $1`, ids[4])
	require.NoError(t, err)
	out, err := cli(t.Context(), a.urls(), "verify", "--recheck", "0")
	require.ErrorAs(t, err, new(differencesError), out)
	requireProblem(t, a.do(http.MethodPost, "/admin/rebuilds/orders", a.opA, nil), http.StatusForbidden, "/problems/forbidden")
	requireProblem(t, a.do(http.MethodPost, "/admin/rebuilds/nope", a.admin, nil), http.StatusUnprocessableEntity, "/problems/validation-failed")
	a.must(http.StatusNotFound, http.MethodGet, "/admin/rebuilds/orders", a.admin, nil)

	r := a.must(http.StatusAccepted, http.MethodPost, "/admin/rebuilds/orders", a.admin, nil)
	assert.Equal(t, "/admin/rebuilds/orders", r.Header.Get("Location"))
	var status response
	require.Eventually(t, func() bool {
		var err error
		status, err = a.send(http.MethodGet, "/admin/rebuilds/orders", auth(a.admin), nil)
		return err == nil && status.Status == http.StatusOK && status.Body["phase"] != "fold" &&
			status.Body["phase"] != "catch_up" && status.Body["phase"] != "swap"
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, "done", status.Body["phase"], status.Raw)
	assert.Equal(t, 10, intOf(status.Body["rows"]))
	assert.Equal(t, 10, intOf(status.Body["total"]))
	for _, id := range ids {
		a.awaitOrder(a.opA, id, 1)
	}
	assert.Equal(t, 104, intOf(a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+ids[4], a.opA, nil).Body["amount_cents"]))
	out, err = cli(t.Context(), a.urls(), "verify", "--recheck", "0")
	require.NoError(t, err, out)
}

// Cancelling a rebuild (Ctrl-C in the CLI) drops the shadow table and
// leaves the live table as it was.
func TestRebuildCancelled(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	_, ids := a.seedOrders(1)
	id := ids[0]
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p, err := readmodel.Rebuild(ctx, readmodel.RebuildConfig{Log: a.w.eventLog, DB: a.dbs.rm, Projection: "orders",
		Progress: func(ops.RebuildProgress) { cancel() }})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, "cancelled", p.Phase)
	var shadows int
	require.NoError(t, a.dbs.rm.DB.QueryRow(`SELECT count(*) FROM pg_tables WHERE tablename = 'orders_rebuild'`).Scan(&shadows))
	require.Zero(t, shadows)
	a.awaitOrder(a.opA, id, 1)
	out, err := cli(t.Context(), a.urls(), "verify", "--recheck", "0")
	require.NoError(t, err, out)
}

// awaitParked waits until the orders projection has parked the order id
// and returns its parked aggregate as GET /admin/parked/orders/{id} shows
// it.
func (a *api) awaitParked(id string) map[string]any {
	a.t.Helper()
	var body map[string]any
	require.Eventually(a.t, func() bool {
		r, err := a.send(http.MethodGet, "/admin/parked/orders/"+id, auth(a.admin), nil)
		if err == nil && r.Status == http.StatusOK {
			body = r.Body
			return true
		}
		return false
	}, 20*time.Second, 10*time.Millisecond)
	return body
}

// Skipping an aggregate's first event (version 1) is refused (operations.md:
// "there would be no row"): the admin API answers it as the rule it is,
// 422 parked.skip_first_event, not 500 as for a server fault.
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction (architecture.md).
func TestSkippingAnAggregatesFirstEventIsARuleRefusal(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	_, err := a.dbs.rm.DB.Exec(`ALTER TABLE orders ADD CONSTRAINT parked_cause CHECK (amount_cents <> 4242)`)
	require.NoError(t, err)
	c := a.createCustomer(a.opA, "Ada")
	bad := a.createOrder(a.opA, c, 4242)
	parked := a.awaitParked(bad)
	require.Equal(t, 1, intOf(parked["first_version"]), "parked at its first event")

	r := a.do(http.MethodPost, "/admin/parked/orders/"+bad+"/skip", a.admin, map[string]any{"reason": "cannot apply"})
	requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/rule-broken")
	require.Equal(t, "parked.skip_first_event", r.Body["rule"], "%s", r)
	require.Equal(t, 1, intOf(a.awaitParked(bad)["waiting"]), "still parked, its event waiting")
}

// Ids are accepted in any case (api.md): `app parked skip --event ID`
// naming the first waiting event in upper case skips it.
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction (architecture.md).
func TestParkedSkipTakesTheEventIDInAnyCase(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	c := a.createCustomer(a.opA, "Ada")
	bad := a.createOrder(a.opA, c, 100)
	a.awaitOrder(a.opA, bad, 1)
	_, err := a.dbs.rm.DB.Exec(fmt.Sprintf(`ALTER TABLE orders ADD CONSTRAINT parked_cause CHECK (id <> '%s' OR status = 'pending')`, bad))
	require.NoError(t, err)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+bad+"/status", a.opA, map[string]any{"status": "confirmed"})
	parked := a.awaitParked(bad)
	first := parked["first_event_id"].(string)
	require.Equal(t, 2, intOf(parked["first_version"]))

	// The admin API accepts it (its decoder lower-cases ids); the CLI's
	// --event must too.
	out, err := cli(t.Context(), a.urls(), "parked", "skip", "orders", bad, "--event", strings.ToUpper(first), "--reason", "bad data")
	require.NoError(t, err, "the first waiting event, named in upper case: %s", out)
}

// DELETE /admin/rebuilds/{projection} cancels a running rebuild; once the
// rebuild has finished there is nothing to cancel: 409, and no
// "rebuild.cancel" in the audit log for a rebuild that completed.
func TestCancellingAFinishedRebuildIsAConflictAndNotAudited(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	a.seedOrders(2)
	a.must(http.StatusAccepted, http.MethodPost, "/admin/rebuilds/orders", a.admin, nil)
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, "/admin/rebuilds/orders", auth(a.admin), nil)
		return err == nil && r.Status == http.StatusOK && r.Body["phase"] == "done"
	}, 20*time.Second, 10*time.Millisecond)

	r := a.do(http.MethodDelete, "/admin/rebuilds/orders", a.admin, nil)
	lines, _ := a.auditLog()
	cancels := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "rebuild.cancel ") {
			cancels++
		}
	}
	require.Zero(t, cancels, "no rebuild was cancelled, yet the audit log says one was: %q (answer %s)", lines, r)
	requireProblem(t, r, http.StatusConflict, "/problems/conflict")
}

// The parked subcommands refuse bad command lines as usage errors (exit 2)
// naming the flag or argument, as `app rebuild` and `app keys` do: an
// unknown projection, an aggregate id that is not a UUID, a skip without
// --reason, flags of another parked subcommand, which are otherwise
// silently ignored (`parked skip ... --all` skips one event, not all), and
// an empty --projection (a script whose variable was empty), which read as
// absent would replay every projection's parked aggregates (the admin API
// refuses `projection=` for that reason).
func TestParkedCLIBadInputIsAUsageError(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	id := uuid.New()
	for _, tc := range []struct {
		name     string
		args     []string
		contains string
	}{
		{"unknown projection (replay)", []string{"parked", "replay", "nope", id}, "nope"},
		{"unknown projection (list)", []string{"parked", "list", "--projection", "nope"}, "nope"},
		{"aggregate id not a UUID (replay)", []string{"parked", "replay", "orders", "not-a-uuid"}, "UUID"},
		{"aggregate id not a UUID (skip)", []string{"parked", "skip", "orders", "not-a-uuid", "--reason", "bad"}, "UUID"},
		{"skip without --reason", []string{"parked", "skip", "orders", id}, "--reason"},
		{"replay given --reason (a skip flag)", []string{"parked", "replay", "orders", id, "--reason", "why"}, "reason"},
		{"skip given --all (a replay flag)", []string{"parked", "skip", "orders", id, "--reason", "why", "--all"}, "all"},
		{"replay --all given an empty --projection", []string{"parked", "replay", "--all", "--projection", ""}, "--projection"},
		{"list given an empty --projection", []string{"parked", "list", "--projection", " "}, "--projection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cli(t.Context(), urls, tc.args...)
			require.Error(t, err, "%q", tc.args)
			require.True(t, errors.As(err, new(usageError)), "%q: want a usage error (exit 2), got: %v", tc.args, err)
			require.ErrorContains(t, err, tc.contains)
		})
	}
}

// `app parked replay --all` replays one aggregate after another, each in a
// transaction of its own: when one fails part-way (here a lock held by
// another session outlasts lock_timeout; in life a lost connection, or
// Ctrl-C), the replays before it are done and audited, and the command
// still says which, not only the error.
//
// Not parallel: the parked orders' handler retried in its subscriber's
// transaction (architecture.md).
func TestParkedReplayAllReportsWhatItReplayedBeforeAFailure(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	c := a.createCustomer(a.opA, "Ada")
	first, second := a.createOrder(a.opA, c, 100), a.createOrder(a.opA, c, 200)
	a.awaitOrder(a.opA, first, 1)
	a.awaitOrder(a.opA, second, 1)
	_, err := a.dbs.rm.DB.Exec(fmt.Sprintf(`ALTER TABLE orders ADD CONSTRAINT test_cause CHECK (status = 'pending' OR id NOT IN ('%s', '%s'))`, first, second))
	require.NoError(t, err)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+first+"/status", a.opA, map[string]any{"status": "confirmed"})
	a.awaitParked(first)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+second+"/status", a.opA, map[string]any{"status": "confirmed"})
	a.awaitParked(second)
	_, err = a.dbs.rm.DB.Exec(`ALTER TABLE orders DROP CONSTRAINT test_cause`)
	require.NoError(t, err)

	// The second (replayed after the first: oldest first) is locked.
	tx, err := a.dbs.es.DB.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec(`SELECT 1 FROM parked_aggregates WHERE projection = 'orders' AND stream_id = $1 FOR UPDATE`, second)
	require.NoError(t, err)

	urls := a.urls()
	sep := "?"
	if strings.Contains(urls.EventStore, "?") {
		sep = "&"
	}
	urls.EventStore += sep + "lock_timeout=1s"
	out, err := cli(t.Context(), urls, "parked", "replay", "--all")
	require.ErrorContains(t, err, "lock timeout")
	require.Contains(t, out, "orders "+first+": applied 1, unparked", "the replay done before the failure is reported")
	a.awaitOrder(a.opA, first, 2)
}

// The webhook fan-out's projections park aggregates as the read models'
// do (operations.md, Webhooks: "/admin/parked, replay and skip as
// above"), and the alert names them (hearth_projection_parked_aggregates
// {projection="webhooks_orders"}): an operator who narrows `app parked
// list` or `app parked replay --all` to such a projection, as the admin
// API's ?projection= allows, gets its aggregates, not a usage error that
// lists only the read models' projections.
func TestParkedCLITakesTheWebhookFanOutsProjections(t *testing.T) {
	a := withWebhooks(t, pgtest.NewDB(t), hourlyRetries)
	rc := newReceiver(t)
	a.createEndpoint(a.opA, rc.URL+"/hook")
	c := a.createCustomer(a.opA, "Ada")
	o := a.createOrder(a.opA, c, 100)
	awaitDelivered(t, rc, 1)

	// The fan-out cannot queue the order's next event: it parks the order
	// for webhooks_orders only.
	_, err := a.dbs.es.DB.Exec(fmt.Sprintf(`ALTER TABLE webhook_deliveries ADD CONSTRAINT test_cause CHECK (aggregate_id <> '%s' OR aggregate_version < 2)`, o))
	require.NoError(t, err)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+o+"/status", a.opA, map[string]any{"status": "confirmed"})
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, "/admin/parked/webhooks_orders/"+o, auth(a.admin), nil)
		return err == nil && r.Status == http.StatusOK
	}, 20*time.Second, 10*time.Millisecond)

	urls := a.urls()
	out, err := cli(t.Context(), urls, "parked", "list", "--projection", "webhooks_orders")
	require.NoError(t, err, "app parked list --projection webhooks_orders")
	require.Regexp(t, `(?m)^webhooks_orders +`+o+` `, out, "the fan-out's parked order is listed")
	require.Contains(t, out, "1 parked")

	_, err = a.dbs.es.DB.Exec(`ALTER TABLE webhook_deliveries DROP CONSTRAINT test_cause`)
	require.NoError(t, err)
	out, err = cli(t.Context(), urls, "parked", "replay", "--all", "--projection", "webhooks_orders", "--by", "ops")
	require.NoError(t, err, "app parked replay --all --projection webhooks_orders")
	require.Contains(t, out, "webhooks_orders "+o+": applied 1, unparked")
	awaitDelivered(t, rc, 2)
}

// An aggregate parked at its first event has no row yet: its GET answers
// 404, and says in Projection-Parked (as the document declares) that it is
// held back, not missing, so that the client that was just answered 201
// does not take its write for lost and send it again. Another merchant is
// told nothing.
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction (architecture.md).
func TestAnAggregateParkedAtItsFirstEventSaysSoOnItsGet(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	d := newDocCheck(t, a)
	_, err := a.dbs.rm.DB.Exec(`ALTER TABLE orders ADD CONSTRAINT parked_cause CHECK (amount_cents <> 4242)`)
	require.NoError(t, err)
	bad := a.createOrder(a.opA, a.createCustomer(a.opA, "Ada"), 4242)
	require.Equal(t, 1, intOf(a.awaitParked(bad)["first_version"]), "parked at its first event")

	r := d.send("an order parked at its first event", http.MethodGet, "/v1/orders/"+bad, a.opA, nil, nil)
	requireProblem(t, r, http.StatusNotFound, "/problems/not-found")
	require.Contains(t, r.Header.Get(httpport.ParkedHeader), "waiting=1, first_version=1", "%s", r)
	other := d.send("another merchant's GET of it", http.MethodGet, "/v1/orders/"+bad, a.opB, nil, nil)
	requireProblem(t, other, http.StatusNotFound, "/problems/not-found")
	require.Empty(t, other.Header.Get(httpport.ParkedHeader), "%s", other)
	require.Empty(t, d.violations, "answers the OpenAPI document does not describe:\n%s", strings.Join(d.violations, "\n"))
}

// A worker key cannot see another staff member's order or schedule: its GET
// answers 404 as for a missing one (api.md). A parked one is no exception:
// the Projection-Parked header of a 404 tells whoever sends it that the
// order or schedule exists, how many of its events wait and since when, so
// a worker key must not get it for what is not its own, whether the row is
// held back behind a parked event or the aggregate is parked at its first
// event and has no row yet.
//
// Not parallel: the failing handler retries inside its subscriber's
// transaction (architecture.md).
func TestAWorkerKeyIsNotToldOfAnotherStaffMembersParkedOrderOrSchedule(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	colleague, err := a.w.refdata.CreateStaff(t.Context(), a.merchantA, "Colin Colleague")
	require.NoError(t, err)
	customer := a.createCustomer(a.opA, "Ada")
	theirs := a.createOrder(a.opA, customer, 100)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+theirs+"/assignment", a.opA, map[string]any{
		"staff_id": colleague, "start_at": "2030-06-01T10:00:00Z", "end_at": "2030-06-01T12:00:00Z"})
	schedule := a.crmSchedule(a.opA, theirs).Body["id"].(string)
	a.awaitOrder(a.opA, theirs, 3)

	// The colleague's order is held back behind its next event, their
	// schedule too, and another order is parked at its first event.
	_, err = a.dbs.rm.DB.Exec(fmt.Sprintf(`ALTER TABLE orders ADD CONSTRAINT parked_cause CHECK ((id <> '%s' OR amount_cents = 100) AND amount_cents <> 4242)`, theirs))
	require.NoError(t, err)
	_, err = a.dbs.rm.DB.Exec(fmt.Sprintf(`ALTER TABLE schedules ADD CONSTRAINT parked_cause CHECK (id <> '%s' OR status = 'planned')`, schedule))
	require.NoError(t, err)
	a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+theirs, a.opA, map[string]any{"amount_cents": 150})
	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+schedule+"/status", a.opA, map[string]any{"status": "in_service"})
	unborn := a.createOrder(a.opA, customer, 4242)
	a.awaitParked(theirs)
	require.Equal(t, 1, intOf(a.awaitParked(unborn)["first_version"]), "parked at its first event")
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, "/admin/parked/schedules/"+schedule, auth(a.admin), nil)
		return err == nil && r.Status == http.StatusOK
	}, 20*time.Second, 10*time.Millisecond, "the schedule is parked")
	// The operator is told, as operations.md says.
	require.NotEmpty(t, a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+theirs, a.opA, nil).Header.Get(httpport.ParkedHeader))

	for _, path := range []string{"/v1/orders/" + theirs, "/v1/orders/" + unborn, "/v1/schedules/" + schedule} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			r := a.do(method, path, a.worker, nil)
			require.Equal(t, http.StatusNotFound, r.Status, "%s %s by the worker: %s", method, path, r)
			require.Empty(t, r.Header.Get(httpport.ParkedHeader),
				"%s %s by a worker key: another staff member's parked aggregate answers as a missing one, without %s", method, path, httpport.ParkedHeader)
		}
	}
}

// The parked subcommands' command-line mistakes are found before any
// database is opened, as operations.md says of every command's bad input:
// a slip (a skip without --reason, a replay of one argument) must not
// migrate the databases, at a time nobody chose, on its way to exit 2.
func TestParkedCLIMistakesMigrateNothing(t *testing.T) {
	t.Parallel()
	fresh := pgtest.NewEmptyDB(t)
	urls := pgtest.URLs{EventStore: fresh, ReadModel: fresh}
	id := uuid.New()
	for _, args := range [][]string{
		{"parked", "skip", "orders", id},
		{"parked", "skip", "orders", "--reason", "why"},
		{"parked", "replay", "orders"},
		{"parked", "replay"},
		{"parked", "replay", "--all", "orders", id},
		{"parked", "replay", "orders", id, "--projection", "orders"},
		{"parked", "list", "orders"},
	} {
		_, err := cli(t.Context(), urls, args...)
		require.Error(t, err, "%q", args)
		require.True(t, errors.As(err, new(usageError)), "%q: want a usage error (exit 2), got: %v", args, err)
		var migrated bool
		require.NoError(t, pgtest.Open(t, fresh).DB.QueryRow(`SELECT to_regclass('hearth_migrations') IS NOT NULL`).Scan(&migrated))
		require.False(t, migrated, "%q: a mistyped command applied the migrations", args)
	}
}
