package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"hearth/internal/database"
)

// WorkerApplicationName is the application_name of each Scheduler's
// membership session: the live workers are the sessions so named in the
// lock's database (see the package documentation, "Fair share").
const WorkerApplicationName = "hearth-worker"

// Unit is one piece of leader-only work with a lock and a fencing term of
// its own: a projection, a delivery handler, a relay.
type Unit struct {
	// Name is the unit's lock name (the key is [Key](Name)) and the name of
	// its term's row in projection_leader. Required, unique.
	Name string
	// Lead runs the unit's work for one term, as the lead function of
	// [Elector.Run]: it stops when its context is done, and every write it
	// makes checks term. Required.
	Lead func(ctx context.Context, term int64) error
	// FenceAppName is the application_name of the unit's own sessions (see
	// Config.FenceAppName); it must name this unit's sessions only. Optional.
	FenceAppName string
	// Guard is the lock an older version took for this unit's work (see
	// Config.Guard). Optional.
	Guard string
}

// SchedulerConfig configures a [Scheduler].
type SchedulerConfig struct {
	// Config holds what every unit's Elector shares: ConnString, TermDB,
	// Holder, the timings and Log. Its Name, FenceAppName and Guard must be
	// empty: they are each unit's own (Unit).
	Config
	// Units is the work to share out. Required.
	Units []Unit
}

// Scheduler shares units of leader-only work among the workers: each unit
// has its own lock, term and [Elector], and a worker campaigns for a free
// unit only while it leads fewer than its fair share (the units divided by
// the live workers, rounded up), and hands one over gracefully while it
// leads more. See the package documentation.
type Scheduler struct {
	cfg     Config
	connCfg *pgx.ConnConfig // the membership session's
	units   []schedUnit
	log     *slog.Logger
	running atomic.Bool

	// mu serialises the lock attempts of this worker's units, so that two
	// units never take a lock each on the same count.
	mu sync.Mutex
	// workers is the number of live workers at the last membership check;
	// 0 before the first, or while the membership session is down.
	workers atomic.Int64
	// handing is the unit handed over last, and handingAt its acquisition
	// (Elector.acquired) that was handed over (used by membership only).
	handing   *Elector
	handingAt int64
}

type schedUnit struct {
	Unit
	e *Elector
}

// UnitStatus is one unit as this worker sees it.
type UnitStatus struct {
	Name string
	Status
}

// SchedulerStatus is a snapshot of a Scheduler.
type SchedulerStatus struct {
	// Holder names this worker (Config.Holder).
	Holder string
	// Workers is the live workers counted at the last membership check (0:
	// not counted yet, or the membership session is down).
	Workers int
	// FairShare is how many units this worker may lead: the units divided
	// by Workers, rounded up (all of them while Workers is 0).
	FairShare int
	// Leading is how many units this worker leads.
	Leading int
	// Units is every unit, in the order given.
	Units []UnitStatus
}

// NewScheduler validates cfg and returns a Scheduler whose units are all
// standby. Errors name the offending field.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	if cfg.Name != "" || cfg.FenceAppName != "" || cfg.Guard != "" {
		return nil, errors.New("leader: SchedulerConfig: Name, FenceAppName and Guard are set per Unit")
	}
	if len(cfg.Units) == 0 {
		return nil, errors.New("leader: SchedulerConfig.Units is required")
	}
	s := &Scheduler{}
	seen := map[string]bool{}
	for i, u := range cfg.Units {
		switch {
		case u.Name == "":
			return nil, fmt.Errorf("leader: SchedulerConfig.Units[%d].Name is required", i)
		case seen[u.Name]:
			return nil, fmt.Errorf("leader: SchedulerConfig.Units[%d].Name %q is given twice", i, u.Name)
		case u.Lead == nil:
			return nil, fmt.Errorf("leader: SchedulerConfig.Units[%d].Lead is required", i)
		}
		seen[u.Name] = true
		ecfg := cfg.Config
		ecfg.Name, ecfg.FenceAppName, ecfg.Guard = u.Name, u.FenceAppName, u.Guard
		e, err := New(ecfg)
		if err != nil {
			return nil, fmt.Errorf("unit %s: %w", u.Name, err)
		}
		e.sched = s
		s.units = append(s.units, schedUnit{Unit: u, e: e})
	}
	s.cfg = s.units[0].e.cfg // the defaults filled in
	s.cfg.Name, s.cfg.FenceAppName, s.cfg.Guard = "", "", ""
	s.connCfg = s.units[0].e.connCfg.Copy()
	s.connCfg.RuntimeParams["application_name"] = WorkerApplicationName
	s.log = s.cfg.Log.With("component", "leader", "holder", s.cfg.Holder)
	return s, nil
}

// Lease returns the server-side lease (Config.Lease); see [Elector.Lease].
func (s *Scheduler) Lease() time.Duration { return s.cfg.Lease }

// Holder returns the name of this worker (Config.Holder).
func (s *Scheduler) Holder() string { return s.cfg.Holder }

// Status returns what this worker leads, and its fair share. It is safe
// for concurrent use.
func (s *Scheduler) Status() SchedulerStatus {
	workers := int(s.workers.Load())
	st := SchedulerStatus{Holder: s.cfg.Holder, Workers: workers, FairShare: fairShare(len(s.units), workers)}
	for _, u := range s.units {
		us := UnitStatus{Name: u.Name, Status: u.e.Status()}
		if us.Role == RoleLeader {
			st.Leading++
		}
		st.Units = append(st.Units, us)
	}
	return st
}

// CurrentTerms reads the current term of every unit from TermDB, by unit
// name: the last term begun, by whichever worker, so its holder is the
// worker that leads the unit (or led it last). A unit no worker has led
// yet has none.
func (s *Scheduler) CurrentTerms(ctx context.Context) (map[string]Term, error) {
	names := make([]string, 0, len(s.units))
	for _, u := range s.units {
		names = append(names, u.Name)
	}
	rows, err := s.cfg.TermDB.QueryContext(ctx, `SELECT name, term, holder, since FROM projection_leader WHERE name = ANY($1)`, names)
	if err != nil {
		return nil, fmt.Errorf("read current terms: %w", err)
	}
	defer rows.Close()
	out := map[string]Term{}
	for rows.Next() {
		var name string
		var t Term
		if err := rows.Scan(&name, &t.Term, &t.Holder, &t.Since); err != nil {
			return nil, fmt.Errorf("read current terms: %w", err)
		}
		out[name] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read current terms: %w", err)
	}
	return out, nil
}

// fairShare is how many of units one of workers may lead: rounded up, so
// that every unit has a taker; all of them when workers is unknown (0).
func fairShare(units, workers int) int {
	if workers < 1 {
		return units
	}
	return (units + workers - 1) / workers
}

// Run runs every unit's Elector, and the membership session that counts
// the live workers and hands units over, until ctx is done; then every
// unit has stopped and released its lock. It returns nil once ctx is done.
// Only one Run may be active per Scheduler.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("leader: Scheduler.Run called while already running")
	}
	defer s.running.Store(false)
	var wg sync.WaitGroup
	wg.Go(func() { s.membership(ctx) })
	errs := make([]error, len(s.units))
	for i, u := range s.units {
		wg.Go(func() { errs[i] = u.e.Run(ctx, u.Lead) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// liveMembersSQL counts the membership sessions (named by the parameter
// name) in this database that were active within the last silence
// milliseconds (the parameter silence, see memberSilence): the live workers.
// A session whose activity the role may not see (state_change NULL: another
// role without pg_read_all_stats, or track_activities off) counts as live.
func liveMembersSQL(name, silence string) string {
	return `(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = ` + name + `
		AND (state_change IS NULL OR state_change > clock_timestamp() - ` + silence + `::int * interval '1 millisecond'))`
}

// tryFairSQL takes the lock ($1) when this unit may campaign ($8: it does
// not rest) and either this worker leads ($2) fewer units than its fair
// share, the units ($3) divided by the live workers (the sessions named $4
// in this database, active within $9 ms) rounded up, or the unit has been
// seen free for a while ($5: no worker below its share takes it). got is
// NULL when no attempt was made. free reports whether the lock is granted
// to no session at all ($6, $7: its classid and objid), for that "while".
// The statement also keeps the session busy, inside its lease, while no
// attempt is made.
var tryFairSQL = `SELECT CASE WHEN $8::boolean AND ($5::boolean OR $2::int < ceil($3::numeric / greatest(1, ` + liveMembersSQL("$4", "$9") + `)))
	THEN pg_try_advisory_lock($1) END AS got,
	NOT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = $6 AND objid = $7) AS free`

// try is e's lock attempt under the fair share (tryFairSQL). A unit that
// rests (it was just handed over, or its lead failed) makes no attempt.
func (s *Scheduler) try(ctx context.Context, conn *pgx.Conn, e *Elector) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	leading := 0
	for _, u := range s.units {
		if u.e.holding.Load() {
			leading++
		}
	}
	resting := e.resting(now)
	orphaned := !e.freeSince.IsZero() && now.Sub(e.freeSince) >= s.orphanAfter()
	var got *bool
	var free bool
	err := conn.QueryRow(ctx, tryFairSQL, e.key, leading, len(s.units), WorkerApplicationName, orphaned,
		e.classid, e.objid, !resting, s.memberSilence().Milliseconds()).Scan(&got, &free)
	if err != nil {
		return false, fmt.Errorf("try lock: %w", err)
	}
	switch {
	case got != nil && *got:
		if orphaned {
			e.orphanTakenAt.Store(now.UnixNano())
			e.log.Info("took a unit that no worker below its fair share took", "free_for", now.Sub(e.freeSince).Round(time.Millisecond))
		}
		e.took()
		e.freeSince = time.Time{}
		return true, nil
	case got == nil && free:
		if e.freeSince.IsZero() {
			e.freeSince = now
		}
	default:
		// Another session holds the lock: the rest has done its work, a
		// worker below its share took the unit. Resting on would keep this
		// worker from it if that worker dies within the Lease, even while
		// this one is below its share and no other survivor is.
		e.freeSince = time.Time{}
		e.restUntil.Store(0)
	}
	return false, nil
}

// memberSilence is how long a membership session may stay silent and still
// count as a live worker: half the lease. A live worker counts every
// CheckInterval, each count within CheckTimeout, which New keeps within half
// the lease. A worker frozen or cut off is silent from the moment it
// stopped; its lock sessions, which a leader keeps busy every CheckInterval,
// are ended by the server a lease after their last statement, so at least a
// lease less CheckInterval after it stopped: more than half a lease. So the
// others stop counting it before its locks are freed, and the worker below
// its share then takes each at its next attempt, instead of the workers at
// their share waiting for its membership session's own lease to run out.
func (s *Scheduler) memberSilence() time.Duration { return s.cfg.Lease / 2 }

// orphanAfter is how long a unit's lock must stay free before a worker at
// or above its fair share takes it: five attempts of a worker below the
// share would have taken it by then, so none can (it fails to lead, or is
// counted but cannot connect).
func (s *Scheduler) orphanAfter() time.Duration { return 5 * s.cfg.RetryInterval }

// orphanKeep is how long a worker keeps a unit it took because no worker
// below its fair share did, before it may hand it over again: the workers
// below their share could not lead it (one that fails to, say), and a
// handover would leave it free for a lease each time.
const orphanKeep = time.Minute

// handoverAfter is how many membership checks in a row must find this
// worker above its fair share before it hands a unit over: a worker
// reconnecting, or one whose session the server has not yet ended, does
// not make units move.
const handoverAfter = 2

// membership keeps this worker's membership session (named
// WorkerApplicationName, with the lease as idle_session_timeout), counts
// the live workers on it every CheckInterval, and hands a unit over while
// this worker leads more than its fair share. It returns when ctx is done.
func (s *Scheduler) membership(ctx context.Context) {
	var (
		conn   *pgx.Conn
		streak failureStreak
		bo     = newBackoff(s.cfg.RetryInterval)
		over   int // checks in a row above the fair share
	)
	defer func() {
		s.workers.Store(0)
		if conn != nil {
			closeConn(ctx, conn, s.cfg.CheckTimeout, s.log)
		}
	}()
	for ctx.Err() == nil {
		if conn == nil {
			c, err := database.Connect(ctx, s.connCfg)
			if err != nil {
				if ctx.Err() == nil {
					streak.note(s.log, "membership session", "connect", err)
					sleep(ctx, bo.NextBackOff())
				}
				continue
			}
			conn = c
		}
		n, err := s.countWorkers(ctx, conn)
		if err != nil {
			closeConn(ctx, conn, s.cfg.CheckTimeout, s.log)
			conn = nil
			s.workers.Store(0)
			over = 0
			if ctx.Err() == nil {
				streak.note(s.log, "membership session", "count workers", err)
				sleep(ctx, bo.NextBackOff())
			}
			continue
		}
		streak.restored(s.log, "membership session")
		bo.Reset()
		if s.workers.Swap(int64(n)) != int64(n) {
			s.log.Info("live workers", "workers", n, "units", len(s.units), "fair_share", fairShare(len(s.units), n))
		}
		over = s.rebalance(n, over)
		sleep(ctx, s.cfg.CheckInterval)
	}
}

// countWorkersSQL counts the live membership sessions in this database
// (named $1, active within $2 ms).
var countWorkersSQL = `SELECT ` + liveMembersSQL("$1", "$2")

func (s *Scheduler) countWorkers(ctx context.Context, conn *pgx.Conn) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CheckTimeout)
	defer cancel()
	var n int
	if err := conn.QueryRow(ctx, countWorkersSQL, WorkerApplicationName, s.memberSilence().Milliseconds()).Scan(&n); err != nil {
		return 0, fmt.Errorf("count workers: %w", err)
	}
	return n, nil
}

// rebalance hands one unit over when this worker has led more than its
// fair share of units for handoverAfter checks in a row: the unit it took
// last, which has the least settled state. Once handed over, the units it
// leads are at most the fair share, so this worker does not campaign for
// that unit again (and the unit rests, see Elector.rest), and a worker
// below its share takes it within RetryInterval. One unit at a time: the
// next is handed over only once the last is released. A unit taken
// because no worker below its share took it (see try) is kept for
// orphanKeep: handing it over would leave it free again. over is the
// count of checks in a row so far; rebalance returns the new one.
func (s *Scheduler) rebalance(workers, over int) int {
	if h := s.handing; h != nil && h.holding.Load() && h.acquired.Load() == s.handingAt {
		return 0 // still stopping
	}
	share := fairShare(len(s.units), workers)
	var candidates []schedUnit
	held := 0
	for _, u := range s.units {
		if u.e.holding.Load() {
			held++
		}
		if u.e.Status().Role == RoleLeader && time.Since(u.e.orphanTaken()) >= orphanKeep {
			candidates = append(candidates, u)
		}
	}
	if held <= share || len(candidates) == 0 {
		return 0
	}
	if over++; over < handoverAfter {
		return over
	}
	last := slices.MaxFunc(candidates, func(a, b schedUnit) int { return a.e.Status().Since.Compare(b.e.Status().Since) })
	if last.e.handOver() {
		s.handing, s.handingAt = last.e, last.e.acquired.Load()
		s.log.Info("handing a unit over", "unit", last.Name, "leading", held, "fair_share", share, "workers", workers)
	}
	return 0
}
