// Package replicas serves the API's reads from Postgres read replicas (hot
// standbys streaming from the primary), beside the primary.
//
// A Set is the replicas of one database. Its monitor (Run) measures each
// replica's lag every CheckEvery: the primary's WAL position
// (pg_current_wal_lsn) against what the replica has replayed
// (pg_last_wal_replay_lsn), in bytes, and in seconds as the age of the
// oldest of the primary's recent positions the replica has not replayed
// yet (so a replica that keeps up shows 0 however old the last write is,
// and no clock of another machine is read). A replica behind every
// position the monitor kept is behind by at least the oldest one's age and
// by how much more is not known: it is skipped, whatever that age, so a
// replica hours behind is not taken for one just behind when the Set opens
// (Open samples the primary's position first, and gives the replicas a
// moment to replay it). A replica is usable while it answers and is known
// to be at most MaxLag behind; one that is down or further behind is
// skipped, and used again once a check finds it back within MaxLag.
// A replica that is not in recovery and is the primary (the replica setting
// names the primary itself, or a standby Patroni promoted, which the
// primary's multi-host URL now reaches too) is usable with a lag of 0: one
// more read path to a server that has every write. Another server of the
// cluster not in recovery (a former primary not yet demoted, a split
// brain) is skipped: it misses the writes made since.
//
// A Router (route.go) picks, per GET, a usable replica of each Set or the
// primary, and makes read-your-writes hold through the replica it picked.
package replicas

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"hearth/internal/database"
)

// Config is one database's replicas.
type Config struct {
	// Setting names the setting the URLs come from (READ_REPLICA_URLS), in
	// errors and logs.
	Setting string
	// PrimarySetting names the primary's setting (DATABASE_URL), in errors.
	PrimarySetting string
	// Primary is a pool on the database the replicas copy: its WAL position
	// is the reference of their lag. Required.
	Primary *bun.DB
	// URLs are the replicas, one server each, on the same database.
	URLs []string
	// MaxLag: a replica further behind is skipped. Required.
	MaxLag time.Duration
	// CheckEvery is how often the monitor measures the lags. Required.
	CheckEvery time.Duration
	// Pool caps each replica's connections. Defaults to 20.
	Pool int
	// Options are the replica pools' session settings (the request path's).
	Options database.Options
	// Metrics are shared by every Set of the process. Required.
	Metrics *Metrics
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// Set is the replicas of one database and their monitor.
type Set struct {
	cfg     Config
	sysid   int64  // the primary's system identifier
	dbName  string // the primary's database, which a replica URL names too
	members []*Replica
	next    atomic.Uint64
	log     *slog.Logger

	mu      sync.Mutex // guards samples (the monitor, and Open's first check)
	samples []sample
	keep    int // samples kept: enough to date a lag of MaxLag (maxSamples)
}

// callBound bounds one read on a replica, within a request whose context
// is ctx: the pools' statement timeout and a second (a replica that has
// not answered by then is not answering), and never more than half the
// time the request has left, so that the primary has the other half.
func (s *Set) callBound(ctx context.Context) time.Duration {
	bound := cmp.Or(s.cfg.Options.StatementTimeout, defaultCallBound) + time.Second
	if deadline, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(deadline)/2)
	}
	return bound
}

// defaultCallBound is callBound's statement timeout for pools without one.
const defaultCallBound = 5 * time.Second

// Replica is one read replica of a Set.
type Replica struct {
	// Name is host:port/database, as metrics and logs show it.
	Name string
	db   *bun.DB

	usable   atomic.Bool
	verified atomic.Bool // its system identifier is the primary's
	// state is the last state logged ("usable", "down", "behind",
	// "foreign", "other primary"), so only changes are logged (monitor
	// only).
	state string
}

// sample is the primary's WAL position at a time.
type sample struct {
	at  time.Time
	lsn uint64
}

// Usable reports whether reads go to the replica now.
func (r *Replica) Usable() bool { return r.usable.Load() }

// checkTimeout bounds each statement of a check, so a silent replica or
// primary holds up the monitor no longer than that.
const checkTimeout = 2 * time.Second

// Open opens a pool per replica and checks each one that answers: a
// server of another cluster (another system identifier than the
// primary's), or a URL naming another database than the primary's, is
// refused with an error naming it. A replica that does not
// answer is logged and checked again by the monitor, which uses it once it
// answers (and is of the primary's cluster). Replicas are usable from the
// first check, made before Open returns.
func Open(ctx context.Context, cfg Config) (*Set, error) {
	if cfg.Primary == nil || cfg.Metrics == nil || cfg.MaxLag <= 0 || cfg.CheckEvery <= 0 {
		return nil, errors.New("replicas.Open: missing primary, metrics, MaxLag or CheckEvery")
	}
	cfg.Pool = cmp.Or(cfg.Pool, 20)
	cfg.Options.Lazy = true
	s := &Set{cfg: cfg, log: cmp.Or(cfg.Log, slog.Default()).With("component", "replicas", "setting", cfg.Setting),
		keep: int(min(max(minSamples, cfg.MaxLag/cfg.CheckEvery+2), maxSamples))}
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	err := cfg.Primary.QueryRowContext(cctx, `SELECT system_identifier, current_database() FROM pg_control_system()`).Scan(&s.sysid, &s.dbName)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%s: the system identifier of %s's server (pg_control_system()): %w", cfg.Setting, cfg.PrimarySetting, err)
	}
	for i, url := range cfg.URLs {
		pc, err := database.ParseConfig(url)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("%s: replica %d: %w", cfg.Setting, i+1, err)
		}
		name := fmt.Sprintf("%s:%d/%s", pc.Host, pc.Port, pc.Database)
		if SeveralHosts(pc) {
			s.Close()
			return nil, fmt.Errorf("%s: replica %d (%s) names several hosts: name each replica by its own URL, comma-separated", cfg.Setting, i+1, name)
		}
		db, err := database.OpenWith(ctx, url, cfg.Pool, cfg.Options)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("%s: replica %s: %w", cfg.Setting, name, err)
		}
		r := &Replica{Name: name, db: db}
		s.members = append(s.members, r)
		if err := s.verify(ctx, r); errors.Is(err, errForeign) {
			s.Close()
			return nil, fmt.Errorf("%s: %w", cfg.Setting, err)
		} else if err != nil {
			r.state = "down"
			s.log.Warn("read replica does not answer: reads go elsewhere until it does", "replica", name, "error", err)
		}
	}
	s.settle(ctx)
	s.check(ctx)
	return s, nil
}

// settle samples the primary's position before Open's check, and waits
// (up to checkTimeout in all) for the replicas that answer to replay it: a
// replica behind every sample has no known lag and is skipped, so without
// an earlier sample the first check would skip a replica a few
// milliseconds behind until the next one.
func (s *Set) settle(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	var raw string
	if err := s.cfg.Primary.QueryRowContext(cctx, `SELECT pg_current_wal_lsn()::text`).Scan(&raw); err != nil {
		return // the check says why
	}
	lsn, err := parseLSN(raw)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.samples = append(s.samples, sample{at: time.Now(), lsn: lsn})
	s.mu.Unlock()
	for _, r := range s.members {
		if !r.verified.Load() {
			continue // not answering: the monitor measures it once it does
		}
		for wait := time.Millisecond; ; wait = min(wait*2, 25*time.Millisecond) {
			var replayed *string
			err := r.db.QueryRowContext(cctx, `SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()::text END`).Scan(&replayed)
			if err != nil || replayed == nil {
				break // down, or not a standby: the check says which
			}
			if at, err := parseLSN(*replayed); err != nil || at >= lsn {
				break
			}
			t := time.NewTimer(wait)
			select {
			case <-cctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// errForeign is a replica of another cluster.
var errForeign = errors.New("not a replica of the primary")

// verify checks, once, that r is a server of the primary's cluster, on the
// primary's database: another database of the cluster has the same lag, and
// other rows (another deployment's, or tables the reads do not find).
func (s *Set) verify(ctx context.Context, r *Replica) error {
	if r.verified.Load() {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	var id int64
	var dbName string
	if err := r.db.QueryRowContext(cctx, `SELECT system_identifier, current_database() FROM pg_control_system()`).Scan(&id, &dbName); err != nil {
		return err
	}
	if id != s.sysid {
		return fmt.Errorf("%w: %s is a server of another cluster (system identifier %d; %s's is %d): a read replica must stream from %s's primary",
			errForeign, r.Name, id, s.cfg.PrimarySetting, s.sysid, s.cfg.PrimarySetting)
	}
	if dbName != s.dbName {
		return fmt.Errorf("%w: %s names database %q, and %s's is %q: a replica URL names the primary's database",
			errForeign, r.Name, dbName, s.cfg.PrimarySetting, s.dbName)
	}
	r.verified.Store(true)
	return nil
}

// Close closes the replicas' pools.
func (s *Set) Close() {
	for _, r := range s.members {
		_ = r.db.Close()
	}
}

// Replicas are the Set's replicas, in the setting's order.
func (s *Set) Replicas() []*Replica { return s.members }

// Run checks the replicas every CheckEvery until ctx ends.
func (s *Set) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.CheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.check(ctx)
		}
	}
}

// pick returns a usable replica, in turn, or nil when none is.
func (s *Set) pick() *Replica {
	if s == nil {
		return nil
	}
	n := uint64(len(s.members))
	start := s.next.Add(1)
	for i := range n {
		if r := s.members[(start+i)%n]; r.usable.Load() {
			return r
		}
	}
	return nil
}

// skip takes r out of use until the next check finds it usable: a read on
// it failed to reach it.
func (s *Set) skip(r *Replica, err error) {
	if r.usable.CompareAndSwap(true, false) {
		s.cfg.Metrics.usable.WithLabelValues(r.Name).Set(0)
		s.log.Warn("read replica failed a read: skipped until the next check", "replica", r.Name, "error", err)
	}
}

// check measures every replica once.
func (s *Set) check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	var raw string
	var started time.Time
	err := s.cfg.Primary.QueryRowContext(cctx, `SELECT pg_current_wal_lsn()::text, pg_postmaster_start_time()`).Scan(&raw, &started)
	cancel()
	now := time.Now()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("read replicas: the primary's WAL position", "error", err)
		}
		return // lags unknown: the replicas keep their state until the primary answers
	}
	primaryLSN, err := parseLSN(raw)
	if err != nil {
		s.log.Error("read replicas: the primary's WAL position", "error", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, sample{at: now, lsn: primaryLSN})
	if len(s.samples) > s.keep {
		s.samples = s.samples[len(s.samples)-s.keep:]
	}
	for _, r := range s.members {
		s.measure(ctx, r, primaryLSN, started)
	}
}

// minSamples and maxSamples bound the primary's positions kept for the lag
// in seconds: enough to go back MaxLag (and more), within maxSamples. A
// replica behind the oldest is at least that age behind, how much more is
// not known, and is skipped (lag), also when MaxLag is longer than
// maxSamples checks.
const minSamples, maxSamples = 1000, 100_000

// measure checks one replica: its cluster, then its lag. primaryStarted
// tells the primary from another server that is not in recovery.
func (s *Set) measure(ctx context.Context, r *Replica, primaryLSN uint64, primaryStarted time.Time) {
	state, detail := "usable", []any{}
	defer func() {
		r.usable.Store(state == "usable")
		s.cfg.Metrics.usable.WithLabelValues(r.Name).Set(b2f(state == "usable"))
		if state != r.state {
			args := append([]any{"replica", r.Name, "state", state}, detail...)
			if state == "usable" {
				s.log.Info("read replica in use", args...)
			} else {
				s.log.Warn("read replica skipped: reads go to another replica or the primary", args...)
			}
			r.state = state
		}
	}()
	if err := s.verify(ctx, r); err != nil {
		state, detail = "down", []any{"error", err}
		if errors.Is(err, errForeign) {
			state = "foreign"
		}
		return
	}
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	var recovering bool
	var replayed *string
	var started time.Time
	err := r.db.QueryRowContext(cctx, `SELECT pg_is_in_recovery(),
		CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()::text END, pg_postmaster_start_time()`).Scan(&recovering, &replayed, &started)
	if err != nil {
		state, detail = "down", []any{"error", err}
		return
	}
	s.cfg.Metrics.primary.WithLabelValues(r.Name).Set(b2f(!recovering))
	if !recovering && !started.Equal(primaryStarted) {
		// A primary of the cluster that is not the one Hearth writes to:
		// a former primary not demoted yet, or a split brain. It misses
		// the writes made since it was left, so it is no read path.
		state, detail = "other primary", []any{"reason", "a primary of the cluster other than the one " + s.cfg.PrimarySetting + " reaches"}
		return
	}
	var lagBytes uint64
	var lag time.Duration
	if recovering && replayed != nil {
		lsn, err := parseLSN(*replayed)
		if err != nil {
			state, detail = "down", []any{"error", err}
			return
		}
		var known bool
		lagBytes, lag, known = s.lag(lsn, primaryLSN, time.Now())
		if !known {
			s.cfg.Metrics.lagBytes.WithLabelValues(r.Name).Set(float64(lagBytes))
			s.cfg.Metrics.lagSeconds.WithLabelValues(r.Name).Set(lag.Seconds())
			state, detail = "behind", []any{"reason", "behind every position of the primary kept: at least " +
				lag.Round(time.Millisecond).String() + " behind, how much more is not known", "lag_bytes", lagBytes}
			return
		}
	} else if recovering {
		state, detail = "behind", []any{"reason", "replayed nothing yet"}
		return
	}
	s.cfg.Metrics.lagBytes.WithLabelValues(r.Name).Set(float64(lagBytes))
	s.cfg.Metrics.lagSeconds.WithLabelValues(r.Name).Set(lag.Seconds())
	if lag > s.cfg.MaxLag {
		state, detail = "behind", []any{"lag", lag.Round(time.Millisecond).String(), "lag_bytes", lagBytes, "max_lag", s.cfg.MaxLag.String()}
	}
}

// lag is how far a replica that replayed up to lsn is behind: in bytes,
// from the primary's position now, and in time, the age of the oldest
// sample of the primary's position that the replica has not reached. When
// it has reached none (behind the oldest sample kept: at start-up, or
// further behind than the samples go back), that age is only a lower
// bound, and known is false.
func (s *Set) lag(lsn, primaryLSN uint64, now time.Time) (bytes uint64, lag time.Duration, known bool) {
	if lsn >= primaryLSN {
		return 0, 0, true
	}
	for i, smp := range s.samples {
		if smp.lsn > lsn {
			return primaryLSN - lsn, now.Sub(smp.at), i > 0
		}
	}
	return primaryLSN - lsn, 0, true
}

// SeveralHosts reports whether cfg names more than one server (a
// multi-host URL). Fallbacks alone do not: sslmode=prefer adds one for the
// same host, without TLS.
func SeveralHosts(cfg *pgx.ConnConfig) bool {
	for _, f := range cfg.Fallbacks {
		if f.Host != cfg.Host || f.Port != cfg.Port {
			return true
		}
	}
	return false
}

// parseLSN reads a pg_lsn's text form, X/Y in hexadecimal.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed WAL position %q", s)
	}
	return h<<32 | l, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
