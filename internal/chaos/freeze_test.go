package chaos

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// TestFrozenLeaderWritesNothing freezes the leader of the orders projection
// (SIGSTOP) while one of its projection transactions has a write pending,
// waits until the other worker leads orders and has applied that event
// itself, thaws the old leader (SIGCONT) and proves that nothing the frozen
// leader had pending ever committed: no orders change-log row written under
// its term is newer than the freeze, and the pending event's row carries
// the new term.
//
// The pending write is made deterministic by holding the orders table
// locked while the event is applied: the leader's transaction has then
// checked its term (and holds the term row FOR SHARE) and waits to lock the
// order's row. (A table lock, because a row lock would give the test's
// transaction an id, and an open transaction id hides every later event from
// the subscribers: see pg_snapshot_xmin in the architecture notes.)
func TestFrozenLeaderWritesNothing(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, pgtest.NewDB(t), 2)
	leads := w.settledSpread()
	old, oldTerm := leads["orders"].proc, leads["orders"].term
	var standby *proc
	for _, p := range w.workers {
		if p != old {
			standby = p
		}
	}

	id := w.createOrder()
	changeRow := func(version int) (term int64, ok bool) {
		err := w.rm.DB.QueryRow(`SELECT coalesce(term, 0) FROM change_log WHERE aggregate_id = $1 AND version = $2`, id, version).Scan(&term)
		return term, err == nil
	}
	require.Eventually(t, func() bool { _, ok := changeRow(1); return ok }, 30*time.Second, 5*time.Millisecond)

	// Hold the table; the leader's transaction for version 2 waits on it.
	conn, err := w.rm.DB.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	var holder int
	_, err = tx.Exec(`LOCK TABLE orders IN EXCLUSIVE MODE`) // reads go on, row locks wait
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(`SELECT pg_backend_pid()`).Scan(&holder))
	status, err := w.patchNotes(id, "written while the leader froze")
	require.NoError(t, err)
	require.Equal(t, 200, status)
	require.Eventually(t, func() bool {
		var waiting bool
		err := w.rm.DB.QueryRow(`SELECT EXISTS (SELECT FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, holder).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 5*time.Millisecond, "the leader's projection transaction waits on the table lock")

	old.signal(t, syscall.SIGSTOP)
	frozen := time.Now()
	t.Cleanup(func() { _ = old.cmd.Process.Signal(syscall.SIGCONT) })
	// The signal stops the process some time after kill returns (see
	// stopped): until every thread has stopped, the old leader may still
	// commit the pending write under its own term, rightly, so the write is
	// let go, and the newest change-log row read, only once it has.
	require.Eventually(t, old.stopped, 10*time.Second, time.Millisecond, "every thread of the old leader stops")
	before := w.maxChangeID()
	// Let the pending transaction go on: on the server it locks the row and
	// then waits, idle, for a client that no longer runs.
	require.NoError(t, tx.Rollback())

	require.Eventually(t, func() bool {
		r, ok := standby.ready()
		return ok && r.Leads["orders"] > oldTerm
	}, time.Minute, 10*time.Millisecond, "the other worker leads orders while the old leader is frozen")
	require.Eventually(t, func() bool { _, ok := changeRow(2); return ok }, time.Minute, 5*time.Millisecond, "the new leader applies the pending event")
	t.Logf("frozen leader (term %d): the standby applied its pending event %v after the freeze", oldTerm, time.Since(frozen).Round(time.Millisecond))
	newTerm, _ := changeRow(2)
	require.Greater(t, newTerm, oldTerm, "the pending event was applied under the new term")

	old.signal(t, syscall.SIGCONT)
	require.Eventually(t, func() bool {
		r, ok := old.ready()
		_, leads := r.Leads["orders"]
		return ok && !leads
	}, time.Minute, 10*time.Millisecond, "the thawed leader steps down from orders")
	// More events, so a stale write, if any were possible, would have had
	// its chance.
	for i := range 5 {
		status, err := w.patchNotes(id, fmt.Sprint("after the thaw ", i))
		require.NoError(t, err)
		require.Equal(t, 200, status)
	}
	w.checkExactlyOnce()

	var stale int
	require.NoError(t, w.rm.DB.QueryRow(`SELECT count(*) FROM change_log WHERE id > $1 AND aggregate_type = $2 AND (term IS NULL OR term <= $3)`,
		before, aggregateType("orders"), oldTerm).Scan(&stale))
	require.Zero(t, stale, "no orders change-log row of the frozen leader's term committed after the freeze")
	term, _ := changeRow(2)
	require.Equal(t, newTerm, term)
	require.False(t, old.exited(), "the thawed leader keeps running, as a standby")
}
