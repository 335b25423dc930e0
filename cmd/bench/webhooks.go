package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"
	"golang.org/x/sync/errgroup"

	"hearth/adapters/pubsub"
	"hearth/adapters/webhooks"
	"hearth/app/command"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/migrations"
)

// Sizes of the webhook runs (BENCH_QUICK divides them by 10 too).
var (
	// slowReceiverTakes is how long the slow endpoint's receiver takes to
	// answer each delivery.
	slowReceiverTakes = 2 * time.Second
	// hookBacklog is the number of deliveries of the throughput run.
	hookBacklog = 5000
)

// webhookTurns: the fast endpoint runs alone and beside the slow one in
// turns, isolationFor / webhookTurns each.
const webhookTurns = 3

// hookReceiver is a webhook receiver in the bench process: it answers 204
// (after delay, and not before hold is closed), reports each order.created
// to its probe, and counts the distinct orders it got.
type hookReceiver struct {
	url   string
	srv   *http.Server
	delay time.Duration

	mu    sync.Mutex
	probe *arrivals
	hold  chan struct{}
	got   map[string]bool
	all   chan struct{} // closed when got reaches want
	want  int
}

func newHookReceiver(delay time.Duration) (*hookReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rc := &hookReceiver{url: "http://" + ln.Addr().String() + "/hook", delay: delay, got: map[string]bool{}}
	rc.srv = &http.Server{Handler: http.HandlerFunc(rc.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = rc.srv.Serve(ln) }()
	return rc, nil
}

func (rc *hookReceiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	hold := rc.hold
	rc.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	if rc.delay > 0 {
		select {
		case <-time.After(rc.delay):
		case <-r.Context().Done():
			return
		}
	}
	at := time.Now()
	var e struct {
		Type        string `json:"type"`
		AggregateID string `json:"aggregate_id"`
	}
	if json.Unmarshal(body, &e) == nil && e.Type == "order.created" {
		rc.mu.Lock()
		p := rc.probe
		if !rc.got[e.AggregateID] {
			rc.got[e.AggregateID] = true
			if rc.all != nil && len(rc.got) == rc.want {
				close(rc.all)
			}
		}
		rc.mu.Unlock()
		if p != nil {
			p.seen(e.AggregateID, at)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// measure reports what the receiver gets to p from now on.
func (rc *hookReceiver) measure(p *arrivals) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.probe = p
}

func (rc *hookReceiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.got)
}

func (rc *hookReceiver) close() { _ = rc.srv.Close() }

// addEndpoint registers url for the merchant, as POST /v1/webhook-endpoints
// would, created a minute ago (so that every event of the run is after it).
func addEndpoint(ctx context.Context, db *bun.DB, merchantID, url string) (string, error) {
	id := uuid.New()
	_, err := db.ExecContext(ctx, `INSERT INTO webhook_endpoints (id, merchant_id, url, secret, created_at, updated_at)
		VALUES (?, ?, ?, ?, now() - interval '1 minute', now())`, id, merchantID, url, webhook.NewSecret())
	return id, err
}

// webhooks: delivery latency from the commit to the receiver at rate
// events/s (one endpoint), beside the orders read model's latency of the same
// events; the same while a second endpoint of the merchant takes
// slowReceiverTakes per request; and the rate at which a receiver that was
// holding its requests drains a backlog of hookBacklog deliveries, beside
// the same signed POSTs made by Hearth's sender alone (no database), as many
// at once as the dispatcher sends to one endpoint.
func (b *bench) webhooks(ctx context.Context) ([]row, error) {
	h, err := b.startHooks(ctx, "webhooks")
	if err != nil {
		return nil, err
	}
	defer h.close()
	db, url, cmd, fast, merchantID, customerID := h.db, h.url, h.cmd, h.receiver, h.merchantID, h.customerID
	b.progress("webhooks: latency to one receiver, %d events/s for %s after %s of warm-up", rate, latencyFor, latencyWarmUp)
	visible, hook, _, _, err := h.latency(ctx, rate, latencyFor)
	if err != nil {
		return nil, err
	}
	b.sampleRSS(cmd)

	slow, err := newHookReceiver(slowReceiverTakes)
	if err != nil {
		return nil, err
	}
	defer slow.close()
	slowID, err := addEndpoint(ctx, db, merchantID, slow.url)
	if err != nil {
		return nil, err
	}
	// Alone and beside the slow endpoint in turns, so that a change in the
	// host's load favours neither.
	b.progress("webhooks: %s in %d turns, alone and beside an endpoint whose receiver takes %s per request", isolationFor, webhookTurns, slowReceiverTakes)
	alone, beside := newArrivals(), newArrivals()
	for range webhookTurns {
		for _, turn := range []struct {
			slowEnabled bool
			p           *arrivals
		}{{false, alone}, {true, beside}} {
			if _, err := db.ExecContext(ctx, `UPDATE webhook_endpoints SET enabled = ? WHERE id = ?`, turn.slowEnabled, slowID); err != nil {
				return nil, err
			}
			fast.measure(turn.p)
			if err := loadOrders(ctx, db, url, rate, isolationFor/webhookTurns, merchantID, customerID, newArrivals(), turn.p); err != nil {
				return nil, err
			}
		}
	}
	slowGot := slow.count()
	b.sampleRSS(cmd)

	// The throughput run has its receiver to itself.
	if _, err := db.ExecContext(ctx, `UPDATE webhook_endpoints SET enabled = false WHERE id IN (?, ?)`, h.endpointID, slowID); err != nil {
		return nil, err
	}
	drain, err := b.drainBacklog(ctx, db, b.adminOf(cmd), merchantID, customerID)
	if err != nil {
		return nil, err
	}
	b.sampleRSS(cmd)
	plain, err := plainPosts(ctx)
	if err != nil {
		return nil, err
	}
	return []row{
		{fmt.Sprintf("webhook delivery latency, commit to receiver, at %d events/s, %s (p50 / p99 / max)", rate, latencyFor),
			hook.String(), visible.String(),
			"reference: the orders read model's append-to-visible latency of the same events, in the same run"},
		{fmt.Sprintf("the same, %s, beside an endpoint of the merchant whose receiver takes %s per request", isolationFor, slowReceiverTakes),
			beside.latencies().String(), alone.latencies().String(),
			fmt.Sprintf("reference: the same endpoint alone, in %d turns with it; the slow endpoint got %d of its %d deliveries meanwhile (8 in flight at a time)",
				webhookTurns, slowGot, len(beside.latencies()))},
		{fmt.Sprintf("webhook throughput: a receiver drains a backlog of %d deliveries", hookBacklog),
			fmt.Sprintf("%.0f deliveries/s", drain), fmt.Sprintf("%.0f POSTs/s", plain),
			"plain: the same signed POSTs by Hearth's sender alone, 8 at a time (the dispatcher's cap per endpoint), no database"},
	}, nil
}

// hookRun is a Hearth in mode all on a database of its own, whose merchant
// has one webhook endpoint, answered by receiver.
type hookRun struct {
	b                      *bench
	db                     *bun.DB
	url                    string
	cmd                    *exec.Cmd
	receiver               *hookReceiver
	merchantID, customerID string
	endpointID             string
}

// startHooks creates the database name, the merchant with its endpoint and
// receiver, and starts the Hearth; it returns once that Hearth leads the
// webhook fan-out.
func (b *bench) startHooks(ctx context.Context, name string) (h *hookRun, err error) {
	h = &hookRun{b: b}
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	if h.db, h.url, err = b.newDB(ctx, name, migrations.EventStore, migrations.ReadModel); err != nil {
		return h, err
	}
	if h.merchantID, h.customerID, err = tenant(ctx, h.db); err != nil {
		return h, err
	}
	if h.receiver, err = newHookReceiver(0); err != nil {
		return h, err
	}
	if h.endpointID, err = addEndpoint(ctx, h.db, h.merchantID, h.receiver.url); err != nil {
		return h, err
	}
	if h.cmd, _, err = b.startHearth(ctx, name, h.url, "all"); err != nil {
		return h, err
	}
	return h, awaitMetric(b.adminOf(h.cmd), "\nhearth_leader_is_leader{unit=\"hearth/webhooks\"} 1\n")
}

func (h *hookRun) close() {
	if h.cmd != nil {
		h.b.stopHearth(h.cmd)
	}
	if h.receiver != nil {
		h.receiver.close()
	}
	if h.db != nil {
		h.db.Close()
	}
}

// latency creates orders at perSecond events/s for latencyWarmUp (not
// counted), then for d, and returns the latency of the measured ones from
// the commit to readable in the orders read model (visible) and to the
// receiver (hook), and the CPU each party spent meanwhile (the bench is
// the load generator and the receiver), over took (d, and the wait for
// the last arrivals).
func (h *hookRun) latency(ctx context.Context, perSecond int, d time.Duration) (visible, hook stats, cpu cpuSpent, took time.Duration, err error) {
	warm := newArrivals()
	h.receiver.measure(warm)
	if err := loadOrders(ctx, h.db, h.url, perSecond, latencyWarmUp, h.merchantID, h.customerID, newArrivals(), warm); err != nil {
		return nil, nil, cpu, 0, fmt.Errorf("warm-up: %w", err)
	}
	h.b.progress("webhooks warm-up at %d events/s (not counted): %s", perSecond, warm.latencies())
	v, k := newArrivals(), newArrivals()
	h.receiver.measure(k)
	before, from := cpuNow(h.cmd.Process.Pid), time.Now()
	if err := loadOrders(ctx, h.db, h.url, perSecond, d, h.merchantID, h.customerID, v, k); err != nil {
		return nil, nil, cpu, 0, err
	}
	return v.latencies(), k.latencies(), cpuNow(h.cmd.Process.Pid).since(before), time.Since(from), nil
}

// awaitMetric waits until the /metrics of the admin listener at admin
// shows line.
func awaitMetric(admin, line string) error {
	ok := func(metrics string) bool { return strings.Contains(metrics, line) }
	if err := awaitMetrics(context.Background(), admin, 30*time.Second, ok); err != nil {
		return fmt.Errorf("/metrics never showed %q: %w", strings.TrimSpace(line), err)
	}
	return nil
}

// awaitCaughtUp waits until the /metrics of the admin listener at admin
// shows every projection caught up (no unacknowledged message).
func awaitCaughtUp(admin string) error {
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		res, err := http.Get(admin + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		lagging := false
		for line := range strings.SplitSeq(string(body), "\n") {
			if strings.HasPrefix(line, "hearth_projection_lag_events{") && !strings.HasSuffix(line, " 0") {
				lagging = true
			}
		}
		if !lagging && strings.Contains(string(body), "hearth_projection_lag_events{") {
			return nil
		}
	}
	return fmt.Errorf("the projections did not catch up within 2 minutes")
}

// drainBacklog registers a receiver that holds every request, creates
// hookBacklog orders (16 at a time), waits until the fan-out has queued
// all of their deliveries and the read models have caught up (so that the
// drain has the process to itself), then lets the receiver answer and
// returns the rate at which every order reached it.
func (b *bench) drainBacklog(ctx context.Context, db *bun.DB, admin, merchantID, customerID string) (float64, error) {
	rc, err := newHookReceiver(0)
	if err != nil {
		return 0, err
	}
	defer rc.close()
	release := make(chan struct{})
	rc.hold, rc.all, rc.want = release, make(chan struct{}), hookBacklog
	id, err := addEndpoint(ctx, db, merchantID, rc.url)
	if err != nil {
		return 0, err
	}
	b.progress("webhooks: a backlog of %d deliveries to one held receiver", hookBacklog)
	store, err := pubsub.NewStore(db, nil, nil)
	if err != nil {
		return 0, err
	}
	tx, err := pubsub.NewTransactor(store)
	if err != nil {
		return 0, err
	}
	orders, err := command.NewOrderHandlers(tx)
	if err != nil {
		return 0, err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for range hookBacklog {
		g.Go(func() error {
			_, err := orders.Create(gctx, command.CreateOrder{Meta: event.Meta{MerchantID: merchantID, Actor: "bench",
				CorrelationID: uuid.New(), OccurredAt: time.Now()}, CustomerID: customerID, AmountCents: 100})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = ? AND status = 'pending'`, id).Scan(&n); err != nil {
			return 0, err
		}
		if n == hookBacklog {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the fan-out queued %d of %d deliveries in a minute", n, hookBacklog)
		}
	}
	if err := awaitCaughtUp(admin); err != nil {
		return 0, err
	}
	start := time.Now()
	close(release)
	select {
	case <-rc.all:
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("the receiver got %d of %d deliveries in 5 minutes", rc.count(), hookBacklog)
	}
	return float64(hookBacklog) / time.Since(start).Seconds(), nil
}

// plainPosts makes hookBacklog signed POSTs of an order.created body with
// Hearth's sender alone, 8 at a time, to a receiver like the throughput
// run's, and returns their rate.
func plainPosts(ctx context.Context) (float64, error) {
	rc, err := newHookReceiver(0)
	if err != nil {
		return 0, err
	}
	defer rc.close()
	sender, err := webhooks.NewSender(webhooks.SenderConfig{Timeout: time.Minute, AllowPrivate: true})
	if err != nil {
		return 0, err
	}
	secret := webhook.NewSecret()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	start := time.Now()
	for range hookBacklog {
		g.Go(func() error {
			id := uuid.New()
			body := fmt.Sprintf(`{"id":"%s","type":"order.created","schema_version":1,"aggregate_type":"order","aggregate_id":"%s","aggregate_version":1,"data":{"amount_cents":100}}`, uuid.New(), id)
			if out := sender.Send(gctx, rc.url, []string{secret}, id, []byte(body)); !out.OK() {
				return fmt.Errorf("plain POST: %s", out.Err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return float64(hookBacklog) / time.Since(start).Seconds(), nil
}
