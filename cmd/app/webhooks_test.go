package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/adapters/vault"
	"hearth/adapters/webhooks"
	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/keyring"
	"hearth/internal/pgtest"
	"hearth/leader"
)

// webhookTestSettings are the webhook settings of the tests' Hearth:
// deliveries may reach loopback (the receivers are httptest servers), and
// retries come within milliseconds.
func webhookTestSettings(cfg *Config) {
	ring, err := keyring.Parse(testMasterKey)
	if err != nil {
		panic(err)
	}
	cfg.MasterKeys = ring
	cfg.WebhookTimeout = 5 * time.Second
	cfg.WebhookAllowPrivate = true
	cfg.WebhookRetryInitial, cfg.WebhookRetryMax, cfg.WebhookRetryFor = 10*time.Millisecond, 50*time.Millisecond, time.Minute
	cfg.WebhookDeliveryKeep = time.Hour
}

// delivery is one request a receiver got.
type delivery struct {
	at     time.Time
	header http.Header
	body   []byte
	status int // what the receiver answered
	event  struct {
		ID               string `json:"id"`
		Type             string `json:"type"`
		AggregateID      string `json:"aggregate_id"`
		AggregateVersion int    `json:"aggregate_version"`
		Position         int64  `json:"position"`
	}
}

// noAnswer is an answer of a receiver that closes the connection without
// an HTTP answer (one that is down behind its address).
const noAnswer = -1

// receiver is a webhook receiver: it records every request and answers the
// status answer gives for it (200 when answer is nil; noAnswer: none). While
// hold is set, requests wait until it is closed (a slow receiver).
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	got      []delivery
	answer   func(d delivery) int
	errBody  string // the body of an answer of 400 or more
	hold     chan struct{}
	arrivals chan struct{} // one value per request, for tests that wait for one
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{arrivals: make(chan struct{}, 10_000)}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		d := delivery{at: time.Now(), header: r.Header.Clone(), body: body, status: http.StatusOK}
		_ = json.Unmarshal(body, &d.event)
		rc.mu.Lock()
		if rc.answer != nil {
			d.status = rc.answer(d)
		}
		rc.got = append(rc.got, d)
		errBody := rc.errBody
		rc.mu.Unlock()
		select {
		case rc.arrivals <- struct{}{}:
		default:
		}
		if d.status == noAnswer {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = c.Close()
			}
			return
		}
		w.WriteHeader(d.status)
		if d.status >= 400 {
			_, _ = io.WriteString(w, errBody)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) setAnswer(f func(d delivery) int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.answer = f
}

func (rc *receiver) deliveries() []delivery {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// delivered are the deliveries the receiver answered 2xx.
func (rc *receiver) delivered() []delivery {
	var out []delivery
	for _, d := range rc.deliveries() {
		if d.status >= 200 && d.status < 300 {
			out = append(out, d)
		}
	}
	return out
}

// runWebhookLeader runs webhook delivery on a wiring the way serve's
// scheduler runs its unit (an Elector on the unit's lock, running the
// unit's Lead) until stop is called or the test ends.
func runWebhookLeader(t *testing.T, cfg Config, dbs databases, w wiring, log *slog.Logger) (el *leader.Elector, stop func()) {
	t.Helper()
	unit := webhookUnit(cfg, w, log)
	el, err := leader.New(leader.Config{ConnString: cfg.DatabaseURL, TermDB: dbs.rm.DB, Name: unit.Name,
		FenceAppName: unit.FenceAppName, Lease: leader.DefaultLease, Log: log})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx, unit.Lead) }()
	stop = sync.OnceFunc(func() {
		cancel()
		require.NoError(t, <-done)
	})
	t.Cleanup(stop)
	return el, stop
}

// withWebhooks is Hearth (setup) with webhook delivery running.
func withWebhooks(t *testing.T, urls pgtest.URLs, configure func(cfg *Config)) *api {
	t.Helper()
	a := setupConfigured(t, urls, configure, nil)
	runWebhookLeader(t, a.cfg, a.dbs, a.w, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	return a
}

// hourlyRetries: failed deliveries are tried again after an hour only (so
// that nothing a test awaits comes from a retry).
func hourlyRetries(cfg *Config) {
	cfg.WebhookRetryInitial, cfg.WebhookRetryMax, cfg.WebhookRetryFor = time.Hour, time.Hour, 24*time.Hour
}

// answerPingsOnly has the receiver answer test pings 200 and every other
// delivery status.
func (rc *receiver) answerPingsOnly(status int) {
	rc.setAnswer(func(d delivery) int {
		if d.event.Type == "webhook_endpoint.ping" {
			return http.StatusOK
		}
		return status
	})
}

// pendingDeliveries are the first page of the endpoint's pending
// deliveries (nil when the request failed).
func (a *api) pendingDeliveries(key, endpoint string) []map[string]any {
	r, err := a.send(http.MethodGet, "/v1/webhook-endpoints/"+endpoint+"/deliveries?status=pending", auth(key), nil)
	if err != nil {
		return nil
	}
	var out []map[string]any
	for _, it := range r.Body["items"].([]any) {
		out = append(out, it.(map[string]any))
	}
	return out
}

// createEndpoint registers url for key's merchant and returns the
// endpoint's id and signing secret.
func (a *api) createEndpoint(key, url string, eventTypes ...string) (id, secret string) {
	a.t.Helper()
	body := map[string]any{"url": url}
	if len(eventTypes) > 0 {
		body["event_types"] = eventTypes
	}
	r := a.must(http.StatusCreated, http.MethodPost, "/v1/webhook-endpoints", key, body)
	return r.Body["id"].(string), r.Body["secret"].(string)
}

// orderEvents creates n orders of merchant A and gives each events more
// events (details updates), through the commands, and returns the orders'
// ids: n aggregates of 1+events versions each.
func (a *api) orderEvents(n, events int) []string {
	a.t.Helper()
	customer := a.createCustomer(a.opA, "Webhook Customer")
	meta := func() event.Meta {
		return event.Meta{MerchantID: a.merchantA, Actor: "key:" + a.opAKeyID, CorrelationID: uuid.New(), OccurredAt: time.Now()}
	}
	var ids []string
	for range n {
		w, err := a.w.app.Commands.Orders.Create(a.t.Context(), command.CreateOrder{Meta: meta(), CustomerID: customer, AmountCents: 100})
		require.NoError(a.t, err)
		ids = append(ids, w.Stream[0].StreamID)
	}
	for k := range events {
		for _, id := range ids {
			amount := int64(200 + k)
			_, err := a.w.app.Commands.Orders.UpdateDetails(a.t.Context(), command.UpdateOrderDetails{
				OrderTarget: command.OrderTarget{Meta: meta(), OrderID: id}, AmountCents: &amount})
			require.NoError(a.t, err)
		}
	}
	return ids
}

// webhookMetrics are the lines of metrics about webhooks and projections.
func webhookMetrics(metrics string) string {
	var out []string
	for line := range strings.SplitSeq(metrics, "\n") {
		if strings.HasPrefix(line, "hearth_webhook") || strings.HasPrefix(line, "hearth_projection_lag_events") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// awaitEvery waits until the receiver got every version of each of the
// orders, however many duplicates came with them.
func awaitEvery(t *testing.T, rc *receiver, orders []string, versions int) {
	t.Helper()
	missing := func() int {
		got := map[string]map[int]bool{}
		for _, d := range rc.delivered() {
			if got[d.event.AggregateID] == nil {
				got[d.event.AggregateID] = map[int]bool{}
			}
			got[d.event.AggregateID][d.event.AggregateVersion] = true
		}
		n := 0
		for _, id := range orders {
			n += versions - len(got[id])
		}
		return n
	}
	if !assert.Eventually(t, func() bool { return missing() == 0 }, 20*time.Second, 5*time.Millisecond) {
		t.Fatalf("the receiver never got every version: %d missing", missing())
	}
}

// requireInOrder checks what the receiver got of the orders: every version
// of each, and, per aggregate, never a version after a later one (a
// duplicate may repeat the last one: delivery is at least once).
func requireInOrder(t *testing.T, got []delivery, orders []string, versions int) {
	t.Helper()
	seen := map[string][]int{}
	for _, d := range got {
		seen[d.event.AggregateID] = append(seen[d.event.AggregateID], d.event.AggregateVersion)
	}
	for _, id := range orders {
		vs := seen[id]
		require.True(t, slices.IsSorted(vs), "order %s: versions delivered out of order: %v", id, vs)
		require.Equal(t, versions, len(slices.Compact(slices.Clone(vs))), "order %s: every version delivered: %v", id, vs)
	}
}

// awaitDelivered waits until the receiver has answered 2xx to n
// deliveries.
func awaitDelivered(t *testing.T, rc *receiver, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return len(rc.delivered()) >= n }, 20*time.Second, 5*time.Millisecond,
		"the receiver got %d of %d deliveries", len(rc.delivered()), n)
}

// verifySignature checks a delivery's signature against secret, as a receiver
// would (the same rule as docs/api.md's example).
func verifySignature(t *testing.T, secret string, d delivery) {
	t.Helper()
	ts, err := strconv.ParseInt(d.header.Get("webhook-timestamp"), 10, 64)
	require.NoError(t, err)
	require.InDelta(t, time.Now().Unix(), ts, 300, "timestamp within five minutes")
	want, err := webhook.Signature([]string{secret}, d.header.Get("webhook-id"), ts, d.body)
	require.NoError(t, err)
	require.Contains(t, strings.Fields(d.header.Get("webhook-signature")), want)
}

func TestWebhookEndpointsAPI(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	const path = "/v1/webhook-endpoints"

	// Create: the secret is shown once, with the endpoint; the event types
	// are checked against the public types.
	r := a.must(http.StatusCreated, http.MethodPost, path, a.opA, map[string]any{
		"url": "https://hooks.example.com/hearth", "event_types": []string{"order.created", "order.status_changed"}, "description": "CRM sync"})
	id := r.Body["id"].(string)
	require.True(t, strings.HasPrefix(r.Body["secret"].(string), "whsec_"), "%s", r)
	require.Equal(t, path+"/"+id, r.Header.Get("Location"))
	require.Equal(t, `"1"`, r.Header.Get("ETag"))
	require.Equal(t, true, r.Body["enabled"])
	got := a.must(http.StatusOK, http.MethodGet, path+"/"+id, a.opA, nil)
	require.NotContains(t, got.Body, "secret", "never shown again")
	require.Equal(t, []any{"order.created", "order.status_changed"}, got.Body["event_types"])
	list := a.must(http.StatusOK, http.MethodGet, path, a.opA, nil)
	require.Equal(t, float64(1), list.Body["total"])

	// Bad input names its field.
	for _, tc := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"url": "ftp://example.com"}, "url"},
		{map[string]any{}, "url"},
		{map[string]any{"url": "https://example.com:99999/hook"}, "url"},
		{map[string]any{"url": "https://example.com:0/hook"}, "url"},
		{map[string]any{"url": "https://example.com", "event_types": []string{"order.created", "order.exploded"}}, "event_types[1]"},
		{map[string]any{"url": "https://example.com", "description": strings.Repeat("x", 501)}, "description"},
	} {
		r := a.do(http.MethodPost, path, a.opA, tc.body)
		requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
		require.Equal(t, []string{tc.field}, problemFields(r), "%s", r)
	}

	// Worker keys may not; other merchants see nothing.
	requireProblem(t, a.do(http.MethodGet, path, a.worker, nil), http.StatusForbidden, "/problems/forbidden")
	requireProblem(t, a.do(http.MethodPost, path, a.worker, map[string]any{"url": "https://example.com"}), http.StatusForbidden, "/problems/forbidden")
	requireProblem(t, a.do(http.MethodGet, path+"/"+id, a.opB, nil), http.StatusNotFound, "/problems/not-found")
	require.Equal(t, float64(0), a.must(http.StatusOK, http.MethodGet, path, a.opB, nil).Body["total"])

	// Update, conditional on the version.
	upd := a.must(http.StatusOK, http.MethodPatch, path+"/"+id, a.opA, map[string]any{"enabled": false, "event_types": []string{}})
	require.Equal(t, false, upd.Body["enabled"])
	require.Equal(t, []any{}, upd.Body["event_types"], "empty: every type")
	require.Equal(t, float64(2), upd.Body["version"])
	stale, err := a.send(http.MethodPatch, path+"/"+id, http.Header{"Authorization": {"Bearer " + a.opA}, "If-Match": {`"1"`}}, map[string]any{"enabled": true})
	require.NoError(t, err)
	requireProblem(t, stale, http.StatusPreconditionFailed, "/problems/precondition-failed")
	require.Equal(t, float64(2), a.must(http.StatusOK, http.MethodPatch, path+"/"+id, a.opA, map[string]any{"description": "CRM sync"}).Body["version"],
		"a change that changes nothing keeps the version")

	// Rotation: a new secret, the old one still signing for the overlap.
	rot := a.must(http.StatusOK, http.MethodPost, path+"/"+id+"/rotate-secret", a.opA, map[string]any{"overlap": "1h"})
	require.True(t, strings.HasPrefix(rot.Body["secret"].(string), "whsec_"))
	require.NotEqual(t, r.Body["secret"], rot.Body["secret"])
	until, err := time.Parse(time.RFC3339Nano, rot.Body["previous_secret_expires_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Hour), until, time.Minute)
	requireProblem(t, a.do(http.MethodPost, path+"/"+id+"/rotate-secret", a.opA, map[string]any{"overlap": "8d"}), http.StatusBadRequest, "/problems/malformed-request")
	requireProblem(t, a.do(http.MethodPost, path+"/"+id+"/rotate-secret", a.opA, map[string]any{"overlap": "200h"}), http.StatusUnprocessableEntity, "/problems/validation-failed")

	// A disabled endpoint takes no test.
	ping := a.do(http.MethodPost, path+"/"+id+"/test", a.opA, nil)
	requireProblem(t, ping, http.StatusUnprocessableEntity, "/problems/rule-broken")
	require.Equal(t, webhook.RuleEndpointDisabled, ping.Body["rule"])

	// Idempotency-Key: the same creation writes once; its secret is not
	// kept, so the repeat is told so, with the endpoint.
	key := http.Header{"Authorization": {"Bearer " + a.opA}, "Idempotency-Key": {uuid.New()}}
	first, err := a.send(http.MethodPost, path, key, map[string]any{"url": "https://other.example.com/"})
	require.NoError(t, err)
	again, err := a.send(http.MethodPost, path, key, map[string]any{"url": "https://other.example.com/"})
	require.NoError(t, err)
	requireProblem(t, again, http.StatusConflict, "/problems/secret-shown-once")
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, path+"/"+first.Body["id"].(string), again.Header.Get("Location"))
	require.Equal(t, float64(2), a.must(http.StatusOK, http.MethodGet, path, a.opA, nil).Body["total"])

	// At most webhook.MaxEndpoints per merchant.
	for range webhook.MaxEndpoints - 2 {
		a.must(http.StatusCreated, http.MethodPost, path, a.opA, map[string]any{"url": "https://more.example.com/"})
	}
	over := a.do(http.MethodPost, path, a.opA, map[string]any{"url": "https://more.example.com/"})
	requireProblem(t, over, http.StatusUnprocessableEntity, "/problems/rule-broken")
	require.Equal(t, webhook.RuleEndpointLimit, over.Body["rule"])

	// Delete.
	a.must(http.StatusNoContent, http.MethodDelete, path+"/"+id, a.opA, nil)
	requireProblem(t, a.do(http.MethodGet, path+"/"+id, a.opA, nil), http.StatusNotFound, "/problems/not-found")
	requireProblem(t, a.do(http.MethodDelete, path+"/"+id, a.opA, nil), http.StatusNotFound, "/problems/not-found")
}

// Deliveries are signed (Standard Webhooks), carry the public event, and
// reach the receiver in order per aggregate; the log, the test ping, a
// redelivery and the metrics show them.
// A delivery id in the path that is not a UUID answers as any other path
// id does: 400 /problems/invalid-id naming it, so that a client branches on
// one type for one mistake.
func TestWebhookDeliveryPathIDIsChecked(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	r := a.must(http.StatusCreated, http.MethodPost, "/v1/webhook-endpoints", a.opA, map[string]any{"url": "https://hooks.example.com/hearth"})
	path := "/v1/webhook-endpoints/" + r.Body["id"].(string) + "/deliveries/not-a-uuid"
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		p := path
		if method == http.MethodPost {
			p += "/redeliver"
		}
		got := a.do(method, p, a.opA, nil)
		requireProblem(t, got, http.StatusBadRequest, "/problems/invalid-id")
		require.Equal(t, []string{"delivery_id"}, problemFields(got), "%s", got)
	}
}

// A write that takes no body refuses one, as the writes that take one refuse
// a field they do not know: the client meant something by it (a reason, a
// filter), and an answer that ignored it would look as if it was heard.
// Nothing is done.
func TestWritesWithoutABodyRefuseOne(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	endpoint := "/v1/webhook-endpoints/" + a.must(http.StatusCreated, http.MethodPost, "/v1/webhook-endpoints", a.opA,
		map[string]any{"url": "https://hooks.example.com/hearth"}).Body["id"].(string)
	body := map[string]any{"reason": "the customer asked"}
	for _, tc := range []struct{ method, path, key string }{
		{http.MethodPost, endpoint + "/test", a.opA},
		{http.MethodDelete, endpoint, a.opA},
		{http.MethodPost, endpoint + "/deliveries/" + uuid.New() + "/redeliver", a.opA},
		{http.MethodPost, "/admin/keys/" + a.opAKeyID + "/revoke", a.admin},
	} {
		got := a.do(tc.method, tc.path, tc.key, body)
		requireProblem(t, got, http.StatusBadRequest, "/problems/malformed-request")
	}
	a.must(http.StatusOK, http.MethodGet, endpoint, a.opA, nil) // not deleted, and the key not revoked
	deliveries := a.must(http.StatusOK, http.MethodGet, endpoint+"/deliveries", a.opA, nil)
	require.Empty(t, deliveries.Body["items"], "no test ping: %s", deliveries)
}

func TestWebhookDelivery(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), nil)
	rc := newReceiver(t)
	endpoint, secret := a.createEndpoint(a.opA, rc.URL+"/hook")
	other := newReceiver(t)
	a.createEndpoint(a.opB, other.URL) // merchant B's: gets none of A's events
	onlyCreated := newReceiver(t)
	a.createEndpoint(a.opA, onlyCreated.URL, "order.created")

	orders := a.orderEvents(3, 2)
	awaitDelivered(t, rc, 9)
	awaitDelivered(t, onlyCreated, 3)
	requireInOrder(t, rc.delivered(), orders, 3)
	for _, d := range rc.delivered() {
		verifySignature(t, secret, d)
		require.Equal(t, d.event.ID, d.header.Get("webhook-id"))
		require.Equal(t, "application/json", d.header.Get("Content-Type"))
		require.Equal(t, "Hearth-Webhooks/1", d.header.Get("User-Agent"))
		require.NotZero(t, d.event.Position)
	}
	for _, d := range onlyCreated.delivered() {
		require.Equal(t, "order.created", d.event.Type)
	}
	require.Empty(t, other.deliveries(), "another merchant's endpoint")

	// The log: newest first, with status, attempts, response and latency
	// (recorded once the answer has come).
	path := "/v1/webhook-endpoints/" + endpoint
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, path+"/deliveries?status=succeeded", auth(a.opA), nil)
		return err == nil && intOf(r.Body["total"]) == 9
	}, 5*time.Second, 5*time.Millisecond)
	log := a.must(http.StatusOK, http.MethodGet, path+"/deliveries?page_size=5", a.opA, nil)
	require.Equal(t, float64(9), log.Body["total"])
	items := log.Body["items"].([]any)
	require.Len(t, items, 5)
	first := items[0].(map[string]any)
	require.Equal(t, "succeeded", first["status"])
	require.Equal(t, float64(1), first["attempts"])
	require.Equal(t, float64(200), first["response_status"])
	require.Contains(t, first, "latency_ms")
	require.Equal(t, "", first["error"])
	require.Equal(t, float64(0), a.must(http.StatusOK, http.MethodGet, path+"/deliveries?status=failed", a.opA, nil).Body["total"])
	requireProblem(t, a.do(http.MethodGet, path+"/deliveries?status=lost", a.opA, nil), http.StatusBadRequest, "/problems/malformed-request")
	requireProblem(t, a.do(http.MethodGet, path+"/deliveries", a.opB, nil), http.StatusNotFound, "/problems/not-found")

	// A test ping.
	ping := a.must(http.StatusAccepted, http.MethodPost, path+"/test", a.opA, nil)
	require.Equal(t, true, ping.Body["ping"])
	require.Equal(t, "webhook_endpoint.ping", ping.Body["event_type"])
	awaitDelivered(t, rc, 10)
	last := rc.delivered()[9]
	require.Equal(t, "webhook_endpoint.ping", last.event.Type)
	verifySignature(t, secret, last)
	pingPath := ping.Header.Get("Location")
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, pingPath, auth(a.opA), nil)
		return err == nil && r.Body["status"] == "succeeded"
	}, 5*time.Second, 5*time.Millisecond)

	// Redelivery: the same event again (same webhook-id, same body).
	redo := a.must(http.StatusAccepted, http.MethodPost, path+"/deliveries/"+first["id"].(string)+"/redeliver", a.opA, nil)
	require.Equal(t, first["id"], redo.Body["redelivery_of"])
	awaitDelivered(t, rc, 11)
	again := rc.delivered()[10]
	require.Equal(t, first["event_id"], again.event.ID)
	var original delivery
	for _, d := range rc.delivered()[:9] {
		if d.event.ID == first["event_id"] {
			original = d
		}
	}
	require.Equal(t, string(original.body), string(again.body), "the same bytes")
	requireProblem(t, a.do(http.MethodPost, path+"/deliveries/"+uuid.New()+"/redeliver", a.opA, nil), http.StatusNotFound, "/problems/not-found")

	// Metrics.
	metrics := webhookMetrics(a.metrics())
	require.Contains(t, metrics, `hearth_webhook_deliveries_total{outcome="succeeded"}`)
	require.Contains(t, metrics, "hearth_webhook_delivery_lag_seconds_count")
	require.Contains(t, metrics, "hearth_webhook_endpoints_disabled 0")
	require.Contains(t, metrics, `hearth_projection_lag_events{projection="webhooks_orders"}`)
}

// A receiver that is down for a while, then back, gets every event, in
// order per aggregate: deliveries are retried, and an aggregate's next
// event waits for the one before.
func TestWebhookReceiverDownThenBack(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), nil)
	rc := newReceiver(t)
	down := true
	rc.setAnswer(func(delivery) int {
		if down {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	a.createEndpoint(a.opA, rc.URL)
	orders := a.orderEvents(4, 3)
	// Down until it has refused a few retries of each aggregate's first.
	require.Eventually(t, func() bool { return len(rc.deliveries()) >= 4*3 }, 20*time.Second, 5*time.Millisecond)
	for _, d := range rc.deliveries() {
		require.Equal(t, 1, d.event.AggregateVersion, "nothing after an aggregate's first event went out while it failed")
	}
	rc.setAnswer(func(delivery) int { return http.StatusOK })
	awaitDelivered(t, rc, 4*4)
	requireInOrder(t, rc.delivered(), orders, 4)
	require.Len(t, rc.delivered(), 16, "each event once")
}

// The delivery log is paged like the other lists: its total is counted up
// to query.MaxDepth, numbered pages stop there, and next_cursor goes on
// from any page, as cheap as the first.
func TestWebhookDeliveryLogIsBounded(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	endpoint, _ := a.createEndpoint(a.opA, "https://203.0.113.9/hook")
	path := "/v1/webhook-endpoints/" + endpoint + "/deliveries"
	// More finished deliveries than the count goes, and three pending.
	_, err := a.dbs.es.DB.ExecContext(a.t.Context(), `INSERT INTO webhook_deliveries
		(endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, status, completed_at)
		SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), 1, 'succeeded', now() FROM generate_series(1, $3)`,
		endpoint, a.merchantA, query.MaxDepth+2)
	require.NoError(t, err)
	_, err = a.dbs.es.DB.ExecContext(a.t.Context(), `INSERT INTO webhook_deliveries
		(endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version)
		SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), v FROM generate_series(1, 3) v`, endpoint, a.merchantA)
	require.NoError(t, err)

	all := a.must(http.StatusOK, http.MethodGet, path+"?page_size=2", a.opA, nil)
	require.Equal(t, float64(query.MaxDepth), all.Body["total"], "counted up to MaxDepth")
	require.Equal(t, false, all.Body["total_exact"])
	pending := a.must(http.StatusOK, http.MethodGet, path+"?status=pending", a.opA, nil)
	require.Equal(t, float64(3), pending.Body["total"])
	require.Equal(t, true, pending.Body["total_exact"])
	require.NotContains(t, pending.Body, "next_cursor", "the last page")

	r := a.do(http.MethodGet, path+"?page=51&page_size=200", a.opA, nil)
	requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
	require.Equal(t, []string{"page"}, problemFields(r))

	// Newest first; the cursor's page follows the numbered one.
	items := func(r response) []string {
		var out []string
		for _, it := range r.Body["items"].([]any) {
			d := it.(map[string]any)
			out = append(out, fmt.Sprintf("%d/%s", intOf(d["aggregate_version"]), d["status"]))
		}
		return out
	}
	require.Equal(t, []string{"3/pending", "2/pending"}, items(all))
	next := a.must(http.StatusOK, http.MethodGet, path+"?page_size=2&cursor="+all.Body["next_cursor"].(string), a.opA, nil)
	require.Equal(t, []string{"1/pending", "1/succeeded"}, items(next))
	require.NotContains(t, next.Body, "page", "a page after a cursor has no number")
	r = a.do(http.MethodGet, path+"?page=2&cursor="+all.Body["next_cursor"].(string), a.opA, nil)
	requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
}

// A receiver that always fails is retried on the schedule, then its
// endpoint is disabled with the reason, and its pending deliveries fail.
// Its answers' body, which quotes the payload, stays in the delivery's
// own row (an erasure clears it there), not in the endpoint's reason; a
// NUL byte or invalid UTF-8 in it, which Postgres refuses, is left out
// rather than fail the round that records the attempt.
func TestWebhookAlwaysFailingIsDisabled(t *testing.T) {
	t.Parallel()
	schedule := webhook.Schedule{Initial: 20 * time.Millisecond, Max: 80 * time.Millisecond, For: 700 * time.Millisecond}
	a := setupConfigured(t, pgtest.NewDB(t), func(cfg *Config) {
		cfg.WebhookRetryInitial, cfg.WebhookRetryMax, cfg.WebhookRetryFor = schedule.Initial, schedule.Max, schedule.For
	}, nil)
	a.w.webhookRand = func() float64 { return 0.5 } // no jitter: each wait is the base
	runWebhookLeader(t, a.cfg, a.dbs, a.w, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})))
	rc := newReceiver(t)
	rc.setAnswer(func(delivery) int { return http.StatusInternalServerError })
	rc.mu.Lock()
	rc.errBody = "refused notes \x00\"key under the mat\"\xff"
	rc.mu.Unlock()
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	a.orderEvents(1, 1)

	path := "/v1/webhook-endpoints/" + endpoint
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, path, auth(a.opA), nil)
		return err == nil && r.Body["enabled"] == false
	}, 20*time.Second, 5*time.Millisecond)
	e := a.must(http.StatusOK, http.MethodGet, path, a.opA, nil)
	require.Contains(t, e.Body["disabled_reason"], "failed for")
	require.True(t, strings.HasSuffix(e.Body["disabled_reason"].(string), "its last error: HTTP 500"), e.Body["disabled_reason"])
	require.NotContains(t, e.Body["disabled_reason"], "mat")
	require.Contains(t, e.Body, "disabled_at")
	deliveries := a.must(http.StatusOK, http.MethodGet, path+"/deliveries", a.opA, nil)
	require.Contains(t, deliveries.Raw, `HTTP 500: refused notes \"key under the mat\"`, "the delivery's own error keeps the answer, storable")

	// The attempts came on the schedule: the n-th retry no sooner than the
	// n-th wait after the attempt before, and none more than For after the
	// first.
	got := rc.deliveries()
	for _, d := range got {
		require.Equal(t, 1, d.event.AggregateVersion)
	}
	for n := 1; n < len(got); n++ {
		gap := got[n].at.Sub(got[n-1].at)
		require.GreaterOrEqual(t, gap, schedule.Base(n), "retry %d came %s after the attempt before", n, gap)
	}
	// The last retry was due within For of the first attempt: the rule is
	// about when a retry is due (a retry due later is given up instead),
	// not how late a busy machine starts it.
	if last := len(got) - 1; last > 0 {
		due := got[last-1].at.Add(schedule.Base(last))
		require.LessOrEqual(t, due.Sub(got[0].at), schedule.For, "retry %d was due after For", last)
	}
	// 20, 40, 80, 80, ... ms: 1 + 2 + (700 - 60) / 80 = 11 attempts at most.
	// How many fit in For depends on how busy the machine is.
	require.LessOrEqual(t, len(got), 11)

	failed := a.must(http.StatusOK, http.MethodGet, path+"/deliveries?status=failed", a.opA, nil)
	require.Equal(t, float64(2), failed.Body["total"], "both events given up: %s", failed)
	require.Equal(t, float64(0), a.must(http.StatusOK, http.MethodGet, path+"/deliveries?status=pending", a.opA, nil).Body["total"])
	var attempts []int
	for _, it := range failed.Body["items"].([]any) {
		d := it.(map[string]any)
		attempts = append(attempts, intOf(d["attempts"]))
		require.NotEmpty(t, d["error"])
	}
	require.ElementsMatch(t, []int{len(got), 0}, attempts, "the second event never went out")
	if len(got) == 1 {
		// Given up without a retry: only right when the first attempt
		// failed so late (a busy machine) that a retry after the first
		// wait would have come past For. The delivery was queued before
		// its first attempt and recorded after it failed, so that much
		// time lies between the two.
		for _, it := range failed.Body["items"].([]any) {
			d := it.(map[string]any)
			if intOf(d["attempts"]) != 1 {
				continue
			}
			created, err := time.Parse(time.RFC3339Nano, d["created_at"].(string))
			require.NoError(t, err)
			completed, err := time.Parse(time.RFC3339Nano, d["completed_at"].(string))
			require.NoError(t, err)
			require.Greater(t, completed.Sub(created), schedule.For-schedule.Base(1),
				"given up after one attempt, though a retry was due within WEBHOOK_RETRY_FOR")
		}
	}

	metrics := webhookMetrics(a.metrics())
	require.Contains(t, metrics, "hearth_webhook_endpoints_disabled 1")
	require.Contains(t, metrics, "hearth_webhook_endpoints_disabled_total 1")

	// Enabled again, it gets new events (and the operator redelivers the
	// old ones).
	rc.setAnswer(func(delivery) int { return http.StatusOK })
	a.must(http.StatusOK, http.MethodPatch, path, a.opA, map[string]any{"enabled": true})
	require.NotContains(t, a.must(http.StatusOK, http.MethodGet, path, a.opA, nil).Body, "disabled_reason")
	a.orderEvents(1, 0)
	awaitDelivered(t, rc, 1)
}

// The default schedule, as the configuration gives it: a failing delivery
// is attempted 32 times over about 23.4 hours (without jitter), then its
// endpoint is disabled.
func TestWebhookDefaultSchedule(t *testing.T) {
	t.Parallel()
	cfg, _, err := loadConfig(env(map[string]string{}), flag.NewFlagSet("serve", flag.ContinueOnError), nil)
	require.NoError(t, err)
	s := cfg.webhookSchedule()
	require.Equal(t, webhook.Schedule{Initial: 10 * time.Second, Max: time.Hour, For: 24 * time.Hour}, s)
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at, attempts := first, 1
	var waits []time.Duration
	for {
		next, ok := s.Next(first, at, attempts, 0.5)
		if !ok {
			break
		}
		waits = append(waits, next.Sub(at))
		at, attempts = next, attempts+1
	}
	require.Equal(t, 32, attempts)
	require.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second,
		320 * time.Second, 640 * time.Second, 1280 * time.Second, 2560 * time.Second, time.Hour}, waits[:10])
	require.Equal(t, 5110*time.Second+22*time.Hour, at.Sub(first), "the last attempt, 23h25m10s after the first")
	// With the jitter at its extremes the waits are half and one and a
	// half times as long.
	require.Equal(t, 5*time.Second, s.Wait(1, 0))
	require.Equal(t, 90*time.Minute, s.Wait(20, 1))
}

// A receiver's 410 disables its endpoint at once.
func TestWebhookGoneDisablesAtOnce(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), nil)
	rc := newReceiver(t)
	// The receiver answers once the fan-out has queued all four events:
	// the fan-out queues nothing for a disabled endpoint, so a 410 before
	// the last of them would leave fewer than four to fail.
	queued := make(chan struct{})
	release := sync.OnceFunc(func() { close(queued) })
	t.Cleanup(release) // before the receiver closes, should the test stop early
	rc.setAnswer(func(delivery) int { <-queued; return http.StatusGone })
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	a.orderEvents(2, 1)
	require.Eventually(t, func() bool {
		var n int
		return a.dbs.es.DB.QueryRow(`SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, endpoint).Scan(&n) == nil && n == 4
	}, 20*time.Second, 5*time.Millisecond, "the fan-out queues the four events")
	release()
	path := "/v1/webhook-endpoints/" + endpoint
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, path, auth(a.opA), nil)
		return err == nil && r.Body["enabled"] == false
	}, 20*time.Second, 5*time.Millisecond)
	require.Contains(t, a.must(http.StatusOK, http.MethodGet, path, a.opA, nil).Body["disabled_reason"], "410")
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, path+"/deliveries?status=failed", auth(a.opA), nil)
		return err == nil && intOf(r.Body["total"]) == 4
	}, 5*time.Second, 5*time.Millisecond)
	require.LessOrEqual(t, len(rc.deliveries()), 2, "no attempt after the 410 but those already in flight (one per aggregate)")
}

// Without WEBHOOK_ALLOW_PRIVATE, an endpoint on a loopback, private or
// link-local address is refused when it is saved (and at every
// connection: adapters/webhooks' sender tests).
func TestWebhookPrivateTargetsRefused(t *testing.T) {
	t.Parallel()
	a := setupConfigured(t, pgtest.NewDB(t), func(cfg *Config) { cfg.WebhookAllowPrivate = false }, nil)
	for _, u := range []string{"http://127.0.0.1:8080/hook", "http://localhost:8080/hook", "http://10.0.0.7/hook",
		"http://169.254.169.254/latest/meta-data", "http://[::1]/hook", "http://[fd00::1]/", "http://[64:ff9b::a9fe:a9fe]/"} {
		r := a.do(http.MethodPost, "/v1/webhook-endpoints", a.opA, map[string]any{"url": u})
		requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
		require.Equal(t, []string{"url"}, problemFields(r), "%s: %s", u, r)
		require.Contains(t, r.Raw, "a private address", u)
		require.Contains(t, r.Raw, "WEBHOOK_ALLOW_PRIVATE", u)
	}
	// A name's answer does not say what it resolved to.
	r := a.do(http.MethodPost, "/v1/webhook-endpoints", a.opA, map[string]any{"url": "http://localhost:8080/hook"})
	require.NotContains(t, r.Raw, "127.0.0.1")
	require.NotContains(t, r.Raw, "loopback")
	a.must(http.StatusCreated, http.MethodPost, "/v1/webhook-endpoints", a.opA, map[string]any{"url": "https://203.0.113.9/hook"})
	id := a.must(http.StatusCreated, http.MethodPost, "/v1/webhook-endpoints", a.opA, map[string]any{"url": "https://198.51.100.4/hook"}).Body["id"].(string)
	r = a.do(http.MethodPatch, "/v1/webhook-endpoints/"+id, a.opA, map[string]any{"url": "http://192.168.1.1/"})
	requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
}

// One slow endpoint does not hold up another endpoint of the same
// merchant, nor another merchant's.
func TestWebhookSlowEndpointDelaysNoOther(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), nil)
	slow := newReceiver(t)
	release := make(chan struct{})
	slow.hold = release
	fast := newReceiver(t)
	a.createEndpoint(a.opA, slow.URL)
	a.createEndpoint(a.opA, fast.URL)
	orders := a.orderEvents(5, 2)
	awaitDelivered(t, fast, 15) // while every request to the slow one hangs
	requireInOrder(t, fast.delivered(), orders, 3)
	require.Empty(t, slow.deliveries())
	close(release)
	awaitDelivered(t, slow, 15)
	requireInOrder(t, slow.delivered(), orders, 3)
}

// A secret rotation's overlap signs with both secrets.
func TestWebhookRotationSignsWithBoth(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), nil)
	rc := newReceiver(t)
	endpoint, old := a.createEndpoint(a.opA, rc.URL)
	rot := a.must(http.StatusOK, http.MethodPost, "/v1/webhook-endpoints/"+endpoint+"/rotate-secret", a.opA, nil)
	fresh := rot.Body["secret"].(string)
	a.orderEvents(1, 0)
	awaitDelivered(t, rc, 1)
	d := rc.delivered()[0]
	require.Len(t, strings.Fields(d.header.Get("webhook-signature")), 2)
	verifySignature(t, old, d)
	verifySignature(t, fresh, d)

	// A rotation during the overlap keeps the first secret signing until
	// its overlap ends, and the one it replaces for its own.
	rotate := func(overlap string) string {
		return a.must(http.StatusOK, http.MethodPost, "/v1/webhook-endpoints/"+endpoint+"/rotate-secret", a.opA,
			map[string]any{"overlap": overlap}).Body["secret"].(string)
	}
	second := rotate("1h")
	a.orderEvents(1, 0)
	awaitDelivered(t, rc, 2)
	d = rc.delivered()[1]
	require.Len(t, strings.Fields(d.header.Get("webhook-signature")), 3)
	verifySignature(t, old, d)
	verifySignature(t, fresh, d)
	verifySignature(t, second, d)

	// Three sign at most: another rotation with an overlap is refused; one
	// without goes through and ends every earlier secret (after a leak).
	r := a.do(http.MethodPost, "/v1/webhook-endpoints/"+endpoint+"/rotate-secret", a.opA, map[string]any{"overlap": "1h"})
	requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
	require.Equal(t, []string{"overlap"}, problemFields(r))
	newest := rotate("0s")
	a.orderEvents(1, 0)
	awaitDelivered(t, rc, 3)
	d = rc.delivered()[2]
	require.Len(t, strings.Fields(d.header.Get("webhook-signature")), 1, "only the newest signs")
	verifySignature(t, newest, d)
}

// A test ping to a failing receiver is tried once and leaves the endpoint
// enabled, even one answered 410 (a ping never disables an endpoint).
func TestWebhookFailedPingIsNotRetried(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusBadGateway, http.StatusGone} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			a := withWebhooks(t, pgtest.NewDB(t), nil)
			rc := newReceiver(t)
			rc.setAnswer(func(delivery) int { return status })
			endpoint, _ := a.createEndpoint(a.opA, rc.URL)
			ping := a.must(http.StatusAccepted, http.MethodPost, "/v1/webhook-endpoints/"+endpoint+"/test", a.opA, nil)
			var d response
			require.Eventually(t, func() bool {
				var err error
				d, err = a.send(http.MethodGet, ping.Header.Get("Location"), auth(a.opA), nil)
				return err == nil && d.Body["status"] == "failed"
			}, 10*time.Second, 5*time.Millisecond)
			require.Equal(t, float64(1), d.Body["attempts"])
			require.Equal(t, float64(status), d.Body["response_status"])
			require.Equal(t, "HTTP "+strconv.Itoa(status), d.Body["error"])
			require.Len(t, rc.deliveries(), 1)
			e := a.must(http.StatusOK, http.MethodGet, "/v1/webhook-endpoints/"+endpoint, a.opA, nil)
			require.Equal(t, true, e.Body["enabled"], "%s", e)
			require.NotContains(t, e.Body, "disabled_reason")
		})
	}
}

// A leadership change in the middle of a burst loses nothing and does not
// reorder an aggregate's events: two instances, the leader stopped while
// deliveries flow.
func TestWebhookLeadershipChangeMidBurst(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	a := setup(t, urls)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	second, err := openDatabases(t.Context(), a.cfg)
	require.NoError(t, err)
	t.Cleanup(second.close)
	w2, err := wire(a.cfg, second, log)
	require.NoError(t, err)

	elA, stopA := runWebhookLeader(t, a.cfg, a.dbs, a.w, log)
	require.Eventually(t, func() bool { return elA.Status().Role == leader.RoleLeader }, 10*time.Second, 5*time.Millisecond)
	elB, _ := runWebhookLeader(t, a.cfg, second, w2, log)

	rc := newReceiver(t)
	a.createEndpoint(a.opA, rc.URL)
	const aggregates, versions = 10, 6
	orders := a.orderEvents(aggregates, versions-1)
	require.Eventually(t, func() bool { return len(rc.delivered()) >= aggregates*versions/3 }, 20*time.Second, time.Millisecond)
	stopA() // mid-burst: a third delivered
	require.Eventually(t, func() bool { return elB.Status().Role == leader.RoleLeader }, 10*time.Second, 5*time.Millisecond)
	more := a.orderEvents(3, 1) // and events after the change
	// Delivery is at least once, so a count of deliveries can be reached
	// by duplicates before the last versions arrive: await every version.
	awaitEvery(t, rc, orders, versions)
	awaitEvery(t, rc, more, 2)
	requireInOrder(t, rc.delivered(), orders, versions)
	requireInOrder(t, rc.delivered(), more, 2)
	t.Logf("%d deliveries for %d events (duplicates are allowed: at least once)", len(rc.delivered()), aggregates*versions+6)
}

func TestWebhookSettingsErrors(t *testing.T) {
	t.Parallel()
	for name, vars := range map[string]map[string]string{
		"WEBHOOK_RETRY_FOR":     {"WEBHOOK_RETRY_FOR": "30m"},
		"WEBHOOK_TIMEOUT":       {"WEBHOOK_TIMEOUT": "2m"},
		"WEBHOOK_ALLOW_PRIVATE": {"WEBHOOK_ALLOW_PRIVATE": "yes"},
		"WEBHOOK_DELIVERY_KEEP": {"WEBHOOK_DELIVERY_KEEP": "-1h"},
		"WEBHOOK_RETRY_INITIAL": {"WEBHOOK_RETRY_INITIAL": "2h"},
	} {
		_, _, err := loadConfig(env(vars), flag.NewFlagSet("serve", flag.ContinueOnError), nil)
		require.ErrorContains(t, err, name, fmt.Sprint(vars))
	}
}

// An endpoint disabled while a delivery is in flight gets nothing more: the
// round that records that delivery claims no other, and the rest fail.
func TestWebhookDisabledGetsNothingMore(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), nil)
	rc := newReceiver(t)
	release := make(chan struct{})
	rc.hold = release
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	a.orderEvents(1, 2)
	path := "/v1/webhook-endpoints/" + endpoint
	require.Eventually(t, func() bool { // the first is in flight
		r, err := a.send(http.MethodGet, path+"/deliveries?status=pending", auth(a.opA), nil)
		if err != nil || intOf(r.Body["total"]) != 3 {
			return false
		}
		for _, it := range r.Body["items"].([]any) {
			if intOf(it.(map[string]any)["attempts"]) == 1 {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	a.must(http.StatusOK, http.MethodPatch, path, a.opA, map[string]any{"enabled": false})
	close(release)
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, path+"/deliveries?status=failed", auth(a.opA), nil)
		return err == nil && intOf(r.Body["total"]) == 2
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, float64(1), a.must(http.StatusOK, http.MethodGet, path+"/deliveries?status=succeeded", a.opA, nil).Body["total"])
	require.Len(t, rc.deliveries(), 1, "nothing after the endpoint was disabled")
}

// A test ping reaches an endpoint whose receiver keeps failing at once,
// not at its next retry (which, here, is an hour away).
func TestWebhookPingReachesAFailingEndpoint(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), hourlyRetries)
	rc := newReceiver(t)
	rc.answerPingsOnly(http.StatusInternalServerError)
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	a.orderEvents(1, 0)
	path := "/v1/webhook-endpoints/" + endpoint
	require.Eventually(t, func() bool { // failed once, waiting for its retry
		r, err := a.send(http.MethodGet, path+"/deliveries?status=pending", auth(a.opA), nil)
		if err != nil || intOf(r.Body["total"]) != 1 {
			return false
		}
		d := r.Body["items"].([]any)[0].(map[string]any)
		return intOf(d["attempts"]) == 1 && d["response_status"] == float64(500)
	}, 10*time.Second, 5*time.Millisecond)
	a.must(http.StatusAccepted, http.MethodPost, path+"/test", a.opA, nil)
	require.Eventually(t, func() bool { return len(rc.delivered()) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, "webhook_endpoint.ping", rc.delivered()[0].event.Type)
}

// Another merchant's test pings wake only that merchant's endpoint: a
// failing endpoint (its receiver gives no HTTP answer) gets no wave before
// its next retry (an hour away here) however often others ping theirs, nor
// when its own operator pings it (the ping goes out at once, alone).
func TestWebhookPingsWakeOnlyTheirEndpoint(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), hourlyRetries)
	failing := newReceiver(t)
	failing.answerPingsOnly(noAnswer)
	endpoint, _ := a.createEndpoint(a.opA, failing.URL)
	path := "/v1/webhook-endpoints/" + endpoint
	pending := func() []map[string]any { return a.pendingDeliveries(a.opA, endpoint) }
	a.orderEvents(1, 0)
	require.Eventually(t, func() bool { // failed once, its retry an hour away
		p := pending()
		return len(p) == 1 && intOf(p[0]["attempts"]) == 1 && p[0]["error"] != "" && p[0]["response_status"] == nil
	}, 10*time.Second, 5*time.Millisecond)
	a.orderEvents(3, 0) // three more aggregates: they wait for the retry
	require.Eventually(t, func() bool { return len(pending()) == 4 }, 10*time.Second, 5*time.Millisecond)

	// Merchant B pings its own endpoint, again and again.
	other := newReceiver(t)
	otherEndpoint, _ := a.createEndpoint(a.opB, other.URL)
	for n := 1; n <= 3; n++ {
		a.must(http.StatusAccepted, http.MethodPost, "/v1/webhook-endpoints/"+otherEndpoint+"/test", a.opB, nil)
		awaitDelivered(t, other, n)
	}
	// Then A pings the failing endpoint: its ping goes out, and once it is
	// recorded (with whatever its round claimed), nothing else has been
	// claimed: the three new deliveries were never tried.
	ping := a.must(http.StatusAccepted, http.MethodPost, path+"/test", a.opA, nil)
	require.Eventually(t, func() bool {
		d, err := a.send(http.MethodGet, ping.Header.Get("Location"), auth(a.opA), nil)
		return err == nil && d.Body["status"] == "succeeded"
	}, 10*time.Second, 5*time.Millisecond)
	p := pending()
	require.Len(t, p, 4)
	tried := 0
	for _, d := range p {
		tried += intOf(d["attempts"])
	}
	require.Equal(t, 1, tried, "only the first delivery was tried, once, before its retry: %v", p)
	got := failing.deliveries()
	require.Len(t, got, 2, "the first attempt and the ping")
	require.Equal(t, "webhook_endpoint.ping", got[1].event.Type)
}

// While a receiver keeps failing (here: no HTTP answer), the events that
// come meanwhile wait for its next retry instead of going out one by one:
// the round that records the failure claims no delivery never tried.
func TestWebhookFailingEndpointGetsNewEventsInWaves(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), hourlyRetries)
	rc := newReceiver(t)
	release := make(chan struct{})
	rc.hold = release
	rc.setAnswer(func(delivery) int { return noAnswer })
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	pending := func() []map[string]any { return a.pendingDeliveries(a.opA, endpoint) }
	a.orderEvents(1, 0)
	require.Eventually(t, func() bool { // the first event is in flight, held
		p := pending()
		return len(p) == 1 && intOf(p[0]["attempts"]) == 1
	}, 10*time.Second, 5*time.Millisecond)
	a.orderEvents(3, 0) // three more aggregates meanwhile
	require.Eventually(t, func() bool { return len(pending()) == 4 }, 10*time.Second, 5*time.Millisecond)
	close(release)
	var p []map[string]any
	require.Eventually(t, func() bool { // the failure is recorded...
		p = pending()
		for _, d := range p {
			if d["error"] != "" {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
	for _, d := range p { // ... and in the same round nothing new was claimed
		if d["error"] == "" {
			require.Equal(t, 0, intOf(d["attempts"]), "a new event went out to a failing receiver: %v", d)
		}
	}
	require.Len(t, rc.deliveries(), 1)
}

// `app serve` delivers webhooks: the scheduler's webhook unit runs on the
// process's notifier, in the split layout.
func TestServeDeliversWebhooks(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	vars := map[string]string{
		"DATABASE_URL": urls.EventStore, "READMODEL_DATABASE_URL": urls.ReadModel,
		"LOG_FORMAT": "json", "POLL_INTERVAL": "20ms", "SHUTDOWN_TIMEOUT": "5s", "WEBHOOK_ALLOW_PRIVATE": "true",
	}
	key := createKeyCLI(t, vars, "--merchant", "acme", "--role", "operator")
	srv := startServe(t, vars)
	a := &api{t: t, base: "http://" + srv.HTTPAddr, client: &http.Client{}}
	rc := newReceiver(t)
	_, secret := a.createEndpoint(key, rc.URL)
	id := a.createOrder(key, a.createCustomer(key, "Ada"), 1200)
	require.Eventually(t, func() bool { return len(rc.delivered()) == 1 }, 20*time.Second, 5*time.Millisecond,
		"the order's creation reaches the receiver: %s", srv.stderr)
	d := rc.delivered()[0]
	require.Equal(t, id, d.event.AggregateID)
	verifySignature(t, secret, d)
	srv.shutdown()
}

// Signing secrets are sealed at rest under the master key: no row holds
// one in clear, a row sealed before (in clear) is sealed at start-up and
// signs with the same secret, and `app keyring rewrap` moves every secret
// to a new first master key, so that the old one can go.
func TestWebhookSecretsSealedAtRest(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	a := withWebhooks(t, urls, nil)
	rc := newReceiver(t)
	endpoint, secret := a.createEndpoint(a.opA, rc.URL)
	rotated := a.must(http.StatusOK, http.MethodPost, "/v1/webhook-endpoints/"+endpoint+"/rotate-secret", a.opA,
		map[string]any{"overlap": "1h"}).Body["secret"].(string)
	inClear := func() int {
		var n int
		require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM webhook_endpoints e
			WHERE row_to_json(e)::text LIKE '%whsec_%' OR secret IS NOT NULL OR previous_secret IS NOT NULL`).Scan(&n))
		return n
	}
	require.Zero(t, inClear(), "no secret in clear, in any column")
	a.orderEvents(1, 0)
	awaitDelivered(t, rc, 1)
	verifySignature(t, secret, rc.delivered()[0])
	verifySignature(t, rotated, rc.delivered()[0])

	// A row as a Hearth before sealing wrote it: start-up seals it.
	_, err := a.dbs.es.DB.Exec(`UPDATE webhook_endpoints SET secret = $2, secret_sealed = NULL,
		previous_secret = NULL, previous_secret_sealed = NULL, previous_secret_until = NULL WHERE id = $1`, endpoint, secret)
	require.NoError(t, err)
	require.Equal(t, 1, inClear())
	started := startServe(t, map[string]string{"DATABASE_URL": urls.EventStore, "MODE": ModeAPI, "LOG_FORMAT": "json"})
	started.shutdown()
	require.Zero(t, inClear(), "serve seals what it finds in clear at start-up")
	n, err := a.w.webhookStore.SealSecrets(t.Context(), false)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to seal")
	a.orderEvents(1, 0)
	awaitDelivered(t, rc, 2)
	require.Len(t, strings.Fields(rc.delivered()[1].header.Get("webhook-signature")), 1)
	verifySignature(t, secret, rc.delivered()[1])

	// A new master key first: rewrap re-seals under it, and records it.
	newKey, err := keyring.New("next")
	require.NoError(t, err)
	var out bytes.Buffer
	vars := map[string]string{"DATABASE_URL": urls.EventStore, "MASTER_KEY": newKey + "," + testMasterKey, "USER": "tester"}
	var dataKeys int // the customers' (adapters/vault)
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM data_keys`).Scan(&dataKeys))
	require.Positive(t, dataKeys)
	require.NoError(t, run(t.Context(), []string{"keyring", "rewrap"}, env(vars), &out, io.Discard))
	require.Contains(t, out.String(), fmt.Sprintf("re-sealed the secrets of 1 webhook endpoints and %d data keys under master key next; no longer needed: test", dataKeys))
	var stale int
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM data_keys WHERE substring(sealed from 3 for 4) <> 'next'`).Scan(&stale))
	require.Zero(t, stale, "every data key sealed by the new master key")
	var sealed []byte
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT secret_sealed FROM webhook_endpoints WHERE id = $1`, endpoint).Scan(&sealed))
	id, err := keyring.KeyID(sealed)
	require.NoError(t, err)
	require.Equal(t, "next", id)
	var action, target string
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT action, target FROM admin_audit ORDER BY id DESC LIMIT 1`).Scan(&action, &target))
	require.Equal(t, []string{"keyring.rewrap", "master_key/next"}, []string{action, target})

	// The old key can go: the new one alone opens the secret. (The
	// endpoint as a write reads it opens its secrets; the API's reads
	// show none and open none.)
	opened := func(ring *keyring.Ring) (string, error) {
		store, err := webhooks.NewStore(a.dbs.es.DB, ring)
		require.NoError(t, err)
		var got string
		readOnly := errors.New("read only")
		_, err = store.UpdateEndpoint(t.Context(), a.merchantA, endpoint, func(e *webhook.Endpoint) error {
			got = e.Secret
			return readOnly
		}, nil)
		if errors.Is(err, readOnly) {
			return got, nil
		}
		return "", err
	}
	only, err := keyring.Parse(newKey)
	require.NoError(t, err)
	got, err := opened(only)
	require.NoError(t, err)
	require.Equal(t, secret, got)
	// Without the key that sealed it, the secret does not open.
	_, err = opened(mustRing(t, testMasterKey))
	require.ErrorIs(t, err, keyring.ErrUnknownKey)
}

func mustRing(t *testing.T, text string) *keyring.Ring {
	t.Helper()
	r, err := keyring.Parse(text)
	require.NoError(t, err)
	return r
}

// A receiver's answer judges the endpoint as it was sent to: a 410 from
// the old URL that comes after an operator moved the endpoint disables
// nothing, and the endpoint's next deliveries go to the new URL.
func TestWebhookLateGoneFromAnOldURL(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), nil)
	oldRc, newRc := newReceiver(t), newReceiver(t)
	inFlight, gate := make(chan struct{}, 1), make(chan struct{})
	oldRc.setAnswer(func(delivery) int {
		select {
		case inFlight <- struct{}{}:
		default:
		}
		<-gate
		return http.StatusGone
	})
	endpoint, _ := a.createEndpoint(a.opA, oldRc.URL)
	path := "/v1/webhook-endpoints/" + endpoint
	first := a.orderEvents(1, 0)[0]
	select {
	case <-inFlight: // sent to the old URL, its answer held
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery reached the old URL")
	}
	a.must(http.StatusOK, http.MethodPatch, path, a.opA, map[string]any{"url": newRc.URL})
	second := a.orderEvents(1, 0)[0]
	close(gate) // the old URL's 410 comes after the change

	require.Eventually(t, func() bool {
		for _, d := range newRc.delivered() {
			if d.event.AggregateID == second {
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "the next delivery went to the new URL")
	statuses := func() map[string]string {
		out := map[string]string{}
		for _, it := range a.must(http.StatusOK, http.MethodGet, path+"/deliveries", a.opA, nil).Body["items"].([]any) {
			d := it.(map[string]any)
			out[d["aggregate_id"].(string)] = d["status"].(string)
		}
		return out
	}
	require.Eventually(t, func() bool { return statuses()[second] != "pending" }, 20*time.Second, 5*time.Millisecond, "the second recorded")
	require.Equal(t, map[string]string{first: "failed", second: "succeeded"}, statuses(), "the old URL's answer stands for its own delivery")
	e := a.must(http.StatusOK, http.MethodGet, path, a.opA, nil)
	require.Equal(t, true, e.Body["enabled"], "%v", e.Body["disabled_reason"])
}

// A delivery whose body cannot be built for a passing reason (the vault
// cannot read the customer's data key: a failover, a full pool, a timeout)
// is a failed attempt on the retry schedule, not a delivery given up: at
// least once holds through a database blip.
func TestWebhookDataKeyLookupFailureIsRetried(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	a := setupConfigured(t, urls, hourlyRetries, nil)
	rc := newReceiver(t)
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	customer := a.createCustomer(a.opA, "Webhook Customer")
	created, err := a.w.app.Commands.Orders.Create(t.Context(), command.CreateOrder{
		Meta:       event.Meta{MerchantID: a.merchantA, Actor: "key:" + a.opAKeyID, CorrelationID: uuid.New(), OccurredAt: time.Now()},
		CustomerID: customer, AmountCents: 100, Notes: "gate code 1234"}) // notes: sealed with the customer's data key
	require.NoError(t, err)
	order := created.Stream[0].StreamID

	// The webhook leader's vault cannot reach the database (its pool is
	// gone, as during a failover): every data-key lookup fails.
	down := pgtest.Open(t, urls.EventStore).DB
	require.NoError(t, down.Close())
	unreachable, err := vault.New(down, a.cfg.MasterKeys)
	require.NoError(t, err)
	w := a.w
	w.vault = unreachable
	runWebhookLeader(t, a.cfg, a.dbs, w, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})))

	var status, errText string
	var attempts int
	var next *time.Time
	require.Eventually(t, func() bool {
		return a.dbs.es.DB.QueryRow(`SELECT status, attempts, next_attempt_at, error FROM webhook_deliveries WHERE endpoint_id = $1 AND aggregate_id = $2`,
			endpoint, order).Scan(&status, &attempts, &next, &errText) == nil && errText != ""
	}, 20*time.Second, 5*time.Millisecond, "the attempt is recorded")
	require.Equal(t, "pending", status, "a passing failure to read the data key gave the delivery up for good: %s", errText)
	require.Equal(t, 1, attempts)
	require.Contains(t, errText, "not sent: ")
	require.True(t, next.After(time.Now().Add(10*time.Minute)), "the retry follows the schedule (an hour here): %s", next)
	e := a.must(http.StatusOK, http.MethodGet, "/v1/webhook-endpoints/"+endpoint, a.opA, nil)
	require.Equal(t, true, e.Body["enabled"])
	require.Empty(t, rc.deliveries(), "nothing was sent")
}

// A round of deliveries reads the data keys of its events at once: the
// dispatcher's vault looked up each customer's key with a query of its own
// when it did not hold it, so a round of deliveries about as many
// customers cost as many round trips on the database every merchant shares
// (each one while the round's rows were still being read).
func TestWebhookRoundReadsItsDataKeysAtOnce(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	a := setupConfigured(t, urls, hourlyRetries, nil)
	const customers = 32 // a round's worth (webhooks' claimBatch)
	a.sealedOrders(customers)
	// The endpoint came after the events, so the fan-out queues none of
	// them; they are queued here at once, so that one round claims them
	// all.
	rc := newReceiver(t)
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	res, err := a.dbs.es.DB.ExecContext(t.Context(), `INSERT INTO webhook_deliveries
		(endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version)
		SELECT $1, merchant_id, event_id, 'order.created', stream_id::uuid, version FROM events
		WHERE merchant_id = $2 AND type = 'OrderCreated'`, endpoint, a.merchantA)
	require.NoError(t, err)
	queued, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, customers, queued)

	// The webhook leader's vault has nothing cached, and its queries are
	// counted.
	cold, queries := coldVault(t, urls, a.cfg.MasterKeys)
	w := a.w
	w.vault = cold
	runWebhookLeader(t, a.cfg, a.dbs, w, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))

	awaitDelivered(t, rc, customers)
	for _, d := range rc.delivered() {
		var body struct {
			Data struct {
				Notes *string `json:"notes"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(d.body, &body))
		require.NotNil(t, body.Data.Notes, "%s", d.body)
		require.Equal(t, "gate code 1234", *body.Data.Notes, "the notes opened")
	}
	require.LessOrEqual(t, queries.Load(), int64(1), "the vault's queries for a round of %d customers' events", customers)
}

// A delivery whose retries run out disables its endpoint even when the
// endpoint changed while the last attempt was in flight (a rotated secret,
// a new description), as long as its URL is the one the attempt went to:
// the give-up and the disabling are one, and the aggregate's next event
// fails with them rather than going out past the lost one.
func TestWebhookGiveUpDuringASecretRotationStillDisables(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), func(cfg *Config) {
		// The first failure is the last: the next retry would come after
		// WEBHOOK_RETRY_FOR.
		cfg.WebhookRetryInitial, cfg.WebhookRetryMax, cfg.WebhookRetryFor = time.Hour, time.Hour, time.Millisecond
	})
	rc := newReceiver(t)
	inFlight, gate := make(chan struct{}), make(chan struct{})
	var first sync.Once
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	rc.setAnswer(func(delivery) int {
		status := http.StatusOK
		first.Do(func() {
			close(inFlight)
			<-gate
			status = http.StatusInternalServerError
		})
		return status
	})
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	path := "/v1/webhook-endpoints/" + endpoint
	order := a.orderEvents(1, 1)[0] // versions 1 and 2 of one order
	select {
	case <-inFlight: // version 1's only attempt is at the receiver
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery reached the receiver")
	}
	a.must(http.StatusOK, http.MethodPost, path+"/rotate-secret", a.opA, map[string]any{"overlap": "1h"})
	release() // the receiver answers 500 to version 1: its retries have run out

	status := func(version int) string {
		for _, it := range a.must(http.StatusOK, http.MethodGet, path+"/deliveries", a.opA, nil).Body["items"].([]any) {
			d := it.(map[string]any)
			if d["aggregate_id"] == order && intOf(d["aggregate_version"]) == version {
				return d["status"].(string)
			}
		}
		return ""
	}
	require.Eventually(t, func() bool { return status(1) == "failed" }, 20*time.Second, 5*time.Millisecond, "version 1 given up")
	// The give-up and the disabling are one transaction: both are visible
	// now.
	e := a.must(http.StatusOK, http.MethodGet, path, a.opA, nil)
	require.Equal(t, false, e.Body["enabled"], "a delivery whose retries ran out disables its endpoint")
	require.Contains(t, e.Body["disabled_reason"], "HTTP 500")
	// Version 2 fails with its endpoint, not queued to go out after the
	// lost version 1: at once if it was queued before the give-up, or once
	// the fan-out queues it (it occurred while the endpoint was enabled).
	require.Eventually(t, func() bool { return status(2) == "failed" }, 20*time.Second, 5*time.Millisecond,
		"version 2 fails with its endpoint, not queued to go out after the lost version 1")
	for _, d := range rc.deliveries() {
		require.Equal(t, 1, d.event.AggregateVersion, "nothing after version 1 went out")
	}
}

// A receiver that answers, but refuses the events of one aggregate (a body
// it cannot take), is not failing: the other aggregates' events go out as
// they come, not at that aggregate's next retry (an hour away here).
func TestWebhookOneRefusedAggregateDoesNotHoldOthers(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), hourlyRetries)
	rc := newReceiver(t)
	var poison string
	var mu sync.Mutex
	rc.setAnswer(func(d delivery) int {
		mu.Lock()
		defer mu.Unlock()
		if poison == "" {
			poison = d.event.AggregateID // the first order's events are refused
		}
		if d.event.AggregateID == poison {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	a.orderEvents(1, 0)
	require.Eventually(t, func() bool { // refused once, its retry an hour away
		p := a.pendingDeliveries(a.opA, endpoint)
		return len(p) == 1 && p[0]["response_status"] == float64(500)
	}, 10*time.Second, 5*time.Millisecond)

	other := a.orderEvents(1, 0)[0] // another aggregate, which the receiver takes
	// Two rescans' worth of time: far less than the hour of the retry.
	ok := assert.Eventually(t, func() bool {
		for _, d := range rc.delivered() {
			if d.event.AggregateID == other {
				return true
			}
		}
		return false
	}, 25*time.Second, 10*time.Millisecond, "another aggregate's event is held back by one refused event of another aggregate")
	if !ok {
		for _, d := range a.pendingDeliveries(a.opA, endpoint) {
			t.Logf("pending: aggregate %v attempts %v next_attempt_at %v", d["aggregate_id"], d["attempts"], d["next_attempt_at"])
		}
	}
}

// A receiver that takes the merchant's events but refuses one aggregate's
// (a body it cannot take) until that delivery's retries run out loses that
// delivery, and the aggregate's events queued behind it, not its endpoint:
// another delivery succeeded since the lost one's first attempt, so the
// receiver is up. Disabled, the endpoint would get no event that occurs
// from then on, not even once it is enabled again. Its later events
// go out as they come.
func TestWebhookGiveUpOfOneAggregateKeepsAWorkingEndpoint(t *testing.T) {
	t.Parallel()
	a := setupConfigured(t, pgtest.NewDB(t), func(cfg *Config) {
		// One retry an hour after the first attempt, then no more: the
		// test moves the first attempt an hour back instead of waiting.
		cfg.WebhookRetryInitial, cfg.WebhookRetryMax, cfg.WebhookRetryFor = time.Hour, time.Hour, 90*time.Minute
	}, nil)
	a.w.webhookRand = func() float64 { return 0.5 } // no jitter: each wait is the base
	runWebhookLeader(t, a.cfg, a.dbs, a.w, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})))
	rc := newReceiver(t)
	var mu sync.Mutex
	var poison string
	rc.setAnswer(func(d delivery) int {
		mu.Lock()
		defer mu.Unlock()
		if d.event.Type == "webhook_endpoint.ping" {
			return http.StatusOK
		}
		if poison == "" {
			poison = d.event.AggregateID // the first order's events are refused
		}
		if d.event.AggregateID == poison {
			return http.StatusUnprocessableEntity
		}
		return http.StatusOK
	})
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	path := "/v1/webhook-endpoints/" + endpoint
	refused := a.orderEvents(1, 1)[0] // versions 1 and 2; version 1 is refused
	require.Eventually(t, func() bool {
		p := a.pendingDeliveries(a.opA, endpoint)
		return len(p) == 2 && slices.ContainsFunc(p, func(d map[string]any) bool { return d["response_status"] == float64(422) })
	}, 20*time.Second, 5*time.Millisecond, "version 1 refused once, its retry an hour away")

	taken := a.orderEvents(1, 0)[0] // another order: the receiver takes it
	delivered := func(order string) bool {
		for _, d := range rc.delivered() {
			if d.event.AggregateID == order {
				return true
			}
		}
		return false
	}
	require.Eventually(t, func() bool { return delivered(taken) }, 20*time.Second, 5*time.Millisecond, "another order's event delivered")

	// An hour on: version 1's retry is due, and it is the last.
	_, err := a.dbs.es.DB.ExecContext(t.Context(), `UPDATE webhook_deliveries
		SET first_attempt_at = first_attempt_at - interval '1 hour', next_attempt_at = now()
		WHERE endpoint_id = $1 AND aggregate_id = $2 AND aggregate_version = 1`, endpoint, refused)
	require.NoError(t, err)
	a.must(http.StatusAccepted, http.MethodPost, path+"/test", a.opA, nil) // wakes the endpoint's worker

	status := func(version int) (string, string) {
		for _, it := range a.must(http.StatusOK, http.MethodGet, path+"/deliveries", a.opA, nil).Body["items"].([]any) {
			d := it.(map[string]any)
			if d["aggregate_id"] == refused && intOf(d["aggregate_version"]) == version {
				return d["status"].(string), d["error"].(string)
			}
		}
		return "", ""
	}
	require.Eventually(t, func() bool { s, _ := status(1); return s == "failed" }, 20*time.Second, 5*time.Millisecond, "version 1 given up")
	e := a.must(http.StatusOK, http.MethodGet, path, a.opA, nil)
	require.Equal(t, true, e.Body["enabled"],
		"a delivery whose retries ran out disabled an endpoint whose receiver took another event since its first attempt: %v", e.Body["disabled_reason"])
	s, why := status(2)
	require.Equal(t, "failed", s, "version 2 fails with version 1, not sent past it")
	require.Contains(t, why, "not sent")
	for _, d := range rc.deliveries() {
		if d.event.AggregateID == refused {
			require.Equal(t, 1, d.event.AggregateVersion, "nothing after version 1 went out")
		}
	}

	later := a.orderEvents(1, 0)[0]
	require.Eventually(t, func() bool { return delivered(later) }, 20*time.Second, 5*time.Millisecond, "a later event delivered")
}

// A receiver that refuses the events of two aggregates (with no success in
// between) is failing, as one that gives no answer is: the events of other
// aggregates wait for its next retry. Its operator's ping goes out alone.
func TestWebhookRefusalsOfTwoAggregatesMakeTheEndpointFailing(t *testing.T) {
	t.Parallel()
	a := withWebhooks(t, pgtest.NewDB(t), hourlyRetries)
	rc := newReceiver(t)
	rc.answerPingsOnly(http.StatusServiceUnavailable)
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	path := "/v1/webhook-endpoints/" + endpoint
	pending := func() []map[string]any { return a.pendingDeliveries(a.opA, endpoint) }
	refused := func(n int) func() bool {
		return func() bool {
			p := pending()
			if len(p) != n {
				return false
			}
			for _, d := range p {
				if d["response_status"] != float64(503) {
					return false
				}
			}
			return true
		}
	}
	a.orderEvents(1, 0)
	require.Eventually(t, refused(1), 10*time.Second, 5*time.Millisecond)
	a.orderEvents(1, 0) // a second aggregate: still sent as it comes, and refused
	require.Eventually(t, refused(2), 10*time.Second, 5*time.Millisecond)
	a.orderEvents(2, 0) // two more: they wait for the next retry
	require.Eventually(t, func() bool { return len(pending()) == 4 }, 10*time.Second, 5*time.Millisecond)

	// The ping's round claims only the ping: once it is recorded, the two
	// new deliveries were never tried.
	ping := a.must(http.StatusAccepted, http.MethodPost, path+"/test", a.opA, nil)
	require.Eventually(t, func() bool {
		d, err := a.send(http.MethodGet, ping.Header.Get("Location"), auth(a.opA), nil)
		return err == nil && d.Body["status"] == "succeeded"
	}, 10*time.Second, 5*time.Millisecond)
	tried := 0
	for _, d := range pending() {
		tried += intOf(d["attempts"])
	}
	require.Equal(t, 2, tried, "only the first two deliveries were tried: %v", pending())
	require.Len(t, rc.deliveries(), 3, "two refused attempts and the ping")
}

// An endpoint gets the events that occur while it is enabled, judged at the
// event's time, not when the fan-out reaches it (here the fan-out is behind:
// webhook delivery starts after all the changes). An event that occurred
// while an operator had the endpoint disabled is never queued for it, even
// once it is enabled again; one that occurred while it was enabled is
// queued even though it was disabled since, and fails with it (listed, so
// that it can be redelivered).
func TestWebhookFanOutJudgesEnabledAtTheEventsTime(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewDB(t)
	a := setupConfigured(t, urls, nil, nil) // webhook delivery not running yet: the fan-out is behind
	rc, rc2 := newReceiver(t), newReceiver(t)
	reenabled, _ := a.createEndpoint(a.opA, rc.URL)
	disabled, _ := a.createEndpoint(a.opA, rc2.URL)
	enable := func(endpoint string, on bool) {
		a.must(http.StatusOK, http.MethodPatch, "/v1/webhook-endpoints/"+endpoint, a.opA, map[string]any{"enabled": on})
	}
	enable(reenabled, false)
	whileDisabled := a.orderEvents(1, 0)[0] // reenabled: disabled; disabled: enabled
	enable(reenabled, true)
	enable(disabled, false)
	afterwards := a.orderEvents(1, 0)[0] // reenabled: enabled; disabled: disabled

	runWebhookLeader(t, a.cfg, a.dbs, a.w, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.Eventually(t, func() bool {
		for _, d := range rc.delivered() {
			if d.event.AggregateID == afterwards {
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "the event of after the re-enabling is delivered")
	queued := func(endpoint, aggregate string) (statuses []string) {
		rows, err := a.dbs.es.DB.Query(`SELECT status FROM webhook_deliveries WHERE endpoint_id = $1 AND aggregate_id = $2`, endpoint, aggregate)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			statuses = append(statuses, s)
		}
		require.NoError(t, rows.Err())
		return statuses
	}
	// The fan-out goes through the orders topic in order: the earlier
	// event's deliveries, if any, were queued before the later one's.
	require.Empty(t, queued(reenabled, whileDisabled), "an event that occurred while the endpoint was disabled was queued for it")
	require.Empty(t, queued(disabled, afterwards), "an event that occurred while the endpoint was disabled was queued for it")
	require.Eventually(t, func() bool { return slices.Equal(queued(disabled, whileDisabled), []string{"failed"}) }, 20*time.Second, 5*time.Millisecond,
		"an event that occurred while the endpoint was enabled is queued, and fails as the endpoint is disabled now: %v", queued(disabled, whileDisabled))
	require.Empty(t, rc2.deliveries())
	require.Len(t, rc.deliveries(), 1)
}

// webhookQueueCap is how many test pings and redeliveries one endpoint
// may have pending.
const webhookQueueCap = webhook.MaxQueued

// The test pings and redeliveries an operator queues for one endpoint are
// capped: against a receiver that never answers (here no webhook leader
// runs, so nothing queued is ever tried) they would pile up in
// webhook_deliveries, the table every merchant's deliveries share, as fast
// as the rate limits let requests through. At the cap, both answer 429
// (limit webhook-queue) with Retry-After and queue nothing; finished
// deliveries do not count, another endpoint is not held up, and once one
// of them is done the endpoint takes one more.
func TestWebhookQueuedPingsAndRedeliveriesAreCapped(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	endpoint, _ := a.createEndpoint(a.opA, "https://203.0.113.9/hook")
	other, _ := a.createEndpoint(a.opA, "https://203.0.113.10/hook")
	path := "/v1/webhook-endpoints/" + endpoint
	ping := a.must(http.StatusAccepted, http.MethodPost, path+"/test", a.opA, nil).Body["id"].(string)
	seed := func(n int, status string) {
		_, err := a.dbs.es.DB.ExecContext(a.t.Context(), `INSERT INTO webhook_deliveries
			(endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, ping_payload, status, completed_at)
			SELECT $1, $2, gen_random_uuid(), 'webhook_endpoint.ping', gen_random_uuid(), 1, '{}', $4,
				CASE WHEN $4 = 'pending' THEN NULL ELSE now() END FROM generate_series(1, $3)`,
			endpoint, a.merchantA, n, status)
		require.NoError(t, err)
	}
	seed(1000, "failed")
	seed(webhookQueueCap-2, "pending")
	a.must(http.StatusAccepted, http.MethodPost, path+"/deliveries/"+ping+"/redeliver", a.opA, nil) // the last one
	pending := func() (n int) {
		require.NoError(t, a.dbs.es.DB.QueryRowContext(a.t.Context(), `SELECT count(*) FROM webhook_deliveries
			WHERE endpoint_id = $1 AND status = 'pending'`, endpoint).Scan(&n))
		return n
	}
	require.Equal(t, webhookQueueCap, pending())

	keyed := http.Header{"Authorization": {"Bearer " + a.opA}, "Idempotency-Key": {uuid.New()}}
	for _, p := range []string{path + "/test", path + "/deliveries/" + ping + "/redeliver"} {
		r := a.do(http.MethodPost, p, a.opA, nil)
		requireProblem(t, r, http.StatusTooManyRequests, "/problems/rate-limited")
		require.Equal(t, "webhook-queue", r.Body["limit"], "%s", r)
		require.NotEmpty(t, r.Header.Get("Retry-After"), "%s", r)
		require.Contains(t, r.Body["detail"], "pending", "%s", r)
	}
	refused, err := a.send(http.MethodPost, path+"/test", keyed, nil)
	require.NoError(t, err)
	requireProblem(t, refused, http.StatusTooManyRequests, "/problems/rate-limited")
	require.Equal(t, webhookQueueCap, pending(), "nothing queued past the cap")
	a.must(http.StatusAccepted, http.MethodPost, "/v1/webhook-endpoints/"+other+"/test", a.opA, nil)

	_, err = a.dbs.es.DB.ExecContext(a.t.Context(), `UPDATE webhook_deliveries SET status = 'failed', completed_at = now()
		WHERE id = $1`, ping)
	require.NoError(t, err)
	// The refusal was not kept under its Idempotency-Key: the retry runs.
	again, err := a.send(http.MethodPost, path+"/test", keyed, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, again.Status, "%s", again)
	require.Empty(t, again.Header.Get("Idempotent-Replayed"), "%s", again)
	requireProblem(t, a.do(http.MethodPost, path+"/test", a.opA, nil), http.StatusTooManyRequests, "/problems/rate-limited")
}

// A merchant's endpoints are read without their signing secrets, which no
// read shows. One secret sealed by a master key this instance does not have
// (the key lost, a backup restored from before a rotation, an instance
// started without a line; operations.md, Master keys) fails that
// endpoint's deliveries and the writes that need its secret, not every
// read of the merchant's endpoints: the list, the endpoint and its delivery
// log still answer, so the merchant sees what to fix or re-create, and
// DELETE removes it.
func TestWebhookEndpointReadsDoNotNeedTheSecrets(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	const path = "/v1/webhook-endpoints"
	lost, _ := a.createEndpoint(a.opA, "https://hooks.example.com/lost")
	kept, _ := a.createEndpoint(a.opA, "https://hooks.example.com/kept")
	a.must(http.StatusOK, http.MethodPost, path+"/"+kept+"/rotate-secret", a.opA, map[string]any{"overlap": "1h"})

	gone, err := keyring.Parse("gone:" + strings.Repeat("A", 43) + "=")
	require.NoError(t, err)
	sealed, err := gone.Seal([]byte(webhook.NewSecret()), []byte(lost))
	require.NoError(t, err)
	_, err = a.dbs.es.DB.Exec(`UPDATE webhook_endpoints SET secret = NULL, secret_sealed = $2 WHERE id = $1`, lost, sealed)
	require.NoError(t, err)

	list := a.must(http.StatusOK, http.MethodGet, path, a.opA, nil)
	require.Equal(t, float64(2), list.Body["total"], "the merchant's endpoints are listed: %s", list)
	got := a.must(http.StatusOK, http.MethodGet, path+"/"+lost, a.opA, nil)
	require.Equal(t, "https://hooks.example.com/lost", got.Body["url"])
	a.must(http.StatusOK, http.MethodGet, path+"/"+lost+"/deliveries", a.opA, nil)
	// A read says as before until when an earlier secret still signs.
	until, err := time.Parse(time.RFC3339Nano, a.must(http.StatusOK, http.MethodGet, path+"/"+kept, a.opA, nil).Body["previous_secret_expires_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Hour), until, time.Minute)

	a.must(http.StatusNoContent, http.MethodDelete, path+"/"+lost, a.opA, nil)
	a.must(http.StatusNotFound, http.MethodGet, path+"/"+lost, a.opA, nil)
}

// The runbook's redelivery loop (operations.md, Webhooks: "Redeliver what
// was missed, oldest first") sends every failed delivery again, in each
// aggregate's order, also when more failed than one page of the delivery
// log holds (after a day's outage, every event of the day did).
func TestWebhookRunbookRedeliversEveryFailedDeliveryInOrder(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	script := regexp.MustCompile("(?s)- \\*\\*Redeliver\\*\\* what was missed.*?```sh\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, script, "operations.md has the redelivery loop")

	// Webhook delivery starts once the endpoint is disabled: the fan-out
	// queues the events that occurred while it was enabled, and they fail
	// with it (the runbook's case of a fan-out that was behind).
	a := setupConfigured(t, pgtest.NewDB(t), nil, nil)
	rc := newReceiver(t)
	endpoint, _ := a.createEndpoint(a.opA, rc.URL)
	path := "/v1/webhook-endpoints/" + endpoint
	const versions = 71
	orders := a.orderEvents(3, versions-1) // 213 events: more than a page of 200
	a.must(http.StatusOK, http.MethodPatch, path, a.opA, map[string]any{"enabled": false})
	runWebhookLeader(t, a.cfg, a.dbs, a.w, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.Eventually(t, func() bool {
		r, err := a.send(http.MethodGet, path+"/deliveries?status=failed", auth(a.opA), nil)
		return err == nil && intOf(r.Body["total"]) == 3*versions
	}, 30*time.Second, 10*time.Millisecond, "every delivery failed")

	// The endpoint enabled again, the loop runs.
	a.must(http.StatusOK, http.MethodPatch, path, a.opA, map[string]any{"enabled": true})
	cmd := exec.Command("bash", "-c", string(script[1]))
	cmd.Env = append(os.Environ(), "B="+a.base, "KEY="+a.opA, "E="+endpoint)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, 3*versions, strings.Count(string(out), "202 "),
		"the loop redelivers every failed delivery, not the first page of the log only")

	awaitEvery(t, rc, orders, versions)
	requireInOrder(t, rc.delivered(), orders, versions)
}
