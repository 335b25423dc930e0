package leader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// fleet is the workers (Schedulers) of one test, sharing units: it records
// which worker leads which unit and whether two ever led one unit at once.
type fleet struct {
	t     *testing.T
	url   string
	units []string
	cfg   Config // the timings every worker uses
	// fails, when set, makes a worker's lead of a unit fail.
	fails func(holder, unit string) bool

	mu      sync.Mutex
	leaders map[string][]string // unit -> holders whose lead runs now
	causes  map[string][]error  // holder -> context.Cause of each ended lead
	overlap string              // the first unit two workers led at once
	n       int
}

// fleetWorker is one running Scheduler.
type fleetWorker struct {
	s      *Scheduler
	holder string
	cancel context.CancelFunc
	done   chan error
}

func newFleet(t *testing.T, units ...string) *fleet {
	url := testDB(t)
	return &fleet{t: t, url: url, units: units, leaders: map[string][]string{}, causes: map[string][]error{},
		cfg: Config{ConnString: url, TermDB: openDB(t, url), Log: testLogger(t),
			RetryInterval: 20 * time.Millisecond, CheckInterval: 50 * time.Millisecond, CheckTimeout: 200 * time.Millisecond, Lease: time.Second}}
}

// start starts one more worker; it stops when the test ends.
func (f *fleet) start() *fleetWorker {
	t := f.t
	t.Helper()
	f.mu.Lock()
	f.n++
	holder := fmt.Sprintf("w%d", f.n)
	f.mu.Unlock()
	cfg := SchedulerConfig{Config: f.cfg}
	cfg.Holder = holder
	for _, name := range f.units {
		cfg.Units = append(cfg.Units, Unit{Name: name, Lead: func(ctx context.Context, term int64) error {
			if f.fails != nil && f.fails(holder, name) {
				// It fails after a while, as a lead that cannot reach a
				// database would: most of the time it holds the lock.
				select {
				case <-ctx.Done():
				case <-time.After(150 * time.Millisecond):
				}
				return errors.New("this worker cannot lead " + name)
			}
			f.mu.Lock()
			if len(f.leaders[name]) > 0 && f.overlap == "" {
				f.overlap = name
			}
			f.leaders[name] = append(f.leaders[name], holder)
			f.mu.Unlock()
			<-ctx.Done()
			f.mu.Lock()
			f.leaders[name] = slices.DeleteFunc(f.leaders[name], func(h string) bool { return h == holder })
			f.causes[holder] = append(f.causes[holder], context.Cause(ctx))
			f.mu.Unlock()
			return nil
		}})
	}
	s, err := NewScheduler(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	w := &fleetWorker{s: s, holder: holder, cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- s.Run(ctx) }()
	t.Cleanup(func() { w.stop(t) })
	return w
}

// stop stops the worker gracefully and waits for its Run to return.
func (w *fleetWorker) stop(t *testing.T) { stopRun(t, w.cancel, w.done) }

// leads returns how many units each holder leads and whether every unit
// has exactly one leader.
func (f *fleet) leads() (map[string]int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out, all := map[string]int{}, true
	for _, name := range f.units {
		hs := f.leaders[name]
		if len(hs) != 1 {
			all = false
			continue
		}
		out[hs[0]]++
	}
	return out, all
}

// settled waits until every unit has one leader and the holders lead the
// given numbers of units (in any order), and returns the split.
func (f *fleet) settled(want ...int) map[string]int {
	f.t.Helper()
	var got map[string]int
	require.Eventually(f.t, func() bool {
		var all bool
		got, all = f.leads()
		counts := []int{}
		for _, n := range got {
			counts = append(counts, n)
		}
		slices.Sort(counts)
		return all && slices.Equal(counts, want)
	}, 30*time.Second, 5*time.Millisecond, "split %v", want)
	return got
}

// A worker leads every unit while it is alone; each worker that starts
// takes its share without anyone restarting (the others hand units over
// gracefully); a worker that stops leaves its units to the others; and no
// unit ever has two leaders.
func TestSchedulerSharesUnits(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "test/units/a", "test/units/b", "test/units/c")
	w1 := f.start()
	f.settled(3)
	require.Eventually(t, func() bool { st := w1.s.Status(); return st.Workers == 1 && st.FairShare == 3 && st.Leading == 3 },
		10*time.Second, 5*time.Millisecond)

	w2 := f.start()
	split := f.settled(1, 2)
	require.Equal(t, 2, split["w1"], "the first worker keeps two units and hands one over")
	w2.stop(t)
	f.settled(3) // w1 takes the unit it handed over back
	f.start()
	f.settled(1, 2) // and hands it, or another, over again
	w4 := f.start()
	f.settled(1, 1, 1)
	st := w4.s.Status()
	require.Equal(t, 3, st.Workers)
	require.Equal(t, 1, st.FairShare)
	require.Equal(t, 1, st.Leading)

	w1.stop(t)
	f.settled(1, 2)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Empty(t, f.overlap, "two workers led one unit at once")
	handedOver := 0
	for holder, causes := range f.causes {
		for _, cause := range causes {
			require.NotErrorIs(t, cause, ErrLockLost, "%s lost a lock", holder)
			if errors.Is(cause, ErrHandedOver) {
				handedOver++
			}
		}
	}
	require.Equal(t, 3, handedOver, "w1 handed one unit to w2, then to w3, then to w4")
}

// A unit that the worker below its fair share cannot lead (its lead
// fails, again and again) is taken by a worker at its share once it has
// stayed free for a while, and kept there rather than handed back.
func TestSchedulerTakesAUnitNoOneBelowItsShareLeads(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "test/units/x", "test/units/y")
	// Long enough that a worker reconnecting between two failed terms
	// leaves the lock free for much less than orphanAfter (5 attempts).
	f.cfg.RetryInterval = 50 * time.Millisecond
	var victim atomic.Value // the holder that cannot lead x, once chosen
	victim.Store("")
	f.fails = func(holder, unit string) bool { return unit == "test/units/x" && holder == victim.Load() }
	f.start()
	f.start()
	split := f.settled(1, 1)
	leaderOf := func(unit string) string {
		f.mu.Lock()
		defer f.mu.Unlock()
		if hs := f.leaders[unit]; len(hs) == 1 {
			return hs[0]
		}
		return ""
	}
	v, keeper := leaderOf("test/units/x"), leaderOf("test/units/y")
	require.Len(t, split, 2)
	victim.Store(v)

	// The victim's lock session of x ends; it is below its share, so it
	// takes x again, and fails to lead it, again and again.
	key := Key("test/units/x")
	classid, objid := keyHalves(key)
	var ended int
	require.NoError(t, f.cfg.TermDB.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND classid = $1 AND objid = $2
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, classid, objid).Scan(&ended))
	require.Equal(t, 1, ended)

	ledByKeeper := func() bool { return leaderOf("test/units/x") == keeper }
	require.Eventually(t, ledByKeeper, 10*time.Second, 5*time.Millisecond, "%s, at its share, takes x after all", keeper)
	require.Never(t, func() bool { return !ledByKeeper() }, 3*f.cfg.Lease, 5*time.Millisecond,
		"%s keeps x: handing it over would leave it free again", keeper)
	require.Eventually(t, func() bool { return leaderOf("test/units/y") == v }, 20*time.Second, 5*time.Millisecond,
		"%s hands y over instead", keeper)
}

// A worker that dies (its sessions end at once, as on SIGKILL: the proxy
// it connects through closes them) leaves its unit to a survivor at the
// survivors' next attempt, although they are at their fair share and a
// membership session the server has not ended is still there: one silent
// for more than half the lease (a worker frozen, cut off, or gone without
// the end of its socket reaching the server) counts as no live worker, so
// the survivors' share has grown. Counted, it would keep them at their
// share until the unit had been free for orphanAfter.
func TestSchedulerSurvivorsTakeADeadWorkersUnitAtOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "test/units/a", "test/units/b", "test/units/c")
	f.cfg.RetryInterval = 300 * time.Millisecond
	f.cfg.CheckInterval = 100 * time.Millisecond
	f.cfg.CheckTimeout = 400 * time.Millisecond
	f.cfg.Lease = 2 * time.Second
	ghostCfg, err := pgx.ParseConfig(f.url)
	require.NoError(t, err)
	ghostCfg.RuntimeParams["application_name"] = WorkerApplicationName
	ghost, err := pgx.ConnectConfig(t.Context(), ghostCfg) // then silent, and never ended by the server
	require.NoError(t, err)
	t.Cleanup(func() { ghost.Close(context.Background()) })

	f.start()
	f.start()
	p, proxied := proxyTo(t, f.url)
	f.cfg.ConnString = proxied
	victim := f.start()
	f.settled(1, 1, 1)
	require.Eventually(t, func() bool {
		var silent bool
		err := f.cfg.TermDB.QueryRow(`SELECT clock_timestamp() - state_change > $2::int * interval '1 millisecond' FROM pg_stat_activity WHERE pid = $1`,
			ghost.PgConn().PID(), (f.cfg.Lease / 2).Milliseconds()).Scan(&silent)
		return err == nil && silent
	}, 10*time.Second, 5*time.Millisecond, "the ghost member has been silent for half the lease")

	p.close() // the victim dies
	// Within the retry interval, with room for the lock's release on the
	// server and the new term; orphanAfter (5 attempts) is out of reach.
	require.Eventually(t, func() bool { leads, all := f.leads(); return all && leads[victim.holder] == 0 },
		3*f.cfg.RetryInterval, 5*time.Millisecond, "a survivor leads the dead worker's unit at its next attempt")
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Empty(t, f.overlap, "two workers led one unit at once")
}

// A worker that handed a unit over rests it (for a Lease) only until it
// sees the taker hold it: when the taker then dies, within that Lease, the
// worker, below its share again, takes the unit back at its next attempt,
// where a rest for the whole Lease would keep the unit free until the rest
// ran out (a Lease after the handover; no worker at its share takes a
// unit that rests on the only one below it).
func TestSchedulerTakesBackAUnitItHandedOverWhenTheTakerDies(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "test/units/a", "test/units/b")
	f.cfg.RetryInterval = 300 * time.Millisecond
	f.cfg.CheckInterval = 100 * time.Millisecond
	f.cfg.CheckTimeout = 400 * time.Millisecond
	f.cfg.Lease = 4 * time.Second
	giver := f.start()
	f.settled(2)
	p, proxied := proxyTo(t, f.url)
	f.cfg.ConnString = proxied
	taker := f.start()
	f.settled(1, 1)
	var handed *Elector
	f.mu.Lock()
	for _, u := range giver.s.units {
		if hs := f.leaders[u.Name]; len(hs) == 1 && hs[0] == taker.holder {
			handed = u.e
		}
	}
	f.mu.Unlock()
	require.NotNil(t, handed)
	// Its next attempt or the one after sees the taker hold the lock.
	require.Eventually(t, func() bool { return !handed.resting(time.Now()) }, 3*f.cfg.RetryInterval, 5*time.Millisecond,
		"%s's unit rests no longer once %s leads it", giver.holder, taker.holder)

	p.close() // the taker dies, well within a Lease of the handover
	require.Eventually(t, func() bool { leads, all := f.leads(); return all && leads[giver.holder] == 2 },
		3*f.cfg.RetryInterval, 5*time.Millisecond, "%s takes the unit back at its next attempt", giver.holder)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Empty(t, f.overlap, "two workers led one unit at once")
}

// A unit guarded by the lock an older version took for all the work (it
// took it exclusively, with a plain Elector) never leads at the same time
// as that version's leader, and every term it begins also increments the
// older version's term, so that the older version's transactions in
// flight are refused.
func TestSchedulerGuardKeepsTheOlderVersionOut(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "test/whole/part")
	h := &hooks{}
	oldCfg := f.cfg
	oldCfg.Name = "test/whole"
	old := h.start(t, oldCfg)
	require.Eventually(t, old.leading.Load, 10*time.Second, 5*time.Millisecond)
	oldTerm := old.lastTerm()

	cfg := SchedulerConfig{Config: f.cfg, Units: []Unit{{Name: "test/whole/part", Guard: "test/whole",
		Lead: func(ctx context.Context, term int64) error {
			if old.leading.Load() {
				t.Error("the unit leads while the older version's leader does")
			}
			f.mu.Lock()
			f.leaders["test/whole/part"] = []string{"new"}
			f.mu.Unlock()
			<-ctx.Done()
			f.mu.Lock()
			f.leaders["test/whole/part"] = nil
			f.mu.Unlock()
			return nil
		}}}}
	cfg.Holder = "new"
	s, err := NewScheduler(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	newLeads := func() bool { leads, _ := f.leads(); return leads["new"] == 1 }
	require.Never(t, newLeads, 300*time.Millisecond, 5*time.Millisecond, "the older version leads")

	old.stop(t)
	require.Eventually(t, newLeads, 10*time.Second, 5*time.Millisecond)
	var guardTerm int64
	require.NoError(t, f.cfg.TermDB.QueryRow(`SELECT term FROM projection_leader WHERE name = 'test/whole'`).Scan(&guardTerm))
	require.Equal(t, oldTerm+1, guardTerm, "the unit's term begun also moved the older version's term on")

	again := h.start(t, oldCfg) // an older-version instance starting during the rollout
	require.Never(t, again.leading.Load, 300*time.Millisecond, 5*time.Millisecond, "the older version leads beside the unit")
}

func TestFairShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ units, workers, want int }{
		{3, 0, 3}, {3, 1, 3}, {3, 2, 2}, {3, 3, 1}, {3, 5, 1}, {4, 3, 2}, {1, 2, 1},
	} {
		require.Equal(t, tc.want, fairShare(tc.units, tc.workers), "%d units, %d workers", tc.units, tc.workers)
	}
}

func TestNewSchedulerValidation(t *testing.T) {
	t.Parallel()
	const url = "postgres://u@127.0.0.1:5432/db"
	db := openDB(t, url) // never connects
	lead := func(context.Context, int64) error { return nil }
	base := Config{ConnString: url, TermDB: db}
	named := base
	named.Name = "x"
	for _, tc := range []struct {
		name string
		cfg  SchedulerConfig
		want string
	}{
		{"no units", SchedulerConfig{Config: base}, "SchedulerConfig.Units is required"},
		{"name in config", SchedulerConfig{Config: named, Units: []Unit{{Name: "a", Lead: lead}}}, "set per Unit"},
		{"unnamed unit", SchedulerConfig{Config: base, Units: []Unit{{Lead: lead}}}, "Units[0].Name is required"},
		{"unit twice", SchedulerConfig{Config: base, Units: []Unit{{Name: "a", Lead: lead}, {Name: "a", Lead: lead}}}, `Units[1].Name "a" is given twice`},
		{"no lead", SchedulerConfig{Config: base, Units: []Unit{{Name: "a"}}}, "Units[0].Lead is required"},
		{"guard is the unit", SchedulerConfig{Config: base, Units: []Unit{{Name: "a", Guard: "a", Lead: lead}}}, "Config.Guard must differ"},
		{"bad timing", SchedulerConfig{Config: Config{ConnString: url, TermDB: db, Lease: time.Second}, Units: []Unit{{Name: "a", Lead: lead}}}, "at most half of Config.Lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewScheduler(tc.cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
	s, err := NewScheduler(SchedulerConfig{Config: base, Units: []Unit{{Name: "a", Lead: lead}, {Name: "b", Lead: lead}}})
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, s.Lease())
	require.Equal(t, WorkerApplicationName, s.connCfg.RuntimeParams["application_name"])
	require.Equal(t, "3000", s.connCfg.RuntimeParams["idle_session_timeout"])
	require.Equal(t, ApplicationName, s.units[0].e.connCfg.RuntimeParams["application_name"], "the units' lock sessions keep their name")
	st := s.Status()
	require.Equal(t, SchedulerStatus{Holder: s.Holder(), FairShare: 2, Units: []UnitStatus{
		{Name: "a", Status: st.Units[0].Status}, {Name: "b", Status: st.Units[1].Status}}}, st)
	require.Equal(t, RoleStandby, st.Units[0].Role)
}
