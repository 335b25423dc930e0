package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"hearth/app/access"
	"hearth/app/command"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
	"hearth/internal/refdata"
	"hearth/migrations"
)

// The noisy-neighbour run: merchant A reads its orders at a steady rate
// while merchant B floods one Hearth in mode all, with its default limits.
var (
	noisyFor         = 15 * time.Second // each phase
	noisyRate        = 40               // A's GETs per second, within its key's default limit (50/s)
	noisyFlooders    = 256              // B's connections
	noisyOrdersA     = 20
	noisyOrdersB     = 1_000 // enough for full pages of 200
	noisyReaders     = 8     // A's connections
	noisyFloodPhases = []floodPhase{
		{name: "unknown keys", note: "random hk_ keys, GET /v1/orders"},
		{name: "B's heaviest list", note: "GET /v1/orders?page_size=200 with B's key"},
		{name: "B's writes", note: "POST /v1/orders with B's key"},
	}
)

type floodPhase struct{ name, note string }

// phaseResult is A's experience and B's answers during one phase.
type phaseResult struct {
	name     string
	a        stats
	aRate    float64
	aErrors  int
	aFailed  map[string]int // what A's failures were
	bStatus  map[int]int    // B's answers by status; 0: transport error
	bElapsed time.Duration
}

func (p phaseResult) bMix() string {
	if len(p.bStatus) == 0 {
		return "no flood"
	}
	codes := make([]int, 0, len(p.bStatus))
	total := 0
	for c, n := range p.bStatus {
		codes = append(codes, c)
		total += n
	}
	sort.Ints(codes)
	parts := make([]string, len(codes))
	for i, c := range codes {
		label := fmt.Sprint(c)
		if c == 0 {
			label = "error"
		}
		parts[i] = fmt.Sprintf("%s: %d (%.0f %%)", label, p.bStatus[c], 100*float64(p.bStatus[c])/float64(total))
	}
	return fmt.Sprintf("B: %.0f req/s; %s", float64(total)/p.bElapsed.Seconds(), strings.Join(parts, ", "))
}

// merchants creates the database name and an operator key of each
// merchant named.
func (b *bench) merchants(ctx context.Context, name string, merchants ...string) (*bun.DB, string, *refdata.Store, []refdata.NewKey, error) {
	es, url, err := b.newDB(ctx, name, migrations.EventStore, migrations.ReadModel)
	if err != nil {
		return nil, "", nil, nil, err
	}
	ref, err := refdata.New(es)
	if err != nil {
		es.Close()
		return nil, "", nil, nil, err
	}
	keys := make([]refdata.NewKey, len(merchants))
	for i, m := range merchants {
		if keys[i], err = ref.CreateKey(ctx, m, access.Operator, ""); err != nil {
			es.Close()
			return nil, "", nil, nil, err
		}
	}
	return es, url, ref, keys, nil
}

// noisy runs the phases one after the other on one Hearth and returns the
// rows: A's figures per phase, B's status mix, and the targets.
func (b *bench) noisy(ctx context.Context) ([]row, error) {
	es, url, _, keys, err := b.merchants(ctx, "noisy", "noisy-a", "noisy-b")
	if err != nil {
		return nil, err
	}
	defer es.Close()
	keyA, keyB := keys[0], keys[1]
	b.progress("noisy neighbour: %d orders for A, %d for B", noisyOrdersA, noisyOrdersB)
	ordersA, err := seedOrders(ctx, es, keyA.MerchantID, noisyOrdersA)
	if err != nil {
		return nil, err
	}
	customerB := uuid.New()
	if _, err := seedOrdersFor(ctx, es, keyB.MerchantID, customerB, noisyOrdersB); err != nil {
		return nil, err
	}

	hearth, base, err := b.startHearth(ctx, "noisy neighbour, mode all", url, "all", true)
	if err != nil {
		return nil, err
	}
	defer b.stopHearth(hearth)
	addr := strings.TrimPrefix(base, "http://")
	requestsA := make([][]byte, len(ordersA))
	for i, id := range ordersA {
		requestsA[i] = rawRequest(http.MethodGet, "/v1/orders/"+id, keyA.Secret, nil)
	}
	if err := awaitStatus(addr, requestsA[len(requestsA)-1], http.StatusOK, 30*time.Second); err != nil {
		return nil, fmt.Errorf("A's orders never became readable: %w", err)
	}
	createB, _ := json.Marshal(map[string]any{"customer_id": customerB, "amount_cents": 100})
	floods := map[string]func(i int) []byte{
		"unknown keys": func(int) []byte {
			return rawRequest(http.MethodGet, "/v1/orders", randomKey(), nil)
		},
		"B's heaviest list": func(int) []byte {
			return rawRequest(http.MethodGet, "/v1/orders?page_size=200", keyB.Secret, nil)
		},
		"B's writes": func(int) []byte {
			return rawRequest(http.MethodPost, "/v1/orders", keyB.Secret, createB)
		},
	}

	var results []phaseResult
	b.progress("noisy neighbour: A alone, %d GET/s for %s", noisyRate, noisyFor)
	results = append(results, runPhase(addr, "no flood", requestsA, nil))
	for _, ph := range noisyFloodPhases {
		b.progress("noisy neighbour: A at %d GET/s while B floods with %d connections: %s", noisyRate, noisyFlooders, ph.name)
		results = append(results, runPhase(addr, ph.name, requestsA, floods[ph.name]))
	}
	b.sampleRSS(hearth)
	return noisyRows(results), nil
}

// noisyRows are the table rows of the phases, then the targets.
func noisyRows(results []phaseResult) []row {
	var rows []row
	quiet := results[0]
	byName := map[string]phaseResult{}
	for _, r := range results {
		byName[r.name] = r
		rows = append(rows, row{
			name:   fmt.Sprintf("noisy neighbour: A's GET /v1/orders/{id} at %d/s, %s (p50 / p99, rate)", noisyRate, r.name),
			hearth: fmt.Sprintf("%s / %s, %.0f req/s (%.0f %% of no flood)%s", ms(r.a.pct(0.5)), ms(r.a.pct(0.99)), r.aRate, 100*r.aRate/quiet.aRate, failures(r.aErrors, r.aFailed)),
			note:   r.bMix(),
		})
	}
	cheapest := byName["unknown keys"]
	worstP99, worstRate, worst := time.Duration(0), quiet.aRate, ""
	told429 := true
	for _, r := range results[1:] {
		if p := r.a.pct(0.99); p > worstP99 {
			worstP99, worst = p, r.name
		}
		worstRate = min(worstRate, r.aRate)
		if r.name != "unknown keys" && r.bStatus[http.StatusTooManyRequests] == 0 {
			told429 = false
		}
	}
	ratio := float64(worstP99) / float64(max(cheapest.a.pct(0.99), time.Microsecond))
	met := metOrNot
	rows = append(rows, row{
		name: "noisy neighbour targets: A's worst p99 / its p99 under the unknown-key flood (at most 2); A's lowest rate (at least 90 % of no flood); B told 429",
		hearth: fmt.Sprintf("%.2f (%s); %.0f %%; %v", ratio, worst, 100*worstRate/quiet.aRate,
			told429 && cheapest.bStatus[http.StatusTooManyRequests] > 0),
		note: fmt.Sprintf("p99 %s, rate %s, 429 %s", met(ratio <= 2), met(worstRate >= 0.9*quiet.aRate),
			met(told429 && cheapest.bStatus[http.StatusTooManyRequests] > 0)),
	})
	return rows
}

func failures(n int, why map[string]int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d failed %v", n, why)
}

// runPhase sends A's requests at noisyRate for noisyFor, round robin over
// requestsA, while flood (unless nil) makes B's requests from noisyFlooders
// connections as fast as they are answered.
func runPhase(addr, name string, requestsA [][]byte, flood func(i int) []byte) phaseResult {
	res := phaseResult{name: name, bStatus: map[int]int{}, aFailed: map[string]int{}}
	stop := make(chan struct{})
	var floodWG sync.WaitGroup
	var mu sync.Mutex
	floodStart := time.Now()
	if flood != nil {
		for i := range noisyFlooders {
			floodWG.Go(func() {
				c := &httpClient{addr: addr}
				defer c.close()
				counts := map[int]int{}
				for {
					select {
					case <-stop:
						mu.Lock()
						for k, v := range counts {
							res.bStatus[k] += v
						}
						mu.Unlock()
						return
					default:
					}
					status, err := c.do(flood(i))
					if err != nil {
						status = 0
					}
					counts[status]++
				}
			})
		}
	}
	// A: an open-loop schedule; a reader that falls behind sends at once,
	// so the rate it keeps shows how far it fell behind.
	interval := time.Second / time.Duration(noisyRate)
	start := time.Now()
	end := start.Add(noisyFor)
	var aWG sync.WaitGroup
	for w := range noisyReaders {
		aWG.Go(func() {
			c := &httpClient{addr: addr}
			defer c.close()
			for k := w; ; k += noisyReaders {
				at := start.Add(time.Duration(k) * interval)
				if !at.Before(end) {
					return
				}
				if d := time.Until(at); d > 0 {
					time.Sleep(d) // the schedule, not a synchronisation
				}
				t := time.Now()
				status, err := c.do(requestsA[k%len(requestsA)])
				took := time.Since(t)
				mu.Lock()
				if err == nil && status == http.StatusOK {
					res.a = append(res.a, took)
				} else {
					res.aErrors++
					why := fmt.Sprint(status)
					if err != nil {
						why = err.Error()
					}
					res.aFailed[why]++
				}
				mu.Unlock()
			}
		})
	}
	aWG.Wait()
	res.aRate = float64(len(res.a)) / time.Since(start).Seconds()
	close(stop)
	floodWG.Wait()
	res.bElapsed = time.Since(floodStart)
	return res
}

// rawRequest is a ready-made HTTP/1.1 request with a bearer key.
func rawRequest(method, path, key string, body []byte) []byte {
	var s strings.Builder
	fmt.Fprintf(&s, "%s %s HTTP/1.1\r\nHost: hearth\r\nAuthorization: Bearer %s\r\n", method, path, key)
	if body != nil {
		fmt.Fprintf(&s, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	s.WriteString("\r\n")
	s.Write(body)
	return []byte(s.String())
}

func randomKey() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "hk_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// awaitStatus sends request until it is answered with status.
func awaitStatus(addr string, request []byte, status int, within time.Duration) error {
	c := &httpClient{addr: addr}
	defer c.close()
	deadline := time.Now().Add(within)
	var last int
	var err error
	for time.Now().Before(deadline) {
		if last, err = c.do(request); err == nil && last == status {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("last answer %d, %v", last, err)
}

// seedOrders creates a customer and n orders of the merchant through the
// Transactor, before Hearth starts (it catches up), and returns their ids.
func seedOrders(ctx context.Context, es *bun.DB, merchantID string, n int) ([]string, error) {
	return seedOrdersFor(ctx, es, merchantID, uuid.New(), n)
}

func seedOrdersFor(ctx context.Context, es *bun.DB, merchantID, customerID string, n int) ([]string, error) {
	if _, err := es.ExecContext(ctx, `INSERT INTO customers (id, merchant_id, name) VALUES (?, ?, 'Ada')`, customerID, merchantID); err != nil {
		return nil, err
	}
	tx, err := transactor(es)
	if err != nil {
		return nil, err
	}
	meta := event.Meta{MerchantID: merchantID, Actor: "bench", CorrelationID: uuid.New(), OccurredAt: time.Now()}
	var ids []string
	for first := 0; first < n; first += 100 {
		_, err := tx.Run(ctx, meta, func(ctx context.Context, s command.Session) error {
			for range min(100, n-first) {
				o, err := order.New(order.NewOrder{ID: uuid.New(), CustomerID: customerID, AmountCents: 100})
				if err != nil {
					return err
				}
				ids = append(ids, o.ID())
				s.AddOrder(o)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return slices.Clip(ids), nil
}
