// Package leader elects the one Hearth instance that runs the projections,
// using a PostgreSQL session-level advisory lock, and fences every other
// one out with a term checked inside each projection transaction.
//
// Every instance runs an [Elector]. The instance whose database session
// holds the lock named [LockName] (key [Key](LockName)) is the leader and
// runs the function given to [Elector.Run]; the others are standbys and
// keep trying, so a standby takes over on its own when the leader goes
// away, with nothing restarted.
//
// # States
//
// Standby. The Elector keeps one dedicated connection (not from a pool,
// outside any transaction) and calls pg_try_advisory_lock on it every
// RetryInterval (200 ms by default). pg_try_advisory_lock never waits and
// takes no transaction id, so a standby neither blocks nor holds back
// other transactions. If connecting or the attempt fails, the connection
// is closed (which frees the lock if the attempt took it unseen) and
// reopened with exponential backoff from RetryInterval up to five times
// it; the first failure of a streak is logged at Warn, the rest at Debug,
// and the recovery at Info.
//
// Taking over. The lock was granted; the standby connection becomes the
// lock connection. Before leading, the Elector
//
//  1. ends every session in the lock's database whose application_name is
//     Config.FenceAppName (Hearth names its subscribers' sessions
//     "hearth-projector"): they can only be an earlier leader's, since this
//     instance opens its own only once it leads. A frozen or cut-off leader
//     may have a subscriber transaction open that holds its offset rows
//     and holds back pg_snapshot_xmin for the whole server; ending it lets
//     the new term start at once;
//  2. begins a new fencing term: it increments the term of LockName in
//     table projection_leader of Config.TermDB (the read-model database)
//     and records itself as holder. The increment takes the term row's
//     lock, so it waits until every transaction of the old term still in
//     flight has ended (see below), at most TermTimeout (15 s).
//
// Leader. Run logs "acquired leadership" with the term, sets [Status] to
// leader with the term, and calls lead with the term and a lead context.
// lead must make every write it does check the term (Hearth's projections
// do, see adapters/readmodel.WithFence). Meanwhile a watcher goroutine owns
// the lock connection: it blocks reading it, so a session the server ends
// is noticed at once, and every CheckInterval (500 ms) it checks in
// pg_locks, with a CheckTimeout (1 s) deadline, that the session still
// holds the lock.
//
// # Transitions
//
//   - standby -> leader: pg_try_advisory_lock returned true and the term
//     was begun.
//   - leader -> standby, self-fenced: the lock connection failed (read
//     error, failed or timed-out check, lock not held). The lead context
//     is cancelled at once with a cause wrapping [ErrLockLost], Status
//     turns to standby and "lost leadership" is logged. lead must stop all
//     leader-only work as soon as its context is done.
//   - leader -> standby, stale term: a projection transaction found that
//     the current term is no longer its own (readmodel.ErrStaleTerm).
//     Hearth cancels its router at once and lead returns the error.
//   - leader -> standby, lead returned (nil or an error) or Run's context
//     was cancelled (the lead context is cancelled too, and lead is
//     expected to return).
//
// Whatever ended the term, once lead has returned Run unlocks explicitly
// with pg_advisory_unlock (under context.WithoutCancel and a CheckTimeout
// deadline, so it also happens during shutdown), closes the lock
// connection, waits RetryInterval and campaigns again with a new
// connection, unless its context is done, in which case Run returns nil.
// An error returned by lead is logged, never returned by Run.
//
// # The lease
//
// The lock session carries a server-side lease: the Elector connects with
// idle_session_timeout = Lease (3 s), so the server ends the session, and
// frees the lock, when it has received nothing from the leader for that
// long. The leader's own checks keep the session busy every CheckInterval
// (0.5 s), six times inside the lease; a standby's attempts every 0.2 s.
// Only a leader that cannot talk to the server, frozen (SIGSTOP, a long GC
// or VM pause) or cut off, lets the lease run out. A kernel that still
// runs answers TCP keepalives for a frozen process, so keepalives alone
// would keep its lock for ever; the idle timer does not depend on the
// client's kernel. The lock connection also sets TCP keepalives (5 s idle,
// 3 probes 1 s apart) and tcp_user_timeout (9 s) as a backstop for a
// session the server is busy sending to, where the idle timer does not run.
//
// Each projection transaction sets idle_in_transaction_session_timeout to
// the same lease, so a frozen leader's transaction in flight ends on the
// server by the time its lock is free; it would otherwise hold the term
// row, and keep the next term from beginning, until the process resumed.
//
// # Timings (defaults)
//
//   - Leader killed (crash, SIGKILL, OOM): its kernel closes the socket,
//     the server ends the session and frees the lock; a standby takes the
//     lock within RetryInterval (0.2 s) and projects a few tens of
//     milliseconds later (measured: about 0.3 s from the kill).
//   - Graceful shutdown (SIGTERM): the lead context is cancelled, the
//     router stops taking batches, the message in flight finishes or is
//     aborted (its transaction rolls back and the offset stays, so the next
//     leader gets it again), and the lock is released explicitly: a standby
//     takes over within RetryInterval (measured: about 0.25 s).
//   - Lock session ended by the server (pg_terminate_backend, restart):
//     the watcher reads the error at once and the leader fences itself
//     within milliseconds; a standby (or the same instance, reconnecting)
//     takes over within RetryInterval, or once the server accepts
//     connections again. The server frees the lock at the moment it ends
//     the session, so here the old leader cannot stop strictly first: it
//     stops within milliseconds, usually before a standby's next attempt,
//     and the new leader's sweep and the term take care of whatever it
//     still had in flight.
//   - Leader cut off from the server (network): its last check succeeded
//     at t; the next one starts by t + CheckInterval and fails by
//     t + CheckInterval + CheckTimeout = t + 1.5 s, when the lead context is
//     cancelled. The server frees the lock no earlier than Lease = 3 s
//     after it last heard from the leader, so the leader stops taking work
//     at least 1.5 s before any standby can hold the lock (less whatever
//     delay the last answer had on the way). New refuses settings with
//     2*(CheckInterval + CheckTimeout) > Lease.
//   - Leader frozen: the server ends its lock session and its projection
//     transaction after Lease; a standby takes over about Lease +
//     RetryInterval after the freeze (measured: about 3.2 s). When the
//     process resumes, its watcher finds the session gone and it fences
//     itself before doing anything else that could commit: its old
//     transactions are gone, and new ones read the new term.
//
// The timings are for liveness. Safety does not depend on them.
//
// # Why two leaders can never both commit
//
// A projection commits only in a read-model transaction whose first
// statement read the term row FOR SHARE and found its own term N (anything
// else is refused with ErrStaleTerm and rolls back). That statement is the
// function hearth_fence (migration readmodel/005), sent with the
// transaction's BEGIN in one round trip. A new leader begins
// term N+1 by updating that row, which needs a lock that conflicts with
// FOR SHARE. Take any transaction T of term N:
//
//   - If T read the row before the increment locked it, the increment
//     waits until T has ended: T commits, if at all, before term N+1
//     exists.
//   - If T reads the row after the increment locked it, T waits for the
//     increment to commit and then reads the new row (READ COMMITTED
//     re-reads a row updated while it waited; under REPEATABLE READ the
//     read fails with a serialization error instead): it sees N+1 and
//     rolls back.
//
// The new leader starts its projections only after the increment has
// committed. So every commit of term N precedes the increment, which
// precedes every commit of term N+1: writes of two terms never interleave,
// whatever the clocks, the network or the lock say. The lock, the lease
// and self-fencing make a stale leader stop early and rarely even try; the
// term makes its writes fail when it does. (A write that reached the
// server before the increment and commits first is not stale: it belongs
// to the order of events, and the version guard of the projection makes
// the new leader's redelivery of the same event change nothing.) Every
// write to the read model must go through a fenced transaction for this to
// hold; Hearth's projections do (adapters/readmodel, projection.inTx).
//
// No deadlock: every projection transaction takes the term row first,
// before any read-model row, and shared locks do not conflict with each
// other; the increment takes only the term row. A transaction waiting for
// the increment holds nothing else yet, and the increment waits only for
// transactions that already hold their share. Compatible FOR SHARE
// requests can overtake a waiting increment, so a stale leader that kept
// starting transactions could delay it; it stops quickly (its lock is gone
// and its subscriber sessions were ended), and TermTimeout bounds the wait.
//
// # Requirements
//
//   - PostgreSQL 14 or newer (idle_session_timeout, pg_terminate_backend
//     with a timeout).
//   - Direct connections. Session advisory locks belong to a server
//     session. Behind a pooler in transaction mode (PgBouncer
//     pool_mode=transaction, many managed "poolers") consecutive statements
//     can run on different sessions, so the lock would be taken on one and
//     checked, released or lost on another, and idle_session_timeout would
//     measure the pooler's idleness, not the leader's. Config.ConnString
//     must reach PostgreSQL directly (a session-mode pooler also works).
//     Advisory locks are also per database: every instance must connect to
//     the same database.
//   - Every instance connects as the same role (or one that is a member of
//     pg_signal_backend), so that a new leader may end an old one's
//     sessions; without it the Elector logs a warning and the new term may
//     wait for the old leader's transactions to end by themselves.
package leader
