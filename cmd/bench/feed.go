package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"hearth/adapters/pubsub"
	"hearth/app/access"
	"hearth/app/command"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/refdata"
	"hearth/migrations"
)

// The event feed run: one Hearth in mode all; orders are created through
// the command handlers in the bench process at the latency runs' rate, and
// for each the bench measures, from the commit:
//
//   - to the answer of the long poll (GET /v1/events?after=...&wait=20s,
//     one follower, as a client app runs it) that carries its event;
//   - to the answer of GET /v1/orders/{id} with Consistency-Position (read
//     your writes), the reference: the other way a client sees its write.
//
// Then the same again while feedIdlePolls long polls of other merchants
// (which get no events) wait on the same instance: they cost the follower
// nothing if the watcher wakes only the merchants whose events became
// readable.
var feedIdlePolls = 200

// feedWait is the follower's and the idle polls' wait.
const feedWait = "20s"

type feedRun struct {
	feed, ryw stats
	// rywTimeouts are the read-your-writes GETs whose wait ended first
	// (CONSISTENCY_TIMEOUT, Consistency-Status: timeout): not counted in ryw.
	rywTimeouts int
}

// rywString is the reference column: the read-your-writes latencies, and
// the waits that timed out.
func (r feedRun) rywString() string {
	if r.rywTimeouts == 0 {
		return r.ryw.String()
	}
	return fmt.Sprintf("%s, %d timed out", r.ryw, r.rywTimeouts)
}

func (b *bench) feed(ctx context.Context) ([]row, error) {
	es, url, err := b.newDB(ctx, "feed", migrations.EventStore, migrations.ReadModel)
	if err != nil {
		return nil, err
	}
	defer es.Close()
	ref, err := refdata.New(es)
	if err != nil {
		return nil, err
	}
	key, err := ref.CreateKey(ctx, "feed", access.Operator, "")
	if err != nil {
		return nil, err
	}
	customer := uuid.New()
	if _, err := es.ExecContext(ctx, `INSERT INTO customers (id, merchant_id, name) VALUES (?, ?, 'Ada')`, customer, key.MerchantID); err != nil {
		return nil, err
	}
	idle := make([]string, feedIdlePolls)
	for i := range idle {
		k, err := ref.CreateKey(ctx, fmt.Sprintf("feed-idle-%d", i), access.Operator, "")
		if err != nil {
			return nil, err
		}
		idle[i] = k.Secret
	}
	hearth, base, err := b.startHearth(ctx, "event feed, mode all", url, "all")
	if err != nil {
		return nil, err
	}
	defer b.stopHearth(hearth)
	orders, err := orderHandlers(es)
	if err != nil {
		return nil, err
	}
	w := &feedWorkload{base: base, admin: b.adminOf(hearth), key: key.Secret, merchantID: key.MerchantID, customerID: customer, orders: orders,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * feedIdlePolls}}}
	defer w.client.CloseIdleConnections()

	b.progress("event feed: %d events/s for %s after %s of warm-up, one follower; then with %d idle long polls of other merchants",
		rate, latencyFor, latencyWarmUp, feedIdlePolls)
	warm, err := w.run(ctx, latencyWarmUp, nil)
	if err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	b.progress("event feed warm-up (not counted): feed %s, read your writes %s", warm.feed, warm.rywString())
	quiet, err := w.run(ctx, latencyFor, nil)
	if err != nil {
		return nil, err
	}
	busy, err := w.run(ctx, latencyFor, idle)
	if err != nil {
		return nil, fmt.Errorf("with idle polls: %w", err)
	}
	b.sampleRSS(hearth)
	name := fmt.Sprintf("event feed: commit to long-poll answer at %d events/s, %s (p50 / p99 / max)", rate, latencyFor)
	return []row{
		{name, quiet.feed.String(), quiet.rywString(),
			"reference: commit to the answer of GET /v1/orders/{id} with Consistency-Position (read your writes), same run"},
		{name + fmt.Sprintf(", %d other merchants' long polls waiting", feedIdlePolls), busy.feed.String(), busy.rywString(),
			"the idle polls' merchants get no events: the watcher does not wake them"},
	}, nil
}

// orderHandlers are the command handlers on the event store.
func orderHandlers(es *bun.DB) (command.OrderHandlers, error) {
	store, err := pubsub.NewStore(es, nil, nil)
	if err != nil {
		return command.OrderHandlers{}, err
	}
	tx, err := pubsub.NewTransactor(store)
	if err != nil {
		return command.OrderHandlers{}, err
	}
	return command.NewOrderHandlers(tx)
}

// feedWorkload is the event feed run's load: orders of one merchant, its
// follower, and the read-your-writes GETs.
type feedWorkload struct {
	base, admin, key       string // admin: the base of its admin listener
	merchantID, customerID string
	orders                 command.OrderHandlers
	client                 *http.Client
}

// feedPageBody is what the bench reads of an answer of the feed.
type feedPageBody struct {
	Events []struct {
		Type        string `json:"type"`
		AggregateID string `json:"aggregate_id"`
	} `json:"events"`
	NextCursor string `json:"next_cursor"`
}

// get sends GET path with the key and header (name, value pairs) and
// returns the status and body.
func (w *feedWorkload) get(ctx context.Context, key, path string, header ...string) (int, []byte, error) {
	res, body, err := w.do(ctx, key, path, header...)
	if err != nil {
		return 0, nil, err
	}
	return res.StatusCode, body, nil
}

// do sends GET path with the key and header (name, value pairs) and
// returns the answer, its body read.
func (w *feedWorkload) do(ctx context.Context, key, path string, header ...string) (*http.Response, []byte, error) {
	return send(ctx, w.client, http.MethodGet, w.base+path, key, nil, header...)
}

// end returns the cursor after the merchant's last readable event.
func (w *feedWorkload) end(ctx context.Context) (string, error) {
	cursor := ""
	for {
		status, body, err := w.get(ctx, w.key, "/v1/events?limit=1000&wait=0&after="+url.QueryEscape(cursor))
		if err != nil || status != http.StatusOK {
			return "", cmp.Or(err, fmt.Errorf("GET /v1/events: %d %s", status, body))
		}
		var p feedPageBody
		if err := json.Unmarshal(body, &p); err != nil {
			return "", err
		}
		if len(p.Events) == 0 {
			return cursor, nil
		}
		cursor = p.NextCursor
	}
}

// run creates orders at the rate for d, with idle long polls of the keys
// waiting throughout, and measures both latencies.
func (w *feedWorkload) run(ctx context.Context, d time.Duration, idle []string) (feedRun, error) {
	start, err := w.end(ctx)
	if err != nil {
		return feedRun{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		res      feedRun
		arrived  = newArrivals()
	)
	fail := func(err error) {
		mu.Lock()
		if ctx.Err() == nil {
			firstErr = cmp.Or(firstErr, err)
		}
		mu.Unlock()
	}
	var background sync.WaitGroup
	defer background.Wait()
	defer cancel()
	for _, key := range idle {
		background.Go(func() {
			for ctx.Err() == nil {
				if status, body, err := w.get(ctx, key, "/v1/events?wait="+feedWait); ctx.Err() == nil && (err != nil || status != http.StatusOK) {
					fail(cmp.Or(err, fmt.Errorf("idle poll: %d %s", status, body)))
					return
				}
			}
		})
	}
	if err := w.awaitWaiting(ctx, len(idle)); err != nil {
		return feedRun{}, err
	}
	background.Go(func() {
		cursor := start
		for ctx.Err() == nil {
			status, body, err := w.get(ctx, w.key, "/v1/events?wait="+feedWait+"&after="+url.QueryEscape(cursor))
			now := time.Now()
			if ctx.Err() != nil {
				return
			}
			if err != nil || status != http.StatusOK {
				fail(cmp.Or(err, fmt.Errorf("follower: %d %s", status, body)))
				return
			}
			var p feedPageBody
			if err := json.Unmarshal(body, &p); err != nil {
				fail(err)
				return
			}
			for _, e := range p.Events {
				arrived.seen(e.AggregateID, now)
			}
			cursor = p.NextCursor
		}
	})

	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var writes sync.WaitGroup
	for end := time.Now().Add(d); time.Now().Before(end); {
		<-tick.C
		// One goroutine per event, so that the rate holds when a commit is slow.
		writes.Go(func() {
			written, err := w.orders.Create(ctx, command.CreateOrder{Meta: event.Meta{MerchantID: w.merchantID, Actor: "bench",
				CorrelationID: uuid.New(), OccurredAt: time.Now()}, CustomerID: w.customerID, AmountCents: 100})
			at := time.Now()
			if err != nil {
				fail(err)
				return
			}
			id := written.Stream[0].StreamID
			arrived.committed(id, at)
			answer, body, err := w.do(ctx, w.key, "/v1/orders/"+id, "Consistency-Position", strconv.FormatInt(written.Position, 10))
			took := time.Since(at)
			mu.Lock()
			defer mu.Unlock()
			rywAnswer(&res.ryw, &res.rywTimeouts, &firstErr, answer, body, err, took)
		})
	}
	writes.Wait()
	arrived.drain()
	cancel()
	background.Wait()
	mu.Lock()
	defer mu.Unlock()
	if n := arrived.pending(); n > 0 && firstErr == nil {
		firstErr = fmt.Errorf("%d events never reached the follower", n)
	}
	res.feed = arrived.latencies()
	return res, firstErr
}

// awaitWaiting waits until at least n long polls wait on the instance
// (its hearth_event_feed_waiting gauge).
func (w *feedWorkload) awaitWaiting(ctx context.Context, n int) error {
	if n == 0 {
		return nil
	}
	ok := func(metrics string) bool {
		return metricLine(metrics, func(line string) bool {
			v, found := strings.CutPrefix(line, "hearth_event_feed_waiting ")
			f, _ := strconv.ParseFloat(v, 64)
			return found && int(f) >= n
		})
	}
	if err := awaitMetrics(ctx, w.admin, 30*time.Second, ok); err != nil {
		return fmt.Errorf("fewer than %d long polls waited: %w", n, err)
	}
	return nil
}
