package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"hearth/adapters/pubsub/projector"
	"hearth/app/access"
	"hearth/app/query"
	"hearth/client"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
	httpport "hearth/ports/http"
)

// api is one running Hearth for a test: the HTTP API behind an httptest
// server, the projections running in-process, and keys of two merchants.
type api struct {
	t      *testing.T
	base   string // the server's URL
	client *http.Client
	cfg    Config
	dbs    databases
	w      wiring

	merchantA, merchantB string
	opA, opB             string // operator keys of merchants A and B
	worker               string // worker key of merchant A, bound to staffA
	admin                string // admin key: a platform key, of no merchant
	staffA, staffB       string // a staff member of each merchant
	opAKeyID             string // id of opA, the actor of its events
	adminKeyID           string // id of admin, the actor of its admin actions
}

// setup wires Hearth on the databases at urls the way serve does, runs the
// projections until the test ends and creates the merchants and keys.
func setup(t *testing.T, urls pgtest.URLs) *api {
	t.Helper()
	return setupWith(t, urls, nil)
}

// setupWith is setup with a hook that may change the projections (and the
// config) before they run.
func setupWith(t *testing.T, urls pgtest.URLs, change func(cfg *Config, projections []projector.Projection)) *api {
	t.Helper()
	return setupConfigured(t, urls, nil, change)
}

// setupConfigured is setupWith with a hook that changes the config first,
// before the pools open.
func setupConfigured(t *testing.T, urls pgtest.URLs, configure func(cfg *Config), change func(cfg *Config, projections []projector.Projection)) *api {
	t.Helper()
	ctx := t.Context()
	cfg := Config{
		DatabaseURL: urls.EventStore, ReadModelDatabaseURL: urls.ReadModel,
		Mode: ModeAll, PollInterval: 20 * time.Millisecond, ConsistencyTimeout: 2 * time.Second,
		ConsistencyMaxWaits: 256, RequestStatementTimeout: 5 * time.Second,
	}
	webhookTestSettings(&cfg)
	if configure != nil {
		configure(&cfg)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))

	dbs, err := openDatabases(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { dbs.close() }) // the request pools too, once open
	// As an instance's start pairs the read model with the event store
	// (after its migrations, which pgtest's databases have had): a backup
	// of the read model taken from now on carries its identity.
	require.NoError(t, dbs.checkReadModelPaired(ctx))
	require.NoError(t, dbs.openRequestPools(ctx, cfg))
	require.Equal(t, urls.Split(), dbs.rm != dbs.es, "one pool per database")
	w, err := wire(cfg, dbs, log)
	require.NoError(t, err)
	w.retryInitial = time.Millisecond // a failing event parks within about a second
	require.NoError(t, w.wireEventFeed(cfg, dbs, log))
	require.NoError(t, w.routeReads(ctx, cfg, dbs, log))
	if w.reads != nil { // the replicas' monitor, as serve runs it
		readsCtx, stopReads := context.WithCancel(context.Background())
		readsDone := make(chan struct{})
		go func() { w.reads.Run(readsCtx); close(readsDone) }()
		t.Cleanup(func() { stopReads(); <-readsDone; w.reads.Close() })
	}
	if change != nil {
		change(&cfg, w.projections)
	}
	notifyCtx, stopNotifications := context.WithCancel(context.Background())
	notified := make(chan error, 1)
	go func() { notified <- w.runNotifications(notifyCtx) }()
	t.Cleanup(func() {
		stopNotifications()
		require.NoError(t, <-notified)
	})

	projCtx, stopProjections := context.WithCancel(context.Background())
	projDone := make(chan error, 1)
	live := make(chan struct{})
	go func() {
		projDone <- runProjections(projCtx, cfg, dbs.es.DB, w, w.projections, log, func() { close(live) })
	}()
	t.Cleanup(func() {
		stopProjections()
		require.NoError(t, <-projDone, "projections stop cleanly")
	})
	select {
	case <-live: // caught up and subscribed
	case <-time.After(10 * time.Second):
		t.Fatal("the projections never went live")
	}

	t.Cleanup(w.maintenance.Close)
	srv := serveAPI(t, cfg, dbs, w, log)

	a := &api{t: t, base: srv.URL, client: srv.Client(), cfg: cfg, dbs: dbs, w: w}
	newKey := func(merchant string, role access.Role, staffID string) (id, merchantID, secret string) {
		k, err := w.refdata.CreateKey(ctx, merchant, role, staffID)
		require.NoError(t, err)
		return k.ID, k.MerchantID, k.Secret
	}
	a.opAKeyID, a.merchantA, a.opA = newKey("acme", access.Operator, "")
	_, a.merchantB, a.opB = newKey("globex", access.Operator, "")
	a.staffA, err = w.refdata.CreateStaff(ctx, a.merchantA, "Wanda Worker")
	require.NoError(t, err)
	a.staffB, err = w.refdata.CreateStaff(ctx, a.merchantB, "Gus Globex")
	require.NoError(t, err)
	_, _, a.worker = newKey("acme", access.Worker, a.staffA)
	a.adminKeyID, _, a.admin = newKey("", access.Admin, "")
	return a
}

// serveAPI serves the HTTP API of w, as serve wires it, until the test ends.
func serveAPI(t *testing.T, cfg Config, dbs databases, w wiring, log *slog.Logger) *httptest.Server {
	t.Helper()
	hcfg, err := httpConfig(cfg, dbs, w, nil, log) // serve's HTTP wiring
	require.NoError(t, err)
	t.Cleanup(func() { closeConsole(hcfg.Console) })
	handler, err := httpport.NewHandler(hcfg)
	require.NoError(t, err)
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

// hearth is Hearth's generated Go client (client_test.go) on the same
// server and HTTP client as the raw requests. Built as NewClientWithResponses
// builds it (a server URL ending in a slash), without its error: only a
// failing option makes one.
func (a *api) hearth() *client.ClientWithResponses {
	return &client.ClientWithResponses{ClientInterface: &client.Client{Server: a.base + "/", Client: a.client}}
}

// response is an HTTP answer with its JSON body decoded (numbers are
// float64, as encoding/json decodes them into any).
type response struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    string
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.Status, r.Raw) }

// send makes one request with the given headers; body is sent as is when it
// is a string, as JSON otherwise. It never touches t, so conditions polled
// by Eventually (and other goroutines) can use it.
func (a *api) send(method, path string, header http.Header, body any) (response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		return response{}, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for name, values := range header {
		req.Header[name] = values
	}
	res, err := a.client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	r := response{Status: res.StatusCode, Header: res.Header, Raw: string(raw)}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.Body); err != nil {
			return r, fmt.Errorf("%s %s: body is not a JSON object: %w: %s", method, path, err, raw)
		}
	}
	return r, nil
}

// auth is the Authorization header of key (none for "").
func auth(key string) http.Header {
	if key == "" {
		return http.Header{}
	}
	return http.Header{"Authorization": {"Bearer " + key}}
}

// do makes a request with key ("" sends no Authorization header).
func (a *api) do(method, path, key string, body any) response {
	a.t.Helper()
	r, err := a.send(method, path, auth(key), body)
	require.NoError(a.t, err)
	return r
}

// must makes a request and requires its status.
func (a *api) must(status int, method, path, key string, body any) response {
	a.t.Helper()
	r := a.do(method, path, key, body)
	require.Equal(a.t, status, r.Status, "%s %s answered %s", method, path, r)
	return r
}

// createCustomer creates a customer through the generated client and
// returns its id.
func (a *api) createCustomer(key, name string) string {
	a.t.Helper()
	r, err := a.hearth().CreateCustomerWithResponse(a.t.Context(), nil, client.CustomerInput{Name: new(name)}, as(key))
	return expect(a.t, http.StatusCreated, r, err).JSON201.Id.String()
}

// createOrder creates a pending order through the generated client and
// returns its id.
func (a *api) createOrder(key, customerID string, amountCents int) string {
	a.t.Helper()
	r, err := a.hearth().CreateOrderWithResponse(a.t.Context(), nil,
		client.OrderCreate{CustomerId: uid(a.t, customerID), AmountCents: new(amountCents)}, as(key))
	return expect(a.t, http.StatusCreated, r, err).JSON201.Id.String()
}

// awaitOrder waits until the read model shows the order at version (a
// condition, not a sleep: the projections are asynchronous) and returns
// what GET /v1/orders/{id} answers then.
func (a *api) awaitOrder(key, id string, version int) response {
	a.t.Helper()
	path := "/v1/orders/" + id
	assert.Eventually(a.t, func() bool {
		r, err := a.send(http.MethodGet, path, auth(key), nil)
		return err == nil && r.Status == http.StatusOK && intOf(r.Body["version"]) >= version
	}, 5*time.Second, 10*time.Millisecond, "the read model never showed order %s at version %d", id, version)
	r := a.must(http.StatusOK, http.MethodGet, path, key, nil)
	require.Equal(a.t, version, intOf(r.Body["version"]), "GET %s: %s", path, r)
	return r
}

// events counts the rows of the events table: those of one stream, or all
// of them when streamID is "".
func (a *api) events(streamID string) int {
	a.t.Helper()
	var n int
	err := a.dbs.es.DB.QueryRowContext(a.t.Context(),
		`SELECT count(*) FROM events WHERE $1 = '' OR stream_id::text = $1`, streamID).Scan(&n)
	require.NoError(a.t, err)
	return n
}

type storedEvent struct {
	Version       int
	ID            string
	Type          string
	Actor         string
	CorrelationID string
}

// stream returns the stored events of one stream in version order.
func (a *api) stream(streamID string) []storedEvent {
	a.t.Helper()
	rows, err := a.dbs.es.DB.QueryContext(a.t.Context(),
		`SELECT version, event_id, type, actor, correlation_id FROM events WHERE stream_id = $1 ORDER BY version`, streamID)
	require.NoError(a.t, err)
	defer rows.Close()
	var out []storedEvent
	for rows.Next() {
		var e storedEvent
		require.NoError(a.t, rows.Scan(&e.Version, &e.ID, &e.Type, &e.Actor, &e.CorrelationID))
		out = append(out, e)
	}
	require.NoError(a.t, rows.Err())
	return out
}

func intOf(v any) int {
	f, _ := v.(float64)
	return int(f)
}

// positionOf is a write's answered position (a JSON number) as the
// Consistency-Position header and min_position carry it; "" when the body
// has none.
func positionOf(body map[string]any) string {
	f, ok := body["position"].(float64)
	if !ok {
		return ""
	}
	return strconv.FormatInt(int64(f), 10)
}

// jsonValue turns v into what decoding its JSON into any gives, so that
// expectations written with Go values compare with decoded bodies.
func jsonValue(t *testing.T, v any) any {
	t.Helper()
	buf, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(buf, &out))
	return out
}

// requireShows checks that a read shows every field of want (a write's
// answer or a change-log snapshot) with the same value. Reads may add the
// joined names (customer_name, staff_name); the write's position is not a
// field of the resource.
func requireShows(t *testing.T, want, read map[string]any, msgAndArgs ...any) {
	t.Helper()
	what := "read"
	if len(msgAndArgs) > 0 {
		format, _ := msgAndArgs[0].(string)
		what = fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	for field, v := range want {
		if field == "position" {
			continue
		}
		require.Contains(t, read, field, "%s: field %s", what, field)
		require.Equal(t, v, read[field], "%s: field %s", what, field)
	}
}

// requireProblem checks that r is an RFC 9457 problem with the status and
// type.
func requireProblem(t *testing.T, r response, status int, typ string) {
	t.Helper()
	require.Equal(t, status, r.Status, "%s", r)
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), "%s", r)
	require.Equal(t, typ, r.Body["type"], "%s", r)
	require.Equal(t, float64(status), r.Body["status"], "%s", r)
	require.NotEmpty(t, r.Body["detail"], "%s", r)
}

// A write to an aggregate whose stored events hold one this release cannot
// read (a newer release's type during a rolling upgrade, a corrupt row)
// answers a problem that says so and names the event, as the event feed
// does, rather than the bare /problems/internal: the client and the
// operator then know that retrying changes nothing until the event is
// readable (a release that reads it, or a repair), and which event it is.
// The aggregate's other events are left as they were.
func TestAWriteToAnAggregateWithAnUnreadableEvent(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	id := a.createOrder(a.opA, a.createCustomer(a.opA, "Ada"), 100)
	var badID string
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `
		INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, actor)
		SELECT gen_random_uuid(), stream_type, stream_id, 2, merchant_id, 'OrderTeleported', '{"to":"Mars"}', occurred_at, correlation_id, actor
		FROM events WHERE stream_id = $1
		RETURNING event_id::text`, id).Scan(&badID))

	r := a.do(http.MethodPost, "/v1/orders/"+id+"/status", a.opA, map[string]any{"status": "confirmed"})
	requireProblem(t, r, http.StatusInternalServerError, "/problems/unreadable-event")
	require.Equal(t, badID, r.Body["event_id"], "%s", r)
	require.Contains(t, r.Body["detail"], "OrderTeleported")
	var events int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM events WHERE stream_id = $1`, id).Scan(&events))
	require.Equal(t, 2, events, "nothing appended")
}

// A problem says what is wrong with a value without sending a large one
// back: a client that sent a mistaken 500 KiB string must not get it back
// twice (in detail and in errors), and a log or a proxy that keeps answers
// must not hold it. Each answer stays small and still names the field.
func TestProblemsDoNotEchoLargeInputs(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	big := strings.Repeat("x", 500<<10)
	long := strings.Repeat("x", 30<<10) // within the 64 KiB of a request's line and headers
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		field              string
	}{
		{"a time in the body", "POST", "/v1/orders", map[string]any{"customer_id": customer, "scheduled_start_at": big}, 400, "scheduled_start_at"},
		{"an unknown field", "POST", "/v1/orders", `{"customer_id":"` + customer + `","` + big + `":1}`, 400, ""},
		{"a number of the wrong type", "POST", "/v1/orders", `{"customer_id":"` + customer + `","amount_cents":1` + strings.Repeat("0", 500<<10) + `}`, 400, "amount_cents"},
		{"an event type", "POST", "/v1/webhook-endpoints", map[string]any{"url": "https://hooks.example.com/h", "event_types": []string{big}}, 422, "event_types[0]"},
		{"a path id", "GET", "/v1/orders/" + long, nil, 400, "id"},
		{"a query parameter", "GET", "/v1/orders?from=" + long, nil, 400, "from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := a.do(tc.method, tc.path, a.opA, tc.body)
			require.Equal(t, tc.status, r.Status, "%.500s", r)
			require.Less(t, len(r.Raw), 4<<10, "%.500s", r)
			if tc.field != "" {
				require.Equal(t, []string{tc.field}, problemFields(r), "%.500s", r)
			}
		})
	}
}

// problemFields lists the fields named in a problem's errors.
func problemFields(r response) []string {
	var fields []string
	list, _ := r.Body["errors"].([]any)
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			fields = append(fields, fmt.Sprint(m["field"]))
		}
	}
	return fields
}

// An order's life, through Hearth's generated Go client: every write's
// answer, events, change log, correlation ids, and the refusals of a final
// order.
func TestOrderLifecycle(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := setup(t, newDB(t))
			ctx, op := t.Context(), as(a.opA)
			customerID := a.createCustomer(a.opA, "Ada Lovelace")

			createR, err := a.hearth().CreateOrderWithResponse(ctx, nil,
				client.OrderCreate{CustomerId: uid(t, customerID), AmountCents: new(12000), Notes: new("ring twice")}, op)
			created := expect(t, http.StatusCreated, createR, err).JSON201
			id := created.Id.String()
			oid := created.Id
			require.Equal(t, "/v1/orders/"+id, *createR.Headers201.Location)
			require.Equal(t, 1, created.Version)
			require.Equal(t, client.OrderWrittenStatusPending, created.Status)
			require.Equal(t, client.OrderWrittenSettlementStatusUnsettled, created.SettlementStatus)
			position := created.Position
			require.NotEmpty(t, position)
			require.Equal(t, strconv.FormatInt(position, 10), *createR.Headers201.ConsistencyPosition, "the header and the body name one position")
			require.Equal(t, "Ada Lovelace", *created.CustomerName, "the write answers with the name its customer check read")
			require.Equal(t, 1, a.events(id))
			got := a.awaitOrderAt(a.opA, id, 1)
			requireShows(t, fieldsMap(t, created), fieldsMap(t, got), "the read model shows what the write answered")
			require.Equal(t, "Ada Lovelace", *got.CustomerName, "reads join the customer's name")

			// written is a write's answer: the order, and the HTTP answer
			// for its headers and its body as sent.
			type written struct {
				order *client.OrderWritten
				res   *http.Response
				body  []byte
			}
			steps := []struct {
				name    string
				send    func() written
				appends int            // events the step appends
				want    map[string]any // fields of the order afterwards, as JSON
			}{
				{
					name: "update details",
					send: func() written {
						r, err := a.hearth().UpdateOrderWithResponse(ctx, oid, nil, client.OrderUpdate{AmountCents: new(15000), Notes: new("gate code 1234")}, op)
						return written{expect(t, http.StatusOK, r, err).JSON200, r.HTTPResponse, r.Body}
					},
					appends: 1, want: map[string]any{"status": "pending", "amount_cents": 15000, "notes": "gate code 1234"},
				},
				{
					name: "confirm",
					send: func() written {
						r, err := a.hearth().ChangeOrderStatusWithResponse(ctx, oid, nil, client.OrderStatusInput{Status: client.OrderStatusInputStatusConfirmed}, op)
						return written{expect(t, http.StatusOK, r, err).JSON200, r.HTTPResponse, r.Body}
					},
					appends: 1, want: map[string]any{"status": "confirmed"},
				},
				{
					name: "assign",
					send: func() written {
						r, err := a.hearth().AssignOrderWithResponse(ctx, oid, nil, client.AssignmentInput{StaffId: uid(t, a.staffA),
							StartAt: instant(t, "2030-03-04T10:00:00+02:00"), EndAt: instant(t, "2030-03-04T12:30:00+02:00"),
							DispatchNote: new("bring a ladder")}, op)
						return written{expect(t, http.StatusOK, r, err).JSON200, r.HTTPResponse, r.Body}
					},
					appends: 2, // OrderAssignmentUpdated and OrderStatusChanged to dispatching
					want: map[string]any{"status": "dispatching", "staff_id": a.staffA, "dispatch_note": "bring a ladder",
						"scheduled_start_at": "2030-03-04T08:00:00Z", "scheduled_end_at": "2030-03-04T10:30:00Z"},
				},
				{
					name: "settle",
					send: func() written {
						r, err := a.hearth().SettleOrderWithResponse(ctx, oid, nil, client.SettlementInput{
							SettlementStatus: client.SettlementInputSettlementStatusSettled, PaidAmountCents: new(15000),
							PaymentMethod: new("card"), PaidAt: new(instant(t, "2030-03-04T12:45:00Z")), SettlementNote: new("paid on site")}, op)
						return written{expect(t, http.StatusOK, r, err).JSON200, r.HTTPResponse, r.Body}
					},
					appends: 1,
					want: map[string]any{"status": "dispatching", "settlement_status": "settled", "paid_amount_cents": 15000,
						"payment_method": "card", "paid_at": "2030-03-04T12:45:00Z", "settlement_note": "paid on site"},
				},
				{
					name: "cancel",
					send: func() written {
						r, err := a.hearth().CancelOrderWithResponse(ctx, oid, nil, client.CancelInput{Reason: "customer moved away"}, op)
						return written{expect(t, http.StatusOK, r, err).JSON200, r.HTTPResponse, r.Body}
					},
					appends: 1, want: map[string]any{"status": "cancelled", "cancellation_reason": "customer moved away"},
				},
			}
			version := 1
			correlation := map[int]string{1: *createR.Headers201.XCorrelationID} // by event version
			for _, step := range steps {
				before := a.events(id)
				w := step.send()
				require.Equal(t, version+step.appends, w.order.Version, "%s: %s", step.name, w.body)
				require.Equal(t, before+step.appends, a.events(id), "%s appends %d events", step.name, step.appends)
				version += step.appends
				for field, want := range step.want {
					require.Equal(t, jsonValue(t, want), rawField(t, w.body, field), "%s: %s", step.name, field)
				}
				require.Equal(t, strconv.FormatInt(w.order.Position, 10), w.res.Header.Get("Consistency-Position"), step.name)
				require.NotEqual(t, position, w.order.Position, "%s: a write that appends answers a new position", step.name)
				position = w.order.Position
				for v := version - step.appends + 1; v <= version; v++ {
					correlation[v] = w.res.Header.Get("X-Correlation-ID")
				}

				got := a.awaitOrderAt(a.opA, id, version)
				requireShows(t, fieldsMap(t, w.order), fieldsMap(t, got), "%s: the read model shows what the write answered", step.name)
			}

			changesR, err := a.hearth().OrderChangesWithResponse(ctx, oid, nil, op)
			items := expect(t, http.StatusOK, changesR, err).JSON200.Items
			stored := a.stream(id)
			require.Len(t, stored, version)
			require.Len(t, items, len(stored), "one change per event: %s", changesR.Body)
			finalR, err := a.hearth().GetOrderWithResponse(ctx, oid, nil, op)
			final := expect(t, http.StatusOK, finalR, err).JSON200
			for i, c := range items {
				v := i + 1
				require.Equal(t, v, c.Version, "change %d", i)
				require.Equal(t, stored[i].ID, c.EventId.String(), "change %d", v)
				require.Equal(t, stored[i].Type, c.Action, "change %d", v)
				require.Equal(t, "key:"+a.opAKeyID, c.Actor, "change %d", v)
				require.Equal(t, stored[i].Actor, c.Actor, "change %d", v)
				require.Equal(t, "order", c.AggregateType, "change %d", v)
				require.Equal(t, id, c.AggregateId.String(), "change %d", v)
				require.Equal(t, v, intOf(c.After["version"]), "change %d", v)
				if v == 1 {
					require.Nil(t, c.Before, "the first change has no before")
					continue
				}
				require.NotNil(t, c.Before, "change %d has a before snapshot", v)
				require.Equal(t, v-1, intOf((*c.Before)["version"]), "change %d", v)
				require.Equal(t, items[i-1].After, *c.Before, "change %d starts where %d ended", v, v-1)
			}
			requireShows(t, items[len(items)-1].After, fieldsMap(t, final), "the last change ends at the row")
			require.Equal(t, "Wanda Worker", *final.StaffName, "reads join the staff member's name")
			require.Equal(t, fmt.Sprintf(`"%d"`, version), *finalR.Headers200.ETag)
			for _, e := range stored {
				require.NotEmpty(t, correlation[e.Version])
				require.Equal(t, correlation[e.Version], e.CorrelationID,
					"event %d carries the correlation id of the request that caused it", e.Version)
			}

			// A final order refuses every change, and says which rule.
			updateR, err := a.hearth().UpdateOrderWithResponse(ctx, oid, nil, client.OrderUpdate{Notes: new("too late")}, op)
			requireRule(t, "order.final", updateR, err)
			statusR, err := a.hearth().ChangeOrderStatusWithResponse(ctx, oid, nil, client.OrderStatusInput{Status: client.OrderStatusInputStatusConfirmed}, op)
			requireRule(t, "order.invalid_transition", statusR, err)
			assignR, err := a.hearth().AssignOrderWithResponse(ctx, oid, nil, client.AssignmentInput{StaffId: uid(t, a.staffA),
				StartAt: instant(t, "2030-03-05T10:00:00Z"), EndAt: instant(t, "2030-03-05T11:00:00Z")}, op)
			requireRule(t, "order.assignment_not_allowed", assignR, err)
			require.Equal(t, version, a.events(id), "refusals append nothing")
		})
	}
}

func TestOrderAccess(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := setup(t, newDB(t))
			customerID := a.createCustomer(a.opA, "Ada Lovelace")
			assigned := a.createOrder(a.opA, customerID, 5000)
			a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+assigned+"/assignment", a.opA, map[string]any{
				"staff_id": a.staffA, "start_at": "2030-01-01T09:00:00Z", "end_at": "2030-01-01T10:00:00Z"})
			unassigned := a.createOrder(a.opA, customerID, 7000)
			a.awaitOrder(a.opA, assigned, 3)
			a.awaitOrder(a.opA, unassigned, 1)
			missing := uuid.New()

			t.Run("another merchant's key cannot detect the order", func(t *testing.T) {
				requests := []struct {
					method, path string
					body         map[string]any
				}{
					{http.MethodGet, "", nil},
					{http.MethodGet, "/changes", nil},
					{http.MethodPatch, "", map[string]any{"notes": "mine now"}},
					{http.MethodPost, "/status", map[string]any{"status": "confirmed"}},
					{http.MethodPost, "/cancel", map[string]any{"reason": "because"}},
					{http.MethodPut, "/assignment", map[string]any{
						"staff_id": a.staffB, "start_at": "2030-01-01T09:00:00Z", "end_at": "2030-01-01T10:00:00Z"}},
					{http.MethodPut, "/settlement", map[string]any{"settlement_status": "settled"}},
				}
				before := a.events("")
				for _, req := range requests {
					foreign := a.do(req.method, "/v1/orders/"+assigned+req.path, a.opB, req.body)
					requireProblem(t, foreign, http.StatusNotFound, "/problems/not-found")
					absent := a.do(req.method, "/v1/orders/"+missing+req.path, a.opB, req.body)
					require.Equal(t, absent.Raw, foreign.Raw, "%s %s: a foreign order answers like a missing one", req.method, req.path)
				}
				require.Equal(t, before, a.events(""), "nothing appended")
				list := a.must(http.StatusOK, http.MethodGet, "/v1/orders", a.opB, nil)
				require.Equal(t, 0, intOf(list.Body["total"]), "%s", list)
				a.awaitOrder(a.opA, assigned, 3) // unchanged for its owner
			})

			t.Run("another merchant's key cannot detect the customer", func(t *testing.T) {
				foreign := a.do(http.MethodGet, "/v1/customers/"+customerID, a.opB, nil)
				requireProblem(t, foreign, http.StatusNotFound, "/problems/not-found")
				absent := a.do(http.MethodGet, "/v1/customers/"+missing, a.opB, nil)
				require.Equal(t, absent.Raw, foreign.Raw)
				list := a.must(http.StatusOK, http.MethodGet, "/v1/customers", a.opB, nil)
				require.Equal(t, 0, intOf(list.Body["total"]), "%s", list)
				own := a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+customerID, a.opA, nil)
				require.Equal(t, "Ada Lovelace", own.Body["name"])
			})

			t.Run("authentication and roles", func(t *testing.T) {
				cases := []struct {
					name          string
					method, path  string
					authorization string
					status        int
					challenge     bool // answers WWW-Authenticate
				}{
					{"no key", http.MethodGet, "/v1/orders", "", http.StatusUnauthorized, true},
					{"no key on a write", http.MethodPost, "/v1/orders", "", http.StatusUnauthorized, true},
					{"empty bearer", http.MethodGet, "/v1/orders", "Bearer ", http.StatusUnauthorized, true},
					{"not a bearer", http.MethodGet, "/v1/orders", "Basic " + a.opA, http.StatusUnauthorized, true},
					{"unknown key", http.MethodGet, "/v1/orders", "Bearer hk_unknown", http.StatusUnauthorized, true},
					{"unknown key without prefix", http.MethodGet, "/v1/orders/" + assigned, "Bearer nope", http.StatusUnauthorized, true},
					{"admin lists orders", http.MethodGet, "/v1/orders", "Bearer " + a.admin, http.StatusForbidden, false},
					{"admin reads an order", http.MethodGet, "/v1/orders/" + assigned, "Bearer " + a.admin, http.StatusForbidden, false},
					{"admin creates an order", http.MethodPost, "/v1/orders", "Bearer " + a.admin, http.StatusForbidden, false},
					{"admin lists customers", http.MethodGet, "/v1/customers", "Bearer " + a.admin, http.StatusForbidden, false},
					{"worker creates an order", http.MethodPost, "/v1/orders", "Bearer " + a.worker, http.StatusForbidden, false},
					{"worker changes an order", http.MethodPatch, "/v1/orders/" + assigned, "Bearer " + a.worker, http.StatusForbidden, false},
					{"worker changes a status", http.MethodPost, "/v1/orders/" + assigned + "/status", "Bearer " + a.worker, http.StatusForbidden, false},
					{"worker creates a customer", http.MethodPost, "/v1/customers", "Bearer " + a.worker, http.StatusForbidden, false},
				}
				before := a.events("")
				for _, tc := range cases {
					t.Run(tc.name, func(t *testing.T) {
						var body any
						if tc.method != http.MethodGet {
							body = map[string]any{"customer_id": customerID, "amount_cents": 1}
						}
						header := http.Header{}
						if tc.authorization != "" {
							header.Set("Authorization", tc.authorization)
						}
						r, err := a.send(tc.method, tc.path, header, body)
						require.NoError(t, err)
						if tc.status == http.StatusUnauthorized {
							requireProblem(t, r, tc.status, "/problems/unauthenticated")
						} else {
							requireProblem(t, r, tc.status, "/problems/forbidden")
						}
						if tc.challenge {
							require.True(t, strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer "), "%v", r.Header)
						} else {
							require.Empty(t, r.Header.Get("WWW-Authenticate"))
						}
					})
				}
				require.Equal(t, before, a.events(""), "nothing appended")

				// RFC 9110: the scheme is case-insensitive.
				r, err := a.send(http.MethodGet, "/v1/orders", http.Header{"Authorization": {"bearer " + a.opA}}, nil)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, r.Status)
			})

			t.Run("worker sees only orders assigned to its staff member", func(t *testing.T) {
				list := a.must(http.StatusOK, http.MethodGet, "/v1/orders", a.worker, nil)
				require.Equal(t, 1, intOf(list.Body["total"]), "%s", list)
				items := list.Body["items"].([]any)
				require.Len(t, items, 1)
				require.Equal(t, assigned, items[0].(map[string]any)["id"])
				require.Equal(t, a.staffA, items[0].(map[string]any)["staff_id"])

				own := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+assigned, a.worker, nil)
				require.Equal(t, assigned, own.Body["id"])
				// The change log is the dispatcher's (earlier values, earlier
				// assignees): 403 for a worker key, whichever order.
				requireProblem(t, a.do(http.MethodGet, "/v1/orders/"+assigned+"/changes", a.worker, nil), http.StatusForbidden, "/problems/forbidden")

				unseen := a.do(http.MethodGet, "/v1/orders/"+unassigned, a.worker, nil)
				requireProblem(t, unseen, http.StatusNotFound, "/problems/not-found")
				absent := a.do(http.MethodGet, "/v1/orders/"+missing, a.worker, nil)
				require.Equal(t, absent.Raw, unseen.Raw, "an unassigned order answers like a missing one")
				// Filtering on another staff member does not widen the scope.
				other := a.must(http.StatusOK, http.MethodGet, "/v1/orders?staff_id="+a.staffB, a.worker, nil)
				require.Equal(t, 0, intOf(other.Body["total"]), "%s", other)
			})
		})
	}
}

func TestOrderBadInput(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customerA := a.createCustomer(a.opA, "Ada Lovelace")
	customerB := a.createCustomer(a.opB, "Grace Hopper")
	id := a.createOrder(a.opA, customerA, 1000)
	a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+id, a.opA, map[string]any{"notes": "version 2"})
	order := "/v1/orders/" + id
	request := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA,
		map[string]any{"customer_id": customerA, "content": "leaking tap", "source": "phone"})
	serviceRequest := "/v1/service-requests/" + request.Body["id"].(string)

	const (
		malformed  = "/problems/malformed-request"
		invalidID  = "/problems/invalid-id"
		validation = "/problems/validation-failed"
		ruleBroken = "/problems/rule-broken"
	)
	cases := []struct {
		name         string
		method, path string
		body         any // a string is sent as is
		status       int
		typ          string
		field        string // named in errors (and, for 400, in detail)
		rule         string
	}{
		{name: "malformed JSON", method: http.MethodPost, path: "/v1/orders",
			body: `{"customer_id": "` + customerA + `",`, status: 400, typ: malformed},
		{name: "empty body", method: http.MethodPost, path: "/v1/orders",
			body: "", status: 400, typ: malformed},
		{name: "not an object", method: http.MethodPost, path: "/v1/orders",
			body: `["` + customerA + `"]`, status: 400, typ: malformed},
		{name: "data after the object", method: http.MethodPost, path: "/v1/orders",
			body: `{"customer_id": "` + customerA + `", "amount_cents": 1} {}`, status: 400, typ: malformed},
		{name: "unknown field", method: http.MethodPost, path: "/v1/orders",
			body:   map[string]any{"customer_id": customerA, "amount_cents": 1, "colour": "red"},
			status: 400, typ: malformed, field: "colour"},
		{name: "unknown field in a patch", method: http.MethodPatch, path: order,
			body: map[string]any{"amount": 1}, status: 400, typ: malformed, field: "amount"},
		{name: "wrong type", method: http.MethodPost, path: "/v1/orders",
			body:   map[string]any{"customer_id": customerA, "amount_cents": "x"},
			status: 400, typ: malformed, field: "amount_cents"},
		{name: "wrong type in a patch", method: http.MethodPatch, path: order,
			body: `{"notes": 5}`, status: 400, typ: malformed, field: "notes"},
		{name: "not a time", method: http.MethodPost, path: "/v1/orders",
			body:   map[string]any{"customer_id": customerA, "scheduled_start_at": "tomorrow", "scheduled_end_at": "2030-01-01T10:00:00Z"},
			status: 400, typ: malformed, field: "scheduled_start_at"},
		{name: "non-UUID path id", method: http.MethodGet, path: "/v1/orders/42",
			status: 400, typ: invalidID, field: "id"},
		{name: "non-UUID path id on a write", method: http.MethodPost, path: "/v1/orders/not-a-uuid/status",
			body: map[string]any{"status": "confirmed"}, status: 400, typ: invalidID, field: "id"},
		{name: "negative amount", method: http.MethodPost, path: "/v1/orders",
			body:   map[string]any{"customer_id": customerA, "amount_cents": -1},
			status: 422, typ: validation, field: "amount_cents"},
		{name: "negative amount in a patch", method: http.MethodPatch, path: order,
			body: map[string]any{"amount_cents": -5}, status: 422, typ: validation, field: "amount_cents"},
		{name: "missing customer", method: http.MethodPost, path: "/v1/orders",
			body: map[string]any{"amount_cents": 1}, status: 422, typ: validation, field: "customer_id"},
		{name: "customer of another merchant", method: http.MethodPost, path: "/v1/orders",
			body:   map[string]any{"customer_id": customerB, "amount_cents": 1},
			status: 422, typ: validation, field: "customer_id"},
		{name: "patch to a customer of another merchant", method: http.MethodPatch, path: order,
			body: map[string]any{"customer_id": customerB}, status: 422, typ: validation, field: "customer_id"},
		{name: "patch to a customer id that is not a UUID", method: http.MethodPatch, path: order,
			body: map[string]any{"customer_id": "not-a-uuid"}, status: 422, typ: validation, field: "customer_id"},
		{name: "patch to an empty customer id", method: http.MethodPatch, path: order,
			body: map[string]any{"customer_id": ""}, status: 422, typ: validation, field: "customer_id"},
		{name: "service request patch to a catalog item id that is not a UUID", method: http.MethodPatch, path: serviceRequest,
			body: map[string]any{"catalog_item_id": "abc"}, status: 422, typ: validation, field: "catalog_item_id"},
		{name: "end before start", method: http.MethodPost, path: "/v1/orders",
			body: map[string]any{"customer_id": customerA, "scheduled_start_at": "2030-01-01T10:00:00Z",
				"scheduled_end_at": "2030-01-01T09:00:00Z"},
			status: 422, typ: validation, field: "scheduled_end_at"},
		{name: "unknown status", method: http.MethodPost, path: order + "/status",
			body: map[string]any{"status": "done"}, status: 422, typ: validation, field: "status"},
		{name: "illegal transition", method: http.MethodPost, path: order + "/status",
			body: map[string]any{"status": "completed"}, status: 422, typ: ruleBroken, rule: "order.invalid_transition"},
		{name: "cancel through the status", method: http.MethodPost, path: order + "/status",
			body: map[string]any{"status": "cancelled"}, status: 422, typ: ruleBroken, rule: "order.cancel_needs_reason"},
		{name: "cancel with an empty reason", method: http.MethodPost, path: order + "/cancel",
			body: map[string]any{"reason": "  "}, status: 422, typ: validation, field: "reason"},
		{name: "assignment ending before it starts", method: http.MethodPut, path: order + "/assignment",
			body:   map[string]any{"staff_id": a.staffA, "start_at": "2030-01-01T10:00:00Z", "end_at": "2030-01-01T10:00:00Z"},
			status: 422, typ: validation, field: "end_at"},
		{name: "assignment to another merchant's staff", method: http.MethodPut, path: order + "/assignment",
			body:   map[string]any{"staff_id": a.staffB, "start_at": "2030-01-01T10:00:00Z", "end_at": "2030-01-01T11:00:00Z"},
			status: 422, typ: validation, field: "staff_id"},
		{name: "unknown settlement status", method: http.MethodPut, path: order + "/settlement",
			body: map[string]any{"settlement_status": "paid"}, status: 422, typ: validation, field: "settlement_status"},
		{name: "body over 1 MiB", method: http.MethodPost, path: "/v1/orders",
			body:   `{"customer_id": "` + customerA + `", "notes": "` + strings.Repeat("x", 1<<20) + `"}`,
			status: 413, typ: "/problems/body-too-large"},
		{name: "stale expected_version", method: http.MethodPatch, path: order,
			body: map[string]any{"expected_version": 1, "notes": "late"}, status: 409, typ: "/problems/conflict"},
		{name: "stale expected_version on a status change", method: http.MethodPost, path: order + "/status",
			body: map[string]any{"expected_version": 1, "status": "confirmed"}, status: 409, typ: "/problems/conflict"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := a.events("")
			r := a.do(tc.method, tc.path, a.opA, tc.body)
			requireProblem(t, r, tc.status, tc.typ)
			if tc.field != "" {
				require.Contains(t, problemFields(r), tc.field, "%s", r)
				if tc.status == http.StatusBadRequest {
					require.Contains(t, r.Body["detail"], tc.field, "%s", r)
				}
			}
			if tc.rule != "" {
				require.Equal(t, tc.rule, r.Body["rule"], "%s", r)
			}
			require.Equal(t, before, a.events(""), "a rejected request appends nothing")
		})
	}
	// The order is where the setup left it.
	got := a.awaitOrder(a.opA, id, 2)
	require.Equal(t, "pending", got.Body["status"])
	require.Equal(t, "version 2", got.Body["notes"])
}

func TestOrderNoOpCommands(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customerID := a.createCustomer(a.opA, "Ada Lovelace")
	id := a.createOrder(a.opA, customerID, 1000)
	assignment := map[string]any{"staff_id": a.staffA, "start_at": "2030-01-01T09:00:00Z",
		"end_at": "2030-01-01T10:00:00Z", "dispatch_note": "ring"}

	// Real changes interleave with no-ops (appends 0), which must answer 200
	// with the order as it is and append nothing.
	steps := []struct {
		name         string
		method, path string
		body         map[string]any
		appends      int
	}{
		{"same status", http.MethodPost, "/status", map[string]any{"status": "pending"}, 0},
		{"same details", http.MethodPatch, "", map[string]any{"amount_cents": 1000, "notes": ""}, 0},
		{"empty patch", http.MethodPatch, "", map[string]any{}, 0},
		{"default settlement", http.MethodPut, "/settlement", map[string]any{"settlement_status": "unsettled"}, 0},
		{"assign", http.MethodPut, "/assignment", assignment, 2},
		{"same assignment", http.MethodPut, "/assignment", assignment, 0},
		{"same status after assigning", http.MethodPost, "/status", map[string]any{"status": "dispatching"}, 0},
		{"same status with the current expected_version", http.MethodPost, "/status",
			map[string]any{"status": "dispatching", "expected_version": 3}, 0},
		{"cancel", http.MethodPost, "/cancel", map[string]any{"reason": "no longer needed"}, 1},
		{"cancel again", http.MethodPost, "/cancel", map[string]any{"reason": "still not needed"}, 0},
		{"same status once cancelled", http.MethodPost, "/status", map[string]any{"status": "cancelled"}, 0},
	}
	version := 1
	for _, step := range steps {
		before := a.events(id)
		r := a.must(http.StatusOK, step.method, "/v1/orders/"+id+step.path, a.opA, step.body)
		require.Equal(t, before+step.appends, a.events(id), "%s appends %d events", step.name, step.appends)
		version += step.appends
		require.Equal(t, version, intOf(r.Body["version"]), "%s: %s", step.name, r)
		require.NotEmpty(t, positionOf(r.Body), step.name)
	}
	got := a.awaitOrder(a.opA, id, version)
	require.Equal(t, "cancelled", got.Body["status"])
	require.Equal(t, "no longer needed", got.Body["cancellation_reason"])
	changes := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+id+"/changes", a.opA, nil)
	require.Len(t, changes.Body["items"], version)
}

// PUT is idempotent, and a command that would change nothing succeeds: a
// client that sends an order's assignment again (a retry after a lost
// answer) gets 200 and appends nothing, also once the worker has started
// or finished the job, and once the staff member was made inactive
// meanwhile. Only another assignment is refused past dispatching.
func TestAssignmentRestatedAfterDispatchChangesNothing(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	staff := a.must(http.StatusCreated, http.MethodPost, "/v1/staff", a.opA, map[string]any{"name": "Sam"}).Body["id"].(string)
	assignment := map[string]any{"staff_id": staff, "start_at": "2030-01-01T09:00:00Z",
		"end_at": "2030-01-01T10:00:00Z", "dispatch_note": "ring"}
	started := a.createOrder(a.opA, a.createCustomer(a.opA, "Ada"), 1000)
	cancelled := a.createOrder(a.opA, a.createCustomer(a.opA, "Bob"), 1000)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+started+"/assignment", a.opA, assignment)
	sch := a.liveSchedule(a.opA, started).Id.String()
	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+sch+"/status", a.opA, map[string]any{"status": "in_service"})
	other := map[string]any{"staff_id": staff, "start_at": "2030-01-02T09:00:00Z", "end_at": "2030-01-02T10:00:00Z"}
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+cancelled+"/assignment", a.opA, other)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+cancelled+"/cancel", a.opA, map[string]any{"reason": "not needed"})

	again := func(step, id string, body map[string]any) {
		t.Helper()
		before := a.events("")
		r := a.do(http.MethodPut, "/v1/orders/"+id+"/assignment", a.opA, body)
		require.Equal(t, http.StatusOK, r.Status, "%s: the same assignment again: %s", step, r)
		require.Equal(t, before, a.events(""), "%s: the same assignment again appends nothing", step)
	}
	again("in service", started, assignment)
	moved := maps.Clone(assignment)
	moved["dispatch_note"] = "knock"
	refused := a.do(http.MethodPut, "/v1/orders/"+started+"/assignment", a.opA, moved)
	requireProblem(t, refused, http.StatusUnprocessableEntity, "/problems/rule-broken")
	require.Equal(t, "order.assignment_not_allowed", refused.Body["rule"], "%s", refused)
	a.must(http.StatusOK, http.MethodPatch, "/v1/staff/"+staff, a.opA, map[string]any{"active": false})
	again("in service, the staff member inactive", started, assignment)
	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+sch+"/status", a.opA, map[string]any{"status": "done"})
	again("completed", started, assignment)
	again("cancelled", cancelled, other)
}

func TestListOrders(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	c1 := a.createCustomer(a.opA, "Ada Lovelace")
	c2 := a.createCustomer(a.opA, "Grace Hopper")
	a.createOrder(a.opB, a.createCustomer(a.opB, "Other Merchant's Customer"), 1) // never listed for A

	// 25 orders of two customers: every fifth confirmed, in service,
	// assigned (to staffA, starting i hours after base) or settled.
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	hour := func(i int) time.Time { return base.Add(time.Duration(i) * time.Hour) }
	type created struct {
		i                    int
		id, customer, status string
		assigned, settled    bool
		version              int
	}
	var orders []created // in creation order
	for i := range 25 {
		o := created{i: i, customer: c1, status: "pending", version: 1}
		if i%2 == 1 {
			o.customer = c2
		}
		o.id = a.createOrder(a.opA, o.customer, 100*i)
		path := "/v1/orders/" + o.id
		switch i % 5 {
		case 1, 2:
			o.status = map[int]string{1: "confirmed", 2: "in_service"}[i%5]
			a.must(http.StatusOK, http.MethodPost, path+"/status", a.opA, map[string]any{"status": o.status})
			o.version = 2
		case 3:
			a.must(http.StatusOK, http.MethodPut, path+"/assignment", a.opA, map[string]any{"staff_id": a.staffA,
				"start_at": hour(i).Format(time.RFC3339), "end_at": hour(i + 1).Format(time.RFC3339)})
			o.status, o.assigned, o.version = "dispatching", true, 3
		case 4:
			a.must(http.StatusOK, http.MethodPut, path+"/settlement", a.opA, map[string]any{
				"settlement_status": "settled", "paid_amount_cents": 100 * i})
			o.settled, o.version = true, 2
		}
		orders = append(orders, o)
	}
	for _, o := range orders {
		a.awaitOrder(a.opA, o.id, o.version)
	}
	newestFirst := slices.Clone(orders)
	slices.Reverse(newestFirst)
	ids := func(keep func(created) bool) []string {
		out := []string{}
		for _, o := range newestFirst {
			if keep(o) {
				out = append(out, o.id)
			}
		}
		return out
	}
	byStart := func(indexes ...int) []string { // a time range lists earliest start first
		out := []string{}
		for _, i := range indexes {
			out = append(out, orders[i].id)
		}
		return out
	}
	listed := func(r response) []string {
		out := []string{}
		for _, item := range r.Body["items"].([]any) {
			out = append(out, item.(map[string]any)["id"].(string))
		}
		return out
	}

	t.Run("filters", func(t *testing.T) {
		cases := []struct {
			name  string
			query url.Values
			want  []string
		}{
			{"none", url.Values{}, ids(func(created) bool { return true })},
			{"status", url.Values{"status": {"confirmed"}},
				ids(func(o created) bool { return o.status == "confirmed" })},
			{"repeated status", url.Values{"status": {"confirmed", "in_service"}},
				ids(func(o created) bool { return o.status == "confirmed" || o.status == "in_service" })},
			{"customer", url.Values{"customer_id": {c1}},
				ids(func(o created) bool { return o.customer == c1 })},
			{"customer and status", url.Values{"customer_id": {c2}, "status": {"pending"}},
				ids(func(o created) bool { return o.customer == c2 && o.status == "pending" })},
			{"settlement status", url.Values{"settlement_status": {"settled"}},
				ids(func(o created) bool { return o.settled })},
			{"unsettled", url.Values{"settlement_status": {"unsettled"}},
				ids(func(o created) bool { return !o.settled })},
			{"staff", url.Values{"staff_id": {a.staffA}},
				ids(func(o created) bool { return o.assigned })},
			{"time range (half-open)", url.Values{"from": {hour(8).Format(time.RFC3339)}, "to": {hour(18).Format(time.RFC3339)}},
				byStart(8, 13)},
			{"from with an offset", url.Values{"from": {hour(13).In(time.FixedZone("", 3600)).Format(time.RFC3339)}},
				byStart(13, 18, 23)},
			{"to only", url.Values{"to": {hour(13).Add(time.Second).Format(time.RFC3339)}},
				byStart(3, 8, 13)},
			{"status without orders", url.Values{"status": {"completed"}}, []string{}},
			{"customer without orders", url.Values{"customer_id": {uuid.New()}}, []string{}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				tc.query.Set("page_size", "200")
				r := a.must(http.StatusOK, http.MethodGet, "/v1/orders?"+tc.query.Encode(), a.opA, nil)
				require.Equal(t, tc.want, listed(r), "newest first")
				require.Equal(t, len(tc.want), intOf(r.Body["total"]))
				require.Equal(t, 1, intOf(r.Body["page"]))
				require.Equal(t, 200, intOf(r.Body["page_size"]))
			})
		}
	})

	t.Run("another merchant's orders are never listed", func(t *testing.T) {
		r := a.must(http.StatusOK, http.MethodGet, "/v1/orders", a.opB, nil)
		require.Equal(t, 1, intOf(r.Body["total"]))
		for _, id := range listed(r) {
			require.NotContains(t, ids(func(created) bool { return true }), id)
		}
	})

	t.Run("pages", func(t *testing.T) {
		var seen []string
		for page := 1; page <= 4; page++ {
			r := a.must(http.StatusOK, http.MethodGet, fmt.Sprintf("/v1/orders?page_size=10&page=%d", page), a.opA, nil)
			require.Equal(t, len(orders), intOf(r.Body["total"]), "page %d", page)
			require.Equal(t, page, intOf(r.Body["page"]))
			require.Equal(t, 10, intOf(r.Body["page_size"]))
			got := listed(r)
			require.Len(t, got, min(10, max(0, len(orders)-(page-1)*10)), "page %d", page)
			seen = append(seen, got...)
		}
		require.Equal(t, ids(func(created) bool { return true }), seen, "every order exactly once, newest first")

		r := a.must(http.StatusOK, http.MethodGet, "/v1/orders", a.opA, nil)
		require.Len(t, listed(r), 20, "page_size defaults to 20")
		require.Equal(t, 20, intOf(r.Body["page_size"]))
		require.Equal(t, true, r.Body["total_exact"])
	})

	t.Run("cursors", func(t *testing.T) {
		for _, q := range []url.Values{{}, {"from": {hour(0).Format(time.RFC3339)}}} {
			want := ids(func(created) bool { return true })
			if q.Has("from") {
				want = byStart(3, 8, 13, 18, 23)
			}
			var seen []string
			q.Set("page_size", "2")
			r := a.must(http.StatusOK, http.MethodGet, "/v1/orders?"+q.Encode(), a.opA, nil)
			for {
				require.Equal(t, len(want), intOf(r.Body["total"]))
				seen = append(seen, listed(r)...)
				next, ok := r.Body["next_cursor"].(string)
				if !ok {
					break
				}
				q.Set("cursor", next)
				r = a.must(http.StatusOK, http.MethodGet, "/v1/orders?"+q.Encode(), a.opA, nil)
				require.NotContains(t, r.Body, "page", "a page after a cursor has no number")
			}
			require.Equal(t, want, seen, "%v: every order exactly once, in order", q)
		}
	})

	t.Run("bad parameters", func(t *testing.T) {
		cases := []struct{ query, param string }{
			{"page_size=0", "page_size"},
			{"page_size=201", "page_size"},
			{"page_size=ten", "page_size"},
			{"page=0", "page"},
			{"status=done", "status"},
			{"status=pending&status=nope", "status"},
			{"customer_id=42", "customer_id"},
			{"staff_id=x", "staff_id"},
			{"settlement_status=paid", "settlement_status"},
			{"from=yesterday", "from"},
			{"page=501", "page"}, // past the first 10,000 rows (20 a page)
			{"page=51&page_size=200", "page"},
			{"cursor=bm90IGEgY3Vyc29y", "cursor"},
			{"cursor=" + httpport.FormatCursor(&query.Cursor{Order: "created_at", At: base, ID: uuid.New()}) + "&page=2", "page"},
		}
		for _, tc := range cases {
			t.Run(tc.query, func(t *testing.T) {
				r := a.do(http.MethodGet, "/v1/orders?"+tc.query, a.opA, nil)
				requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
				require.Equal(t, []string{tc.param}, problemFields(r), "%s", r)
				require.Contains(t, r.Body["detail"], tc.param)
			})
		}
		// A well-formed cursor of the newest-first order does not fit a
		// time-ordered list.
		r := a.do(http.MethodGet, "/v1/orders?from="+base.Format(time.RFC3339)+"&cursor="+
			httpport.FormatCursor(&query.Cursor{Order: "created_at", At: base, ID: uuid.New()}), a.opA, nil)
		requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
		require.Equal(t, []string{"cursor"}, problemFields(r), "%s", r)
	})
}

func TestHealth(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))

	r := a.must(http.StatusOK, http.MethodGet, "/healthz", "", nil)
	require.Equal(t, "ok", r.Body["status"])
	r = a.must(http.StatusOK, http.MethodGet, "/readyz", "", nil)
	require.Equal(t, map[string]any{"status": "ready"}, r.Body, "no details without an admin key")
	for _, key := range []string{a.opA, a.worker, "not-a-key"} {
		r = a.must(http.StatusOK, http.MethodGet, "/readyz", key, nil)
		require.Equal(t, map[string]any{"status": "ready"}, r.Body, "no details for a key that is not an admin's")
	}
	r = a.must(http.StatusOK, http.MethodGet, "/readyz", a.admin, nil)
	require.Equal(t, "ready", r.Body["status"], "%s", r)
	require.Equal(t, ModeAll, r.Body["mode"], "details for an admin key")

	t.Run("unready when the databases are gone", func(t *testing.T) {
		dbs, err := openDatabases(t.Context(), a.cfg)
		require.NoError(t, err)
		dbs.close()
		h, err := httpport.NewHandler(httpport.Config{Ready: readiness(a.cfg, dbs, nil, nil), Auth: a.w.refdata, Log: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
		require.JSONEq(t, `{"status":"unavailable"}`, rec.Body.String(), "not the error without an admin key")

		rec = httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+a.admin)
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
		require.Contains(t, rec.Body.String(), `"status":"unavailable"`)
		require.Contains(t, rec.Body.String(), `"error":"event store: `, "the error for an admin key")
	})

	t.Run("worker mode serves only the health endpoints", func(t *testing.T) {
		h, err := httpport.NewHandler(httpport.Config{App: a.w.app, Auth: a.w.refdata, Log: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		for path, status := range map[string]int{"/healthz": 200, "/readyz": 200, "/v1/orders": 404} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Header.Set("Authorization", "Bearer "+a.opA)
			h.ServeHTTP(rec, req)
			require.Equal(t, status, rec.Code, "%s: %s", path, rec.Body.String())
		}
	})
}

// Concurrent writes to one order: with expected_version exactly one wins
// and the others get 409; without it every write is either kept or refused
// with 409, and the stream stays contiguous.
func TestConcurrentOrderWrites(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	id := a.createOrder(a.opA, a.createCustomer(a.opA, "Ada Lovelace"), 1000)
	const writers = 8

	// patchAll sends the writers' PATCHes at once and returns their answers.
	patchAll := func(body func(i int) map[string]any) []response {
		start := make(chan struct{})
		answers := make([]response, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				<-start
				answers[i], errs[i] = a.send(http.MethodPatch, "/v1/orders/"+id, auth(a.opA), body(i))
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		return answers
	}
	count := func(answers []response) (ok int) {
		for _, r := range answers {
			if r.Status == http.StatusOK {
				ok++
			} else {
				requireProblem(t, r, http.StatusConflict, "/problems/conflict")
			}
		}
		return ok
	}

	answers := patchAll(func(i int) map[string]any {
		return map[string]any{"expected_version": 1, "notes": fmt.Sprintf("writer %d", i)}
	})
	require.Equal(t, 1, count(answers), "exactly one writer wins")
	require.Equal(t, 2, a.events(id))

	answers = patchAll(func(i int) map[string]any { return map[string]any{"amount_cents": 2000 + i} })
	kept := count(answers)
	require.GreaterOrEqual(t, kept, 1, "at least one writer wins")
	version := 2 + kept
	require.Equal(t, version, a.events(id), "one event per kept write")
	versions := []int{}
	for _, e := range a.stream(id) {
		versions = append(versions, e.Version)
	}
	for v := 1; v <= version; v++ {
		require.Equal(t, v, versions[v-1], "versions are contiguous")
	}
	a.awaitOrder(a.opA, id, version)
	changes := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+id+"/changes", a.opA, nil)
	require.Len(t, changes.Body["items"], version)
}

// The spec: a write answers a position, and a GET that names it (the
// Consistency-Position header or ?min_position=) waits until the read
// models have reached it. Right after a write, such a GET must already show
// the write.
func TestReadYourWrites(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customerID := a.createCustomer(a.opA, "Ada Lovelace")
	for i := range 10 {
		created := a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA,
			map[string]any{"customer_id": customerID, "amount_cents": i})
		id := created.Body["id"].(string)
		r := a.must(http.StatusOK, http.MethodGet,
			"/v1/orders/"+id+"?min_position="+url.QueryEscape(positionOf(created.Body)), a.opA, nil)
		require.Equal(t, 1, intOf(r.Body["version"]))

		updated := a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+id, a.opA, map[string]any{"notes": "changed"})
		header := auth(a.opA)
		header.Set("Consistency-Position", positionOf(updated.Body))
		r, err := a.send(http.MethodGet, "/v1/orders/"+id, header, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.Status, "%s", r)
		require.Equal(t, 2, intOf(r.Body["version"]), "%s", r)
	}
}

// TestServe runs the real command, `app serve`, on split databases: it
// starts, becomes the projection leader, serves the API, projects a write,
// and stops cleanly when its context ends.
func TestServe(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	vars := map[string]string{
		"DATABASE_URL": urls.EventStore, "READMODEL_DATABASE_URL": urls.ReadModel,
		"LOG_FORMAT": "json", "LOG_LEVEL": "info", "POLL_INTERVAL": "20ms", "SHUTDOWN_TIMEOUT": "5s",
		"EVENT_FEED_WAIT": "60s",
	}

	key := createKeyCLI(t, vars, "--merchant", "acme", "--role", "operator")
	srv := startServe(t, vars)

	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	a := &api{t: t, base: "http://" + srv.HTTPAddr, client: &http.Client{Transport: transport}}

	require.Eventually(t, func() bool { return projectionsLive(a.metrics()) }, 30*time.Second, 10*time.Millisecond,
		"serve, the only worker, never led every projection live")
	require.Eventually(t, func() bool {
		return strings.Contains(a.metrics(), "\nhearth_leader_is_leader{unit=\"hearth/webhooks\"} 1\n")
	}, 30*time.Second, 10*time.Millisecond, "serve, the only worker, never led webhook delivery")
	ready := a.must(http.StatusOK, http.MethodGet, "/readyz", "", nil)
	require.Equal(t, map[string]any{"status": "ready"}, ready.Body, "no details without an admin key")

	// One LISTEN connection serves the projections and the event feed.
	var listeners int
	require.NoError(t, pgtest.Open(t, urls.EventStore).DB.QueryRow(`SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, projector.NotifyApplicationName).Scan(&listeners))
	require.Equal(t, 1, listeners)

	id := a.createOrder(key, a.createCustomer(key, "Ada Lovelace"), 4200)
	got := a.awaitOrder(key, id, 1)
	require.Equal(t, float64(4200), got.Body["amount_cents"])
	page := a.feed(key, "wait=10s")
	require.Len(t, page.Events, 1)
	require.Equal(t, id, page.Events[0].AggregateID)

	// A long poll waiting at shutdown is answered at once (empty), not cut
	// off when the shutdown times out.
	waiting := a.longPoll(key, after(page.NextCursor, "wait=60s"))
	require.Eventually(t, func() bool {
		return strings.Contains(a.metrics(), "\nhearth_event_feed_waiting 1\n")
	}, 10*time.Second, 5*time.Millisecond, "the long poll never waited")
	// Retention waits for every consumer group of the topic: the webhook
	// fan-out's too, which no read waits for.
	es := pgtest.Open(t, urls.EventStore)
	require.Eventually(t, func() bool {
		var behind int
		return es.DB.QueryRow(`SELECT count(*) FROM watermill_offsets_orders o
			WHERE o.offset_acked < (SELECT max("offset") FROM watermill_orders)`).Scan(&behind) == nil && behind == 0
	}, 10*time.Second, 10*time.Millisecond, "every consumer group acknowledged the order's messages")
	srv.shutdown()
	require.Equal(t, feedPage{Events: []feedEvent{}, NextCursor: page.NextCursor}, <-waiting)

	// A worker prunes the topics (TOPIC_RETENTION): its first round runs at
	// start-up, and these messages are acknowledged and old by then.
	_, err := es.DB.Exec(`UPDATE watermill_orders SET created_at = created_at - interval '2 hours'`)
	require.NoError(t, err)
	vars["MODE"], vars["TOPIC_RETENTION"] = "worker", "1h"
	worker := startServe(t, vars)
	require.Eventually(t, func() bool {
		var n int
		return es.DB.QueryRow(`SELECT count(*) FROM watermill_orders`).Scan(&n) == nil && n == 0
	}, 10*time.Second, 10*time.Millisecond, "the worker never pruned the orders topic")
	worker.shutdown()
}

// RFC 9110 (11.1): the authentication scheme is a case-insensitive token, so
// "bearer <key>" is the same credential as "Bearer <key>".
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	for _, scheme := range []string{"bearer", "BEARER"} {
		r, err := a.send(http.MethodGet, "/v1/orders", http.Header{"Authorization": {scheme + " " + a.opA}}, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", scheme, r)
	}
}

// PUT /v1/orders/{id}/assignment books the staff member's time: an
// overlapping live booking answers 409 naming the clash and appends
// nothing, touching windows are fine, and cancelling an order frees its
// booking.
func TestOrderAssignmentBooking(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customerID := a.createCustomer(a.opA, "Ada Lovelace")
	at := func(hhmm string) string { return "2030-06-01T" + hhmm + ":00Z" }
	assign := func(key, id, staffID, from, to string) response {
		return a.do(http.MethodPut, "/v1/orders/"+id+"/assignment", key,
			map[string]any{"staff_id": staffID, "start_at": at(from), "end_at": at(to)})
	}
	first := a.createOrder(a.opA, customerID, 100)
	second := a.createOrder(a.opA, customerID, 200)
	require.Equal(t, http.StatusOK, assign(a.opA, first, a.staffA, "09:00", "10:00").Status)

	before := a.events("")
	clash := assign(a.opA, second, a.staffA, "09:30", "10:30")
	requireProblem(t, clash, http.StatusConflict, "/problems/conflict")
	require.Contains(t, clash.Body["detail"], a.staffA, "the conflict names the clash: %s", clash)
	require.Equal(t, before, a.events(""), "a refused assignment appends nothing, on any stream")

	r := assign(a.opA, second, a.staffA, "10:00", "11:00")
	require.Equal(t, http.StatusOK, r.Status, "touching windows do not overlap: %s", r)

	// Another merchant's staff member is booked independently.
	other := a.createOrder(a.opB, a.createCustomer(a.opB, "Grace Hopper"), 300)
	r = assign(a.opB, other, a.staffB, "09:00", "10:00")
	require.Equal(t, http.StatusOK, r.Status, "%s", r)

	// Two orders racing for the same window: exactly one gets it.
	racers := []string{a.createOrder(a.opA, customerID, 1), a.createOrder(a.opA, customerID, 2)}
	answers := make([]response, len(racers))
	errs := make([]error, len(racers))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, id := range racers {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = a.send(http.MethodPut, "/v1/orders/"+id+"/assignment", auth(a.opA),
				map[string]any{"staff_id": a.staffA, "start_at": at("12:00"), "end_at": at("13:00")})
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for i := range racers {
		require.NoError(t, errs[i])
		if answers[i].Status == http.StatusOK {
			won++
		} else {
			requireProblem(t, answers[i], http.StatusConflict, "/problems/conflict")
		}
	}
	require.Equal(t, 1, won, "exactly one of two concurrent overlapping assignments wins")

	// Cancelling the first order frees 09:00-10:00.
	third := a.createOrder(a.opA, customerID, 400)
	requireProblem(t, assign(a.opA, third, a.staffA, "09:00", "10:00"), http.StatusConflict, "/problems/conflict")
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+first+"/cancel", a.opA, map[string]any{"reason": "rain"})
	r = assign(a.opA, third, a.staffA, "09:00", "10:00")
	require.Equal(t, http.StatusOK, r.Status, "a cancelled order's booking is freed: %s", r)
	a.awaitOrder(a.opA, third, 3)
}

// When the projections' context ends while the router is still
// subscribing (a leadership term that ends at once, or a shutdown right
// after start-up), runProjections must still stop without leaving
// goroutines behind. Not parallel: goleak compares with the goroutines
// present when it starts.
func TestProjectionsCancelledDuringStartup(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	urls := pgtest.NewDB(t)
	cfg := Config{DatabaseURL: urls.EventStore, ReadModelDatabaseURL: urls.ReadModel, PollInterval: 20 * time.Millisecond}
	webhookTestSettings(&cfg)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	dbs, err := openDatabases(t.Context(), cfg)
	require.NoError(t, err)
	defer dbs.close()
	w, err := wire(cfg, dbs, log)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = runProjections(ctx, cfg, dbs.es.DB, w, w.projections, log, func() {})
	if err != nil {
		require.ErrorIs(t, err, context.Canceled)
	}
}
