package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"

	"hearth/domain/webhook"
	"hearth/internal/pgtest"
)

// docCheck sends requests and validates every answer (status, headers,
// body) against the 3.0 form of the served OpenAPI document, collecting
// what the document does not describe: a field, a status, an enum value
// the server sends and the document lacks breaks the clients generated
// from it.
type docCheck struct {
	a          *api
	doc        *openapi3.T
	router     routers.Router
	violations []string
}

func newDocCheck(t *testing.T, a *api) *docCheck {
	res, err := a.client.Get(a.base + "/openapi-3.0.json")
	require.NoError(t, err)
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	require.NoError(t, err)
	doc.Servers = openapi3.Servers{{URL: a.base}}
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)
	return &docCheck{a: a, doc: doc, router: router}
}

func (d *docCheck) send(label, method, path, key string, header map[string]string, body any) response {
	t := d.a.t
	t.Helper()
	var buf []byte
	switch b := body.(type) {
	case nil:
	case string:
		buf = []byte(b)
	default:
		var err error
		buf, err = json.Marshal(b)
		require.NoError(t, err)
	}
	req, err := http.NewRequest(method, d.a.base+path, bytes.NewReader(buf))
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	} else {
		req.Body = http.NoBody
		req.ContentLength = 0
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := d.a.client.Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	r := response{Status: res.StatusCode, Header: res.Header, Raw: string(raw)}
	_ = json.Unmarshal(raw, &r.Body)
	t.Logf("%s: %s %s -> %d %s", label, method, path, res.StatusCode, truncate(string(raw), 400))

	vreq, _ := http.NewRequest(method, d.a.base+path, bytes.NewReader(buf))
	route, params, err := d.router.FindRoute(vreq)
	if err != nil {
		d.violations = append(d.violations, fmt.Sprintf("%s: %s %s: no route in the document: %v", label, method, path, err))
		return r
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status: res.StatusCode, Header: res.Header, Body: io.NopCloser(bytes.NewReader(raw)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	for _, name := range undeclaredHeaders(route, res) {
		d.violations = append(d.violations, fmt.Sprintf("%s: %s %s -> %d: header %s is not declared", label, method, path, res.StatusCode, name))
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		d.violations = append(d.violations, fmt.Sprintf("%s: %s %s -> %d: %s\n   body: %s", label, method, path, res.StatusCode,
			truncate(err.Error(), 1500), truncate(string(raw), 600)))
	}
	return r
}

// transportHeaders are the answer's headers of HTTP itself, which no
// document declares.
var transportHeaders = []string{"Content-Type", "Content-Length", "Date", "Connection", "Transfer-Encoding", "Vary"}

// undeclaredHeaders is the headers of res the document does not declare
// for its status: a generated client reads only the declared ones (its
// HeadersNNN), so a Retry-After, a Location or a correlation id sent
// without a declaration does not reach its user.
func undeclaredHeaders(route *routers.Route, res *http.Response) []string {
	var declared openapi3.Headers
	if r := route.Operation.Responses.Status(res.StatusCode); r != nil && r.Value != nil {
		declared = r.Value.Headers
	}
	var out []string
	for name := range res.Header {
		if slices.ContainsFunc(transportHeaders, func(h string) bool { return strings.EqualFold(h, name) }) {
			continue
		}
		if !slices.ContainsFunc(slices.Collect(maps.Keys(declared)), func(h string) bool { return strings.EqualFold(h, name) }) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// About a hundred requests across every family of routes, good and bad:
// every answer is one the OpenAPI document describes.
func TestAnswersMatchTheOpenAPIDocument(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	d := newDocCheck(t, a)
	op, admin, worker := a.opA, a.admin, a.worker
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer receiver.Close()

	// Public.
	d.send("healthz", "GET", "/healthz", "", nil, nil)
	d.send("readyz", "GET", "/readyz", "", nil, nil)
	d.send("readyz admin", "GET", "/readyz", admin, nil, nil)
	d.send("leadership", "GET", "/admin/leadership", admin, nil, nil)

	// Empty lists of a fresh merchant B.
	d.send("empty customers B", "GET", "/v1/customers", a.opB, nil, nil)
	d.send("empty orders B", "GET", "/v1/orders", a.opB, nil, nil)
	d.send("empty service requests B", "GET", "/v1/service-requests", a.opB, nil, nil)
	d.send("empty schedules B", "GET", "/v1/schedules", a.opB, nil, nil)
	d.send("empty plans B", "GET", "/v1/plans", a.opB, nil, nil)
	d.send("empty webhooks B", "GET", "/v1/webhook-endpoints", a.opB, nil, nil)
	d.send("empty catalog B", "GET", "/v1/catalog-items", a.opB, nil, nil)
	d.send("empty events B", "GET", "/v1/events?wait=0", a.opB, nil, nil)
	d.send("empty parked", "GET", "/admin/parked", admin, nil, nil)
	d.send("empty replay all", "POST", "/admin/parked/replay", admin, nil, nil)
	replay := d.send("if-match on an admin write", "POST", "/admin/parked/replay", admin, map[string]string{"If-Match": `"1"`}, nil)
	require.Equal(t, http.StatusPreconditionFailed, replay.Status, "%s", replay)
	d.send("keys of unknown merchant", "GET", "/admin/keys?merchant_id=0b9e7f64-5f3c-4d1a-9a49-3c1d6f1e2a10", admin, nil, nil)
	d.send("settings", "GET", "/v1/settings", op, nil, nil)

	// Reference data.
	c := d.send("create customer", "POST", "/v1/customers", op, nil, map[string]any{"name": "Ada", "address": "1 Road"})
	cust := c.Body["id"].(string)
	d.send("get customer", "GET", "/v1/customers/"+cust, op, nil, nil)
	d.send("patch customer", "PATCH", "/v1/customers/"+cust, op, nil, map[string]any{"phone": "123"})
	d.send("list customers", "GET", "/v1/customers?q=Ad", op, nil, nil)
	it := d.send("create item", "POST", "/v1/catalog-items", op, nil, map[string]any{"name": "Clean", "base_price_cents": 4500})
	item := it.Body["id"].(string)
	d.send("create staff", "POST", "/v1/staff", op, nil, map[string]any{"name": "Sam"})
	d.send("list staff", "GET", "/v1/staff", op, nil, nil)
	d.send("if-match on customer", "PATCH", "/v1/customers/"+cust, op, map[string]string{"If-Match": `"1"`}, map[string]any{"phone": "1"})

	// Service request -> order.
	sr := d.send("create request", "POST", "/v1/service-requests", op, nil, map[string]any{"customer_id": cust, "catalog_item_id": item, "content": "clean it"})
	srID := sr.Body["id"].(string)
	d.send("confirm request", "POST", "/v1/service-requests/"+srID+"/status", op, nil, map[string]any{"status": "confirmed"})
	conv := d.send("convert", "POST", "/v1/service-requests/"+srID+"/convert", op, nil, nil)
	orderID, _ := conv.Body["id"].(string)
	d.send("get request", "GET", "/v1/service-requests/"+srID+"?min_position=1", op, nil, nil)
	d.send("list requests", "GET", "/v1/service-requests", op, nil, nil)
	o := d.send("create order", "POST", "/v1/orders", op, map[string]string{"Idempotency-Key": "k-1"}, map[string]any{"customer_id": cust, "amount_cents": 100})
	ord := o.Body["id"].(string)
	d.send("replay order", "POST", "/v1/orders", op, map[string]string{"Idempotency-Key": "k-1"}, map[string]any{"customer_id": cust, "amount_cents": 100})
	d.send("reuse key", "POST", "/v1/orders", op, map[string]string{"Idempotency-Key": "k-1"}, map[string]any{"customer_id": cust, "amount_cents": 101})
	d.send("stale if-match", "POST", "/v1/orders/"+ord+"/status", op, map[string]string{"If-Match": `"9"`}, map[string]any{"status": "confirmed"})
	d.send("stale expected_version", "POST", "/v1/orders/"+ord+"/status", op, nil, map[string]any{"status": "confirmed", "expected_version": 9})
	star := d.send("if-match * with a stale expected_version", "POST", "/v1/orders/"+ord+"/status", op, map[string]string{"If-Match": "*"}, map[string]any{"status": "confirmed", "expected_version": 9})
	require.Equal(t, http.StatusConflict, star.Status, "%s", star)
	onWrite := d.send("consistency-position on a write", "POST", "/v1/orders/"+ord+"/status", op, map[string]string{"Consistency-Position": "1"}, map[string]any{"status": "confirmed"})
	require.Equal(t, http.StatusBadRequest, onWrite.Status, "%s", onWrite)
	d.send("confirm order", "POST", "/v1/orders/"+ord+"/status", op, map[string]string{"If-Match": `"1"`}, map[string]any{"status": "confirmed"})
	d.send("bad transition", "POST", "/v1/orders/"+ord+"/status", op, nil, map[string]any{"status": "completed"})
	d.send("assign", "PUT", "/v1/orders/"+ord+"/assignment", op, nil, map[string]any{"staff_id": a.staffA,
		"start_at": "2030-01-01T09:00:00Z", "end_at": "2030-01-01T10:00:00Z", "dispatch_note": "gate code"})
	d.send("double booking", "PUT", "/v1/orders/"+orderID+"/assignment", op, nil, map[string]any{"staff_id": a.staffA,
		"start_at": "2030-01-01T09:30:00Z", "end_at": "2030-01-01T10:30:00Z"})
	d.send("settle", "PUT", "/v1/orders/"+ord+"/settlement", op, nil, map[string]any{"settlement_status": "settled", "paid_amount_cents": 100, "payment_method": "card"})
	got := d.send("get order", "GET", "/v1/orders/"+ord+"?min_position=1", op, nil, nil)
	d.send("304", "GET", "/v1/orders/"+ord, op, map[string]string{"If-None-Match": got.Header.Get("ETag")}, nil)
	d.send("changes", "GET", "/v1/orders/"+ord+"/changes", op, nil, nil)
	d.send("list orders", "GET", "/v1/orders?status=dispatching", op, nil, nil)
	d.send("bad id", "GET", "/v1/orders/nope", op, nil, nil)
	d.send("unknown order", "GET", "/v1/orders/0b9e7f64-5f3c-4d1a-9a49-3c1d6f1e2a10", op, nil, nil)
	d.send("no key", "GET", "/v1/orders", "", nil, nil)
	d.send("worker on requests", "GET", "/v1/service-requests", worker, nil, nil)
	d.send("bad json", "POST", "/v1/orders", op, nil, `{"customer_id":`)
	d.send("unknown field", "POST", "/v1/orders", op, nil, map[string]any{"customer_id": cust, "x": 1})
	d.send("cancel", "POST", "/v1/orders/"+orderID+"/cancel", op, nil, map[string]any{"reason": "no"})
	d.send("bad page", "GET", "/v1/orders?page=100&page_size=200", op, nil, nil)
	d.send("bad cursor", "GET", "/v1/orders?cursor=zzz", op, nil, nil)
	d.send("bad position", "GET", "/v1/orders?min_position=999999999", op, nil, nil)

	// Schedules, once the read model has the one assigned.
	require.Eventually(t, func() bool {
		r := a.do(http.MethodGet, "/v1/schedules", worker, nil)
		items, _ := r.Body["items"].([]any)
		return len(items) > 0
	}, 10*time.Second, 10*time.Millisecond)
	scheds := d.send("list schedules", "GET", "/v1/schedules", worker, nil, nil)
	sid := scheds.Body["items"].([]any)[0].(map[string]any)["id"].(string)
	d.send("get schedule", "GET", "/v1/schedules/"+sid, worker, nil, nil)
	d.send("start", "POST", "/v1/schedules/"+sid+"/status", worker, nil, map[string]any{"status": "in_service"})
	d.send("worker cancel", "POST", "/v1/schedules/"+sid+"/status", worker, nil, map[string]any{"status": "cancelled"})

	// Plans, settings, hours, availability.
	d.send("put settings", "PUT", "/v1/settings", op, nil, map[string]any{"time_zone": "Europe/London"})
	p := d.send("create plan", "POST", "/v1/plans", op, nil, map[string]any{"customer_id": cust, "catalog_item_id": item,
		"window":     map[string]any{"start": "09:00", "end": "11:00"},
		"recurrence": map[string]any{"frequency": "weekly", "interval": 1, "weekdays": []int{2}, "start": "2030-03-05", "count": 3}})
	plan, _ := p.Body["id"].(string)
	d.send("get plan", "GET", "/v1/plans/"+plan+"?min_position=1", op, nil, nil)
	d.send("list plans", "GET", "/v1/plans", op, nil, nil)
	d.send("visits", "GET", "/v1/plans/"+plan+"/visits?from=2030-03-01T00:00:00Z", op, nil, nil)
	d.send("visits none in range", "GET", "/v1/plans/"+plan+"/visits?from=2031-03-01T00:00:00Z", op, nil, nil)
	d.send("skip visit", "POST", "/v1/plans/"+plan+"/skip", op, nil, map[string]any{"date": "2030-03-12"})
	d.send("pause", "POST", "/v1/plans/"+plan+"/pause", op, nil, nil)
	d.send("hours", "GET", "/v1/staff/"+a.staffA+"/working-hours", op, nil, nil)
	d.send("put hours", "PUT", "/v1/staff/"+a.staffA+"/working-hours", op, nil, map[string]any{"week": map[string]any{
		"monday": []any{map[string]any{"start": "08:00", "end": "17:00"}}}, "catalog_item_ids": []string{item}})
	d.send("availability", "GET", "/v1/availability?duration=2h&from=2030-01-07T00:00:00Z&to=2030-01-08T00:00:00Z", op, nil, nil)
	d.send("availability none", "GET", "/v1/availability?duration=2h&from=2030-01-05T00:00:00Z&to=2030-01-06T00:00:00Z", op, nil, nil)

	// Webhooks.
	e := d.send("create endpoint", "POST", "/v1/webhook-endpoints", op, nil, map[string]any{"url": receiver.URL + "/hook"})
	ep, _ := e.Body["id"].(string)
	d.send("get endpoint", "GET", "/v1/webhook-endpoints/"+ep, op, nil, nil)
	d.send("create endpoint with a key", "POST", "/v1/webhook-endpoints", op, map[string]string{"Idempotency-Key": "ep-1"}, map[string]any{"url": receiver.URL + "/keyed"})
	shown := d.send("repeat of a secret's answer", "POST", "/v1/webhook-endpoints", op, map[string]string{"Idempotency-Key": "ep-1"}, map[string]any{"url": receiver.URL + "/keyed"})
	require.Equal(t, http.StatusConflict, shown.Status, "%s", shown)
	d.send("list endpoints", "GET", "/v1/webhook-endpoints", op, nil, nil)
	d.send("patch endpoint", "PATCH", "/v1/webhook-endpoints/"+ep, op, nil, map[string]any{"description": "x"})
	kept := d.send("stale if-match on delete endpoint", "DELETE", "/v1/webhook-endpoints/"+ep, op, map[string]string{"If-Match": `"1"`}, nil)
	require.Equal(t, http.StatusPreconditionFailed, kept.Status, "%s", kept)
	d.send("rotate", "POST", "/v1/webhook-endpoints/"+ep+"/rotate-secret", op, nil, map[string]any{"overlap": "1h"})
	tp := d.send("test ping", "POST", "/v1/webhook-endpoints/"+ep+"/test", op, nil, nil)
	d.send("create order for hook", "POST", "/v1/orders", op, nil, map[string]any{"customer_id": cust})
	d.send("deliveries", "GET", "/v1/webhook-endpoints/"+ep+"/deliveries", op, nil, nil)
	d.send("deliveries by two statuses", "GET", "/v1/webhook-endpoints/"+ep+"/deliveries?status=pending&status=succeeded", op, nil, nil)
	if id, ok := tp.Body["id"].(string); ok {
		d.send("delivery", "GET", "/v1/webhook-endpoints/"+ep+"/deliveries/"+id, op, nil, nil)
	}
	full := d.send("create full endpoint", "POST", "/v1/webhook-endpoints", op, nil, map[string]any{"url": receiver.URL + "/full"})
	if id, ok := full.Body["id"].(string); ok {
		_, err := a.dbs.es.DB.ExecContext(t.Context(), `INSERT INTO webhook_deliveries
			(endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, ping_payload)
			SELECT $1, $2, gen_random_uuid(), 'webhook_endpoint.ping', gen_random_uuid(), 1, '{}' FROM generate_series(1, $3)`,
			id, a.merchantA, webhook.MaxQueued)
		require.NoError(t, err)
		r := d.send("test ping past the queue's cap", "POST", "/v1/webhook-endpoints/"+id+"/test", op, nil, nil)
		require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r)
	}
	d.send("events feed", "GET", "/v1/events?wait=0&limit=5", op, nil, nil)
	d.send("events bad type", "GET", "/v1/events?types=nope", op, nil, nil)

	// Export, erasure, admin.
	d.send("export", "GET", "/v1/customers/"+cust+"/export", op, nil, nil)
	d.send("staff export", "GET", "/v1/staff/"+a.staffA+"/export", op, nil, nil)
	d.send("erase staff bad confirm", "POST", "/v1/staff/"+a.staffB+"/erase", a.opB, nil, map[string]any{"confirm": a.staffA})
	d.send("keys", "GET", "/admin/keys", admin, nil, nil)
	k := d.send("create key", "POST", "/admin/keys", admin, nil, map[string]any{"role": "operator", "merchant": "initech"})
	if id, ok := k.Body["id"].(string); ok {
		d.send("rotate key", "POST", "/admin/keys/"+id+"/rotate", admin, nil, nil)
		d.send("revoke key", "POST", "/admin/keys/"+id+"/revoke", admin, nil, nil)
	}
	d.send("audit", "GET", "/admin/audit", admin, nil, nil)
	d.send("rebuild plans", "POST", "/admin/rebuilds/plans", admin, nil, nil)
	d.send("rebuild status plans", "GET", "/admin/rebuilds/plans", admin, nil, nil)
	d.send("parked plans", "GET", "/admin/parked?projection=plans", admin, nil, nil)
	d.send("parked webhooks_orders", "GET", "/admin/parked?projection=webhooks_orders", admin, nil, nil)
	d.send("parked bogus", "GET", "/admin/parked?projection=bogus", admin, nil, nil)

	// Last: merchant A's event feed stops at this event.
	unreadable := a.createOrder(op, a.createCustomer(op, "Ursula Unread"), 3)
	_, err := a.dbs.es.DB.ExecContext(t.Context(), `
		INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, actor)
		SELECT gen_random_uuid(), stream_type, stream_id, 2, merchant_id, 'OrderTeleported', '{}', occurred_at, correlation_id, actor
		FROM events WHERE stream_id = $1`, unreadable)
	require.NoError(t, err)
	r := d.send("write to an order with an unreadable event", "POST", "/v1/orders/"+unreadable+"/status", op, nil,
		map[string]any{"status": "confirmed"})
	require.Equal(t, http.StatusInternalServerError, r.Status, "%s", r)

	require.Empty(t, d.violations, "answers the OpenAPI document does not describe:\n%s", strings.Join(d.violations, "\n"))
}

// A cursor of another list on the delivery log is a 422 the document
// describes.
func TestDeliveryCursorAnswerMatchesTheOpenAPIDocument(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	d := newDocCheck(t, a)
	op := a.opA
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer receiver.Close()
	cust := a.createCustomer(op, "Ada")
	for _, o := range []string{a.createOrder(op, cust, 1), a.createOrder(op, cust, 2)} {
		a.awaitOrder(op, o, 1)
	}
	l := d.send("orders page 1", "GET", "/v1/orders?page_size=1", op, nil, nil)
	cursor, _ := l.Body["next_cursor"].(string)
	e := d.send("create endpoint", "POST", "/v1/webhook-endpoints", op, nil, map[string]any{"url": receiver.URL})
	ep := e.Body["id"].(string)
	d.send("deliveries with an orders cursor", "GET", "/v1/webhook-endpoints/"+ep+"/deliveries?cursor="+cursor, op, nil, nil)
	d.send("orders from/to with newest-first cursor", "GET", "/v1/orders?from=2020-01-01T00:00:00Z&cursor="+cursor, op, nil, nil)
	require.Empty(t, d.violations, "answers the OpenAPI document does not describe:\n%s", strings.Join(d.violations, "\n"))
}

// Every action the audit log holds is one the document's enum names, the
// command line's too: `app projections rewind` records its entry in the
// same log that GET /admin/audit lists.
func TestAuditLogOfACommandLineActionMatchesTheOpenAPIDocument(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	a := setup(t, urls)
	d := newDocCheck(t, a)
	out, err := cli(t.Context(), a.urls(), "projections", "rewind", "--by", "ops: restore 12")
	require.NoError(t, err, out)
	l := d.send("audit after a rewind", "GET", "/admin/audit", a.admin, nil, nil)
	require.Equal(t, http.StatusOK, l.Status, "%s", l)
	require.Contains(t, l.Raw, `"projections.rewind"`, "the rewind is in the audit log")
	require.Empty(t, d.violations, "answers the OpenAPI document does not describe:\n%s", strings.Join(d.violations, "\n"))
}

// Every GET that takes a position (min_position or Consistency-Position)
// refuses one that is no write of the key's merchant with a 422, and
// says in Consistency-Status whether it reached one that is: a route the
// document gives the parameter but not those answers leaves a client
// generated from it with neither the problem nor the header. The routes
// are the document's own, so a new one is checked as it comes.
func TestPositionAnswersMatchTheOpenAPIDocument(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	d := newDocCheck(t, a)
	op := a.opA
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer receiver.Close()

	cust := a.createCustomer(op, "Ada")
	own := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", op, map[string]any{"customer_id": cust})
	order, pos := own.Body["id"].(string), own.Header.Get("Consistency-Position")
	other := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opB, map[string]any{"customer_id": a.createCustomer(a.opB, "Bea")})
	foreign := other.Header.Get("Consistency-Position")
	require.NotEmpty(t, pos)
	require.NotEmpty(t, foreign)
	ep := a.must(http.StatusCreated, http.MethodPost, "/v1/webhook-endpoints", op, map[string]any{"url": receiver.URL}).Body["id"].(string)
	delivery := a.must(http.StatusAccepted, http.MethodPost, "/v1/webhook-endpoints/"+ep+"/test", op, nil).Body["id"].(string)
	ids := map[string]string{"/v1/customers/": cust, "/v1/staff/": a.staffA, "/v1/orders/": order, "/v1/webhook-endpoints/": ep}

	checked := 0
	for template, item := range d.doc.Paths.Map() {
		get := item.Get
		if get == nil || get.Parameters.GetByInAndName("query", "min_position") == nil {
			continue
		}
		checked++
		path := strings.ReplaceAll(template, "{delivery_id}", delivery)
		if prefix, _, ok := strings.Cut(path, "{id}"); ok {
			path = strings.Replace(path, "{id}", cmp.Or(ids[prefix], "0b9e7f64-5f3c-4d1a-9a49-3c1d6f1e2a10"), 1)
		}
		query := "?"
		if get.Parameters.GetByInAndName("query", "wait") != nil {
			query += "wait=0&" // the event feed: answer at once
		}
		r := d.send("another merchant's position", http.MethodGet, path+query+"min_position="+foreign, op, nil, nil)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", template, r)
		r = d.send("another merchant's position in the header", http.MethodGet, path+strings.TrimRight(query, "?&"), op,
			map[string]string{"Consistency-Position": foreign}, nil)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", template, r)

		r = d.send("its own position", http.MethodGet, path+query+"min_position="+pos, op, nil, nil)
		if r.Status != http.StatusOK {
			continue // a required parameter not given, an unknown id: the refusal is checked above
		}
		require.Equal(t, "reached", r.Header.Get("Consistency-Status"), "%s: %s", template, r)
		ok := get.Responses.Status(http.StatusOK)
		if ok == nil || ok.Value == nil || ok.Value.Headers["Consistency-Status"] == nil {
			d.violations = append(d.violations, fmt.Sprintf("GET %s -> 200: header Consistency-Status is not declared", template))
		}
	}
	require.Greater(t, checked, 10, "the document's GETs that take min_position")
	require.Empty(t, d.violations, "answers the OpenAPI document does not describe:\n%s", strings.Join(d.violations, "\n"))
}
