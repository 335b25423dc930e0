// Package leader elects the one Hearth instance that runs the projections,
// using a PostgreSQL session-level advisory lock.
//
// Every instance runs an [Elector]. The instance whose database session
// holds the lock named [LockName] (key [Key](LockName)) is the leader and
// runs the function given to [Elector.Run]; the others are standbys and
// keep trying, so a standby takes over on its own when the leader goes
// away.
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
// Leader. The lock was granted to the standby connection, which becomes
// the lock connection. Run logs "acquired leadership", sets [Status] to
// leader and calls lead with a lead context. Meanwhile a watcher goroutine
// owns the lock connection: it blocks reading it, so a session the server
// ends is noticed at once, and every CheckInterval (500 ms by default) it
// checks in pg_locks, with a CheckTimeout (1 s) deadline, that the session
// still holds the lock.
//
// # Transitions
//
//   - standby -> leader: pg_try_advisory_lock returned true.
//   - leader -> standby, self-fenced: the lock connection failed (read
//     error, failed or timed-out check, lock not held). The lead context
//     is cancelled at once with a cause wrapping [ErrLockLost], Status
//     turns to standby and "lost leadership" is logged. lead must stop all
//     leader-only work as soon as its context is done.
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
// # Timings and failures
//
//   - Clean shutdown, or lead returning: the lock is released explicitly,
//     so a standby takes over within one RetryInterval, well under a
//     second with the defaults.
//   - The leader process dies (crash, kill -9, OOM): its kernel closes the
//     socket, PostgreSQL ends the session and frees the lock; a standby
//     takes over within RetryInterval of that.
//   - The lock session ends while the process lives (pg_terminate_backend,
//     server restart, idle-session killers): the watcher reads the error
//     at once and the leader self-fences within milliseconds.
//   - The network goes silent, or the leader's whole machine freezes: the
//     server's end of the socket carries a lease set by the Elector as
//     runtime parameters (tcp_keepalives_idle=5, tcp_keepalives_interval=1,
//     tcp_keepalives_count=3, tcp_user_timeout=9000), so the server ends
//     the session and frees the lock about 8-9 s after it last heard from
//     the leader. A leader cut off from the server fails its next check
//     within CheckInterval + CheckTimeout (1.5 s), well inside that lease,
//     so it fences itself first. New refuses settings that would break
//     this ordering.
//   - Only the process freezes (SIGSTOP, a long pause) while its kernel
//     runs: the kernel still answers keepalives, so the session and the
//     lock stay held and no standby takes over until the process resumes
//     or dies. This costs availability, not exclusivity.
//
// # What is not guaranteed yet
//
// This version fences only by cancelling the lead context. The lock lives
// on one connection while the projections write on others, so a leader
// that is slow to react to cancellation, or that resumes from a machine
// pause after its lease ran out, can still write for a moment after a
// standby has taken over (at most until its next check, plus however long
// lead takes to stop). Fencing terms, a number incremented at each
// takeover and checked inside every projection transaction, will make
// such stale writes fail; they come in a later version.
//
// # Direct connections only
//
// Session advisory locks belong to a server session. Behind a pooler in
// transaction mode (PgBouncer pool_mode=transaction, many managed
// "poolers") consecutive statements can run on different sessions, so the
// lock would be taken on one and checked, released or lost on another.
// Config.ConnString must reach PostgreSQL directly (a session-mode pooler
// also works). Advisory locks are also per database: every instance must
// connect to the same database.
package leader
