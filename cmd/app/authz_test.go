package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// A long poll of the event feed authenticated its key when it came in; a
// key revoked while it waits is answered nothing that was written after the
// revocation: the poll ends with the 401 any request of that key now gets.
func TestFeedLongPollOfARevokedKeyAnswersNothing(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	key := a.newOperatorKey("acme")
	customer := a.createCustomer(a.opA, "Ada")
	poll := a.sendAsync(http.MethodGet, "/v1/events?wait=10s", auth(key), nil)
	a.awaitWaiting(1)
	a.revokeSecret(key)
	a.createOrder(a.opA, customer, 4200) // wakes the poll with an event the revoked key may not read
	select {
	case r := <-poll:
		requireProblem(t, r, http.StatusUnauthorized, "/problems/unauthenticated")
		require.Contains(t, r.Header.Get("WWW-Authenticate"), `error="invalid_token"`)
	case <-time.After(15 * time.Second):
		t.Fatal("the long poll never answered")
	}
}

// access is who may call a route (docs/api.md).
type routeAccess int

const (
	public         routeAccess = iota // no key
	operatorOnly                      // operator keys of the merchant
	operatorWorker                    // operator keys; worker keys for their own staff member's
	adminOnly                         // admin keys (platform keys, of every merchant)
)

// routeAccessOf is the matrix's expectation for every route the server
// serves: the route table is checked against the OpenAPI document
// (ports/http openapi_test.go), and the matrix fails for a route of the
// document missing here, so a new route must say who may call it.
var routeAccessOf = map[string]routeAccess{
	"GET /healthz": public, "GET /readyz": public, "GET /openapi.json": public, "GET /openapi-3.0.json": public, "GET /metrics": public,

	"POST /v1/customers": operatorOnly, "GET /v1/customers": operatorOnly, "GET /v1/customers/{id}": operatorOnly,
	"PATCH /v1/customers/{id}": operatorOnly, "GET /v1/customers/{id}/export": operatorOnly, "POST /v1/customers/{id}/erase": operatorOnly,
	"POST /v1/staff": operatorOnly, "GET /v1/staff": operatorOnly, "GET /v1/staff/{id}": operatorOnly, "PATCH /v1/staff/{id}": operatorOnly,
	"POST /v1/staff/{id}/erase": operatorOnly, "GET /v1/staff/{id}/working-hours": operatorOnly, "PUT /v1/staff/{id}/working-hours": operatorOnly,
	"GET /v1/staff/{id}/export": operatorOnly,
	"POST /v1/catalog-items":    operatorOnly, "GET /v1/catalog-items": operatorOnly, "GET /v1/catalog-items/{id}": operatorOnly,
	"PATCH /v1/catalog-items/{id}": operatorOnly,
	"POST /v1/service-requests":    operatorOnly, "GET /v1/service-requests": operatorOnly, "GET /v1/service-requests/{id}": operatorOnly,
	"PATCH /v1/service-requests/{id}": operatorOnly, "POST /v1/service-requests/{id}/status": operatorOnly,
	"POST /v1/service-requests/{id}/convert": operatorOnly,
	"POST /v1/orders":                        operatorOnly, "GET /v1/orders": operatorWorker, "GET /v1/orders/{id}": operatorWorker,
	"GET /v1/orders/{id}/changes": operatorOnly, "PATCH /v1/orders/{id}": operatorOnly, "POST /v1/orders/{id}/status": operatorOnly,
	"POST /v1/orders/{id}/cancel": operatorOnly, "PUT /v1/orders/{id}/assignment": operatorOnly, "PUT /v1/orders/{id}/settlement": operatorOnly,
	"GET /v1/schedules": operatorWorker, "GET /v1/schedules/{id}": operatorWorker, "POST /v1/schedules/{id}/status": operatorWorker,
	"POST /v1/plans": operatorOnly, "GET /v1/plans": operatorOnly, "GET /v1/plans/{id}": operatorOnly, "GET /v1/plans/{id}/visits": operatorOnly,
	"POST /v1/plans/{id}/change": operatorOnly, "POST /v1/plans/{id}/skip": operatorOnly, "POST /v1/plans/{id}/move": operatorOnly,
	"POST /v1/plans/{id}/pause": operatorOnly, "POST /v1/plans/{id}/resume": operatorOnly, "POST /v1/plans/{id}/end": operatorOnly,
	"GET /v1/settings": operatorOnly, "PUT /v1/settings": operatorOnly, "GET /v1/availability": operatorOnly, "GET /v1/events": operatorOnly,
	"POST /v1/webhook-endpoints": operatorOnly, "GET /v1/webhook-endpoints": operatorOnly, "GET /v1/webhook-endpoints/{id}": operatorOnly,
	"PATCH /v1/webhook-endpoints/{id}": operatorOnly, "DELETE /v1/webhook-endpoints/{id}": operatorOnly,
	"POST /v1/webhook-endpoints/{id}/rotate-secret": operatorOnly, "POST /v1/webhook-endpoints/{id}/test": operatorOnly,
	"GET /v1/webhook-endpoints/{id}/deliveries": operatorOnly, "GET /v1/webhook-endpoints/{id}/deliveries/{delivery_id}": operatorOnly,
	"POST /v1/webhook-endpoints/{id}/deliveries/{delivery_id}/redeliver": operatorOnly,

	"GET /admin/leadership": adminOnly, "GET /admin/parked": adminOnly, "POST /admin/parked/replay": adminOnly,
	"GET /admin/parked/{projection}/{id}": adminOnly, "POST /admin/parked/{projection}/{id}/replay": adminOnly,
	"POST /admin/parked/{projection}/{id}/skip": adminOnly, "POST /admin/rebuilds/{projection}": adminOnly,
	"GET /admin/rebuilds/{projection}": adminOnly, "DELETE /admin/rebuilds/{projection}": adminOnly,
	"GET /admin/keys": adminOnly, "POST /admin/keys": adminOnly, "POST /admin/keys/{id}/revoke": adminOnly,
	"POST /admin/keys/{id}/rotate": adminOnly, "GET /admin/audit": adminOnly,
}

// matrixRoutes are the routes of the OpenAPI document the server serves,
// as "METHOD /path" patterns.
func matrixRoutes(t *testing.T, a *api) []string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	r := a.must(http.StatusOK, http.MethodGet, "/openapi.json", "", nil)
	require.NoError(t, json.Unmarshal([]byte(r.Raw), &doc))
	var out []string
	for path, ops := range doc.Paths {
		for method := range ops {
			switch method {
			case "get", "post", "put", "patch", "delete":
				out = append(out, strings.ToUpper(method)+" "+path)
			}
		}
	}
	slices.Sort(out)
	return out
}

// tenant is one merchant's resources, an id of each kind the routes name.
type tenant struct {
	customer, staff, item, request, order, schedule, plan, endpoint, delivery string
	orderOfOther                                                              string // an order not assigned to the worker's staff member
}

// fill replaces the path's variables with t's ids.
func (tn tenant) fill(path string) string {
	id := ""
	switch {
	case strings.HasPrefix(path, "/v1/customers/"):
		id = tn.customer
	case strings.HasPrefix(path, "/v1/staff/"):
		id = tn.staff
	case strings.HasPrefix(path, "/v1/catalog-items/"):
		id = tn.item
	case strings.HasPrefix(path, "/v1/service-requests/"):
		id = tn.request
	case strings.HasPrefix(path, "/v1/orders/"):
		id = tn.order
	case strings.HasPrefix(path, "/v1/schedules/"):
		id = tn.schedule
	case strings.HasPrefix(path, "/v1/plans/"):
		id = tn.plan
	case strings.HasPrefix(path, "/v1/webhook-endpoints/"):
		id = tn.endpoint
	case strings.HasPrefix(path, "/admin/"):
		id = tn.order
	}
	switch path { // the parameters a read needs
	case "/v1/availability":
		path += "?duration=1h&from=2030-01-07T00:00:00Z&to=2030-01-08T00:00:00Z"
	case "/v1/events":
		path += "?wait=0"
	}
	path = strings.ReplaceAll(path, "{id}", id)
	path = strings.ReplaceAll(path, "{delivery_id}", tn.delivery)
	return strings.ReplaceAll(path, "{projection}", "orders")
}

// withQuery adds q to path's query.
func withQuery(path, q string) string {
	if q == "" {
		return path
	}
	if strings.Contains(path, "?") {
		return path + "&" + q
	}
	return path + "?" + q
}

// missingTenant is a tenant of ids nobody has.
func missingTenant() tenant {
	return tenant{customer: uuid.New(), staff: uuid.New(), item: uuid.New(), request: uuid.New(), order: uuid.New(),
		schedule: uuid.New(), plan: uuid.New(), endpoint: uuid.New(), delivery: uuid.New(), orderOfOther: uuid.New()}
}

// matrixBody is a body each write would accept for the owner's resource,
// so that a refusal for another merchant's id comes from the lookup, not
// from the body.
func matrixBody(pattern string, tn tenant) any {
	window := map[string]any{"start_at": "2031-03-03T09:00:00Z", "end_at": "2031-03-03T10:00:00Z"}
	switch pattern {
	case "POST /v1/customers", "POST /v1/staff", "POST /v1/catalog-items":
		return map[string]any{"name": "Matrix"}
	case "PATCH /v1/customers/{id}", "PATCH /v1/staff/{id}", "PATCH /v1/catalog-items/{id}":
		return map[string]any{"name": "Renamed"}
	case "POST /v1/customers/{id}/erase":
		return map[string]any{"confirm": tn.customer}
	case "POST /v1/staff/{id}/erase":
		return map[string]any{"confirm": tn.staff}
	case "PUT /v1/staff/{id}/working-hours":
		return map[string]any{"week": map[string]any{"monday": []any{map[string]any{"start": "09:00", "end": "17:00"}}}}
	case "POST /v1/service-requests":
		return map[string]any{"customer_id": tn.customer, "catalog_item_id": tn.item, "content": "matrix"}
	case "PATCH /v1/service-requests/{id}", "PATCH /v1/orders/{id}":
		return map[string]any{"notes": "changed"}
	case "POST /v1/service-requests/{id}/status":
		return map[string]any{"status": "cancelled"}
	case "POST /v1/orders":
		return map[string]any{"customer_id": tn.customer, "amount_cents": 100, "request_id": tn.request}
	case "POST /v1/orders/{id}/status":
		return map[string]any{"status": "in_service"}
	case "POST /v1/schedules/{id}/status":
		return map[string]any{"status": "in_service"}
	case "POST /v1/orders/{id}/cancel":
		return map[string]any{"reason": "matrix"}
	case "PUT /v1/orders/{id}/assignment":
		return map[string]any{"staff_id": tn.staff, "start_at": window["start_at"], "end_at": window["end_at"]}
	case "PUT /v1/orders/{id}/settlement":
		return map[string]any{"settlement_status": "settled", "paid_amount_cents": 100}
	case "POST /v1/plans/{id}/pause", "POST /v1/plans/{id}/resume", "POST /v1/plans/{id}/end",
		"POST /v1/webhook-endpoints/{id}/test", "POST /v1/webhook-endpoints/{id}/deliveries/{delivery_id}/redeliver",
		"POST /v1/service-requests/{id}/convert", "DELETE /v1/webhook-endpoints/{id}":
		return nil
	case "POST /v1/plans/{id}/change":
		return map[string]any{"from": "2031-01-01", "price_cents": 100}
	case "POST /v1/plans/{id}/skip":
		return map[string]any{"date": "2031-01-06"}
	case "POST /v1/plans/{id}/move":
		return map[string]any{"date": "2031-01-06", "to_date": "2031-01-07", "start": "10:00"}
	case "PUT /v1/settings":
		return map[string]any{"time_zone": "UTC"}
	case "POST /v1/webhook-endpoints":
		return map[string]any{"url": "https://hooks.example.com/matrix"}
	case "PATCH /v1/webhook-endpoints/{id}":
		return map[string]any{"description": "changed"}
	case "POST /v1/webhook-endpoints/{id}/rotate-secret":
		return map[string]any{}
	case "POST /v1/plans":
		return map[string]any{"customer_id": tn.customer, "staff_id": tn.staff, "catalog_item_id": tn.item,
			"window":     map[string]any{"start": "09:00", "end": "11:00"},
			"recurrence": map[string]any{"frequency": "weekly", "interval": 2, "start": "2031-01-06"}}
	case "POST /admin/keys":
		return map[string]any{"role": "operator", "merchant": "matrix"}
	case "POST /admin/parked/{projection}/{id}/skip":
		return map[string]any{"reason": "matrix"}
	}
	if strings.HasPrefix(pattern, "POST ") || strings.HasPrefix(pattern, "PUT ") || strings.HasPrefix(pattern, "PATCH ") {
		return map[string]any{}
	}
	return nil
}

// sameAnswer requires two refusals to read alike: the same status and
// problem type, and the same detail once each request's ids are blanked.
func sameAnswer(t *testing.T, want, got response, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, want.Status, got.Status, append([]any{"status: missing %s, foreign %s"}, want, got)...)
	require.Equal(t, want.Body["type"], got.Body["type"], msgAndArgs...)
	ids := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	require.Equal(t, ids.ReplaceAllString(fmt.Sprint(want.Body["detail"]), "ID"), ids.ReplaceAllString(fmt.Sprint(got.Body["detail"]), "ID"), msgAndArgs...)
}

// The access matrix: every route the server serves × every role × the
// owner's resource, another merchant's and one that does not exist. No key
// is 401; a role the route is not for, 403 before anything is looked up;
// another merchant's id answers exactly as a missing one does, and its
// resource is unchanged; a worker key sees only its own staff member's
// schedules and their orders.
func TestAccessMatrix(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	workerKey, err := a.w.refdata.CreateKey(ctx, "acme", access.Worker, a.staffA)
	require.NoError(t, err)
	worker := workerKey.Secret
	otherStaff, err := a.w.refdata.CreateStaff(ctx, a.merchantA, "Otto Other")
	require.NoError(t, err)

	// Merchant A's resources, one of each kind.
	var A tenant
	A.customer = a.createCustomer(a.opA, "Ada Matrix")
	A.staff = a.staffA
	A.item = a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Clean", "base_price_cents": 4500})
	A.request = a.crmRequest(a.opA, A.customer, A.item)
	A.order = a.createOrder(a.opA, A.customer, 5000)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+A.order+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": "2030-01-01T09:00:00Z", "end_at": "2030-01-01T10:00:00Z", "dispatch_note": "ring twice"})
	A.orderOfOther = a.createOrder(a.opA, A.customer, 6000)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+A.orderOfOther+"/assignment", a.opA, map[string]any{
		"staff_id": otherStaff, "start_at": "2030-01-01T09:00:00Z", "end_at": "2030-01-01T10:00:00Z"})
	A.schedule, _ = a.crmSchedule(a.opA, A.order).Body["id"].(string)
	otherSchedule, _ := a.crmSchedule(a.opA, A.orderOfOther).Body["id"].(string)
	A.plan = a.crmCreate(a.opA, "/v1/plans", map[string]any{"customer_id": A.customer, "catalog_item_id": A.item, "staff_id": a.staffA,
		"window":     map[string]any{"start": "09:00", "end": "11:00"},
		"recurrence": map[string]any{"frequency": "weekly", "interval": 2, "start": time.Now().UTC().AddDate(0, 0, 7).Format(time.DateOnly)}})
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	A.endpoint = a.crmCreate(a.opA, "/v1/webhook-endpoints", map[string]any{"url": receiver.URL, "event_types": []string{"order.created"}})
	ping := a.must(http.StatusAccepted, http.MethodPost, "/v1/webhook-endpoints/"+A.endpoint+"/test", a.opA, nil)
	A.delivery, _ = ping.Body["id"].(string)
	require.True(t, uuid.Valid(A.delivery), "%s", ping)
	a.awaitOrder(a.opA, A.order, 3)
	a.awaitOrder(a.opA, A.orderOfOther, 3)
	missing := missingTenant()

	// What merchant A's operator reads of its resources: a foreign request
	// changes none of it.
	// Each read waits for the read models to reach every event written so
	// far (Consistency-Position): the plan, the service request and the
	// schedules are projected after their writes answered.
	ownReads := func() map[string]string {
		var last int64
		require.NoError(t, a.dbs.es.DB.QueryRowContext(ctx, `SELECT max(position) FROM events`).Scan(&last))
		header := auth(a.opA)
		header.Set("Consistency-Position", strconv.FormatInt(last, 10))
		out := map[string]string{}
		for _, p := range []string{"/v1/customers/{id}", "/v1/staff/{id}", "/v1/staff/{id}/working-hours", "/v1/catalog-items/{id}",
			"/v1/service-requests/{id}", "/v1/orders/{id}", "/v1/schedules/{id}", "/v1/plans/{id}", "/v1/webhook-endpoints/{id}",
			"/v1/settings"} {
			r, err := a.send(http.MethodGet, A.fill(p), header, nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, r.Status, "GET %s answered %s", A.fill(p), r)
			out[p] = r.Raw
		}
		return out
	}
	before, eventsBefore := ownReads(), a.events("")

	// Keys that no longer work, of every role: revoked, expired, and
	// rotated away without a grace period.
	var dead []string
	for _, role := range []access.Role{access.Operator, access.Worker, access.Admin} {
		merchant, staff := "acme", a.staffA
		switch role {
		case access.Operator:
			staff = ""
		case access.Admin:
			merchant, staff = "", ""
		}
		for _, how := range []string{"revoked", "expired", "rotated"} {
			k, err := a.w.refdata.CreateKey(ctx, merchant, role, staff)
			require.NoError(t, err)
			switch how {
			case "revoked":
				a.must(http.StatusOK, http.MethodPost, "/admin/keys/"+k.ID+"/revoke", a.admin, nil)
			case "expired":
				_, err := a.dbs.es.DB.ExecContext(ctx, `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, k.ID)
				require.NoError(t, err)
			case "rotated":
				a.must(http.StatusCreated, http.MethodPost, "/admin/keys/"+k.ID+"/rotate", a.admin, nil)
			}
			dead = append(dead, k.Secret)
		}
	}
	before, eventsBefore = ownReads(), a.events("")

	routes := matrixRoutes(t, a)
	for _, pattern := range routes {
		_, ok := routeAccessOf[pattern]
		require.True(t, ok, "%s: the matrix does not say who may call it", pattern)
	}
	aIDs := []string{A.customer, A.item, A.request, A.order, A.orderOfOther, A.schedule, otherSchedule, A.plan, A.endpoint, A.delivery}

	for _, pattern := range routes {
		method, path, _ := strings.Cut(pattern, " ")
		acc := routeAccessOf[pattern]
		if acc == public {
			continue
		}
		t.Run(pattern, func(t *testing.T) {
			// No key, a key nobody has, and one that no longer works: 401,
			// whatever the id.
			for _, key := range append([]string{"", "not-a-key"}, dead...) {
				r := a.do(method, A.fill(path), key, matrixBody(pattern, A))
				requireProblem(t, r, http.StatusUnauthorized, "/problems/unauthenticated")
			}
			// A role the route is not for: 403, the same for every id.
			var refused []string
			switch acc {
			case operatorOnly:
				refused = []string{worker, a.admin}
			case operatorWorker:
				refused = []string{a.admin}
			case adminOnly:
				refused = []string{a.opA, worker}
			}
			for _, key := range refused {
				own := a.do(method, A.fill(path), key, matrixBody(pattern, A))
				requireProblem(t, own, http.StatusForbidden, "/problems/forbidden")
				if strings.Contains(path, "{") {
					absent := a.do(method, missing.fill(path), key, matrixBody(pattern, missing))
					requireProblem(t, absent, http.StatusForbidden, "/problems/forbidden")
				}
			}
			if acc == adminOnly {
				return // platform keys: every merchant's
			}
			if method == http.MethodGet { // the owner reads its own
				a.must(http.StatusOK, method, A.fill(path), a.opA, nil)
			}
			// Another merchant's operator: A's ids answer as missing ones do,
			// with and without If-Match.
			if strings.Contains(path, "{id}") {
				for _, h := range []http.Header{{}, {"If-Match": {`"1"`}}} {
					if method == http.MethodGet && len(h) > 0 {
						continue
					}
					h := h.Clone()
					h.Set("Authorization", "Bearer "+a.opB)
					foreign, err := a.send(method, A.fill(path), h, matrixBody(pattern, A))
					require.NoError(t, err)
					absent, err := a.send(method, missing.fill(path), h, matrixBody(pattern, missing))
					require.NoError(t, err)
					if h.Get("If-Match") == "" { // with it, a route that checks no entity tag refuses it first (412)
						require.Equal(t, http.StatusNotFound, foreign.Status, "%s for another merchant's id: %s", pattern, foreign)
					}
					sameAnswer(t, absent, foreign, "%s: another merchant's id answers as a missing one", pattern)
				}
			}
			// A body naming A's ids (a customer, a staff member, a catalog
			// item, a service request) answers as one naming missing ids.
			if method != http.MethodGet && !strings.Contains(path, "{") {
				foreign := a.do(method, path, a.opB, matrixBody(pattern, A))
				absent := a.do(method, path, a.opB, matrixBody(pattern, missing))
				if fmt.Sprint(matrixBody(pattern, A)) != fmt.Sprint(matrixBody(pattern, missing)) {
					require.GreaterOrEqual(t, foreign.Status, 400, "%s naming another merchant's ids: %s", pattern, foreign)
					sameAnswer(t, absent, foreign, "%s naming another merchant's ids", pattern)
				}
			}
			// Lists and filters: nothing of A shows, whatever filter names A's ids.
			if method == http.MethodGet && !strings.Contains(path, "{") {
				for _, q := range []string{"", "customer_id=" + A.customer, "staff_id=" + A.staff, "staff_id=" + otherStaff,
					"catalog_item_id=" + A.item, "request_id=" + A.request, "order_id=" + A.order} {
					r := a.do(method, withQuery(A.fill(path), q), a.opB, nil)
					for _, id := range aIDs {
						require.NotContains(t, r.Raw, id, "%s?%s by another merchant's key: %s", path, q, r)
					}
					// As for an id nobody has.
					absent := a.do(method, withQuery(A.fill(path), regexp.MustCompile(`=.*`).ReplaceAllString(q, "="+uuid.New())), a.opB, nil)
					if q != "" {
						sameAnswer(t, absent, r, "%s?%s by another merchant's key", path, q)
						require.Equal(t, regexp.MustCompile(`[0-9a-f-]{36}`).ReplaceAllString(absent.Raw, "ID"),
							regexp.MustCompile(`[0-9a-f-]{36}`).ReplaceAllString(r.Raw, "ID"), "%s?%s by another merchant's key", path, q)
					}
				}
			}
			// The worker: its own staff member's schedule and order, nothing else.
			if acc == operatorWorker {
				if method == http.MethodGet && strings.Contains(path, "{id}") {
					a.must(http.StatusOK, method, A.fill(path), worker, nil)
					other := A
					other.order, other.schedule = A.orderOfOther, otherSchedule
					notMine := a.do(method, other.fill(path), worker, nil)
					absent := a.do(method, missing.fill(path), worker, nil)
					require.Equal(t, http.StatusNotFound, notMine.Status, "%s", notMine)
					sameAnswer(t, absent, notMine, "%s: another staff member's answers as a missing one", pattern)
				}
				if method == http.MethodGet && !strings.Contains(path, "{") {
					for _, q := range []string{"", "staff_id=" + otherStaff} {
						r := a.must(http.StatusOK, method, withQuery(A.fill(path), q), worker, nil)
						require.NotContains(t, r.Raw, A.orderOfOther, "%s?%s by the worker", path, q)
						require.NotContains(t, r.Raw, otherSchedule, "%s?%s by the worker", path, q)
					}
				}
			}
		})
	}
	t.Run("bodies naming another merchant's ids", func(t *testing.T) {
		// Merchant A's writes to its own resources, naming merchant B's
		// customer, staff member or catalog item, answer as when naming
		// missing ones.
		customerB := a.createCustomer(a.opB, "Gus Globex")
		itemB := a.crmCreate(a.opB, "/v1/catalog-items", map[string]any{"name": "Globex clean"})
		for _, c := range []struct {
			method, path string
			body         func(customer, staff, item string) map[string]any
		}{
			{http.MethodPut, "/v1/orders/" + A.order + "/assignment", func(_, staff, _ string) map[string]any {
				return map[string]any{"staff_id": staff, "start_at": "2031-03-03T09:00:00Z", "end_at": "2031-03-03T10:00:00Z"}
			}},
			{http.MethodPatch, "/v1/orders/" + A.order, func(customer, _, _ string) map[string]any {
				return map[string]any{"customer_id": customer, "notes": ""}
			}},
			{http.MethodPatch, "/v1/service-requests/" + A.request, func(_, _, item string) map[string]any {
				return map[string]any{"catalog_item_id": item}
			}},
			{http.MethodPost, "/v1/plans/" + A.plan + "/change", func(_, staff, _ string) map[string]any {
				return map[string]any{"from": time.Now().UTC().AddDate(0, 0, 7).Format(time.DateOnly), "staff_id": staff}
			}},
			{http.MethodPut, "/v1/staff/" + A.staff + "/working-hours", func(_, _, item string) map[string]any {
				return map[string]any{"week": map[string]any{}, "catalog_item_ids": []string{item}}
			}},
			{http.MethodPost, "/v1/orders", func(customer, _, _ string) map[string]any {
				return map[string]any{"customer_id": customer, "amount_cents": 1}
			}},
			{http.MethodPost, "/v1/service-requests", func(customer, _, item string) map[string]any {
				return map[string]any{"customer_id": customer, "catalog_item_id": item, "content": "x"}
			}},
			{http.MethodPost, "/v1/plans", func(customer, staff, item string) map[string]any {
				return map[string]any{"customer_id": customer, "staff_id": staff, "catalog_item_id": item,
					"window":     map[string]any{"start": "09:00", "end": "11:00"},
					"recurrence": map[string]any{"frequency": "weekly", "interval": 2, "start": "2031-01-06"}}
			}},
		} {
			foreign := a.do(c.method, c.path, a.opA, c.body(customerB, a.staffB, itemB))
			absent := a.do(c.method, c.path, a.opA, c.body(uuid.New(), uuid.New(), uuid.New()))
			require.GreaterOrEqual(t, foreign.Status, 400, "%s %s naming merchant B's ids: %s", c.method, c.path, foreign)
			sameAnswer(t, absent, foreign, "%s %s naming merchant B's ids", c.method, c.path)
		}
	})

	t.Run("worker's writes", func(t *testing.T) {
		// Another staff member's schedule answers as a missing one, whatever
		// version the worker states and whatever status it asks for.
		for _, h := range []http.Header{{}, {"If-Match": {`"1"`}}, {"If-Match": {`"99"`}}} {
			for _, st := range []string{"in_service", "done", "cancelled"} {
				h := h.Clone()
				h.Set("Authorization", "Bearer "+worker)
				body := map[string]any{"status": st}
				notMine, err := a.send(http.MethodPost, "/v1/schedules/"+otherSchedule+"/status", h, body)
				require.NoError(t, err)
				absent, err := a.send(http.MethodPost, "/v1/schedules/"+missing.schedule+"/status", h, body)
				require.NoError(t, err)
				sameAnswer(t, absent, notMine, "%v %s: another staff member's schedule", h.Get("If-Match"), st)
			}
		}
	})

	t.Run("positions and idempotency keys", func(t *testing.T) {
		// A position of merchant A's write, to merchant B's read, answers as
		// a position nobody wrote.
		var last int64
		require.NoError(t, a.dbs.es.DB.QueryRowContext(ctx, `SELECT max(position) FROM events WHERE merchant_id = $1`, a.merchantA).Scan(&last))
		for _, path := range []string{"/v1/orders", "/v1/orders/" + A.order, "/v1/events?wait=0"} {
			foreign, err := a.send(http.MethodGet, path, http.Header{"Authorization": {"Bearer " + a.opB}, "Consistency-Position": {fmt.Sprint(last)}}, nil)
			require.NoError(t, err)
			absent, err := a.send(http.MethodGet, path, http.Header{"Authorization": {"Bearer " + a.opB}, "Consistency-Position": {fmt.Sprint(last + 1_000_000)}}, nil)
			require.NoError(t, err)
			sameAnswer(t, absent, foreign, "%s with another merchant's position", path)
		}
		// An Idempotency-Key of merchant A's write, sent by merchant B with
		// the same request, runs B's own write.
		key := uuid.New()
		body := map[string]any{"name": "Same Name"}
		mine, err := a.send(http.MethodPost, "/v1/customers", http.Header{"Authorization": {"Bearer " + a.opA}, "Idempotency-Key": {key}}, body)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, mine.Status, "%s", mine)
		theirs, err := a.send(http.MethodPost, "/v1/customers", http.Header{"Authorization": {"Bearer " + a.opB}, "Idempotency-Key": {key}}, body)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, theirs.Status, "%s", theirs)
		require.Empty(t, theirs.Header.Get("Idempotent-Replayed"))
		require.NotEqual(t, mine.Body["id"], theirs.Body["id"])
		a.must(http.StatusNotFound, http.MethodGet, "/v1/customers/"+theirs.Body["id"].(string), a.opA, nil)
	})

	t.Run("console", func(t *testing.T) {
		ids := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
		// Each rendered form carries a key of its own, drawn at random:
		// the one thing two answers may differ in.
		formKeys := regexp.MustCompile(`name="form_key" value="[^"]*"`)
		page := func(c *consoleClient, method, path string, form url.Values) (int, string) {
			status, _, body := c.do(method, path, form)
			return status, formKeys.ReplaceAllString(ids.ReplaceAllString(body, "ID"), `name="form_key" value="KEY"`)
		}
		// Another merchant's operator: A's ids answer as missing ones.
		opB := newConsoleClient(t, a.base)
		opB.signIn(a.opB)
		_, _, list := opB.do(http.MethodGet, "/console/customers", nil)
		csrf := csrfTokenRe.FindStringSubmatch(list)
		require.NotNil(t, csrf, "a page of the console has its CSRF token")
		opB.referer = "/console/customers"
		form := url.Values{"csrf": {csrf[1]}, "status": {"cancelled"}, "reason": {"matrix"}, "name": {"Renamed"},
			"date": {"2031-01-06"}, "to_date": {"2031-01-07"}, "start": {"10:00"}, "version": {"1"}}
		type req struct{ method, path string }
		var reqs []req
		for _, p := range []string{"/console/orders/{order}", "/console/plans/{plan}", "/console/customers/{customer}",
			"/console/staff/{staff}", "/console/catalog/{item}"} {
			reqs = append(reqs, req{http.MethodGet, p}, req{http.MethodPost, p})
		}
		for _, p := range []string{"/console/requests/{request}/status", "/console/requests/{request}/convert",
			"/console/orders/{order}/status", "/console/orders/{order}/cancel", "/console/orders/{order}/settle",
			"/console/plans/{plan}/skip", "/console/plans/{plan}/move", "/console/plans/{plan}/pause", "/console/plans/{plan}/resume",
			"/console/plans/{plan}/end", "/console/staff/{staff}/hours/week", "/console/staff/{staff}/hours/add", "/console/staff/{staff}/hours/remove"} {
			reqs = append(reqs, req{http.MethodPost, p})
		}
		fill := func(path string, tn tenant) string {
			return strings.NewReplacer("{order}", tn.order, "{plan}", tn.plan, "{customer}", tn.customer, "{staff}", tn.staff,
				"{item}", tn.item, "{request}", tn.request, "{schedule}", tn.schedule).Replace(path)
		}
		for _, rq := range reqs {
			var f url.Values
			if rq.method == http.MethodPost {
				f = form
			}
			fs, foreign := page(opB, rq.method, fill(rq.path, A), f)
			ms, absent := page(opB, rq.method, fill(rq.path, missing), f)
			require.Equal(t, http.StatusNotFound, fs, "%s %s with another merchant's id: %s", rq.method, rq.path, foreign)
			require.Equal(t, ms, fs, "%s %s", rq.method, rq.path)
			require.Equal(t, absent, foreign, "%s %s: another merchant's id answers as a missing one", rq.method, rq.path)
		}
		// The board: picking or assigning another merchant's order reads as
		// picking a missing one.
		for _, rq := range []struct {
			method, path string
			form         url.Values
		}{
			{http.MethodGet, "/console/board?order={order}&slots=1", nil},
			{http.MethodPost, "/console/board/assign", url.Values{"csrf": {csrf[1]}, "order_id": {"{order}"}, "staff_id": {a.staffB},
				"start_at": {"2031-03-03T09:00"}, "end_at": {"2031-03-03T10:00"}}},
		} {
			at := func(tn tenant) (int, string) {
				var f url.Values
				if rq.form != nil {
					f = url.Values{}
					for k, v := range rq.form {
						f[k] = []string{strings.ReplaceAll(v[0], "{order}", tn.order)}
					}
				}
				return page(opB, rq.method, strings.ReplaceAll(rq.path, "{order}", tn.order), f)
			}
			fs, foreign := at(A)
			ms, absent := at(missing)
			require.Equal(t, ms, fs, "%s %s", rq.method, rq.path)
			require.Equal(t, absent, foreign, "%s %s: another merchant's order reads as a missing one", rq.method, rq.path)
			require.NotContains(t, foreign, "Ada Matrix")
		}

		// The worker: its own job only.
		wc := newConsoleClient(t, a.base)
		wc.signIn(worker)
		_, _, jobs := wc.do(http.MethodGet, "/console/jobs", nil)
		require.NotContains(t, jobs, otherSchedule, "another staff member's job")
		require.NotContains(t, jobs, A.orderOfOther)
		csrf = csrfTokenRe.FindStringSubmatch(jobs)
		require.NotNil(t, csrf)
		wc.referer = "/console/jobs"
		ws, notMine := page(wc, http.MethodPost, "/console/jobs/"+otherSchedule+"/status", url.Values{"csrf": {csrf[1]}, "status": {"in_service"}})
		ms, absent := page(wc, http.MethodPost, "/console/jobs/"+missing.schedule+"/status", url.Values{"csrf": {csrf[1]}, "status": {"in_service"}})
		require.Equal(t, http.StatusNotFound, ws, "%s", notMine)
		require.Equal(t, ms, ws)
		require.Equal(t, absent, notMine)
		// A session whose key stops working ends: its next page, and its
		// live parts' next poll, are the sign-in.
		for _, how := range []string{"revoked", "expired", "rotated"} {
			k, err := a.w.refdata.CreateKey(ctx, "acme", access.Operator, "")
			require.NoError(t, err)
			c := newConsoleClient(t, a.base)
			c.signIn(k.Secret)
			require.True(t, c.signedIn())
			switch how {
			case "revoked":
				a.must(http.StatusOK, http.MethodPost, "/admin/keys/"+k.ID+"/revoke", a.admin, nil)
			case "expired":
				_, err := a.dbs.es.DB.ExecContext(ctx, `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, k.ID)
				require.NoError(t, err)
			case "rotated":
				a.must(http.StatusCreated, http.MethodPost, "/admin/keys/"+k.ID+"/rotate", a.admin, nil)
			}
			status, location, _ := c.do(http.MethodGet, "/console/requests?part=requests-list", nil)
			require.NotEqual(t, http.StatusOK, status, "a live part of a %s key's session", how)
			require.False(t, c.signedIn(), "a %s key's session (%d %s)", how, status, location)
		}
	})

	require.Equal(t, eventsBefore, a.events(""), "no refused request appended an event")
	after := ownReads()
	for p, raw := range before {
		require.Equal(t, raw, after[p], "GET %s changed: a refused request wrote", p)
	}
}

// A worker key reads its staff member's orders as they are, not their
// change log: the log keeps every earlier value with its before and after,
// such as notes the dispatcher took out before the job was given to the
// worker, and another staff member's assignment and dispatch note.
func TestWorkerReadsNoChangeLog(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	colleague, err := a.w.refdata.CreateStaff(t.Context(), a.merchantA, "Colin Colleague")
	require.NoError(t, err)
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	order := a.crmCreate(a.opA, "/v1/orders", map[string]any{"customer_id": customer, "amount_cents": 100, "notes": "alarm code 4321"})
	a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+order, a.opA, map[string]any{"notes": "ring the bell"})
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, map[string]any{"staff_id": colleague,
		"start_at": "2030-06-01T10:00:00Z", "end_at": "2030-06-01T12:00:00Z", "dispatch_note": "Colin: the key is under the mat"})
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, map[string]any{"staff_id": a.staffA,
		"start_at": "2030-06-01T10:00:00Z", "end_at": "2030-06-01T12:00:00Z", "dispatch_note": "Wanda: knock"})
	own := a.awaitOrder(a.worker, order, 5)
	require.Equal(t, "ring the bell", own.Body["notes"], "the worker reads its order as it is")

	changes := a.do(http.MethodGet, "/v1/orders/"+order+"/changes", a.worker, nil)
	require.NotContains(t, changes.Raw, "alarm code 4321", "notes taken out before the job was the worker's")
	require.NotContains(t, changes.Raw, "under the mat", "another staff member's dispatch note")
	requireProblem(t, changes, http.StatusForbidden, "/problems/forbidden")
	a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+order+"/changes", a.opA, nil)
}

// A read that waits for a position (read your writes) authenticated its
// key when it came in; a key revoked while it waits gets 401, not what the
// read models show once they reach the position.
func TestReadYourWritesWaitOfARevokedKeyAnswersNothing(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	k, err := a.w.refdata.CreateKey(ctx, "acme", access.Operator, "")
	require.NoError(t, err)
	customer := a.createCustomer(a.opA, "Ada")
	order := a.createOrder(a.opA, customer, 4200)
	a.awaitOrder(a.opA, order, 1)

	// The order's read-model row stays locked: the projection of the next
	// write waits, and so does a read of its position.
	hold, err := a.dbs.rm.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback() }()
	_, err = hold.ExecContext(ctx, `SELECT 1 FROM orders WHERE id = $1 FOR UPDATE`, order)
	require.NoError(t, err)
	written := a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+order, a.opA, map[string]any{"notes": "written after the revocation"})
	read := a.sendAsync(http.MethodGet, "/v1/orders/"+order,
		http.Header{"Authorization": {"Bearer " + k.Secret}, "Consistency-Position": {positionOf(written.Body)}}, nil)
	// Once the read has been authenticated (its key's use is noted), the
	// key is revoked and the projection let go.
	require.Eventually(t, func() bool {
		_, err := a.w.refdata.FlushUses(ctx)
		require.NoError(t, err)
		var used bool
		require.NoError(t, a.dbs.es.DB.QueryRowContext(ctx, `SELECT last_used_at IS NOT NULL FROM api_keys WHERE id = $1`, k.ID).Scan(&used))
		return used
	}, 5*time.Second, time.Millisecond, "the read never authenticated its key")
	a.revokeSecret(k.Secret)
	require.NoError(t, hold.Rollback())
	r := <-read
	require.NotContains(t, r.Raw, "written after the revocation")
	requireProblem(t, r, http.StatusUnauthorized, "/problems/unauthenticated")
}
