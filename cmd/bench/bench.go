package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"
	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
	"hearth/app/command"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/database"
	"hearth/internal/pgcluster"
	"hearth/migrations"
)

type bench struct {
	cluster  *pgcluster.Cluster
	bin      string
	log      *slog.Logger
	progress func(string, ...any)

	mu        sync.Mutex
	procs     []*exec.Cmd
	peakRSS   int64               // kB, over every Hearth process
	rssOf     map[*exec.Cmd]int64 // kB, per process
	names     map[*exec.Cmd]string
	admins    map[*exec.Cmd]string        // base URL of each process's admin listener
	profiling map[*exec.Cmd]func()        // ends the recording of each process's profile
	profiles  map[string]*profile.Profile // CPU profiles by process name (profileCPU)
}

// newDB creates a database with the given migration sets and opens it.
func (b *bench) newDB(ctx context.Context, name string, sets ...migrations.Set) (*bun.DB, string, error) {
	admin, err := sql.Open("pgx", b.cluster.URL("postgres"))
	if err != nil {
		return nil, "", err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, "", err
	}
	url := b.cluster.URL(name)
	db, err := database.Open(ctx, url, 40)
	if err != nil {
		return nil, "", err
	}
	for _, set := range sets {
		if _, err := migrations.Apply(ctx, db.DB, set); err != nil {
			return nil, "", err
		}
	}
	return db, url, nil
}

// settle vacuums and analyses db's tables, then checkpoints the cluster,
// so that a run on db does not share the machine with autovacuum's or the
// checkpointer's catching up on what was just written.
func (b *bench) settle(ctx context.Context, db *bun.DB) error {
	if _, err := db.ExecContext(ctx, "VACUUM ANALYZE"); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	if _, err := db.ExecContext(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	return nil
}

// dropDB closes db and drops its database name, whose data would
// otherwise keep autovacuum busy during the next runs.
func (b *bench) dropDB(ctx context.Context, db *bun.DB, name string) error {
	if err := db.Close(); err != nil {
		return err
	}
	admin, err := sql.Open("pgx", b.cluster.URL("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// startHearth runs the Hearth binary in mode (api, worker or all) on url
// and waits until it is ready: in mode all, until it leads the projections
// and they run live (caught up, router running). The fair-share limits and
// the key cache are off (capacity runs), or Hearth's defaults (withLimits).
func (b *bench) startHearth(ctx context.Context, name, url, mode string, withLimits ...bool) (*exec.Cmd, string, error) {
	return b.start(ctx, hearthRun{name: name, url: url, mode: mode, limits: len(withLimits) > 0 && withLimits[0], live: mode != "api"})
}

// hearthRun is how to start one Hearth process: live waits until its
// projections run live (up to 30 s), otherwise it only waits until it
// answers /readyz.
type hearthRun struct {
	name, url, mode string
	limits, live    bool
	env             []string // more settings, NAME=value
	bin             string   // "": the binary of this tree
}

// Every process has an admin listener besides its public one (base): its
// /metrics and its profiles are there (adminOf). Its CPU profile is
// recorded from the moment it is ready until stopHearth, under its name.
func (b *bench) start(ctx context.Context, h hearthRun) (*exec.Cmd, string, error) {
	name, url, mode := h.name, h.url, h.mode
	addrs, err := freeAddrs(2)
	if err != nil {
		return nil, "", err
	}
	addr, adminAddr := addrs[0], addrs[1]
	cmd := exec.Command(cmp.Or(h.bin, b.bin), "serve")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "HTTP_ADDR="+addr, "ADMIN_ADDR="+adminAddr, "MODE="+mode, "MASTER_KEY="+benchMasterKey,
		"LOG_LEVEL="+cmp.Or(os.Getenv("BENCH_HEARTH_LOG_LEVEL"), "warn"), "POLL_INTERVAL="+fallbackPoll.String(),
		// The webhook receivers listen on loopback, in the bench process; a
		// held receiver keeps its requests until the backlog is queued.
		"WEBHOOK_ALLOW_PRIVATE=true", "WEBHOOK_TIMEOUT=1m")
	if !h.limits {
		// One key of one merchant drives the throughput runs: the fair-share
		// limits (which would hold it to RATE_LIMIT_KEY_RPS) are off, and so
		// is the key cache, so that Hearth has Postgres look its key up on
		// every request as the pgbench script it is compared with does (a
		// write, in its own transaction: the write path in docs/design.md).
		// The lookups of the key are many at once, and lookups in flight
		// count against the client address's budget of unknown keys: it is
		// off too.
		cmd.Env = append(cmd.Env, "RATE_LIMIT_KEY_RPS=0", "RATE_LIMIT_MERCHANT_RPS=0", "RATE_LIMIT_MERCHANT_IN_FLIGHT=0",
			"RATE_LIMIT_UNKNOWN_KEY_RPS=0", "KEY_CACHE_TTL=0")
	}
	cmd.Env = append(cmd.Env, h.env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	b.mu.Lock()
	b.procs = append(b.procs, cmd)
	if b.names == nil {
		b.names, b.rssOf, b.admins, b.profiling = map[*exec.Cmd]string{}, map[*exec.Cmd]int64{}, map[*exec.Cmd]string{}, map[*exec.Cmd]func(){}
	}
	b.names[cmd] = name
	b.admins[cmd] = "http://" + adminAddr
	b.mu.Unlock()
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	get := func(url string) (string, bool) {
		res, err := http.Get(url)
		if err != nil {
			return "", false
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		return string(body), err == nil && res.StatusCode == http.StatusOK
	}
	for time.Now().Before(deadline) {
		if _, ready := get(base + "/readyz"); ready {
			// The admin listener answers too (it may start after the
			// public one).
			if metrics, up := get(b.adminOf(cmd) + "/metrics"); up && (!h.live || allLive(metrics)) {
				stop := b.profileCPU(cmd, name)
				b.mu.Lock()
				b.profiling[cmd] = stop
				b.mu.Unlock()
				return cmd, base, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, "", fmt.Errorf("hearth (mode %s) was not ready within 30s", mode)
}

// freeAddrs are n loopback addresses, each with a port free at the moment
// (held together, so that they differ).
func freeAddrs(n int) ([]string, error) {
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// adminOf is the base URL of the admin listener of a Hearth process the
// bench started.
func (b *bench) adminOf(cmd *exec.Cmd) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.admins[cmd]
}

// awaitMetrics reads the /metrics of the admin listener at admin until ok
// holds for it, for up to limit.
func awaitMetrics(ctx context.Context, admin string, limit time.Duration, ok func(metrics string) bool) error {
	var lastErr error
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_, body, err := send(ctx, http.DefaultClient, http.MethodGet, admin+"/metrics", "", nil)
		if err != nil {
			lastErr = err
			continue
		}
		if ok(string(body)) {
			return nil
		}
	}
	if lastErr != nil {
		return fmt.Errorf("not within %s (last error: %w)", limit, lastErr)
	}
	return fmt.Errorf("not within %s", limit)
}

// metricLine reports whether a line of metrics satisfies ok.
func metricLine(metrics string, ok func(line string) bool) bool {
	return slices.ContainsFunc(strings.Split(metrics, "\n"), ok)
}

// allLive reports whether /metrics shows every projection led and live
// on this process, the bench's only worker.
func allLive(metrics string) bool {
	n := 0
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "hearth_projections_live{") {
			if !strings.HasSuffix(line, " 1") {
				return false
			}
			n++
		}
	}
	return n > 0
}

// sampleRSS records the process's peak RSS so far.
func (b *bench) sampleRSS(cmd *exec.Cmd) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			b.mu.Lock()
			b.peakRSS = max(b.peakRSS, kb)
			b.rssOf[cmd] = max(b.rssOf[cmd], kb)
			b.mu.Unlock()
		}
	}
}

func (b *bench) stopHearth(cmd *exec.Cmd) {
	b.sampleRSS(cmd)
	b.mu.Lock()
	stopProfile := b.profiling[cmd]
	delete(b.profiling, cmd)
	b.mu.Unlock()
	if stopProfile != nil {
		stopProfile()
	}
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	b.mu.Lock()
	b.procs = slices.DeleteFunc(b.procs, func(c *exec.Cmd) bool { return c == cmd })
	b.mu.Unlock()
}

func (b *bench) stopProcesses() {
	b.mu.Lock()
	procs := slices.Clone(b.procs)
	b.mu.Unlock()
	for _, c := range procs {
		b.stopHearth(c)
	}
}

// tenant creates a merchant and a customer on the event store.
func tenant(ctx context.Context, es *bun.DB) (merchantID, customerID string, err error) {
	merchantID, customerID = uuid.New(), uuid.New()
	if _, err = es.ExecContext(ctx, `INSERT INTO merchants (id, name) VALUES (?, ?)`, merchantID, "bench-"+merchantID); err != nil {
		return
	}
	_, err = es.ExecContext(ctx, `INSERT INTO customers (id, merchant_id, name) VALUES (?, ?, 'Ada')`, customerID, merchantID)
	return
}

// stats are latencies.
type stats []time.Duration

func (s stats) pct(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	i := int(p * float64(len(c)-1))
	return c[i]
}

func (s stats) String() string {
	if len(s) == 0 {
		return "no samples"
	}
	return fmt.Sprintf("%s / %s / %s (n=%d)", ms(s.pct(0.5)), ms(s.pct(0.99)), ms(s.pct(1)), len(s))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// visibleSQL makes the read model announce each orders row on
// visibleChannel when the transaction that wrote it commits: the moment
// the row becomes readable. Watching costs one notification per event,
// where polling every pending id would cost a query per poll and still
// miss by up to the poll interval.
const visibleSQL = `CREATE OR REPLACE FUNCTION bench_order_visible() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('` + visibleChannel + `', NEW.id::text);
	RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS bench_order_visible ON orders;
CREATE TRIGGER bench_order_visible AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION bench_order_visible();`

const visibleChannel = "bench_visible"

// measureLatency creates orders through the command handlers at a steady
// rate for d; for each, it measures from the commit to the moment the
// orders row is readable in db (the read model shares the event store's
// database), as the notification of visibleSQL reports it on a LISTEN
// connection to url.
func measureLatency(ctx context.Context, db *bun.DB, url string, d time.Duration) (stats, error) {
	merchantID, customerID, err := tenant(ctx, db)
	if err != nil {
		return nil, err
	}
	visible := newArrivals()
	err = loadOrders(ctx, db, url, rate, d, merchantID, customerID, visible)
	return visible.latencies(), err
}

// loadOrders creates orders of the merchant through the command handlers
// at perSecond a second for d, and notes each commit in visible and the others
// (what else watches them: a webhook receiver); visible also sees the
// moment each orders row became readable in db (visibleSQL, on a LISTEN
// connection to url). It returns once all of them have seen every order,
// or 30 s after the load (the rest are left out of the figures).
func loadOrders(ctx context.Context, db *bun.DB, url string, perSecond int, d time.Duration, merchantID, customerID string, visible *arrivals, others ...*arrivals) error {
	if _, err := db.ExecContext(ctx, visibleSQL); err != nil {
		return fmt.Errorf("visibility trigger: %w", err)
	}
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer listener.Close(context.WithoutCancel(ctx))
	if _, err := listener.Exec(ctx, "LISTEN "+visibleChannel); err != nil {
		return err
	}
	tx, err := transactor(db)
	if err != nil {
		return err
	}
	orders, err := command.NewOrderHandlers(tx)
	if err != nil {
		return err
	}
	watchers := append([]*arrivals{visible}, others...)
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		firstErr = cmp.Or(firstErr, err)
		mu.Unlock()
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			note, err := listener.WaitForNotification(watchCtx)
			if err != nil {
				if watchCtx.Err() == nil {
					fail(err)
				}
				return
			}
			visible.seen(note.Payload, time.Now())
		}
	}()
	createOrder := func() {
		w, err := orders.Create(ctx, command.CreateOrder{Meta: event.Meta{MerchantID: merchantID, Actor: "bench",
			CorrelationID: uuid.New(), OccurredAt: time.Now()}, CustomerID: customerID, AmountCents: 100})
		at := time.Now()
		if err != nil {
			fail(err)
			return
		}
		for _, a := range watchers {
			a.committed(w.Stream[0].StreamID, at)
		}
	}
	// Each tick starts every order due by then: a ticker drops the ticks
	// its reader missed, which on a busy machine would lower the rate the
	// row names. One goroutine per order, so the rate holds even when a
	// commit is slow.
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	var wg sync.WaitGroup
	total := int(int64(perSecond) * int64(d) / int64(time.Second))
	start := time.Now()
	for made := 0; made < total; {
		<-tick.C
		due := min(total, int(int64(perSecond)*int64(time.Since(start))/int64(time.Second)))
		for ; made < due; made++ {
			wg.Go(createOrder)
		}
	}
	wg.Wait()
	for _, a := range watchers {
		a.drain()
	}
	stopWatching()
	<-watched
	mu.Lock()
	defer mu.Unlock()
	return firstErr
}

// arrivals pairs each id's commit with the moment it was seen, in
// whichever order the two are recorded (the watcher may see an id before
// its writer has noted the commit).
type arrivals struct {
	mu      sync.Mutex
	commits map[string]time.Time // id -> commit, not yet seen
	early   map[string]time.Time // id -> seen, commit not yet recorded
	out     stats
}

func newArrivals() *arrivals {
	return &arrivals{commits: map[string]time.Time{}, early: map[string]time.Time{}}
}

func (a *arrivals) committed(id string, at time.Time) { a.note(id, at, true) }

func (a *arrivals) seen(id string, at time.Time) { a.note(id, at, false) }

// note records id's commit or sighting; once both are known, the time
// between them counts.
func (a *arrivals) note(id string, at time.Time, commit bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	mine, other := a.early, a.commits
	if commit {
		mine, other = a.commits, a.early
	}
	o, ok := other[id]
	if !ok {
		mine[id] = at
		return
	}
	delete(other, id)
	if commit {
		a.out = append(a.out, max(0, o.Sub(at)))
	} else {
		a.out = append(a.out, max(0, at.Sub(o)))
	}
}

// pending is how many committed ids have not been seen.
func (a *arrivals) pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.commits)
}

// drain waits for the committed ids still unseen; any not seen after 30 s
// are left out of the figures.
func (a *arrivals) drain() {
	for drained := time.Now(); time.Since(drained) < 30*time.Second && a.pending() > 0; time.Sleep(time.Millisecond) {
	}
}

func (a *arrivals) latencies() stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.out
}

// warmUp runs the latency load for latencyWarmUp and discards the figures,
// so that the measured run is the steady state. Right after a leadership
// term begins (the process reports "leader" before the term's pipeline has
// caught up and started its router, on a fresh pool of cold connections),
// events pile up and then drain at the live path's margin over the rate:
// that start-up transient is a takeover property, not the steady-state
// latency, and alone it dominated p99 and max (about 0.3 s here, 1.6 s on a
// loaded machine). It is printed, not hidden.
func (b *bench) warmUp(ctx context.Context, db *bun.DB, url string) error {
	s, err := measureLatency(ctx, db, url, latencyWarmUp)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	b.progress("latency warm-up (not counted): %s", s)
	return nil
}

func (b *bench) latencyHearth(ctx context.Context) (stats, error) {
	db, url, err := b.newDB(ctx, "latency", migrations.EventStore, migrations.ReadModel)
	if err != nil {
		return nil, err
	}
	cmd, _, err := b.startHearth(ctx, "latency", url, "all")
	if err != nil {
		return nil, err
	}
	defer b.stopHearth(cmd)
	b.progress("latency: Hearth (NOTIFY + %s fallback), %d events/s for %s after %s of warm-up", fallbackPoll, rate, latencyFor, latencyWarmUp)
	if err := b.warmUp(ctx, db, url); err != nil {
		return nil, err
	}
	s, err := measureLatency(ctx, db, url, latencyFor)
	b.sampleRSS(cmd)
	return s, err
}

func (b *bench) latencyPlain(ctx context.Context) (stats, error) {
	db, url, err := b.newDB(ctx, "latency_plain", migrations.EventStore, migrations.ReadModel)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	orders, err := readmodel.NewOrders(db)
	if err != nil {
		return nil, err
	}
	poison, err := projector.SQLPublisher(db.DB, b.log)
	if err != nil {
		return nil, err
	}
	router, err := projector.NewRouter(projector.RouterConfig{
		Subscriber: projector.SQLSubscribers(db.DB, b.log, plainPollEvery), Poison: poison, Log: b.log,
	}, projector.ProjectionOf(orders.Aggregate(), orders.Apply, nil))
	if err != nil {
		return nil, err
	}
	stop := runRouter(ctx, router)
	defer stop()
	b.progress("latency: plain watermill-sql polling every %s, %d events/s for %s after %s of warm-up", plainPollEvery, rate, latencyFor, latencyWarmUp)
	if err := b.warmUp(ctx, db, url); err != nil {
		return nil, err
	}
	return measureLatency(ctx, db, url, latencyFor)
}

// transactor is the write path on db: the store and its Transactor.
func transactor(db *bun.DB) (*pubsub.Transactor, error) {
	store, err := pubsub.NewStore(db, nil, nil)
	if err != nil {
		return nil, err
	}
	return pubsub.NewTransactor(store)
}

// runRouter runs router until the returned stop is called.
func runRouter(ctx context.Context, router interface {
	Run(context.Context) error
	Running() chan struct{}
}) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case <-done:
	}
	return func() { cancel(); <-done }
}

func databaseOpen(ctx context.Context, url string) (*bun.DB, error) {
	return database.Open(ctx, url, 40)
}

// rssByProcess lists each Hearth process's peak RSS.
func (b *bench) rssByProcess() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var parts []string
	for cmd, kb := range b.rssOf {
		parts = append(parts, fmt.Sprintf("%s: %.0f MB", b.names[cmd], float64(kb)/1024))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// benchMasterKey is the MASTER_KEY of every Hearth the bench starts: fixed,
// since every Hearth of one database must open what another sealed.
const benchMasterKey = "bench:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
