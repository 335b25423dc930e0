package leader

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"

	"hearth/internal/advisory"
	"hearth/internal/database"
)

// LockName is the default Config.Name: the one lock under which versions
// before per-unit leadership ran every projection, now the Guard of each
// projection's own lock (see the package documentation, "Rolling
// upgrade").
const LockName = advisory.Projections

const (
	// ApplicationName is the application_name of every lock connection, so an
	// operator can find it in pg_stat_activity.
	ApplicationName = "hearth-leader"

	// DefaultLease is Config.Lease's default. Work that fences its own
	// transactions with the lease (a unit's Lead) can take it before the
	// Elector or Scheduler exists.
	DefaultLease = 3 * time.Second

	defaultRetryInterval  = 200 * time.Millisecond
	defaultCheckInterval  = 500 * time.Millisecond
	defaultCheckTimeout   = time.Second
	defaultLease          = DefaultLease
	defaultTermTimeout    = 15 * time.Second
	defaultConnectTimeout = 5 * time.Second

	// maxBackoffFactor caps the reconnect backoff at RetryInterval*maxBackoffFactor.
	maxBackoffFactor = 5
)

// keepaliveParams are session settings sent in the startup packet of every
// lock connection, besides the lease (idle_session_timeout). They act on the
// server's end of the socket and end a session whose client machine went
// silent while the server was sending to it (where the idle timer does not
// run), after about 8-9 s instead of the kernel default of hours. They have
// no effect on Unix-socket connections.
var keepaliveParams = map[string]string{
	"tcp_keepalives_idle":     "5",    // seconds of silence before the first probe
	"tcp_keepalives_interval": "1",    // seconds between probes
	"tcp_keepalives_count":    "3",    // unanswered probes before the server drops the session
	"tcp_user_timeout":        "9000", // ms a sent packet may stay unacknowledged (PostgreSQL 12+)
}

// ErrLockLost is the cause (see [context.Cause]) of a lead context cancelled
// because the lock connection failed a check: the session, and with it the
// lock, may already be gone.
var ErrLockLost = errors.New("leader: lock connection lost")

// ErrHandedOver is the cause of a lead context cancelled because a
// [Scheduler] hands the unit over to a worker that leads fewer units.
var ErrHandedOver = errors.New("leader: unit handed over")

// errLeadReturned is the cause of a lead context cancelled because lead returned.
var errLeadReturned = errors.New("leader: lead returned")

// Key returns the int64 advisory-lock key for name, by Hearth's one
// scheme ([advisory.Key]: the first 8 bytes of SHA-256(name)). For
// [LockName] it is -3139509515664720772; pg_locks shows it as classid
// 3563993274 and objid 3050863740 (objsubid = 1). To find the holder:
//
//	SELECT l.pid, a.application_name, a.client_addr, a.backend_start
//	FROM pg_locks l JOIN pg_stat_activity a USING (pid)
//	WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
//	  AND l.classid::bigint = 3563993274 AND l.objid::bigint = 3050863740;
func Key(name string) int64 { return advisory.Key(name) }

// keyHalves returns the classid and objid under which pg_locks shows key.
func keyHalves(key int64) (classid, objid uint32) {
	return uint32(uint64(key) >> 32), uint32(uint64(key))
}

// Config configures an [Elector].
type Config struct {
	// ConnString is the PostgreSQL URL or keyword/value string of the lock
	// connection. It must reach PostgreSQL directly (or through a pooler in
	// session mode): a session advisory lock does not survive a pooler in
	// transaction mode such as PgBouncer's. application_name,
	// idle_session_timeout and the TCP keepalive settings are overridden;
	// connect_timeout defaults to 5 s. Required.
	ConnString string

	// TermDB is the database that holds the fencing terms (table
	// projection_leader, in the read-model database): every acquisition
	// increments the term there before lead runs. Required.
	TermDB *sql.DB

	// Holder names this instance in projection_leader.holder and in logs.
	// Defaults to "HOSTNAME/PID".
	Holder string

	// FenceAppName is the application_name of the sessions that do the
	// leader's work in the lock's database (the projections' subscribers).
	// On each acquisition the Elector ends every such session still open
	// there, which can only be an earlier leader's (frozen, cut off, or slow
	// to stop), so that its open transactions and row locks cannot hold up
	// the new term. Empty: no session is ended.
	FenceAppName string

	// Name is the lock name; the advisory-lock key is [Key](Name).
	// Defaults to [LockName].
	Name string

	// Guard, when set, names a lock that an older version of Hearth took
	// exclusively for work that this lock now covers (a part of). The
	// Elector holds Guard in shared mode on its lock session before it
	// campaigns, so an instance of the older version and this Elector
	// never lead at once; and every term it begins also increments
	// Guard's term, so that a transaction of the older version still in
	// flight is refused (see the package documentation, "Rolling
	// upgrade"). Empty: no guard.
	Guard string

	// RetryInterval is how often a standby tries to take the lock, and how
	// long Run waits after a leadership term before campaigning again.
	// Reconnection after a failure backs off from it up to 5 times it.
	// Defaults to 200ms.
	RetryInterval time.Duration

	// CheckInterval is how often the leader verifies, on the lock
	// connection, that its session still holds the lock. (A connection that
	// the server closes is noticed at once, without waiting for a check.)
	// Defaults to 500ms.
	CheckInterval time.Duration

	// CheckTimeout bounds each database call on the lock connection: a
	// check, a lock attempt, the unlock. Defaults to 1s.
	CheckTimeout time.Duration

	// Lease is the server-side lease of the lock session: its
	// idle_session_timeout, so the server ends the session, and frees the
	// lock, once it has heard nothing from the leader for this long (a
	// frozen or cut-off leader). Projection transactions use it as their
	// idle_in_transaction_session_timeout (see [Elector.Lease]).
	// 2*(CheckInterval + CheckTimeout) must not exceed it, so that a live
	// leader is never idle that long and a cut-off one fences itself well
	// before the server frees its lock. Defaults to 3s.
	Lease time.Duration

	// TermTimeout bounds the increment of the term, which waits for the
	// transactions of an earlier leader still in flight. Defaults to 15s.
	TermTimeout time.Duration

	// Log receives state transitions and failures; the Elector adds
	// component=leader. Defaults to slog.Default().
	Log *slog.Logger
}

// Role is an Elector's current state.
type Role string

const (
	// RoleStandby: not holding the lock; trying to take it every RetryInterval.
	RoleStandby Role = "standby"
	// RoleLeader: holding the lock; lead is running.
	RoleLeader Role = "leader"
)

// Status is a snapshot of an Elector's state.
type Status struct {
	Role  Role
	Term  int64     // the fencing term this instance leads under; 0 while standby
	Since time.Time // when the Elector entered Role (and Term)
}

// Elector campaigns for a PostgreSQL session-level advisory lock and runs a
// function while it holds it. See the package documentation.
type Elector struct {
	cfg      Config
	connCfg  *pgx.ConnConfig
	key      int64
	guard    int64 // Key(cfg.Guard); 0 without a guard
	classid  uint32
	objid    uint32
	log      *slog.Logger
	running  atomic.Bool
	statusMu sync.Mutex
	status   Status

	// holding is true from the lock attempt that took the lock until it is
	// released: what a Scheduler counts as a unit this worker leads.
	holding atomic.Bool
	// acquired counts the times the lock was taken.
	acquired atomic.Int64
	// sched, when set, decides whether a lock attempt is made at all (fair
	// share, see Scheduler); nil for an Elector of its own.
	sched *Scheduler
	// stepMu guards stepDown, the current term's cancel (nil between
	// terms), through which a Scheduler hands the unit over.
	stepMu   sync.Mutex
	stepDown context.CancelCauseFunc
	// restUntil (Unix nanoseconds) is when a Scheduler's unit may campaign
	// again after handing its unit over or failing to lead it (0: once
	// another session was seen holding the lock); read and written under
	// sched.mu or by Run between attempts.
	restUntil atomic.Int64
	// freeSince is when this Elector, held off by its fair share, first
	// saw the lock free in an unbroken run of attempts (zero: held, or not
	// looked). Used by Scheduler.try only, under sched.mu.
	freeSince time.Time
	// failedLeads counts the terms in a row whose lead failed soon (Run's
	// goroutine only).
	failedLeads int
	// orphanTakenAt (Unix nanoseconds) is when a Scheduler's unit last took
	// its lock because it had stayed free (see Scheduler.rebalance).
	orphanTakenAt atomic.Int64
}

// New validates cfg, fills in its defaults and returns an Elector in the
// standby role. Errors name the offending Config field.
func New(cfg Config) (*Elector, error) {
	cfg.Name = cmp.Or(cfg.Name, LockName)
	cfg.RetryInterval = cmp.Or(cfg.RetryInterval, defaultRetryInterval)
	cfg.CheckInterval = cmp.Or(cfg.CheckInterval, defaultCheckInterval)
	cfg.CheckTimeout = cmp.Or(cfg.CheckTimeout, defaultCheckTimeout)
	cfg.Lease = cmp.Or(cfg.Lease, defaultLease)
	cfg.TermTimeout = cmp.Or(cfg.TermTimeout, defaultTermTimeout)
	cfg.Log = cmp.Or(cfg.Log, slog.Default())
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = cmp.Or(host, "unknown") + "/" + strconv.Itoa(os.Getpid())
	}

	if cfg.ConnString == "" {
		return nil, errors.New("leader: Config.ConnString is required")
	}
	if cfg.TermDB == nil {
		return nil, errors.New("leader: Config.TermDB is required")
	}
	connCfg, err := database.ParseConfig(cfg.ConnString) // keepalives, user timeout: a silent server is left
	if err != nil {
		return nil, fmt.Errorf("leader: Config.ConnString: %w", err)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"RetryInterval", cfg.RetryInterval},
		{"CheckInterval", cfg.CheckInterval},
		{"CheckTimeout", cfg.CheckTimeout},
		{"Lease", cfg.Lease},
		{"TermTimeout", cfg.TermTimeout},
	} {
		if f.d < 0 {
			return nil, fmt.Errorf("leader: Config.%s must be positive, got %v", f.name, f.d)
		}
	}
	if sum := cfg.CheckInterval + cfg.CheckTimeout; 2*sum > cfg.Lease {
		return nil, fmt.Errorf("leader: Config.CheckInterval + Config.CheckTimeout (%v) must be at most half of Config.Lease (%v)", sum, cfg.Lease)
	}
	if cfg.Lease%time.Millisecond != 0 {
		return nil, fmt.Errorf("leader: Config.Lease must be whole milliseconds, got %v", cfg.Lease)
	}

	for k, v := range keepaliveParams {
		connCfg.RuntimeParams[k] = v
	}
	connCfg.RuntimeParams["application_name"] = ApplicationName
	// The lease: a session the leader leaves idle this long is ended by the
	// server (PostgreSQL 14+).
	connCfg.RuntimeParams["idle_session_timeout"] = strconv.FormatInt(cfg.Lease.Milliseconds(), 10)
	connCfg.ConnectTimeout = cmp.Or(connCfg.ConnectTimeout, defaultConnectTimeout)

	key := Key(cfg.Name)
	classid, objid := keyHalves(key)
	var guard int64
	if cfg.Guard != "" {
		if cfg.Guard == cfg.Name {
			return nil, fmt.Errorf("leader: Config.Guard must differ from Config.Name (%s)", cfg.Name)
		}
		guard = Key(cfg.Guard)
	}
	return &Elector{
		cfg:     cfg,
		connCfg: connCfg,
		key:     key,
		guard:   guard,
		classid: classid,
		objid:   objid,
		log:     cfg.Log.With("component", "leader", "lock", cfg.Name, "holder", cfg.Holder),
		status:  Status{Role: RoleStandby, Since: time.Now()},
	}, nil
}

// Status returns the Elector's current role and since when it holds it.
// It is safe for concurrent use.
func (e *Elector) Status() Status {
	e.statusMu.Lock()
	defer e.statusMu.Unlock()
	return e.status
}

// Lease returns the server-side lease (Config.Lease). Work done under the
// lead context should not leave a transaction idle longer than that:
// projection transactions use it as their idle_in_transaction_session_timeout,
// so those of a frozen leader end by the time its lock is free.
func (e *Elector) Lease() time.Duration { return e.cfg.Lease }

// Holder returns the name of this instance (Config.Holder).
func (e *Elector) Holder() string { return e.cfg.Holder }

// setStatus records a transition to role and term; it does nothing if
// neither changed.
func (e *Elector) setStatus(role Role, term int64) {
	e.statusMu.Lock()
	defer e.statusMu.Unlock()
	if e.status.Role != role || e.status.Term != term {
		e.status = Status{Role: role, Term: term, Since: time.Now()}
	}
}

// Run campaigns for the lock until ctx is done. Whenever it holds the lock
// it begins a new fencing term and calls lead with the term and a context
// that is cancelled when ctx is done or when the lock connection fails
// (context.Cause then wraps [ErrLockLost]); lead should stop all
// leader-only work promptly when it is, and make every write it does check
// that term (see the package documentation). When lead returns, for any
// reason, Run unlocks, closes the lock connection, waits RetryInterval and
// campaigns again. An error from lead is logged, not returned.
//
// Run returns nil once ctx is done. Only one Run may be active per Elector.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context, term int64) error) error {
	if lead == nil {
		return errors.New("leader: Run: lead is nil")
	}
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("leader: Run called while already running")
	}
	defer e.running.Store(false)

	e.log.Debug("campaigning", "key", e.key, "retry_interval", e.cfg.RetryInterval)
	var (
		conn    *pgx.Conn // standby connection, reused between lock attempts
		guarded bool      // conn holds Config.Guard in shared mode
		streak  failureStreak
		bo      = newBackoff(e.cfg.RetryInterval)
	)
	defer func() {
		if conn != nil {
			e.closeConn(ctx, conn)
		}
	}()

	for ctx.Err() == nil {
		if conn == nil {
			c, err := e.connect(ctx)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				streak.note(e.log, "lock connection", "connect", err)
				sleep(ctx, bo.NextBackOff())
				continue
			}
			conn, guarded = c, false
		}

		acquired, err := e.tryLock(ctx, conn, &guarded)
		if err != nil {
			// The attempt may have taken the lock on the server without us
			// seeing the answer: closing the session frees it in that case.
			e.closeConn(ctx, conn)
			conn = nil
			if ctx.Err() != nil {
				break
			}
			streak.note(e.log, "lock connection", "try lock", err)
			sleep(ctx, bo.NextBackOff())
			continue
		}
		streak.restored(e.log, "lock connection")
		bo.Reset()

		if !acquired {
			sleep(ctx, e.cfg.RetryInterval)
			continue
		}
		if ctx.Err() != nil {
			// Shutting down: give the lock back without leading.
			e.release(ctx, conn)
			e.holding.Store(false)
			conn = nil
			break
		}
		e.term(ctx, conn, lead)
		e.holding.Store(false)
		conn = nil // term released and closed it
		sleep(ctx, e.cfg.RetryInterval)
	}
	e.setStatus(RoleStandby, 0)
	return nil
}

// term runs one leadership term on conn, which holds the lock: it ends the
// sessions an earlier leader left behind, begins a new fencing term, calls
// lead while watching the connection, then releases the lock and closes
// conn.
func (e *Elector) term(ctx context.Context, conn *pgx.Conn, lead func(ctx context.Context, term int64) error) {
	start := time.Now()
	e.log.Debug("acquired lock", "key", e.key, "backend_pid", conn.PgConn().PID())
	e.fenceSessions(ctx, conn) // before the watcher takes conn

	leadCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e.setStepDown(cancel)
	defer e.setStepDown(nil)
	var fenced atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := e.watch(leadCtx, conn); err != nil {
			// Self-fence: stop leading before a standby can take over.
			fenced.Store(true)
			e.setStatus(RoleStandby, 0)
			e.log.Info("lost leadership", "reason", "lock connection failed", "err", err, "held_for", time.Since(start).Round(time.Millisecond))
			cancel(fmt.Errorf("%w: %w", ErrLockLost, err))
		}
	})

	n, err := e.beginTerm(leadCtx)
	if err == nil {
		e.setStatus(RoleLeader, n)
		e.log.Info("acquired leadership", "term", n, "key", e.key, "backend_pid", conn.PgConn().PID(),
			"after", time.Since(start).Round(time.Millisecond))
		err = lead(leadCtx, n)
	}
	handedOver := errors.Is(context.Cause(leadCtx), ErrHandedOver)
	cancel(errLeadReturned)
	wg.Wait() // the watcher no longer uses conn

	stopping := ctx.Err() != nil || fenced.Load() || handedOver
	benign := err == nil || (stopping && errors.Is(err, context.Canceled))
	switch {
	case handedOver && !fenced.Load():
		attrs := []any{"reason", "handed over", "term", n, "held_for", time.Since(start).Round(time.Millisecond)}
		level := slog.LevelInfo
		if !benign {
			level = slog.LevelWarn
			attrs = append(attrs, "err", err)
		}
		e.setStatus(RoleStandby, 0)
		e.rest()
		e.log.Log(ctx, level, "lost leadership", attrs...)
	case fenced.Load():
		if !benign {
			e.log.Warn("lead failed after losing leadership", "err", err)
		}
	case stopping:
		attrs := []any{"reason", "shutting down", "held_for", time.Since(start).Round(time.Millisecond)}
		level := slog.LevelInfo
		if !benign {
			level = slog.LevelWarn
			attrs = append(attrs, "err", err)
		}
		e.setStatus(RoleStandby, 0)
		e.log.Log(ctx, level, "lost leadership", attrs...)
	case err != nil:
		e.setStatus(RoleStandby, 0)
		e.failedLeads++
		if time.Since(start) >= e.cfg.Lease {
			e.failedLeads = 1 // after a while of leading: a failure of its own, not a streak
		}
		if e.failedLeads >= failuresBeforeRest {
			e.rest()
		}
		e.log.Error("lost leadership", "reason", "lead failed", "term", n, "err", err, "held_for", time.Since(start).Round(time.Millisecond))
	default:
		e.setStatus(RoleStandby, 0)
		e.log.Info("lost leadership", "reason", "lead returned", "term", n, "held_for", time.Since(start).Round(time.Millisecond))
	}
	if benign {
		e.failedLeads = 0
	}
	e.release(ctx, conn)
}

// failuresBeforeRest is how many terms in a row whose lead failed soon
// make a Scheduler's unit rest (see Elector.rest). One or two are what a
// Postgres restart costs (a pool's connections from before it fail once
// each); more say this worker cannot lead the unit.
const failuresBeforeRest = 3

// beginTermSQL increments the term of lock $1 (creating its row at term 1)
// and records the holder ($2). The row lock it takes waits until every
// transaction that read the row FOR SHARE, i.e. every projection
// transaction of an earlier term still in flight, has ended.
//
// With a guard ($3, else empty), it also increments the guard's term, when it
// has a row: a transaction of an older version that checks that row is
// then refused, and the increment waits for those in flight. Whichever of
// the two rows is locked first, nothing deadlocks: terms begun at once
// share only the guard's row, and a projection transaction locks one term
// row only, its first statement.
const beginTermSQL = `WITH guard AS (UPDATE projection_leader SET term = term + 1 WHERE name = $3)
INSERT INTO projection_leader AS p (name, term, holder, since)
VALUES ($1, 1, $2, now())
ON CONFLICT (name) DO UPDATE SET term = p.term + 1, holder = EXCLUDED.holder, since = EXCLUDED.since
RETURNING term`

// beginTerm increments the fencing term in TermDB and returns it.
func (e *Elector) beginTerm(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.TermTimeout)
	defer cancel()
	var term int64
	if err := e.cfg.TermDB.QueryRowContext(ctx, beginTermSQL, e.cfg.Name, e.cfg.Holder, e.cfg.Guard).Scan(&term); err != nil {
		return 0, fmt.Errorf("begin term: %w", err)
	}
	return term, nil
}

// fenceSessionsSQL ends the sessions named $1 in the lock's database, waiting
// up to $2 ms for each to exit (and so release its locks). PostgreSQL 14+.
const fenceSessionsSQL = `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, $2))
FROM pg_stat_activity
WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()`

// fenceSessions ends the sessions named Config.FenceAppName: an earlier
// leader's, since this instance opens its own only once lead runs. A
// failure (say, a role not allowed to signal the others) is logged: the
// term check still keeps a stale leader's writes out, but its open
// transactions may hold up the new term until they end.
func (e *Elector) fenceSessions(ctx context.Context, conn *pgx.Conn) {
	if e.cfg.FenceAppName == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.CheckTimeout)
	defer cancel()
	var ended int
	err := conn.QueryRow(ctx, fenceSessionsSQL, e.cfg.FenceAppName, e.cfg.CheckTimeout.Milliseconds()).Scan(&ended)
	switch {
	case err != nil:
		e.log.Warn("could not end an earlier leader's sessions", "application_name", e.cfg.FenceAppName, "err", err)
	case ended > 0:
		e.log.Info("ended an earlier leader's sessions", "application_name", e.cfg.FenceAppName, "sessions", ended)
	}
}

// watch returns nil once ctx is done, or an error as soon as the lock
// connection fails. Between checks it blocks reading the connection, so a
// session the server ends (pg_terminate_backend, server shutdown, crash)
// is noticed at once; every CheckInterval it verifies in pg_locks that the
// session still holds the lock, which also catches a silent network.
func (e *Elector) watch(ctx context.Context, conn *pgx.Conn) error {
	for {
		waitCtx, cancel := context.WithTimeout(ctx, e.cfg.CheckInterval)
		_, err := conn.WaitForNotification(waitCtx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err == nil:
			continue // a notification; nothing LISTENs on this connection, ignore it
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			// Quiet for CheckInterval: time for an active check.
		default:
			return fmt.Errorf("wait on lock connection: %w", err)
		}
		if err := e.check(ctx, conn); err != nil {
			return err
		}
	}
}

// checkSQL reports whether this session holds the advisory lock ($1, $2 =
// classid, objid of the key).
const checkSQL = `SELECT EXISTS (
	SELECT FROM pg_locks
	WHERE locktype = 'advisory' AND pid = pg_backend_pid()
	  AND classid = $1 AND objid = $2 AND objsubid = 1 AND granted)`

// check verifies that conn's session still holds the lock. It is not cut
// short by ctx (that would break the connection), only by CheckTimeout.
func (e *Elector) check(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.CheckTimeout)
	defer cancel()
	var held bool
	if err := conn.QueryRow(ctx, checkSQL, e.classid, e.objid).Scan(&held); err != nil {
		return fmt.Errorf("check lock: %w", err)
	}
	if !held {
		return errors.New("check lock: session no longer holds the advisory lock")
	}
	return nil
}

// connect opens a lock connection.
func (e *Elector) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := database.Connect(ctx, e.connCfg) // through a multi-host URL, the primary first
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// tryLock makes one non-blocking attempt to take the lock on conn. With a
// guard, conn first takes the guard in shared mode (once per connection;
// *guarded records it) and makes no attempt while it cannot. In a
// Scheduler, the Scheduler decides whether to attempt at all.
func (e *Elector) tryLock(ctx context.Context, conn *pgx.Conn, guarded *bool) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.CheckTimeout)
	defer cancel()
	if e.guard != 0 && !*guarded {
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock_shared($1)", e.guard).Scan(guarded); err != nil {
			return false, fmt.Errorf("try guard: %w", err)
		}
		if !*guarded {
			e.log.Debug("an older version leads under the guard lock; waiting", "guard", e.cfg.Guard)
			return false, nil
		}
	}
	if e.sched != nil {
		return e.sched.try(ctx, conn, e)
	}
	var acquired bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", e.key).Scan(&acquired); err != nil {
		return false, fmt.Errorf("try lock: %w", err)
	}
	if acquired {
		e.took()
	}
	return acquired, nil
}

// took records that the lock was taken.
func (e *Elector) took() {
	e.acquired.Add(1)
	e.holding.Store(true)
}

// setStepDown records the current term's cancel (nil when the term ends).
func (e *Elector) setStepDown(cancel context.CancelCauseFunc) {
	e.stepMu.Lock()
	defer e.stepMu.Unlock()
	e.stepDown = cancel
}

// handOver ends the current term, if any, as a graceful handover: the lead
// context is cancelled with cause [ErrHandedOver], lead stops as on a
// shutdown, and the lock is released. It reports whether a term was ended.
func (e *Elector) handOver() bool {
	e.stepMu.Lock()
	defer e.stepMu.Unlock()
	if e.stepDown == nil {
		return false
	}
	e.stepDown(ErrHandedOver)
	return true
}

// orphanTaken is when the lock was last taken because it had stayed free.
func (e *Elector) orphanTaken() time.Time { return time.Unix(0, e.orphanTakenAt.Load()) }

// rest keeps a Scheduler's unit from campaigning for one Lease, after it
// handed the unit over or failed to lead it several times in a row, so
// that another worker takes it; the rest ends early once an attempt finds
// the lock held by another session (Scheduler.try). An Elector of its own
// campaigns again after RetryInterval.
func (e *Elector) rest() {
	if e.sched != nil {
		e.restUntil.Store(time.Now().Add(e.cfg.Lease).UnixNano())
	}
}

// resting reports whether a Scheduler's unit rests at now (see rest).
func (e *Elector) resting(now time.Time) bool { return now.UnixNano() < e.restUntil.Load() }

// release unlocks explicitly, so that a standby can take over at once
// rather than when the server gets round to ending the session, then closes
// conn. It runs even when ctx is done.
func (e *Elector) release(ctx context.Context, conn *pgx.Conn) {
	if !conn.IsClosed() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.CheckTimeout)
		var released bool
		err := conn.QueryRow(uctx, "SELECT pg_advisory_unlock($1)", e.key).Scan(&released)
		cancel()
		switch {
		case err != nil:
			e.log.Warn("unlock failed; closing the connection frees the lock", "err", err)
		case !released:
			e.log.Warn("unlock: session did not hold the lock")
		default:
			e.log.Debug("released lock")
		}
	}
	e.closeConn(ctx, conn)
}

// closeConn closes conn, even when ctx is done.
func (e *Elector) closeConn(ctx context.Context, conn *pgx.Conn) {
	closeConn(ctx, conn, e.cfg.CheckTimeout, e.log)
}

// closeConn closes conn within timeout, even when ctx is done.
func closeConn(ctx context.Context, conn *pgx.Conn, timeout time.Duration, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := conn.Close(cctx); err != nil {
		log.Debug("close connection", "err", err)
	}
}

// failureStreak tracks consecutive connection failures.
type failureStreak struct {
	failures int
	since    time.Time
}

// note logs the first failure of a streak at Warn and the rest at Debug;
// conn names the connection ("lock connection").
func (s *failureStreak) note(log *slog.Logger, conn, op string, err error) {
	s.failures++
	if s.failures == 1 {
		s.since = time.Now()
		log.Warn(conn+" failed; retrying", "op", op, "err", err)
		return
	}
	log.Debug(conn+" still failing", "op", op, "err", err, "failures", s.failures)
}

// restored logs the end of a streak, if there was one, and resets it.
func (s *failureStreak) restored(log *slog.Logger, conn string) {
	if s.failures > 0 {
		log.Info(conn+" restored", "failures", s.failures, "after", time.Since(s.since).Round(time.Millisecond))
		*s = failureStreak{}
	}
}

// newBackoff returns the reconnect backoff: retry doubling up to
// maxBackoffFactor*retry, with jitter, never giving up.
func newBackoff(retry time.Duration) *backoff.ExponentialBackOff {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = retry
	bo.MaxInterval = maxBackoffFactor * retry
	bo.Multiplier = 2
	bo.RandomizationFactor = 0.2
	bo.MaxElapsedTime = 0
	bo.Reset()
	return bo
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
