package leader

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"hearth/internal/database"
	"hearth/internal/pgcluster"
	"hearth/internal/pgtest"
	"hearth/migrations"
)

// cluster is the one PostgreSQL server of this test run; each test gets its
// own database in it (advisory locks are per database).
var cluster *pgcluster.Cluster

// mainRunner starts the cluster around the tests so that it is stopped
// before goleak looks for leftover goroutines.
type mainRunner struct{ m *testing.M }

func (r mainRunner) Run() int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Fast: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "leader tests: start PostgreSQL:", err)
		return 1
	}
	cluster = c
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "leader tests: stop PostgreSQL:", err)
		}
	}()
	return r.m.Run()
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(mainRunner{m})
}

var dbSeq atomic.Int64

// testDB creates a fresh database with the read-model migrations (which
// hold the fencing terms) and returns its URL.
func testDB(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	name := fmt.Sprintf("leader_%d_%d", os.Getpid(), dbSeq.Add(1))
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	url := cluster.URL(name)
	_, err = migrations.Apply(ctx, openDB(t, url), migrations.ReadModel)
	require.NoError(t, err)
	return url
}

// openDB opens a pool on url, closed when the test ends.
func openDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db
}

// testLogger writes to the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// candidate is one Elector running in the background, with a lead function
// that records what happens to it.
type candidate struct {
	e      *Elector
	cancel context.CancelFunc
	done   chan error

	terms   atomic.Int64 // lead calls started
	leading atomic.Bool
	mu      sync.Mutex
	causes  []error // context.Cause of each ended term's lead context
	numbers []int64 // the fencing term of each lead call
}

// hooks are what all candidates of one test share.
type hooks struct {
	active  atomic.Int64 // lead calls running right now, all candidates together
	overlap atomic.Bool  // active exceeded 1 at some point
	// hold is how long lead runs before returning nil; 0 means until its
	// context is done.
	hold time.Duration
}

func (h *hooks) start(t *testing.T, cfg Config) *candidate {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = testLogger(t)
	}
	if cfg.TermDB == nil {
		cfg.TermDB = openDB(t, cfg.ConnString)
	}
	e, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	c := &candidate{e: e, cancel: cancel, done: make(chan error, 1)}
	go func() {
		c.done <- e.Run(ctx, func(ctx context.Context, term int64) error {
			if h.active.Add(1) > 1 {
				h.overlap.Store(true)
			}
			defer h.active.Add(-1)
			c.mu.Lock()
			c.numbers = append(c.numbers, term)
			c.mu.Unlock()
			c.terms.Add(1)
			c.leading.Store(true)
			defer c.leading.Store(false)
			if s := e.Status(); s.Role != RoleLeader || s.Term != term {
				t.Errorf("Status inside lead = %v, want leader of term %d", s, term)
			}
			if h.hold > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(h.hold):
					return nil
				}
			}
			<-ctx.Done()
			c.mu.Lock()
			c.causes = append(c.causes, context.Cause(ctx))
			c.mu.Unlock()
			return ctx.Err()
		})
	}()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop cancels the candidate's Run and requires it to return nil promptly.
// Calling it again is harmless.
func (c *candidate) stop(t *testing.T) { stopRun(t, c.cancel, c.done) }

// stopRun cancels a Run (of an Elector or a Scheduler) and requires it to
// return nil, on done, promptly. Calling it again is harmless.
func stopRun(t *testing.T, cancel context.CancelFunc, done chan error) {
	t.Helper()
	cancel()
	select {
	case err, ok := <-done:
		if ok {
			require.NoError(t, err)
			close(done)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

func (c *candidate) lastCause() error { return last(c, &c.causes) }

// lastTerm is the fencing term of the candidate's latest lead call.
func (c *candidate) lastTerm() int64 { return last(c, &c.numbers) }

// last returns the last element of *s, read under c.mu, or the zero value.
func last[T any](c *candidate, s *[]T) T {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero T
	if len(*s) == 0 {
		return zero
	}
	return (*s)[len(*s)-1]
}

func TestExclusive(t *testing.T) {
	t.Parallel()
	url := testDB(t)
	// Each term lasts 30 ms, so leadership changes hands many times.
	h := &hooks{hold: 30 * time.Millisecond}
	cfg := Config{ConnString: url, RetryInterval: 20 * time.Millisecond, CheckInterval: 10 * time.Millisecond}
	a := h.start(t, cfg)
	b := h.start(t, cfg)

	require.Eventually(t, func() bool {
		return a.terms.Load() >= 3 && b.terms.Load() >= 3
	}, 20*time.Second, 10*time.Millisecond, "both electors should lead several times")
	a.stop(t)
	b.stop(t)
	require.False(t, h.overlap.Load(), "two lead functions ran at the same time")
	for _, c := range []*candidate{a, b} {
		for _, cause := range c.causes {
			require.NotErrorIs(t, cause, ErrLockLost, "a healthy lock connection failed its check")
		}
	}
	require.Equal(t, RoleStandby, a.e.Status().Role)
	require.Equal(t, RoleStandby, b.e.Status().Role)
}

func TestTakeoverOnShutdown(t *testing.T) {
	t.Parallel()
	url := testDB(t)
	h := &hooks{}
	cfg := Config{ConnString: url} // default timings: the documented takeover time
	a := h.start(t, cfg)
	require.Eventually(t, a.leading.Load, 10*time.Second, 5*time.Millisecond)
	before := time.Now()
	require.Equal(t, RoleLeader, a.e.Status().Role)
	require.False(t, a.e.Status().Since.After(before))

	b := h.start(t, cfg)
	require.Never(t, b.leading.Load, 500*time.Millisecond, 10*time.Millisecond, "standby led while the leader held the lock")
	require.Equal(t, RoleStandby, b.e.Status().Role)

	a.stop(t)
	stopped := time.Now()
	require.ErrorIs(t, a.lastCause(), context.Canceled, "the old leader's lead context should have been cancelled")
	require.Equal(t, RoleStandby, a.e.Status().Role)

	require.Eventually(t, b.leading.Load, 5*time.Second, time.Millisecond)
	t.Logf("takeover after shutdown: %v", time.Since(stopped))
	require.Equal(t, RoleLeader, b.e.Status().Role)
	require.False(t, h.overlap.Load())
}

// terminateLockHolder ends the session holding an advisory lock in the
// database of url, as an operator would, and returns how many it ended.
func terminateLockHolder(t *testing.T, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(ctx, `
		SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'hearth-leader' AND datname = current_database()
		  AND pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted)`).Scan(&n)
	require.NoError(t, err)
	return n
}

func TestSelfFencing(t *testing.T) {
	t.Parallel()
	for _, electors := range []int{1, 2} {
		t.Run(fmt.Sprintf("electors=%d", electors), func(t *testing.T) {
			t.Parallel()
			url := testDB(t)
			h := &hooks{}
			cfg := Config{ConnString: url, RetryInterval: 50 * time.Millisecond}
			var cs []*candidate
			for range electors {
				cs = append(cs, h.start(t, cfg))
			}
			var old *candidate
			require.Eventually(t, func() bool {
				for _, c := range cs {
					if c.leading.Load() {
						old = c
						return true
					}
				}
				return false
			}, 10*time.Second, 5*time.Millisecond)
			termsBefore := h.totalTerms(cs)

			killed := time.Now()
			require.Equal(t, 1, terminateLockHolder(t, url))

			// The old leader's lead context is cancelled because its lock
			// connection failed, not because Run was stopped.
			require.Eventually(t, func() bool { return old.lastCause() != nil }, 5*time.Second, time.Millisecond)
			t.Logf("fenced %v after the backend was terminated", time.Since(killed))
			require.ErrorIs(t, old.lastCause(), ErrLockLost)

			// Someone (the other elector, or the same one after reconnecting) leads again.
			require.Eventually(t, func() bool {
				return h.totalTerms(cs) > termsBefore && h.active.Load() == 1
			}, 10*time.Second, 5*time.Millisecond)
		})
	}
}

func (h *hooks) totalTerms(cs []*candidate) int64 {
	var n int64
	for _, c := range cs {
		n += c.terms.Load()
	}
	return n
}

// TestKeyDocumentation checks what Key's documentation tells operators: the
// SQL that computes the key, and where the lock shows in pg_locks.
func TestKeyDocumentation(t *testing.T) {
	t.Parallel()
	url := testDB(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	require.Equal(t, int64(-3139509515664720772), Key(LockName))
	classid, objid := keyHalves(Key(LockName))
	require.Equal(t, uint32(3563993274), classid)
	require.Equal(t, uint32(3050863740), objid)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	var sqlKey int64
	require.NoError(t, conn.QueryRow(ctx,
		`SELECT ('x' || left(encode(sha256(convert_to('hearth/projections', 'UTF8')), 'hex'), 16))::bit(64)::bigint`).Scan(&sqlKey))
	require.Equal(t, Key(LockName), sqlKey)

	h := &hooks{}
	c := h.start(t, Config{ConnString: url})
	require.Eventually(t, c.leading.Load, 10*time.Second, 5*time.Millisecond)
	var app string
	require.NoError(t, conn.QueryRow(ctx, `
		SELECT a.application_name
		FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND l.classid::bigint = 3563993274 AND l.objid::bigint = 3050863740`).Scan(&app))
	require.Equal(t, ApplicationName, app)
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	const url = "postgres://u@127.0.0.1:5432/db"
	db := openDB(t, url) // never connects
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"missing conn string", Config{}, "Config.ConnString"},
		{"bad conn string", Config{ConnString: "postgres://u@127.0.0.1:notaport/db"}, "Config.ConnString"},
		{"negative retry", Config{ConnString: url, RetryInterval: -time.Second}, "Config.RetryInterval"},
		{"negative check interval", Config{ConnString: url, CheckInterval: -time.Second}, "Config.CheckInterval"},
		{"negative check timeout", Config{ConnString: url, CheckTimeout: -time.Second}, "Config.CheckTimeout"},
		{"missing term db", Config{ConnString: url}, "Config.TermDB"},
		{"negative lease", Config{ConnString: url, TermDB: db, Lease: -time.Second}, "Config.Lease"},
		{"check slower than lease", Config{ConnString: url, TermDB: db, CheckInterval: time.Second, CheckTimeout: time.Second}, "Config.CheckInterval + Config.CheckTimeout"},
		{"lease below a millisecond", Config{ConnString: url, TermDB: db, Lease: 3*time.Second + time.Microsecond}, "Config.Lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.TermDB == nil && tc.name != "missing term db" {
				tc.cfg.TermDB = db
			}
			_, err := New(tc.cfg)
			require.ErrorContains(t, err, tc.field)
		})
	}

	e, err := New(Config{ConnString: url, TermDB: db})
	require.NoError(t, err)
	require.Equal(t, LockName, e.cfg.Name)
	require.Equal(t, 200*time.Millisecond, e.cfg.RetryInterval)
	require.Equal(t, 500*time.Millisecond, e.cfg.CheckInterval)
	require.Equal(t, time.Second, e.cfg.CheckTimeout)
	require.Equal(t, 3*time.Second, e.cfg.Lease)
	require.Equal(t, 15*time.Second, e.cfg.TermTimeout)
	require.Equal(t, slog.Default(), e.cfg.Log)
	require.Contains(t, e.cfg.Holder, fmt.Sprintf("/%d", os.Getpid()))
	require.Equal(t, ApplicationName, e.connCfg.RuntimeParams["application_name"])
	require.Equal(t, "3000", e.connCfg.RuntimeParams["idle_session_timeout"])
	require.Equal(t, "5", e.connCfg.RuntimeParams["tcp_keepalives_idle"])
	require.Equal(t, 5*time.Second, e.connCfg.ConnectTimeout)
	require.Equal(t, Status{Role: RoleStandby, Since: e.Status().Since}, e.Status())
}

func TestRunMisuse(t *testing.T) {
	t.Parallel()
	const url = "postgres://u@127.0.0.1:1/db"
	e, err := New(Config{ConnString: url, TermDB: openDB(t, url), Log: testLogger(t)})
	require.NoError(t, err)
	require.ErrorContains(t, e.Run(t.Context(), nil), "lead is nil")

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	noop := func(context.Context, int64) error { return nil }
	go func() { done <- e.Run(ctx, noop) }()
	require.Eventually(t, e.running.Load, 5*time.Second, time.Millisecond)
	require.ErrorContains(t, e.Run(ctx, noop), "already running")
	cancel()
	require.NoError(t, <-done)
}

// logCounts counts log records by level and message.
type logCounts struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *logCounts) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}

// countingHandler feeds logCounts and passes records on to next.
type countingHandler struct {
	*logCounts
	next slog.Handler
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	h.counts[r.Level.String()+" "+r.Message]++
	h.mu.Unlock()
	return h.next.Handle(ctx, r)
}
func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.logCounts, h.next.WithAttrs(as)}
}
func (h countingHandler) WithGroup(g string) slog.Handler {
	return countingHandler{h.logCounts, h.next.WithGroup(g)}
}

func TestConnectionFailuresLoggedOncePerStreak(t *testing.T) {
	t.Parallel()
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	logs := &logCounts{counts: map[string]int{}}
	h := countingHandler{logs, testLogger(t).Handler()}
	url := "postgres://u@" + addr + "/db"
	e, err := New(Config{ConnString: url, TermDB: openDB(t, url), RetryInterval: 5 * time.Millisecond, Log: slog.New(h)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, func(context.Context, int64) error { return nil }) }()

	require.Eventually(t, func() bool { return h.count("DEBUG lock connection still failing") >= 5 }, 10*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, 1, h.count("WARN lock connection failed; retrying"))
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for k := range logs.counts {
		require.False(t, strings.HasPrefix(k, "ERROR"), "unexpected error log %q", k)
	}
	require.Equal(t, RoleStandby, e.Status().Role)
}

// proxy forwards TCP connections to PostgreSQL and can freeze them, as a
// network partition would: bytes stop flowing but no connection closes.
type proxy struct {
	l      net.Listener
	target string
	wg     sync.WaitGroup

	mu     sync.Mutex
	thawed chan struct{} // closed while traffic flows
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{l: l, target: target, thawed: make(chan struct{})}
	close(p.thawed)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// proxyTo starts a proxy to the cluster and returns it with url (one of
// the cluster's databases) rewritten to go through it.
func proxyTo(t *testing.T, url string) (*proxy, string) {
	t.Helper()
	p := startProxy(t, fmt.Sprintf("127.0.0.1:%d", cluster.Port()))
	proxied := strings.Replace(url, fmt.Sprintf("127.0.0.1:%d", cluster.Port()), p.l.Addr().String(), 1)
	require.NotEqual(t, url, proxied)
	return p, proxied
}

func (p *proxy) accept() {
	for {
		down, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, down, up)
		p.mu.Unlock()
		p.wg.Go(func() { p.pump(up, down) })
		p.wg.Go(func() { p.pump(down, up) })
	}
}

// pump copies src to dst, holding everything (data and EOF) while frozen.
func (p *proxy) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.waitThawed()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

func (p *proxy) waitThawed() {
	p.mu.Lock()
	ch := p.thawed
	p.mu.Unlock()
	<-ch
}

func (p *proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.thawed = make(chan struct{})
}

func (p *proxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

func (p *proxy) close() {
	p.l.Close()
	p.thaw()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestSelfFencingOnSilentNetwork cuts the leader off from PostgreSQL without
// closing anything: its periodic check times out and it steps down while the
// server still holds its lock, so no standby can have taken over yet. The
// server then ends the silent session when its lease (idle_session_timeout)
// runs out, and the standby takes over while the network is still cut.
func TestSelfFencingOnSilentNetwork(t *testing.T) {
	t.Parallel()
	url := testDB(t)
	p, proxied := proxyTo(t, url)

	h := &hooks{}
	timing := Config{RetryInterval: 50 * time.Millisecond, CheckInterval: 100 * time.Millisecond, CheckTimeout: 200 * time.Millisecond}
	cfgA, cfgB := timing, timing
	cfgA.ConnString, cfgB.ConnString = proxied, url
	cfgA.TermDB = openDB(t, url)
	a := h.start(t, cfgA)
	require.Eventually(t, a.leading.Load, 10*time.Second, 5*time.Millisecond)
	b := h.start(t, cfgB)

	cut := time.Now()
	p.freeze()
	require.Eventually(t, func() bool { return a.lastCause() != nil }, 5*time.Second, time.Millisecond)
	require.False(t, b.leading.Load(), "the server still holds the fenced leader's lock")
	t.Logf("fenced %v after the network went silent", time.Since(cut))
	require.ErrorIs(t, a.lastCause(), ErrLockLost)
	require.ErrorContains(t, a.lastCause(), "check lock")
	require.Equal(t, RoleStandby, a.e.Status().Role)

	// The lease runs out on the server: the standby leads, under a newer
	// term, although the old leader's connection is still open on its side.
	require.Eventually(t, b.leading.Load, 15*time.Second, 5*time.Millisecond)
	t.Logf("standby leads %v after the network went silent (lease %v)", time.Since(cut), b.e.Lease())
	require.Greater(t, b.lastTerm(), a.lastTerm())
	p.thaw()
	require.False(t, h.overlap.Load())
}

// Every acquisition begins a new, higher term, recorded with its holder.
func TestTermIncrementsOnEveryAcquisition(t *testing.T) {
	t.Parallel()
	url := testDB(t)
	h := &hooks{hold: 20 * time.Millisecond}
	cfg := Config{ConnString: url, RetryInterval: 10 * time.Millisecond, CheckInterval: 10 * time.Millisecond}
	ca, cb := cfg, cfg
	ca.Holder, cb.Holder = "a", "b"
	a, b := h.start(t, ca), h.start(t, cb)
	require.Eventually(t, func() bool { return a.terms.Load() >= 2 && b.terms.Load() >= 2 }, 20*time.Second, 5*time.Millisecond)
	a.stop(t)
	b.stop(t)

	var all []int64
	for _, c := range []*candidate{a, b} {
		require.IsIncreasing(t, c.numbers)
		all = append(all, c.numbers...)
	}
	seen := map[int64]bool{}
	for _, n := range all {
		require.False(t, seen[n], "term %d was begun twice", n)
		seen[n] = true
	}
	var term int64
	var holder string
	require.NoError(t, openDB(t, url).QueryRow(`SELECT term, holder FROM projection_leader WHERE name = $1`, LockName).Scan(&term, &holder))
	require.Equal(t, int64(len(all)), term, "one increment per lead call")
	last := a
	if b.lastTerm() > a.lastTerm() {
		last = b
	}
	require.Equal(t, last.e.Holder(), holder)
}

// A new term waits for the transactions of the old one still in flight:
// projection transactions read the term row FOR SHARE, and the increment
// needs a row lock.
func TestNewTermWaitsForOldTransactions(t *testing.T) {
	t.Parallel()
	url := testDB(t)
	h := &hooks{}
	cfg := Config{ConnString: url, RetryInterval: 20 * time.Millisecond}
	a := h.start(t, cfg)
	require.Eventually(t, a.leading.Load, 10*time.Second, 5*time.Millisecond)

	db := openDB(t, url)
	tx, err := db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	var term int64
	require.NoError(t, tx.QueryRow(`SELECT term FROM projection_leader WHERE name = $1 FOR SHARE`, LockName).Scan(&term))
	require.Equal(t, a.lastTerm(), term)

	b := h.start(t, cfg)
	a.stop(t)
	// b holds the lock but cannot begin its term while the old term's
	// transaction is open.
	require.Eventually(t, func() bool {
		var waiting bool
		err := db.QueryRow(`SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%projection_leader%')`).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 5*time.Millisecond, "the increment waits for the row lock")
	require.False(t, b.leading.Load())
	require.Equal(t, RoleStandby, b.e.Status().Role)

	require.NoError(t, tx.Commit())
	require.Eventually(t, b.leading.Load, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, term+1, b.lastTerm())
}

// On acquisition the Elector ends the sessions named FenceAppName: an
// earlier leader's leftovers, whose transactions would hold up the new term.
func TestFenceAppNameEndsLeftoverSessions(t *testing.T) {
	t.Parallel()
	url := testDB(t)
	ctx := t.Context()
	connCfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	connCfg.RuntimeParams["application_name"] = "leader-test-work"
	leftover, err := pgx.ConnectConfig(ctx, connCfg)
	require.NoError(t, err)
	defer leftover.Close(context.WithoutCancel(ctx))
	other, err := pgx.Connect(ctx, url) // another name: left alone
	require.NoError(t, err)
	defer other.Close(context.WithoutCancel(ctx))
	_, err = leftover.Exec(ctx, "BEGIN")
	require.NoError(t, err)

	h := &hooks{}
	c := h.start(t, Config{ConnString: url, FenceAppName: "leader-test-work"})
	require.Eventually(t, c.leading.Load, 10*time.Second, 5*time.Millisecond)
	_, err = leftover.Exec(ctx, "SELECT 1")
	require.Error(t, err, "the leftover session was ended")
	_, err = other.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
}

// The lock sessions are dialled as every Hearth connection is
// (database.ParseConfig): a server that goes silent is left after
// database.SilenceBound, not after TCP's retries.
func TestLockSessionAbandonsASilentServer(t *testing.T) {
	t.Parallel()
	url := testDB(t)
	e, err := New(Config{ConnString: url, TermDB: openDB(t, url)})
	require.NoError(t, err)
	conn, err := e.connect(t.Context())
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(t.Context()))
	ms := pgtest.Sockopt(t, conn.PgConn().Conn(), syscall.IPPROTO_TCP, pgtest.TCPUserTimeout)
	require.Equal(t, int(database.SilenceBound/time.Millisecond), ms)
}
