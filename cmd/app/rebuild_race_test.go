package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/readmodel"
	"hearth/app/ops"
	"hearth/client"
	"hearth/internal/advisory"
	"hearth/internal/pgtest"
)

// A customer's export reads the read models in one REPEATABLE READ
// snapshot, statement after statement. A rebuild's swap puts a new table in
// the old one's place meanwhile: read under a snapshot taken before the
// new table's rows were written, it looks empty. An export whose snapshot
// was taken before `app rebuild schedules` swapped, and which reads the
// schedules after, must still list the customer's schedule.
//
// The export is held after its first reads by a lock on plans (the table it
// reads before schedules); the rebuild of schedules runs meanwhile. The
// read models have a database of their own, so that every backend waiting
// for a lock there is the export's or the rebuild's.
func TestCustomerExportTakenWhileARebuildSwapsListsEverySchedule(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewSplitDBs(t))
	ctx := t.Context()
	c := a.createCustomer(a.opA, "Ada")
	o := a.createOrder(a.opA, c, 5000)
	start := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+o+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": start.Format(time.RFC3339), "end_at": start.Add(time.Hour).Format(time.RFC3339)})
	a.liveSchedule(a.opA, o)
	require.Eventually(t, a.caughtUp, 10*time.Second, 10*time.Millisecond)

	blocker, err := a.dbs.rm.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback() }()
	_, err = blocker.ExecContext(ctx, `LOCK TABLE plans IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	type exported struct {
		r   *client.ExportCustomerResponse
		err error
	}
	export := make(chan exported, 1)
	go func() {
		r, err := a.hearth().ExportCustomerWithResponse(ctx, uid(t, c), nil, as(a.opA))
		export <- exported{r, err}
	}()
	require.False(t, pgtest.DoneOrWaiting(t, a.dbs.rm.DB, export), "the export waits for plans")

	type rebuild struct {
		out string
		err error
	}
	rebuilt := make(chan rebuild, 1)
	go func() {
		out, err := cli(ctx, a.urls(), "rebuild", "schedules")
		rebuilt <- rebuild{out, err}
	}()
	// Until the rebuild is done, or waits for a lock itself (the export's).
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, a.dbs.rm.DB.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return len(rebuilt) > 0 || waiting > 1
	}, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, blocker.Rollback())

	x := <-export
	expect(t, http.StatusOK, x.r, x.err)
	rb := <-rebuilt
	require.NoError(t, rb.err)
	require.Contains(t, rb.out, "rebuild schedules: done")
	require.Len(t, x.r.JSON200.Orders, 1)
	require.Len(t, x.r.JSON200.Schedules, 1, "the export taken while schedules was rebuilt lists the customer's schedule")
}

// rebuildLockHolder is the backend that holds the rebuild lock of
// projection in db's database (0 when none does): pg_locks shows an
// advisory lock on a bigint key as its high and low 32 bits.
func rebuildLockHolder(t *testing.T, db *sql.DB, projection string) int {
	t.Helper()
	key := uint64(advisory.Key(advisory.Rebuild(projection)))
	var pid int
	err := db.QueryRow(`SELECT COALESCE(max(pid), 0) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = $1 AND objid = $2 AND objsubid = 1`, int64(key>>32), int64(key&0xffffffff)).Scan(&pid)
	require.NoError(t, err)
	return pid
}

// A rebuild holds its lock on a connection of its own. When that
// connection ends under it (an operator's pg_terminate_backend, a server
// that ends idle sessions, a proxy's timeout), the lock goes with it, and
// another rebuild of the projection (another process) may start at once
// and drop the shadow table, and an erasure takes the shadow table for one
// left behind. The rebuild must then stop and say so, not go on and swap
// its table in without the lock.
func TestARebuildWhoseLockConnectionEndsStopsWithoutSwapping(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewSplitDBs(t))
	_, ids := a.seedOrders(3)
	var live uint32
	require.NoError(t, a.dbs.rm.DB.QueryRow(`SELECT 'orders'::regclass::oid`).Scan(&live))

	killed := false
	p, err := readmodel.Rebuild(t.Context(), readmodel.RebuildConfig{Log: a.w.eventLog, Decoders: a.w.vault, DB: a.dbs.rm, Projection: "orders",
		Progress: func(p ops.RebuildProgress) {
			if killed || p.Phase != "catch_up" {
				return
			}
			killed = true
			pid := rebuildLockHolder(t, a.dbs.rm.DB, "orders")
			require.NotZero(t, pid, "the rebuild holds its lock while it folds")
			var ended bool
			require.NoError(t, a.dbs.rm.DB.QueryRow(`SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ended))
			require.True(t, ended, "the rebuild's lock connection ended")
			require.Zero(t, rebuildLockHolder(t, a.dbs.rm.DB, "orders"), "the lock went with its connection")
		}})
	require.True(t, killed, "the rebuild reached its catch-up")
	require.Error(t, err, "a rebuild whose lock connection ended swapped its table in anyway (phase %s)", p.Phase)
	require.Equal(t, "failed", p.Phase)
	require.Contains(t, err.Error(), "lost its lock")
	var now uint32
	require.NoError(t, a.dbs.rm.DB.QueryRow(`SELECT 'orders'::regclass::oid`).Scan(&now))
	require.Equal(t, live, now, "the live table is the one it was")
	var shadows int
	require.NoError(t, a.dbs.rm.DB.QueryRow(`SELECT count(*) FROM pg_tables WHERE tablename = 'orders_rebuild'`).Scan(&shadows))
	require.Zero(t, shadows, "no shadow table left behind: no rebuild holds the lock")

	// The next rebuild runs as usual.
	out, err := cli(t.Context(), a.urls(), "rebuild", "orders")
	require.NoError(t, err)
	require.Contains(t, out, "rebuild orders: done")
	a.awaitOrder(a.opA, ids[0], 1)
	out, err = cli(t.Context(), a.urls(), "verify", "--recheck", "0")
	require.NoError(t, err, out)
}

// Cancelling a rebuild while its swap waits for the live table (a long
// reader holds it) ends it at once and leaves nothing behind: pgx cancels
// the waiting statement by closing its connection, and the session on the
// server lives on, holding the rebuild lock and its read of the shadow
// table, until the statement ends (the swap's lock timeout); the
// cancelled rebuild must not leave its shadow table, or its lock, to it.
func TestARebuildCancelledWhileItsSwapWaitsLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewSplitDBs(t))
	a.seedOrders(2)
	ctx := t.Context()
	hold, err := a.dbs.rm.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback() }()
	_, err = hold.ExecContext(ctx, `LOCK TABLE orders IN ACCESS SHARE MODE`)
	require.NoError(t, err)

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	started := time.Now()
	go func() {
		_, err := readmodel.Rebuild(rctx, readmodel.RebuildConfig{Log: a.w.eventLog, Decoders: a.w.vault, DB: a.dbs.rm, Projection: "orders"})
		done <- err
	}()
	require.False(t, pgtest.DoneOrWaiting(t, a.dbs.rm.DB, done), "the swap waits for the reader")
	cancel()
	err = <-done
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(started), 10*time.Second, "the cancel ended the rebuild, not the swap's lock timeout")
	var shadows int
	require.NoError(t, a.dbs.rm.DB.QueryRow(`SELECT count(*) FROM pg_tables WHERE tablename = 'orders_rebuild'`).Scan(&shadows))
	require.Zero(t, shadows, "the cancelled rebuild left its shadow table behind (%v)", err)
	require.Zero(t, rebuildLockHolder(t, a.dbs.rm.DB, "orders"), "the cancelled rebuild's lock is free")
	require.NoError(t, hold.Rollback())
}

// The status of a rebuild (GET /admin/rebuilds/{projection}) is read on
// every instance, and after the process that ran it has ended: another
// API instance behind the load balancer, or the one that ran it once
// restarted, knows how the latest rebuild ended, and a rebuild whose
// process died midway reads as failed, not as never started.
func TestRebuildStatusIsReadOnEveryInstanceAndAfterItsProcessEnds(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewSplitDBs(t))
	a.seedOrders(3)
	ctx := t.Context()
	// Another instance on the same databases (or the first, restarted).
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	dbs, err := openDatabases(ctx, a.cfg)
	require.NoError(t, err)
	t.Cleanup(func() { dbs.close() }) // the request pools too, once open
	require.NoError(t, dbs.openRequestPools(ctx, a.cfg))
	w, err := wire(a.cfg, dbs, log)
	require.NoError(t, err)
	require.NoError(t, w.wireEventFeed(a.cfg, dbs, log))
	require.NoError(t, w.routeReads(ctx, a.cfg, dbs, log))
	t.Cleanup(w.maintenance.Close)
	other := *a
	srv := serveAPI(t, a.cfg, dbs, w, log)
	other.base, other.client = srv.URL, srv.Client()

	a.must(http.StatusAccepted, http.MethodPost, "/admin/rebuilds/orders", a.admin, nil)
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, "/admin/rebuilds/orders", auth(a.admin), nil)
		return err == nil && r.Status == http.StatusOK && r.Body["phase"] == "done"
	}, 20*time.Second, 10*time.Millisecond)
	r := other.do(http.MethodGet, "/admin/rebuilds/orders", a.admin, nil)
	require.Equal(t, http.StatusOK, r.Status, "the rebuild another instance ran: %s", r)
	require.Equal(t, "done", r.Body["phase"], "%s", r)
	require.Equal(t, 3, intOf(r.Body["rows"]))

	// A rebuild whose process dies at its catch-up: its session, and the
	// lock with it, ends; the process records nothing more.
	frozen, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		once := false
		_, err := readmodel.Rebuild(ctx, readmodel.RebuildConfig{Log: a.w.eventLog, Decoders: a.w.vault, DB: a.dbs.rm, Projection: "orders",
			Progress: func(p ops.RebuildProgress) {
				if p.Phase == "catch_up" && !once {
					once = true
					close(frozen)
					<-release
				}
			}})
		done <- err
	}()
	<-frozen
	pid := rebuildLockHolder(t, a.dbs.rm.DB, "orders")
	require.NotZero(t, pid)
	var ended bool
	require.NoError(t, a.dbs.rm.DB.QueryRow(`SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ended))
	require.True(t, ended)
	for _, instance := range []*api{a, &other} {
		r = instance.do(http.MethodGet, "/admin/rebuilds/orders", a.admin, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r)
		require.Equal(t, "failed", r.Body["phase"], "a rebuild whose process died: %s", r)
		require.Contains(t, r.Body["error"], "interrupted", "%s", r)
	}
	close(release)
	require.Error(t, <-done)

	// `app rebuild` is followed the same way, on every instance.
	out, err := cli(ctx, a.urls(), "rebuild", "orders")
	require.NoError(t, err, out)
	for _, instance := range []*api{a, &other} {
		r = instance.do(http.MethodGet, "/admin/rebuilds/orders", a.admin, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r)
		require.Equal(t, "done", r.Body["phase"], "the rebuild the CLI ran: %s", r)
	}
}

// A rebuild cancelled while its swap's COMMIT is on its way (Ctrl-C, or
// DELETE /admin/rebuilds/{projection} as it finishes) may have swapped all
// the same: pgx cancels by closing the connection, and the server may
// still commit. The rebuild must then say it is done, as its table is, not
// cancelled (which the cancel answers 200 and audits as a cancel).
//
// A deferred trigger on the shadow table holds the swap's COMMIT until the
// cancel reaches the server, and lets it commit then: the answer of a
// COMMIT the server carried out never reaches the rebuild.
func TestARebuildCancelledAsItsSwapCommitsSaysItIsDone(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewSplitDBs(t))
	_, ids := a.seedOrders(2)
	ctx := t.Context()
	const held = 4242001 // an advisory lock of this test only
	hold, err := a.dbs.rm.DB.Conn(ctx)
	require.NoError(t, err)
	defer hold.Close()
	_, err = hold.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, held)
	require.NoError(t, err)
	_, err = a.dbs.rm.DB.ExecContext(ctx, fmt.Sprintf(`CREATE FUNCTION test_commit_waits() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			BEGIN PERFORM pg_advisory_xact_lock(%d); EXCEPTION WHEN query_canceled THEN NULL; END;
			RETURN NULL;
		END $$`, held))
	require.NoError(t, err)

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var shadow uint32
	hooked := make(chan error, 1)
	done := make(chan ops.RebuildProgress, 1)
	go func() {
		p, _ := readmodel.Rebuild(rctx, readmodel.RebuildConfig{Log: a.w.eventLog, Decoders: a.w.vault, DB: a.dbs.rm, Projection: "orders",
			Progress: func(p ops.RebuildProgress) {
				if p.Phase != "swap" || len(hooked) > 0 {
					return
				}
				// One shadow row behind, so that the swap writes it again
				// and its trigger fires at the COMMIT.
				hooked <- errors.Join(
					a.dbs.rm.DB.QueryRowContext(ctx, `SELECT 'orders_rebuild'::regclass::oid`).Scan(&shadow),
					execOne(ctx, a.dbs.rm.DB, `CREATE CONSTRAINT TRIGGER test_commit_waits AFTER INSERT ON orders_rebuild
						DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_commit_waits()`),
					execOne(ctx, a.dbs.rm.DB, `DELETE FROM orders_rebuild WHERE id = $1`, ids[0]))
			}})
		done <- p
	}()
	require.NoError(t, <-hooked)
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, a.dbs.rm.DB.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`).Scan(&waiting))
		return waiting > 0
	}, 10*time.Second, 5*time.Millisecond, "the swap's COMMIT waits for its trigger")
	cancel()
	p := <-done

	var live uint32
	require.Eventually(t, func() bool {
		var sessions int
		require.NoError(t, a.dbs.rm.DB.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event = 'advisory'`).Scan(&sessions))
		return sessions == 0
	}, 10*time.Second, 5*time.Millisecond, "the swap's session has ended")
	require.NoError(t, a.dbs.rm.DB.QueryRowContext(ctx, `SELECT 'orders'::regclass::oid`).Scan(&live))
	require.Equal(t, shadow, live, "the server committed the swap (%s: %s)", p.Phase, p.Error)
	require.Equal(t, "done", p.Phase, "the rebuild swapped its table in, yet says %s (%s)", p.Phase, p.Error)
	_, err = a.dbs.rm.DB.ExecContext(ctx, `DROP TRIGGER test_commit_waits ON orders`)
	require.NoError(t, err)
	a.awaitOrder(a.opA, ids[0], 1)
	out, err := cli(ctx, a.urls(), "verify", "--recheck", "0")
	require.NoError(t, err, out)
}

// execOne runs one statement and returns its error alone.
func execOne(ctx context.Context, db *sql.DB, query string, args ...any) error {
	_, err := db.ExecContext(ctx, query, args...)
	return err
}

// Behind a load balancer, an operator's DELETE /admin/rebuilds/{projection}
// reaches any instance, and a rebuild may run in another one or in `app
// rebuild`: the GET there shows it running, so the cancel must reach it too
// and answer as on the instance that runs it, not 404 as if none ran.
//
// The rebuild runs beside the instance (as another process would), its
// swap held by a reader of the live table so that it is still running when
// the cancel comes.
func TestARebuildIsCancelledThroughAnotherInstance(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewSplitDBs(t))
	a.seedOrders(2)
	hold, done := rebuildHeldAtItsSwap(t, a)
	r := a.do(http.MethodGet, "/admin/rebuilds/orders", a.admin, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r)
	require.Equal(t, "swap", r.Body["phase"], "the rebuild another process runs: %s", r)

	r = a.do(http.MethodDelete, "/admin/rebuilds/orders", a.admin, nil)
	require.Equal(t, http.StatusOK, r.Status, "the cancel of a rebuild another process runs: %s", r)
	require.Equal(t, "cancelled", r.Body["phase"], "%s", r)
	require.ErrorIs(t, <-done, context.Canceled, "the rebuild stopped as cancelled")
	var shadows int
	require.NoError(t, a.dbs.rm.DB.QueryRow(`SELECT count(*) FROM pg_tables WHERE tablename = 'orders_rebuild'`).Scan(&shadows))
	require.Zero(t, shadows, "the cancelled rebuild left its shadow table behind")
	require.Zero(t, rebuildLockHolder(t, a.dbs.rm.DB, "orders"), "the cancelled rebuild's lock is free")
	r = a.do(http.MethodGet, "/admin/rebuilds/orders", a.admin, nil)
	require.Equal(t, "cancelled", r.Body["phase"], "%s", r)
	var audited int
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM admin_audit WHERE action = 'rebuild.cancel' AND target = 'orders'`).Scan(&audited))
	require.Equal(t, 1, audited, "the cancel is in the audit log")

	// Nothing runs now: a second cancel is the conflict of one that ended.
	r = a.do(http.MethodDelete, "/admin/rebuilds/orders", a.admin, nil)
	require.Equal(t, http.StatusConflict, r.Status, "%s", r)
	require.NoError(t, hold.Rollback())
}

// A start of a rebuild while one runs is refused with 409 on the instance
// that runs it; on another instance (or beside `app rebuild`) it must be
// refused the same way, not answered 202 and recorded as started in the
// audit log, to fail at once in the background and leave that instance's
// GET showing the failed attempt instead of the rebuild that runs.
func TestARebuildStartedWhileAnotherProcessRunsOneIsAConflict(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewSplitDBs(t))
	a.seedOrders(2)
	hold, done := rebuildHeldAtItsSwap(t, a)

	r := a.do(http.MethodPost, "/admin/rebuilds/orders", a.admin, nil)
	requireProblem(t, r, http.StatusConflict, "/problems/conflict")
	require.Contains(t, r.Body["detail"], "already running", "%s", r)
	var started int
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM admin_audit WHERE action = 'rebuild.start'`).Scan(&started))
	require.Zero(t, started, "a start refused is not recorded as started")
	r = a.do(http.MethodGet, "/admin/rebuilds/orders", a.admin, nil)
	require.Equal(t, "swap", r.Body["phase"], "the rebuild that runs, not a refused start: %s", r)

	require.NoError(t, hold.Rollback())
	require.NoError(t, <-done)
	r = a.do(http.MethodGet, "/admin/rebuilds/orders", a.admin, nil)
	require.Equal(t, "done", r.Body["phase"], "%s", r)
}

// rebuildHeldAtItsSwap runs a rebuild of orders beside the instance, as
// another process would (another instance, app rebuild), and holds it at
// its swap with a reader of the live table (hold, rolled back at the end of
// the test at the latest): it is running while the test asks about it.
func rebuildHeldAtItsSwap(t *testing.T, a *api) (hold *sql.Tx, done chan error) {
	t.Helper()
	hold, err := a.dbs.rm.DB.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Rollback() })
	_, err = hold.ExecContext(t.Context(), `LOCK TABLE orders IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	done = make(chan error, 1)
	go func() {
		_, err := readmodel.Rebuild(t.Context(), readmodel.RebuildConfig{Log: a.w.eventLog, Decoders: a.w.vault, DB: a.dbs.rm, Projection: "orders"})
		done <- err
	}()
	require.False(t, pgtest.DoneOrWaiting(t, a.dbs.rm.DB, done), "the swap waits for the reader")
	return hold, done
}

// `app rebuild` beside a rebuild of the same projection that runs (another
// instance's, another app rebuild's) is refused as a conflict and, as the
// admin API's start is, not recorded in the audit log as a rebuild started:
// the log would say two rebuilds ran where one did.
func TestAnAppRebuildRefusedAsAlreadyRunningIsNotRecordedAsStarted(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewSplitDBs(t))
	a.seedOrders(2)
	hold, done := rebuildHeldAtItsSwap(t, a)

	out, err := cli(t.Context(), a.urls(), "rebuild", "orders")
	require.Error(t, err, out)
	require.Contains(t, err.Error(), "already running")
	require.False(t, errors.As(err, new(usageError)), "a failure, not a usage error: %v", err)
	var started int
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM admin_audit WHERE action = 'rebuild.start'`).Scan(&started))
	require.Zero(t, started, "a rebuild refused as already running is not recorded as started")

	require.NoError(t, hold.Rollback())
	require.NoError(t, <-done)
}
