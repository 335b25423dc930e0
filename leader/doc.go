// Package leader shares Hearth's leader-only work among its workers: each
// unit of that work (each projection; later a delivery handler, a relay)
// has its own PostgreSQL session-level advisory lock, and the instance
// holding a unit's lock runs it, fenced from every other one by a term of
// that unit's own, checked inside each of its transactions.
//
// Every worker runs a [Scheduler] over the same [Unit]s; each unit has an
// [Elector]. The instance whose database session holds a unit's lock
// (named Unit.Name, key [Key](Name), e.g. "hearth/projections/orders") is
// that unit's leader and runs Unit.Lead; the others are its standbys and
// keep trying, so a standby takes the unit over on its own when its leader
// goes away, with nothing restarted. Each unit goes through the states
// below on its own, and the Scheduler decides, by fair share, which of its
// standby units campaign at all. A plain Elector (one lock, Config.Name)
// works the same way without the fair share.
//
// # States
//
// Standby. The Elector keeps one dedicated connection (not from a pool,
// outside any transaction) and calls pg_try_advisory_lock on it every
// RetryInterval (200 ms by default), when the fair share lets it (below).
// pg_try_advisory_lock never waits and takes no transaction id, so a
// standby neither blocks nor holds back other transactions. If connecting or the attempt fails, the connection
// is closed (which frees the lock if the attempt took it unseen) and
// reopened with exponential backoff from RetryInterval up to five times
// it; the first failure of a streak is logged at Warn, the rest at Debug,
// and the recovery at Info.
//
// Taking over. The lock was granted; the standby connection becomes the
// lock connection. Before leading, the Elector
//
//  1. ends every session in the lock's database whose application_name is
//     the unit's FenceAppName (Hearth names a projection's subscriber
//     sessions "hearth-projector/<projection>"): they can only be an
//     earlier leader's of this unit, since this instance opens its own only
//     once it leads it. A frozen or cut-off leader may have a subscriber
//     transaction open that holds its offset rows and holds back
//     pg_snapshot_xmin for the whole server; ending it lets the new term
//     start at once;
//  2. begins a new fencing term: it increments the unit's term (the row
//     named like its lock) in table projection_leader of Config.TermDB (the
//     read-model database) and records itself as holder. The increment
//     takes the term row's lock, so it waits until every transaction of the
//     unit's old term still in flight has ended (see below), at most
//     TermTimeout (15 s).
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
//   - leader -> standby, handed over: the Scheduler cancels the lead
//     context with cause [ErrHandedOver] (fair share, below); lead stops as
//     on a shutdown.
//   - leader -> standby, lead returned (nil or an error) or Run's context
//     was cancelled (the lead context is cancelled too, and lead is
//     expected to return).
//
// Whatever ended the term, once lead has returned Run unlocks explicitly
// with pg_advisory_unlock (under context.WithoutCancel and a CheckTimeout
// deadline, so it also happens during shutdown), closes the lock
// connection, waits RetryInterval and campaigns again with a new
// connection, unless its context is done, in which case Run returns nil.
// An error returned by lead is logged, never returned by Run. A
// Scheduler's unit that was handed over, or whose lead failed soon three
// times in a row (once or twice is what a Postgres restart costs), rests
// one Lease before it campaigns again, so that another worker takes it;
// the rest ends as soon as an attempt finds the lock held by another
// worker, so that the unit is this worker's again if that one dies.
//
// # Fair share
//
// A Scheduler counts the live workers and keeps each to its fair share of
// the units: ceil(units / live workers), so that every unit has a taker
// (3 units on 3 workers: one each; on 2 workers: two and one; 4 units on 3
// workers may split 2, 2, 0, which is within the share). Every unit counts
// alike, whatever its work: with Hearth's four projections and three other
// units on 2 workers, one may lead the four projections and the other the
// three others.
//
// Counting. Each worker keeps one more dedicated session, its membership
// session, named [WorkerApplicationName] ("hearth-worker"), with the same
// lease and keepalives as a lock session, and reads on it every
// CheckInterval how many sessions so named the database has that were
// active within half the lease: the live workers. Nothing is written: a
// killed worker's session ends with its socket, at the moment its locks are
// freed; a frozen or cut-off one's falls silent and stops counting half a
// lease later, before the server frees its locks (a lease after their last
// statement, which a leader makes every CheckInterval), so the others'
// share has grown by the time its units are free. The count follows the
// locks without a heartbeat table to expire.
//
// Campaigning. A standby unit's attempt is one statement that counts the
// live membership sessions itself, so it is never stale, and calls
// pg_try_advisory_lock only when this worker holds fewer locks than its
// share; otherwise it only notes whether the lock is free at all. The
// attempts of one worker's units go one at a time, so two of them never
// take a lock each on the same count. A unit whose lock stays free for
// five attempts (1 s) while this worker is at its share is taken anyway
// (the workers below their share cannot lead it: one whose lead fails, a
// counted worker that cannot connect), and then kept for a minute rather
// than handed back to be left free again.
//
// Handing over. A worker that has held more locks than its share for two
// checks in a row (a worker reconnecting makes nothing move) hands over
// the unit it took last: the unit's term ends as on a shutdown (the
// message in flight finishes or is rolled back and redelivered, the lock
// is released explicitly), the unit rests, and a worker below its share
// takes it within RetryInterval. One unit at a time, each once the last is
// released. So a worker that starts takes each unit of its share about two
// checks and a takeover (about 1.3 s) after the last, with no one
// restarted; a worker that leaves frees its units, which the others, now
// below their larger share, take as after a kill.
//
// # Rolling upgrade
//
// Versions before per-unit locks ran every projection under the one lock
// [LockName] ("hearth/projections"). Hearth's projection units set it as
// their Guard: before campaigning, a unit's lock session takes the guard in
// shared mode (once per session), which an older leader (exclusive) and
// the newer units (shared) cannot hold at once; and every term a unit
// begins also increments the guard's term row, so a transaction of an
// older leader still in flight, which checks that row, is refused. During
// a rollout either the older leader runs every projection or the newer
// workers share them, never both.
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
// Per unit: a fault that hits one worker hits only the units it leads, and
// each is taken over on its own, by the workers then below their share.
//
//   - Leader killed (crash, SIGKILL, OOM): its kernel closes the sockets,
//     the server ends its sessions and frees its locks; its membership
//     session is gone too, so the survivors' share grows at once, and a
//     standby takes each lock within RetryInterval (0.2 s), a unit it
//     handed over or failed to lead shortly before included, and projects
//     a few tens of milliseconds later (measured: about 0.3 s from the
//     kill).
//   - Graceful shutdown (SIGTERM): the lead context is cancelled, the
//     router stops taking batches, the message in flight finishes or is
//     aborted (its transaction rolls back and the offset stays, so the next
//     leader gets it again), and the lock is released explicitly: a standby
//     takes over within RetryInterval (measured: about 0.3 s).
//   - Worker started: two CheckIntervals after its membership session
//     appears, a worker above its share hands a unit over (as on a graceful
//     shutdown, for that unit only), and the new worker leads it about
//     RetryInterval later: about 1.3 s. A worker that leaves hands its units
//     over as on a graceful shutdown (or a kill).
//   - Lock session ended by the server (pg_terminate_backend, restart):
//     the watcher reads the error at once and the leader fences itself
//     within milliseconds; a standby (usually the same instance,
//     reconnecting, now below its share) takes over within RetryInterval,
//     or once the server accepts connections again. The server frees the lock at the moment it ends
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
//     transaction after Lease; the others stopped counting it half a Lease
//     after the freeze, so a standby below its grown share takes over
//     within RetryInterval of that: about Lease + RetryInterval after the
//     freeze (measured: about 3.2 s). When the
//     process resumes, its watcher finds the session gone and it fences
//     itself before doing anything else that could commit: its old
//     transactions are gone, and new ones read the new term.
//
// The timings are for liveness. Safety does not depend on them.
//
// # Why two leaders can never both commit
//
// This holds per unit: each unit's term has its own row, and each of its
// transactions checks that row. A projection commits only in a read-model
// transaction whose first statement read its unit's term row FOR SHARE and
// found its own term N (anything else is refused with ErrStaleTerm and
// rolls back). That statement is the
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
// No deadlock: every projection transaction takes its term row first,
// before any read-model row, and shared locks do not conflict with each
// other; the increment takes only term rows (its own, and its guard's). A transaction waiting for
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
//     wait for the old leader's transactions to end by themselves. The
//     membership count reads pg_stat_activity.application_name, which every
//     role may see, and state_change, which only the same role (or one with
//     pg_read_all_stats) sees: a session whose state_change is hidden, or
//     NULL (track_activities off), counts as live however long it is
//     silent.
package leader
