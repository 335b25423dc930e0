package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"hearth/domain/uuid"
)

// The replicas section (BENCH_ONLY=replicas): one Hearth in mode all
// serves a read load beside a write load, first with everything on the
// primary, then with its GETs on a streaming replica of the same cluster
// (READ_REPLICA_URLS; pgcluster.StartReplica), same run and same load:
//
//   - readers: replicaReaders clients GET one order by id (drawn among the
//     seeded ones), as many GET the first page of the orders list (20);
//   - writers meanwhile: replicaWriters clients POST /v1/orders;
//   - then read your writes: replicaRYWRate writes a second, each a POST
//     and at once a GET of the order with its Consistency-Position, timed
//     from the POST's answer to the GET's.
//
// Both servers run on the bench's two cores, so the replica takes CPU from
// the primary: the figures show what moving reads costs and gives on one
// machine, not the capacity another machine would add.
var (
	replicaOrders  = 10_000
	replicaFor     = 15 * time.Second
	replicaRYWFor  = 10 * time.Second
	replicaReaders = 4
	replicaWriters = 2
	replicaRYWRate = 50
)

// replicaRun is what one configuration gave.
type replicaRun struct {
	get, list, post postResult
	ryw             stats
	rywTimeouts     int
	// rywOnPrimary are the read-your-writes GETs sent to the replica that
	// the primary answered (the replica did not show the write in time).
	rywOnPrimary float64
}

func (b *bench) replicas(ctx context.Context) ([]row, error) {
	es, url, _, keys, err := b.merchants(ctx, "replicas", "replicas")
	if err != nil {
		return nil, err
	}
	defer es.Close()
	key, customerID := keys[0], uuid.New()
	b.progress("replicas: seeding %d orders", replicaOrders)
	ids, err := seedOrdersFor(ctx, es, key.MerchantID, customerID, replicaOrders)
	if err != nil {
		return nil, err
	}
	// The cluster commits without flushing (synchronous_commit off) and a
	// primary streams only flushed WAL: flush every 10ms, not every 200ms,
	// so the replica follows as it would a durable primary.
	for _, stmt := range []string{`ALTER SYSTEM SET wal_writer_delay = '10ms'`, `SELECT pg_reload_conf()`} {
		if _, err := es.ExecContext(ctx, stmt); err != nil {
			return nil, err
		}
	}
	b.progress("replicas: starting a streaming replica (pg_basebackup)")
	replica, err := b.cluster.StartReplica(ctx)
	if err != nil {
		return nil, err
	}
	defer replica.Stop()

	body, _ := json.Marshal(map[string]any{"customer_id": customerID, "amount_cents": 12000})
	w := &replicaLoad{key: key.Secret, ids: ids, order: body,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4 * (replicaReaders + replicaWriters)}}}
	defer w.client.CloseIdleConnections()
	var runs [2]replicaRun
	for i, c := range []struct {
		name string
		env  []string
	}{
		{"replicas: everything on the primary", nil},
		{"replicas: GETs on the replica", []string{"READ_REPLICA_URLS=" + replica.URL("replicas")}},
	} {
		hearth, base, err := b.start(ctx, hearthRun{name: c.name, url: url, mode: "all", live: true, env: c.env})
		if err != nil {
			return nil, err
		}
		w.base, w.admin = base, b.adminOf(hearth)
		if c.env != nil {
			if err := w.awaitMetric(ctx, "hearth_replica_usable{", " 1"); err != nil {
				b.stopHearth(hearth)
				return nil, err
			}
		}
		b.progress("%s: %d clients GET an order, %d the first page of the list, %d POST orders, for %s; then read your writes at %d writes/s for %s",
			c.name, replicaReaders, replicaReaders, replicaWriters, replicaFor, replicaRYWRate, replicaRYWFor)
		runs[i], err = w.run(ctx)
		b.sampleRSS(hearth)
		b.stopHearth(hearth)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
	}
	onReplica, onPrimary := runs[1], runs[0]
	load := fmt.Sprintf("%d clients each, beside %d writers, %s", replicaReaders, replicaWriters, replicaFor)
	ryw := func(r replicaRun) string {
		s := r.ryw.String()
		if r.rywTimeouts > 0 {
			s += fmt.Sprintf(", %d timed out", r.rywTimeouts)
		}
		return s
	}
	return []row{
		{"GET /v1/orders/{id}, " + load + " (requests/s, p99)", onReplica.get.String(), onPrimary.get.String(),
			"Hearth: GETs on a streaming replica (READ_REPLICA_URLS); reference: everything on the primary; same run, same load; both servers on the same two cores"},
		{"GET /v1/orders (first page of 20), " + load + " (requests/s, p99)", onReplica.list.String(), onPrimary.list.String(), "as above"},
		{fmt.Sprintf("POST /v1/orders meanwhile, %d clients (requests/s, p99)", replicaWriters), onReplica.post.String(), onPrimary.post.String(),
			"the command rate beside those reads"},
		{fmt.Sprintf("read your writes: a POST's answer to its GET's with Consistency-Position, %d writes/s, %s (p50 / p99 / max)", replicaRYWRate, replicaRYWFor),
			ryw(onReplica), ryw(onPrimary),
			fmt.Sprintf("Hearth: the GET waits until the replica shows the write (%.0f of them answered by the primary instead); reference: on the primary", onReplica.rywOnPrimary)},
	}, nil
}

// replicaLoad is the replicas section's load on one Hearth.
type replicaLoad struct {
	base, key string
	admin     string // the base of the admin listener
	ids       []string
	order     []byte // the body of a POST /v1/orders
	client    *http.Client
}

// send sends one request and returns its answer, its body read.
func (w *replicaLoad) send(ctx context.Context, method, path string, body []byte, header ...string) (*http.Response, []byte, error) {
	return send(ctx, w.client, method, w.base+path, w.key, body, header...)
}

// send sends method url with the key (a bearer key, none when empty), the
// body (JSON) and header (name, value pairs), and returns the answer, its
// body read.
func send(ctx context.Context, client *http.Client, method, url, key string, body []byte, header ...string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	return res, raw, err
}

// run runs the mixed load, then the read-your-writes load.
func (w *replicaLoad) run(ctx context.Context) (replicaRun, error) {
	var res replicaRun
	var mu sync.Mutex
	loop := func(into *postResult, want int, request func() (string, string, []byte)) func() {
		return func() {
			start := time.Now()
			for end := start.Add(replicaFor); time.Now().Before(end) && ctx.Err() == nil; {
				method, path, body := request()
				t0 := time.Now()
				answer, raw, err := w.send(ctx, method, path, body)
				took := time.Since(t0)
				mu.Lock()
				switch {
				case err != nil:
					into.failures++
					into.firstErr = cmp.Or(into.firstErr, err)
				case answer.StatusCode != want:
					into.failures++
					into.firstErr = cmp.Or(into.firstErr, fmt.Errorf("%s %s: %s %s", method, path, answer.Status, raw))
				default:
					into.lat = append(into.lat, took)
				}
				mu.Unlock()
			}
		}
	}
	var wg sync.WaitGroup
	start := time.Now()
	for range replicaReaders {
		wg.Go(loop(&res.get, http.StatusOK, func() (string, string, []byte) {
			return http.MethodGet, "/v1/orders/" + w.ids[rand.IntN(len(w.ids))], nil
		}))
		wg.Go(loop(&res.list, http.StatusOK, func() (string, string, []byte) { return http.MethodGet, "/v1/orders?page_size=20", nil }))
	}
	for range replicaWriters {
		wg.Go(loop(&res.post, http.StatusCreated, func() (string, string, []byte) { return http.MethodPost, "/v1/orders", w.order }))
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.get.elapsed, res.list.elapsed, res.post.elapsed = elapsed, elapsed, elapsed
	for _, r := range []postResult{res.get, res.list, res.post} {
		if r.failures > 0 {
			return res, fmt.Errorf("%d requests failed, the first: %w", r.failures, r.firstErr)
		}
	}

	fallbacks := func() float64 {
		v, _ := w.metric(ctx, `hearth_replica_consistency_waits_total{answered="primary"}`)
		return v
	}
	before := fallbacks()
	var firstErr error
	tick := time.NewTicker(time.Second / time.Duration(replicaRYWRate))
	defer tick.Stop()
	var writes sync.WaitGroup
	for end := time.Now().Add(replicaRYWFor); time.Now().Before(end); {
		<-tick.C
		writes.Go(func() {
			created, raw, err := w.send(ctx, http.MethodPost, "/v1/orders", w.order)
			var body struct {
				ID       string `json:"id"`
				Position int64  `json:"position"`
			}
			if err == nil && created.StatusCode == http.StatusCreated {
				err = json.Unmarshal(raw, &body)
			} else if err == nil {
				err = fmt.Errorf("POST /v1/orders: %s %s", created.Status, raw)
			}
			if err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				mu.Unlock()
				return
			}
			at := time.Now()
			answer, raw, err := w.send(ctx, http.MethodGet, "/v1/orders/"+body.ID, nil, "Consistency-Position", strconv.FormatInt(body.Position, 10))
			took := time.Since(at)
			mu.Lock()
			defer mu.Unlock()
			rywAnswer(&res.ryw, &res.rywTimeouts, &firstErr, answer, raw, err, took)
		})
	}
	writes.Wait()
	res.rywOnPrimary = fallbacks() - before
	return res, firstErr
}

// rywAnswer counts the answer of a read-your-writes GET (the caller holds
// the lock over the three): its time, a wait that timed out, or the first
// error.
func rywAnswer(into *stats, timeouts *int, firstErr *error, answer *http.Response, body []byte, err error, took time.Duration) {
	switch {
	case err != nil:
		*firstErr = cmp.Or(*firstErr, err)
	case answer.Header.Get("Consistency-Status") == "timeout":
		*timeouts++
	case answer.StatusCode != http.StatusOK:
		*firstErr = cmp.Or(*firstErr, fmt.Errorf("read your writes: %s %s", answer.Status, body))
	default:
		*into = append(*into, took)
	}
}

// metric is the value of a series of /metrics (name and labels, as
// Prometheus writes them), 0 when it is not there.
func (w *replicaLoad) metric(ctx context.Context, series string) (float64, error) {
	_, body, err := send(ctx, w.client, http.MethodGet, w.admin+"/metrics", "", nil)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, nil
}

// awaitMetric waits until a line of /metrics starts with prefix and ends
// with suffix.
func (w *replicaLoad) awaitMetric(ctx context.Context, prefix, suffix string) error {
	ok := func(metrics string) bool {
		return metricLine(metrics, func(line string) bool { return strings.HasPrefix(line, prefix) && strings.HasSuffix(line, suffix) })
	}
	if err := awaitMetrics(ctx, w.admin, 30*time.Second, ok); err != nil {
		return fmt.Errorf("/metrics never showed %s...%s: %w", prefix, suffix, err)
	}
	return nil
}
