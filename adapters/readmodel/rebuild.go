package readmodel

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"hearth/app/ops"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/internal/advisory"
	"hearth/internal/aggregates"
)

// RebuildConfig is what Rebuild needs.
type RebuildConfig struct {
	// Log reads the event store (pubsub.EventLog). Required.
	Log EventLog
	// Decoders open the events' sealed fields (the vault). Default:
	// aggregates.Plain, which leaves them sealed.
	Decoders aggregates.Decoders
	// DB is the read-model database. Required.
	DB *bun.DB
	// Projection names the projection to rebuild. Required.
	Projection string
	// Progress, when set, is called with the progress at most twice a
	// second and at every change of phase.
	Progress func(ops.RebuildProgress)
	// BatchSize is how many rows go into one insert. Defaults to 1000.
	BatchSize int
	// LockTimeout bounds the wait for the live table's lock at the swap.
	// Defaults to 30s.
	LockTimeout time.Duration
}

// Rebuild rebuilds one projection's table from the start of the event log
// without downtime:
//
//  1. fold: every stream is folded from the events table into a shadow
//     table (<table>_rebuild), while the live table keeps serving reads and
//     the live projection keeps applying events to it;
//  2. catch up: the shadow rows are brought to exactly the versions the live
//     projection has applied, as its change log records them (the highest
//     change-log version of each aggregate): rows of streams that moved on
//     are folded again, rows the live projection has not created yet are
//     dropped, so that the live projection, which continues from its own
//     offset, applies every later event (and writes its change-log row)
//     itself; rows that show fields the live row reads as erased are folded
//     again too (see behind);
//  3. swap: in one read-model transaction, the live table is locked in
//     EXCLUSIVE mode (reads go on; the live projection's next write waits),
//     the last differences are caught up, the shadow table takes the live
//     table's name and index names, and the old table is dropped.
//
// Renaming is not MVCC-safe: a transaction that reads under a snapshot
// taken before the swap committed (REPEATABLE READ) finds the new table
// under the old name, without the rows written after its snapshot, that
// is, empty. Such a reader locks the tables first (lockAgainstSwaps), as
// the customer's export does.
//
// The change log is the history of what the live projection applied; a
// rebuild never writes it, so no change-log row is ever written twice.
// Cancelling ctx drops the shadow table and leaves the live table as it
// was. Two rebuilds of one projection never run at once (an advisory lock
// on the read-model database, held by the connection every statement of
// the rebuild runs on: a rebuild whose connection ends stops).
func Rebuild(ctx context.Context, cfg RebuildConfig) (ops.RebuildProgress, error) {
	if cfg.Log == nil || cfg.DB == nil {
		return ops.RebuildProgress{}, errors.New("readmodel.Rebuild: Log and DB are required")
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 1000)
	cfg.LockTimeout = cmp.Or(cfg.LockTimeout, 30*time.Second)
	ts, err := selectTargets([]string{cfg.Projection})
	if err != nil {
		return ops.RebuildProgress{}, apperr.Invalid("projection", "%v", err)
	}
	// Microseconds, as Postgres keeps them: the rebuild's row in rebuilds
	// is found again by its start.
	rb := &rebuilder{cfg: cfg, p: ops.RebuildProgress{Projection: cfg.Projection, Phase: "fold", StartedAt: time.Now().UTC().Truncate(time.Microsecond)}}
	err = ts[0].rebuild(ctx, rb)
	rb.finish(ctx, err)
	if err != nil {
		return rb.p, fmt.Errorf("rebuild %s: %w", cfg.Projection, err)
	}
	return rb.p, nil
}

type rebuilder struct {
	cfg  RebuildConfig
	p    ops.RebuildProgress
	last time.Time
	// recorded says the rebuild has its row in rebuilds (it took the
	// lock); written is when the row was last written.
	recorded bool
	written  time.Time
}

// recordEvery is how often a running rebuild writes its progress to its
// row in rebuilds between changes of phase.
const recordEvery = 5 * time.Second

// finish sets the rebuild's outcome from err (done, cancelled or failed)
// and reports it, once: inside rebuild while it still holds its lock, so
// that its row never reads as running with the lock free; here when it
// never took it.
func (rb *rebuilder) finish(ctx context.Context, err error) {
	if !rb.p.FinishedAt.IsZero() {
		return
	}
	rb.p.FinishedAt = time.Now().UTC()
	switch {
	case err == nil:
		rb.p.Phase, rb.p.ETA = "done", ""
	case ctx.Err() != nil:
		rb.p.Phase, rb.p.Error = "cancelled", err.Error()
	default:
		rb.p.Phase, rb.p.Error = "failed", err.Error()
	}
	rb.report(true)
}

// begin writes the rebuild's row in rebuilds on conn, which holds its lock:
// the projection's latest rebuild is this one.
func (rb *rebuilder) begin(ctx context.Context, conn bun.Conn) error {
	p := rb.p
	if _, err := conn.ExecContext(ctx, `INSERT INTO rebuilds (projection, phase, events, total, "rows", rate, started_at, error)
		VALUES (?, ?, 0, 0, 0, 0, ?, '')
		ON CONFLICT (projection) DO UPDATE SET phase = excluded.phase, events = 0, total = 0, "rows" = 0, rate = 0,
			started_at = excluded.started_at, finished_at = NULL, error = '', updated_at = now(), cancel_requested_at = NULL`,
		p.Projection, p.Phase, p.StartedAt); err != nil {
		return fmt.Errorf("record the rebuild of %s: %w", p.Projection, err)
	}
	rb.recorded, rb.written = true, time.Now()
	return nil
}

// record writes the progress to the rebuild's row, unless a later rebuild
// has taken the row (its lock was lost). The row only informs: a failed
// write leaves it as it was and the rebuild goes on, its caller learns its
// outcome from its result.
func (rb *rebuilder) record() {
	if !rb.recorded {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p := rb.p
	var finished *time.Time
	if !p.FinishedAt.IsZero() {
		finished = &p.FinishedAt
	}
	_, _ = rb.cfg.DB.ExecContext(ctx, `UPDATE rebuilds SET phase = ?, events = ?, total = ?, "rows" = ?, rate = ?, finished_at = ?,
		error = ?, updated_at = now() WHERE projection = ? AND started_at = ?`,
		p.Phase, p.Events, p.Total, p.Rows, p.Rate, finished, p.Error, p.Projection, p.StartedAt)
	rb.written = time.Now()
}

// cancelPollEvery is how often a running rebuild reads whether a cancel
// was asked for through its row in rebuilds.
const cancelPollEvery = 500 * time.Millisecond

// watchCancel returns ctx, also cancelled (ops.ErrRebuildCancelAsked) once the
// rebuild's row says a cancel was asked for, and the func that stops the
// watch. A failed read is tried again at the next tick: the row only
// carries the request, and the rebuild goes on meanwhile.
func (rb *rebuilder) watchCancel(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	projection, started := rb.p.Projection, rb.p.StartedAt
	stop := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(cancelPollEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Bounded: the pool may have no connection to spare for a
			// while (the rebuild holds one of its own).
			qctx, qcancel := context.WithTimeout(ctx, recordEvery)
			var asked bool
			err := rb.cfg.DB.QueryRowContext(qctx, `SELECT cancel_requested_at IS NOT NULL FROM rebuilds WHERE projection = ? AND started_at = ?`,
				projection, started).Scan(&asked)
			qcancel()
			if err == nil && asked {
				cancel(ops.ErrRebuildCancelAsked)
				return
			}
		}
	}()
	return ctx, func() {
		// The rebuild has ended (and recorded how): ending ctx first
		// also ends a look waiting for a connection.
		cancel(nil)
		close(stop)
		<-ended
	}
}

// shadowOf is the name of the shadow table a rebuild of table folds into.
func shadowOf(table string) string { return table + "_rebuild" }

// leftoverShadowSQL says whether the shadow table $1 of the projection
// whose rebuild lock is $2 is one no rebuild holds: left behind by a
// rebuild whose process died (its deferred drop never ran). When it is, the
// lock stays held to the end of the transaction, so no rebuild starts (and
// creates the table again) before the caller has dropped it; a rebuild that
// holds the lock keeps its table, and its catch-up applies what came since.
const leftoverShadowSQL = `SELECT CASE WHEN to_regclass($1) IS NULL THEN false ELSE pg_try_advisory_xact_lock($2) END`

func (rb *rebuilder) phase(name string) {
	rb.p.Phase = name
	rb.report(true)
}

func (rb *rebuilder) report(force bool) {
	if rb.recorded && (force || time.Since(rb.written) >= recordEvery) {
		defer rb.record()
	}
	if rb.cfg.Progress == nil || (!force && time.Since(rb.last) < 500*time.Millisecond) {
		return
	}
	rb.last = time.Now()
	elapsed := time.Since(rb.p.StartedAt).Seconds()
	if elapsed > 0 {
		rb.p.Rate = float64(rb.p.Events) / elapsed
	}
	rb.p.ETA = ""
	if rb.p.Phase == "fold" && rb.p.Rate > 0 && rb.p.Total >= rb.p.Events {
		rb.p.ETA = (time.Duration(float64(rb.p.Total-rb.p.Events)/rb.p.Rate*float64(time.Second)) + time.Second/2).Truncate(time.Second).String()
	}
	rb.cfg.Progress(rb.p)
}

func (t *table[V, PV, R]) rebuild(ctx context.Context, rb *rebuilder) (err error) {
	// Every statement of the rebuild on the read models runs on the
	// connection that holds its lock: the lock is that session's and ends
	// with it (pg_terminate_backend, idle_session_timeout, a proxy's
	// timeout), after which another rebuild may start and drop the shadow
	// table, and an erasure takes it for one left behind. On the lock's own
	// connection the rebuild's next statement fails instead, and nothing is
	// swapped without the lock.
	conn, err := rb.cfg.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var locked bool
	var holder lockSession
	lockKey := advisory.Key(advisory.Rebuild(t.agg.Projection))
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock(?), pg_backend_pid(), backend_start
		FROM pg_stat_activity WHERE pid = pg_backend_pid()`, lockKey).Scan(&locked, &holder.pid, &holder.start); err != nil {
		return fmt.Errorf("rebuild lock: %w", err)
	}
	if !locked {
		return &apperr.ConflictError{Detail: "a rebuild of " + t.agg.Projection + " is already running"}
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(cctx, `SELECT pg_advisory_unlock(?)`, lockKey)
	}()
	if err := rb.begin(ctx, conn); err != nil {
		return err
	}
	// From here ctx also ends when another process asks for the cancel
	// through the read models (Maintenance.Cancel); every deferred call
	// below reads this ctx, so such a cancel is cleaned up, and recorded,
	// as its own caller's would be. It stops after them.
	ctx, stopWatching := rb.watchCancel(ctx)
	defer stopWatching()
	// Its outcome is recorded before the lock goes (the deferred calls run
	// last first: after the shadow table's drop, before the unlock).
	defer func() {
		if cause := context.Cause(ctx); err != nil && errors.Is(cause, ops.ErrRebuildCancelAsked) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		rb.finish(ctx, err)
	}()

	shadow := shadowOf(t.agg.Table)
	swapped := false
	defer func() {
		if swapped {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if derr := dropShadow(cctx, conn, rb.cfg.DB, holder, shadow, lockKey); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	defer func() {
		if err == nil || ctx.Err() != nil { // cancelled: pgx cancels a statement by closing its connection
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if perr := conn.PingContext(cctx); perr != nil {
			err = fmt.Errorf("lost its lock (its connection to the read models ended), so it stopped; run it again: %w", err)
		}
	}()
	if _, err := conn.ExecContext(ctx, `DROP TABLE IF EXISTS ?`, bun.Ident(shadow)); err != nil {
		return fmt.Errorf("drop %s: %w", shadow, err)
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE ? (LIKE ? INCLUDING ALL)`, bun.Ident(shadow), bun.Ident(t.agg.Table)); err != nil {
		return fmt.Errorf("create %s: %w", shadow, err)
	}
	var shadowID uint32
	if err := conn.QueryRowContext(ctx, `SELECT to_regclass(?)::oid`, shadow).Scan(&shadowID); err != nil {
		return fmt.Errorf("create %s: %w", shadow, err)
	}

	// 1. Fold every stream into the shadow table.
	if rb.p.Total, err = rb.cfg.Log.Count(ctx, t.agg.Type); err != nil {
		return err
	}
	rb.report(true)
	var batch []R
	insert := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := conn.NewInsert().Model(&batch).ModelTableExpr("?", bun.Ident(shadow)).Exec(ctx); err != nil {
			return fmt.Errorf("insert into %s: %w", shadow, err)
		}
		rb.p.Rows += int64(len(batch))
		batch = batch[:0]
		return nil
	}
	err = rb.cfg.Log.Scan(ctx, t.agg.Projection, t.agg.Type, unreadable(aggregates.Or(rb.cfg.Decoders).Decoder(t.agg)), func(stream []event.Recorded) error {
		one := map[string][]event.Recorded{stream[0].StreamID: stream}
		if err := readErased(ctx, rb.cfg.Log, rb.cfg.Decoders, t.agg, unreadable, one); err != nil {
			return err
		}
		rb.p.Events += int64(len(one[stream[0].StreamID]))
		stream = readable(one[stream[0].StreamID])
		if len(stream) == 0 {
			// Its first event does not read: the live projection has no
			// row either, or (its change log says so) the catch-up below
			// stops, naming the event.
			rb.report(false)
			return nil
		}
		v, err := t.fold(stream, 0)
		if err != nil {
			return err
		}
		batch = append(batch, t.toRow(v))
		rb.report(false)
		if len(batch) >= rb.cfg.BatchSize {
			return insert()
		}
		return nil
	})
	if err == nil {
		err = insert()
	}
	if err != nil {
		return err
	}

	// 2. Catch up with the live projection while it keeps running.
	rb.phase("catch_up")
	for range 5 {
		behind, err := t.behind(ctx, conn, shadow)
		if err != nil {
			return err
		}
		if len(behind) == 0 {
			break
		}
		if err := t.reconcile(ctx, conn, rb, shadow, behind); err != nil {
			return err
		}
		if len(behind) < 100 {
			break
		}
	}

	// 3. Swap in one transaction.
	rb.phase("swap")
	err = conn.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.ExecContext(ctx, `SET LOCAL lock_timeout = ?`, fmt.Sprintf("%dms", rb.cfg.LockTimeout.Milliseconds())); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `LOCK TABLE ? IN EXCLUSIVE MODE`, bun.Ident(t.agg.Table)); err != nil {
			return fmt.Errorf("lock %s: %w", t.agg.Table, err)
		}
		behind, err := t.behind(ctx, tx, shadow)
		if err != nil {
			return err
		}
		if err := t.reconcile(ctx, tx, rb, shadow, behind); err != nil {
			return err
		}
		return swapTables(ctx, tx, t.agg.Table, shadow)
	})
	if err != nil {
		// A COMMIT whose answer was lost (its connection ended, or closed
		// by a cancel, as pgx cancels) may have committed all the same: the
		// shadow table is the live one then, and the rebuild is done.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if done, serr := swappedAnyway(cctx, conn, rb.cfg.DB, holder, t.agg.Table, shadowID); serr != nil || !done {
			return errors.Join(err, serr)
		}
	}
	swapped = true
	return nil
}

// swappedAnyway reports whether a swap whose COMMIT failed committed all
// the same: only when its connection has ended (an answer from the server
// is the truth), once its session has ended too, by whether live is the
// table that was the shadow (by oid).
func swappedAnyway(ctx context.Context, conn bun.Conn, db *bun.DB, holder lockSession, live string, shadowID uint32) (bool, error) {
	if conn.PingContext(ctx) == nil {
		return false, nil
	}
	if err := endSession(ctx, db, holder); err != nil {
		return false, err
	}
	var now uint32
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(to_regclass(?)::oid, 0)`, live).Scan(&now); err != nil {
		return false, fmt.Errorf("see whether %s was swapped: %w", live, err)
	}
	return now == shadowID, nil
}

// endSession waits for the session of the rebuild's lock to end on the
// server once its connection has ended: pgx, cancelling a statement,
// closes the connection and sends a cancel request, and the session ends
// once its statement has answered it (a COMMIT under way may still
// commit). One still there after a few seconds is terminated.
func endSession(ctx context.Context, db *bun.DB, holder lockSession) error {
	const gone = `SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = ? AND backend_start = ?)`
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var ended bool
		if err := db.QueryRowContext(ctx, gone, holder.pid, holder.start).Scan(&ended); err != nil {
			return fmt.Errorf("wait for the rebuild's session to end: %w", err)
		}
		if ended {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := db.ExecContext(ctx, `SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE pid = ? AND backend_start = ?`,
		holder.pid, holder.start); err != nil {
		return fmt.Errorf("end the rebuild's session: %w", err)
	}
	return nil
}

// lockSession is the session that holds a rebuild's lock: its backend's
// pid and start, which tell it from a later backend given the same pid.
type lockSession struct {
	pid   int
	start time.Time
}

// dropShadow drops the shadow table of a rebuild that did not swap: on the
// connection that holds the rebuild lock (key) while it lives. Once that
// has ended, its session, and the lock with it, may live on until the
// statement it was running ends: the table is dropped through db once that
// session has ended (endSession), unless a rebuild holds the lock, one
// started since, which owns the table now.
func dropShadow(ctx context.Context, conn bun.Conn, db *bun.DB, holder lockSession, shadow string, key int64) error {
	if _, err := conn.ExecContext(ctx, `DROP TABLE IF EXISTS ?`, bun.Ident(shadow)); err == nil {
		return nil
	}
	if err := endSession(ctx, db, holder); err != nil {
		return fmt.Errorf("drop %s: %w", shadow, err)
	}
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var leftover bool
		if err := tx.Tx.QueryRowContext(ctx, leftoverShadowSQL, shadow, key).Scan(&leftover); err != nil {
			return fmt.Errorf("drop %s: %w", shadow, err)
		}
		if !leftover {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS ?`, bun.Ident(shadow)); err != nil {
			return fmt.Errorf("drop %s: %w", shadow, err)
		}
		return nil
	})
}

// behind returns the aggregates whose shadow row is not at the version the
// live projection has applied (0: not applied at all), from the change log,
// and those whose live row reads fields as erased that their shadow row
// shows (at the version they have): the erasure of a parked aggregate
// (ForgetParked) rewrites its row without moving its version, so a shadow
// row caught up before it, folded while the key still opened, would
// otherwise be swapped in with the erased text.
func (t *table[V, PV, R]) behind(ctx context.Context, db bun.IDB, shadow string) (map[string]int, error) {
	out, err := t.behindChangeLog(ctx, db, shadow)
	if err != nil {
		return nil, err
	}
	var erasable bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = ? AND column_name = 'erased')`, t.agg.Table).Scan(&erasable); err != nil {
		return nil, fmt.Errorf("columns of %s: %w", t.agg.Table, err)
	}
	if !erasable {
		return out, nil
	}
	rows, err := db.QueryContext(ctx, `SELECT s.id::text, s.version FROM ? s JOIN ? l ON l.id = s.id WHERE l.erased IS DISTINCT FROM s.erased`,
		bun.Ident(shadow), bun.Ident(t.agg.Table))
	if err != nil {
		return nil, fmt.Errorf("compare the erased fields of %s with %s: %w", shadow, t.agg.Table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var v int
		if err := rows.Scan(&id, &v); err != nil {
			return nil, err
		}
		if _, ok := out[id]; !ok {
			out[id] = v
		}
	}
	return out, rows.Err()
}

// behindChangeLog is behind's comparison with the change log.
func (t *table[V, PV, R]) behindChangeLog(ctx context.Context, db bun.IDB, shadow string) (map[string]int, error) {
	rows, err := db.QueryContext(ctx, `
		SELECT COALESCE(c.id, s.id)::text, COALESCE(c.v, 0)
		FROM (SELECT aggregate_id AS id, max(version) AS v FROM change_log WHERE aggregate_type = ? GROUP BY aggregate_id) c
		FULL JOIN ? s ON s.id = c.id
		WHERE c.v IS DISTINCT FROM s.version`, t.agg.Type, bun.Ident(shadow))
	if err != nil {
		return nil, fmt.Errorf("compare %s with the change log: %w", shadow, err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var v int
		if err := rows.Scan(&id, &v); err != nil {
			return nil, err
		}
		out[id] = v
	}
	return out, rows.Err()
}

// reconcile sets the shadow rows of the given aggregates to the fold of
// their events up to the given version (0 removes the row).
func (t *table[V, PV, R]) reconcile(ctx context.Context, db bun.IDB, rb *rebuilder, shadow string, versions map[string]int) error {
	for batch := range slices.Chunk(slices.Collect(maps.Keys(versions)), rb.cfg.BatchSize) {
		streams, err := rb.cfg.Log.Streams(ctx, t.agg.Projection, t.agg.Type, unreadable(aggregates.Or(rb.cfg.Decoders).Decoder(t.agg)), batch)
		if err != nil {
			return err
		}
		if err := readErased(ctx, rb.cfg.Log, rb.cfg.Decoders, t.agg, unreadable, streams); err != nil {
			return err
		}
		var rows []R
		for _, id := range batch {
			v := versions[id]
			if v == 0 {
				continue
			}
			stream := streams[id]
			if len(stream) < v {
				return fmt.Errorf("%s %s: the change log has version %d, the event log only %d events", t.agg.Type, id, v, len(stream))
			}
			view, err := t.fold(stream, v)
			if err != nil {
				return err
			}
			rows = append(rows, t.toRow(view))
			rb.p.Events += int64(v)
		}
		if _, err := db.NewDelete().TableExpr("?", bun.Ident(shadow)).Where("id IN (?)", bun.In(batch)).Exec(ctx); err != nil {
			return fmt.Errorf("catch up %s: %w", shadow, err)
		}
		if len(rows) > 0 {
			if _, err := db.NewInsert().Model(&rows).ModelTableExpr("?", bun.Ident(shadow)).Exec(ctx); err != nil {
				return fmt.Errorf("catch up %s: %w", shadow, err)
			}
		}
		rb.report(false)
	}
	return nil
}

// swapTables puts shadow in live's place, with live's index names, and
// drops the old table.
func swapTables(ctx context.Context, tx bun.Tx, live, shadow string) error {
	indexes := func(table string) (map[string]string, error) {
		rows, err := tx.QueryContext(ctx, `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = ?`, table)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[string]string{} // definition without names -> index name
		for rows.Next() {
			var name, def string
			if err := rows.Scan(&name, &def); err != nil {
				return nil, err
			}
			unique := strings.HasPrefix(def, "CREATE UNIQUE")
			_, using, _ := strings.Cut(def, " USING ")
			out[fmt.Sprint(unique, using)] = name
		}
		return out, rows.Err()
	}
	oldIdx, err := indexes(live)
	if err != nil {
		return fmt.Errorf("read indexes of %s: %w", live, err)
	}
	newIdx, err := indexes(shadow)
	if err != nil {
		return fmt.Errorf("read indexes of %s: %w", shadow, err)
	}
	old := live + "_replaced"
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`DROP TABLE IF EXISTS ?`, []any{bun.Ident(old)}},
		{`ALTER TABLE ? RENAME TO ?`, []any{bun.Ident(live), bun.Ident(old)}},
		{`ALTER TABLE ? RENAME TO ?`, []any{bun.Ident(shadow), bun.Ident(live)}},
		{`DROP TABLE ?`, []any{bun.Ident(old)}},
	} {
		if _, err := tx.ExecContext(ctx, q.sql, q.args...); err != nil {
			return fmt.Errorf("swap %s: %w", live, err)
		}
	}
	for def, name := range newIdx {
		want, ok := oldIdx[def]
		if !ok || want == name {
			continue
		}
		if _, err := tx.ExecContext(ctx, `ALTER INDEX ? RENAME TO ?`, bun.Ident(name), bun.Ident(want)); err != nil {
			return fmt.Errorf("rename index %s: %w", name, err)
		}
	}
	return nil
}

// Maintenance is the operator's work on the read models (ops.Rebuilds,
// ops.Verifier): rebuilds, in the background (the admin API: one at a time
// per projection and process; the advisory lock also keeps other processes
// out) or in the foreground (the CLI), and verification.
type Maintenance struct {
	log  EventLog
	dec  aggregates.Decoders
	db   *bun.DB
	mu   sync.Mutex
	runs map[string]*rebuildRun
}

type rebuildRun struct {
	cancel   context.CancelFunc
	done     chan struct{}
	progress ops.RebuildProgress
}

// NewMaintenance returns the operator's work on the read-model database
// db, reading the event store through log.
func NewMaintenance(log EventLog, dec aggregates.Decoders, db *bun.DB) (*Maintenance, error) {
	if log == nil || db == nil {
		return nil, errors.New("readmodel.NewMaintenance: nil dependency")
	}
	return &Maintenance{log: log, dec: aggregates.Or(dec), db: db, runs: map[string]*rebuildRun{}}, nil
}

// Run rebuilds projection in the foreground (see Rebuild) until it is done
// or ctx ends; progress, when set, is called as Rebuild says.
func (r *Maintenance) Run(ctx context.Context, projection string, progress func(ops.RebuildProgress)) (ops.RebuildProgress, error) {
	return Rebuild(ctx, RebuildConfig{Log: r.log, Decoders: r.dec, DB: r.db, Projection: projection, Progress: progress})
}

// Running reports whether a rebuild of projection runs now: this
// process's, or another's that holds its lock.
func (r *Maintenance) Running(ctx context.Context, projection string) (bool, error) {
	r.mu.Lock()
	run, ok := r.runs[projection]
	r.mu.Unlock()
	if ok {
		select {
		case <-run.done:
		default:
			return true, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return rebuildLockHeld(ctx, r.db, projection)
}

// Verify verifies the read models (see Verify).
func (r *Maintenance) Verify(ctx context.Context, v ops.Verification) (ops.VerifyReport, error) {
	return Verify(ctx, VerifyConfig{Log: r.log, Decoders: r.dec, DB: r.db, Verification: v})
}

// Start starts a rebuild of projection in the background and returns its
// first progress. A rebuild of it already running is a conflict.
func (r *Maintenance) Start(projection string) (ops.RebuildProgress, error) {
	if _, err := selectTargets([]string{projection}); err != nil {
		return ops.RebuildProgress{}, apperr.Invalid("projection", "%v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if run, ok := r.runs[projection]; ok {
		select {
		case <-run.done:
		default:
			return ops.RebuildProgress{}, &apperr.ConflictError{Detail: "a rebuild of " + projection + " is already running"}
		}
	}
	// One that another process runs holds the rebuild lock: refused here
	// as on its instance, rather than accepted and recorded as started to
	// fail at once in the background. A start that takes the lock between
	// this look and the run's still fails so, and its status says why.
	lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer lcancel()
	if held, err := rebuildLockHeld(lctx, r.db, projection); err != nil {
		return ops.RebuildProgress{}, err
	} else if held {
		return ops.RebuildProgress{}, &apperr.ConflictError{Detail: "a rebuild of " + projection + " is already running (in another instance or app rebuild)"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &rebuildRun{cancel: cancel, done: make(chan struct{}),
		progress: ops.RebuildProgress{Projection: projection, Phase: "fold", StartedAt: time.Now().UTC()}}
	r.runs[projection] = run
	go func() {
		defer close(run.done)
		defer cancel()
		p, _ := r.Run(ctx, projection, func(p ops.RebuildProgress) {
			r.mu.Lock()
			run.progress = p
			r.mu.Unlock()
		})
		r.mu.Lock()
		run.progress = p
		r.mu.Unlock()
	}()
	return run.progress, nil
}

// Status returns the progress of the projection's latest rebuild: this
// process's while it runs; else the latest of this process's last one and
// the one recorded in the read models (rebuilds) by whatever ran it
// (another instance, one since restarted, the CLI); apperr.ErrNotFound
// when there is none.
func (r *Maintenance) Status(projection string) (ops.RebuildProgress, error) {
	r.mu.Lock()
	run, ok := r.runs[projection]
	var mine ops.RebuildProgress
	running := false
	if ok {
		mine = run.progress
		select {
		case <-run.done:
		default:
			running = true
		}
	}
	r.mu.Unlock()
	if running {
		return mine, nil
	}
	if _, err := selectTargets([]string{projection}); err != nil {
		return ops.RebuildProgress{}, apperr.Invalid("projection", "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, err := recordedRebuild(ctx, r.db, projection)
	switch {
	case ok && (err != nil || !rec.StartedAt.After(mine.StartedAt)):
		return mine, nil // a start that never took the lock (a conflict) records nothing
	case err != nil:
		return ops.RebuildProgress{}, err
	}
	return rec, nil
}

// rebuildLockHeldSQL is true when a session holds the rebuild lock whose
// key's high and low halves are its two parameters (pg_locks shows a
// bigint key so).
const rebuildLockHeldSQL = `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND classid = ? AND objid = ?
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// rebuildLockHeld reports whether a session holds the projection's
// rebuild lock: a rebuild of it runs, whichever process runs it.
func rebuildLockHeld(ctx context.Context, db *bun.DB, projection string) (bool, error) {
	key := uint64(advisory.Key(advisory.Rebuild(projection)))
	var held bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (`+rebuildLockHeldSQL+`)`, int64(key>>32), int64(key&0xffffffff)).Scan(&held); err != nil {
		return false, fmt.Errorf("look for a running rebuild of %s: %w", projection, err)
	}
	return held, nil
}

// recordedRebuild reads the projection's latest rebuild from rebuilds. One
// in a running phase whose rebuild lock no session holds (pg_locks shows a
// bigint key as its high and low halves) was stopped with its process (kill
// -9, a lost machine), which could not record it: it reads as failed.
func recordedRebuild(ctx context.Context, db *bun.DB, projection string) (ops.RebuildProgress, error) {
	p := ops.RebuildProgress{Projection: projection}
	var finished sql.NullTime
	var updated time.Time
	key := uint64(advisory.Key(advisory.Rebuild(projection)))
	var held bool
	err := db.QueryRowContext(ctx, `SELECT phase, events, total, "rows", rate, started_at, finished_at, error, updated_at,
		EXISTS (`+rebuildLockHeldSQL+`)
		FROM rebuilds WHERE projection = ?`, int64(key>>32), int64(key&0xffffffff), projection).
		Scan(&p.Phase, &p.Events, &p.Total, &p.Rows, &p.Rate, &p.StartedAt, &finished, &p.Error, &updated, &held)
	if errors.Is(err, sql.ErrNoRows) {
		return ops.RebuildProgress{}, apperr.ErrNotFound
	}
	if err != nil {
		return ops.RebuildProgress{}, fmt.Errorf("read the rebuild of %s: %w", projection, err)
	}
	p.StartedAt, p.FinishedAt = p.StartedAt.UTC(), finished.Time.UTC()
	if !finished.Valid {
		p.FinishedAt = time.Time{}
	}
	if running := p.FinishedAt.IsZero(); running && !held {
		p.Error = fmt.Sprintf("interrupted: the process that ran it ended during its %s phase, before it finished; "+
			"run it again (the next rebuild drops the shadow table it left)", p.Phase)
		p.Phase, p.FinishedAt = "failed", updated.UTC()
	}
	return p, nil
}

// Cancel cancels the projection's running rebuild, waits for it to clean
// up and returns its last progress. A rebuild that had ended (done,
// failed, cancelled before), or that finished before the cancel reached
// it, is a conflict: nothing was cancelled. One that another process runs
// (another instance, `app rebuild`) is asked through its row in rebuilds
// (cancelElsewhere).
func (r *Maintenance) Cancel(ctx context.Context, projection string) (ops.RebuildProgress, error) {
	r.mu.Lock()
	run, ok := r.runs[projection]
	r.mu.Unlock()
	running := ok
	if ok {
		select {
		case <-run.done:
			running = false
		default:
		}
	}
	if !running {
		return r.cancelElsewhere(ctx, projection)
	}
	run.cancel()
	select {
	case <-run.done:
	case <-ctx.Done():
		return ops.RebuildProgress{}, ctx.Err()
	}
	p, err := r.Status(projection)
	if err == nil && p.Phase != "cancelled" {
		return ops.RebuildProgress{}, r.notRunning(projection)
	}
	return p, err
}

// remoteCancelWait bounds how long a cancel asked through the read models
// waits for the rebuild to stop: it reads the request within
// cancelPollEvery, and its clean-up is bounded (dropShadow's 10 s).
const remoteCancelWait = 30 * time.Second

// cancelElsewhere asks the running rebuild of projection that another
// process runs to stop, through its row in rebuilds (the rebuild reads it:
// watchCancel), and waits until its row says it ended. Only a row in a
// running phase whose rebuild lock is held is asked: one whose process
// died is no rebuild to cancel. None recorded is apperr.ErrNotFound, one
// that has ended (or ends otherwise meanwhile) a conflict, as on the
// instance that runs it. A rebuild that does not stop in time (run by an
// instance of the previous release, which does not read the request) is a
// conflict saying so; the request stays on its row.
func (r *Maintenance) cancelElsewhere(ctx context.Context, projection string) (ops.RebuildProgress, error) {
	if _, err := selectTargets([]string{projection}); err != nil {
		return ops.RebuildProgress{}, apperr.Invalid("projection", "%v", err)
	}
	key := uint64(advisory.Key(advisory.Rebuild(projection)))
	var started time.Time
	err := r.db.QueryRowContext(ctx, `UPDATE rebuilds SET cancel_requested_at = coalesce(cancel_requested_at, now())
		WHERE projection = ? AND finished_at IS NULL AND EXISTS (`+rebuildLockHeldSQL+`)
		RETURNING started_at`, projection, int64(key>>32), int64(key&0xffffffff)).Scan(&started)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		held, err := rebuildLockHeld(ctx, r.db, projection)
		if err != nil {
			return ops.RebuildProgress{}, fmt.Errorf("ask for the cancel of the rebuild of %s: %w", projection, err)
		}
		if held {
			// Its lock is held, and no running rebuild is recorded: an
			// instance of a release before the rebuilds table runs it.
			return ops.RebuildProgress{}, &apperr.ConflictError{Detail: fmt.Sprintf(
				"a rebuild of %s runs that records nothing (an instance of an earlier release runs it): cancel it on that instance", projection)}
		}
		if _, err := recordedRebuild(ctx, r.db, projection); err != nil {
			return ops.RebuildProgress{}, err
		}
		return ops.RebuildProgress{}, r.notRunning(projection)
	case err != nil:
		return ops.RebuildProgress{}, fmt.Errorf("ask for the cancel of the rebuild of %s: %w", projection, err)
	}
	// Within the caller's own deadline (a request's HTTP_WRITE_TIMEOUT),
	// so that the answer can still be given.
	limit := remoteCancelWait
	if d, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(d)*9/10)
	}
	wait, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		// The row's own end, not recordedRebuild's reading of it: a
		// cancelled rebuild ends its lock session while it cleans up,
		// before it records that it was cancelled, and meanwhile its row
		// reads as interrupted.
		var now time.Time
		var finished bool
		err := r.db.QueryRowContext(wait, `SELECT started_at, finished_at IS NOT NULL FROM rebuilds WHERE projection = ?`, projection).
			Scan(&now, &finished)
		switch {
		case err == nil && (!now.Equal(started) || finished):
			p, err := recordedRebuild(ctx, r.db, projection)
			if err == nil && p.StartedAt.Equal(started) && p.Phase == "cancelled" {
				return p, nil
			}
			return ops.RebuildProgress{}, r.notRunning(projection)
		case err != nil && wait.Err() == nil:
			return ops.RebuildProgress{}, fmt.Errorf("wait for the rebuild of %s to stop: %w", projection, err)
		}
		select {
		case <-wait.Done():
			if ctx.Err() != nil {
				return ops.RebuildProgress{}, ctx.Err()
			}
			if held, err := rebuildLockHeld(ctx, r.db, projection); err == nil && !held {
				return ops.RebuildProgress{}, r.notRunning(projection) // its process died: interrupted
			}
			return ops.RebuildProgress{}, &apperr.ConflictError{Detail: fmt.Sprintf(
				"the cancel of the rebuild of %s is asked for, but it has not stopped within %s (an instance of a release before "+
					"readmodel/010 does not read the request: cancel it where it runs); the request stays, and GET shows when it ends",
				projection, limit.Round(time.Second))}
		case <-tick.C:
		}
	}
}

// notRunning is the conflict of a cancel that found the rebuild ended.
func (r *Maintenance) notRunning(projection string) error {
	p, _ := r.Status(projection)
	return &apperr.ConflictError{Detail: fmt.Sprintf("no rebuild of %s is running; the last one is %s", projection, p.Phase)}
}

// Close cancels every running rebuild and waits for them.
func (r *Maintenance) Close() {
	r.mu.Lock()
	runs := make([]*rebuildRun, 0, len(r.runs))
	for _, run := range r.runs {
		runs = append(runs, run)
	}
	r.mu.Unlock()
	for _, run := range runs {
		run.cancel()
		<-run.done
	}
}

// unreadable is dec, with an event it cannot read (event.UnreadableError's
// causes: a type this release does not know, a payload that does not
// parse or lacks a value, a data key missing) read as undecodable rather
// than ending the rebuild: the live projection parks such an event's
// aggregate before it, and a rebuild folds the stream as far (readable),
// so that one aggregate does not stop the rebuild of every other one. A
// fold that must go past it (the change log says the live row applied it)
// still stops, naming it (table.fold). A failure to read what the event
// needs (a data key, while the database is away) ends the rebuild as
// before: it is no fact of the event.
func unreadable(dec event.Decoder) event.Decoder {
	return func(eventType string, data []byte, more ...[]byte) (event.Event, error) {
		e, err := dec(eventType, data, more...)
		var temporary interface{ Temporary() bool }
		switch {
		case errors.As(err, &temporary) && temporary.Temporary():
			return nil, err
		case err != nil:
			return undecodable{eventType: eventType, err: err}, nil
		}
		return e, nil
	}
}

// readable is stream up to its first undecodable event.
func readable(stream []event.Recorded) []event.Recorded {
	for i, r := range stream {
		if _, ok := r.Event.(undecodable); ok {
			return stream[:i]
		}
	}
	return stream
}
