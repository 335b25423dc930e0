package main

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// crmAwait polls GET path with key until ok accepts the answer (the read
// models follow the writes asynchronously) and returns that answer.
func (a *api) crmAwait(key, path string, ok func(r response) bool) response {
	a.t.Helper()
	var last response
	require.Eventually(a.t, func() bool {
		r, err := a.send(http.MethodGet, path, auth(key), nil)
		if err != nil {
			return false
		}
		last = r
		return ok(r)
	}, 10*time.Second, 10*time.Millisecond, "GET %s never answered as expected; last: %s", path, last)
	return last
}

// crmAwaitVersion waits until GET path shows the resource at version.
func (a *api) crmAwaitVersion(key, path string, version int) response {
	a.t.Helper()
	return a.crmAwait(key, path, func(r response) bool {
		return r.Status == http.StatusOK && intOf(r.Body["version"]) >= version
	})
}

// crmCreate POSTs body to path and returns the new resource's id.
func (a *api) crmCreate(key, path string, body map[string]any) string {
	a.t.Helper()
	r := a.must(http.StatusCreated, http.MethodPost, path, key, body)
	id, _ := r.Body["id"].(string)
	require.True(a.t, uuid.Valid(id), "%s", r)
	require.Equal(a.t, path+"/"+id, r.Header.Get("Location"))
	return id
}

// crmRequest creates a service request of customerID and returns its id.
func (a *api) crmRequest(key, customerID, itemID string) string {
	a.t.Helper()
	body := map[string]any{"customer_id": customerID, "content": "  Fix the leaking sink  ", "source": "phone",
		"appointment_start_at": "2030-04-01T09:00:00+02:00", "appointment_end_at": "2030-04-01T11:00:00+02:00", "notes": "side door"}
	if itemID != "" {
		body["catalog_item_id"] = itemID
	}
	return a.crmCreate(key, "/v1/service-requests", body)
}

// crmSchedule is the id of the live schedule of an order, from the
// schedules list once the projection has it.
func (a *api) crmSchedule(key, orderID string) response {
	a.t.Helper()
	var found response
	a.crmAwait(key, "/v1/schedules?page_size=200", func(r response) bool {
		items, _ := r.Body["items"].([]any)
		for _, it := range items {
			m := it.(map[string]any)
			if m["order_id"] == orderID && (m["status"] == "planned" || m["status"] == "in_service") {
				found = response{Status: r.Status, Body: m}
				return true
			}
		}
		return false
	})
	return found
}

// crmAll pages through a list with page_size and returns every item's id in
// order, checking that total stays the same and no id repeats.
func (a *api) crmAll(key, path string, pageSize int) (ids []string, total int) {
	a.t.Helper()
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	seen := map[string]bool{}
	for page := 1; ; page++ {
		r := a.must(http.StatusOK, http.MethodGet, fmt.Sprintf("%s%spage=%d&page_size=%d", path, sep, page, pageSize), key, nil)
		if page == 1 {
			total = intOf(r.Body["total"])
		}
		require.Equal(a.t, total, intOf(r.Body["total"]), "total is the same on every page of %s", path)
		require.Equal(a.t, page, intOf(r.Body["page"]))
		require.Equal(a.t, pageSize, intOf(r.Body["page_size"]))
		items, _ := r.Body["items"].([]any)
		for _, it := range items {
			id := it.(map[string]any)["id"].(string)
			require.False(a.t, seen[id], "%s: %s on two pages", path, id)
			seen[id] = true
			ids = append(ids, id)
		}
		if len(items) < pageSize {
			require.Equal(a.t, total, len(ids), "%s: the pages hold total rows", path)
			require.Equal(a.t, ids, a.crmCursors(key, path+sep, pageSize), "%s: following next_cursor visits the same rows", path)
			return ids, total
		}
	}
}

// crmCursors pages through a list (path ends in ? or &) by following
// next_cursor, and returns every item's id in order.
func (a *api) crmCursors(key, path string, pageSize int) (ids []string) {
	a.t.Helper()
	next := ""
	for {
		q := fmt.Sprintf("%spage_size=%d", path, pageSize)
		if next != "" {
			q += "&cursor=" + url.QueryEscape(next)
		}
		r := a.must(http.StatusOK, http.MethodGet, q, key, nil)
		require.Equal(a.t, true, r.Body["total_exact"])
		items, _ := r.Body["items"].([]any)
		for _, it := range items {
			ids = append(ids, it.(map[string]any)["id"].(string))
		}
		var more bool
		if next, more = r.Body["next_cursor"].(string); !more {
			return ids
		}
		require.Len(a.t, items, pageSize, "a page before the last is full")
	}
}

func TestReferenceData(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	kinds := []struct {
		path    string
		create  map[string]any
		patch   map[string]any
		invalid map[string]any // a body that breaks a field rule
		field   string         // the field it names
	}{
		{"/v1/customers", map[string]any{"name": "Zoë Plumtree", "phone": "+44 1", "email": "zoe@example.com"},
			map[string]any{"address": "1 Main St"}, map[string]any{"name": "x", "email": "no-at-sign"}, "email"},
		{"/v1/staff", map[string]any{"name": "Zoë Plumtree", "phone": "+44 2"},
			map[string]any{"active": false}, map[string]any{"name": "   "}, "name"},
		{"/v1/catalog-items", map[string]any{"name": "Zoë Plumtree", "base_price_cents": 4200},
			map[string]any{"base_price_cents": 5000}, map[string]any{"name": "Window", "base_price_cents": -1}, "base_price_cents"},
	}
	for _, k := range kinds {
		id := a.crmCreate(a.opA, k.path, k.create)
		got := a.must(http.StatusOK, http.MethodGet, k.path+"/"+id, a.opA, nil)
		require.Equal(t, "Zoë Plumtree", got.Body["name"])
		require.NotContains(t, got.Body, "merchant_id")
		if k.path != "/v1/customers" {
			require.Equal(t, true, got.Body["active"], "%s: active by default", k.path)
		}
		patched := a.must(http.StatusOK, http.MethodPatch, k.path+"/"+id, a.opA, k.patch)
		for f, v := range k.patch {
			require.Equal(t, jsonValue(t, v), patched.Body[f], "%s: %s", k.path, f)
		}
		require.Equal(t, "Zoë Plumtree", patched.Body["name"], "%s: absent fields keep their value", k.path)
		require.Equal(t, patched.Body, a.must(http.StatusOK, http.MethodGet, k.path+"/"+id, a.opA, nil).Body)

		// Field rules: 422 naming the field; nothing stored.
		before := a.must(http.StatusOK, http.MethodGet, k.path, a.opA, nil)
		r := a.do(http.MethodPost, k.path, a.opA, k.invalid)
		requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
		require.Contains(t, problemFields(r), k.field, "%s: %s", k.path, r)
		r = a.do(http.MethodPatch, k.path+"/"+id, a.opA, k.invalid)
		requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
		require.Contains(t, problemFields(r), k.field)
		r = a.do(http.MethodPost, k.path, a.opA, map[string]any{"name": "ok", "colour": "red"})
		requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
		require.Equal(t, []string{"colour"}, problemFields(r))
		r = a.do(http.MethodPost, k.path, a.opA, map[string]any{"name": 7})
		requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
		require.Equal(t, []string{"name"}, problemFields(r))
		after := a.must(http.StatusOK, http.MethodGet, k.path, a.opA, nil)
		require.Equal(t, intOf(before.Body["total"]), intOf(after.Body["total"]), "%s: nothing created", k.path)
		require.Equal(t, patched.Body, a.must(http.StatusOK, http.MethodGet, k.path+"/"+id, a.opA, nil).Body, "nothing changed")

		// Search and pages: q matches the name case-insensitively, LIKE
		// wildcards are literal, newest first, every row once.
		var made []string
		for i := range 5 {
			body := map[string]any{"name": fmt.Sprintf("Page_%d Percent%%", i)}
			if k.path == "/v1/catalog-items" {
				body["base_price_cents"] = i
			}
			made = append(made, a.crmCreate(a.opA, k.path, body))
		}
		slices.Reverse(made)
		ids, total := a.crmAll(a.opA, k.path+"?q=page_", 2)
		require.Equal(t, 5, total)
		require.Equal(t, made, ids, "%s: newest first", k.path)
		ids, _ = a.crmAll(a.opA, k.path+"?q="+url.QueryEscape("t%"), 200)
		require.Equal(t, made, ids, "%% is literal")
		ids, _ = a.crmAll(a.opA, k.path+"?q="+url.QueryEscape("_1 p"), 200)
		require.Equal(t, made[3:4], ids, "_ is literal")
		ids, total = a.crmAll(a.opA, k.path+"?q="+url.QueryEscape("oë pLUMtree"), 200)
		require.Equal(t, []string{id}, ids)
		require.Equal(t, 1, total)
		ids, _ = a.crmAll(a.opA, k.path, 3)
		require.Len(t, ids, 6+map[string]int{"/v1/customers": 0, "/v1/staff": 1, "/v1/catalog-items": 0}[k.path],
			"%s: all of the merchant's rows (staff: the set-up's Wanda too)", k.path)
		for _, bad := range []string{"page=0", "page_size=0", "page_size=201", "page=x", "q=" + strings.Repeat("q", 201)} {
			r := a.do(http.MethodGet, k.path+"?"+bad, a.opA, nil)
			requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
			require.Len(t, problemFields(r), 1, "%s?%s names the parameter: %s", k.path, bad, r)
		}

		// Tenancy and roles.
		ids, total = a.crmAll(a.opB, k.path+"?q=zo", 200)
		require.Empty(t, ids, "%s: merchant B sees none of A's rows", k.path)
		require.Zero(t, total)
		a.must(http.StatusNotFound, http.MethodGet, k.path+"/"+id, a.opB, nil)
		a.must(http.StatusNotFound, http.MethodPatch, k.path+"/"+id, a.opB, map[string]any{"name": "Stolen"})
		a.must(http.StatusNotFound, http.MethodGet, k.path+"/"+uuid.New(), a.opA, nil)
		requireProblem(t, a.do(http.MethodGet, k.path+"/not-a-uuid", a.opA, nil), http.StatusBadRequest, "/problems/invalid-id")
		for _, key := range []string{a.worker, a.admin} {
			requireProblem(t, a.do(http.MethodGet, k.path, key, nil), http.StatusForbidden, "/problems/forbidden")
			requireProblem(t, a.do(http.MethodPost, k.path, key, map[string]any{"name": "x"}), http.StatusForbidden, "/problems/forbidden")
		}
		requireProblem(t, a.do(http.MethodGet, k.path, "", nil), http.StatusUnauthorized, "/problems/unauthenticated")
		require.Equal(t, "Zoë Plumtree", a.must(http.StatusOK, http.MethodGet, k.path+"/"+id, a.opA, nil).Body["name"])
	}
}

func TestServiceRequestLifecycle(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := setup(t, newDB(t))
			customer := a.createCustomer(a.opA, "Ada Lovelace")
			item := a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Plumbing", "base_price_cents": 8900})

			created := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA, map[string]any{
				"customer_id": customer, "catalog_item_id": item, "content": "  Fix the leaking sink  ", "source": "phone",
				"appointment_start_at": "2030-04-01T09:00:00+02:00", "appointment_end_at": "2030-04-01T11:00:00+02:00", "notes": "side door"})
			id := created.Body["id"].(string)
			require.Equal(t, "/v1/service-requests/"+id, created.Header.Get("Location"))
			require.Equal(t, "new", created.Body["status"])
			require.Equal(t, "Fix the leaking sink", created.Body["content"], "content is trimmed")
			require.Equal(t, "2030-04-01T07:00:00Z", created.Body["appointment_start_at"], "UTC")
			require.Equal(t, 1, intOf(created.Body["version"]))
			require.NotEmpty(t, created.Body["position"])
			require.Equal(t, created.Body["position"], created.Header.Get("Consistency-Position"))
			got := a.crmAwaitVersion(a.opA, "/v1/service-requests/"+id, 1)
			requireShows(t, created.Body, got.Body)
			require.Equal(t, "Ada Lovelace", got.Body["customer_name"])
			require.Equal(t, "Plumbing", got.Body["catalog_item_name"])

			// A request without a source is manual.
			manual := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA,
				map[string]any{"customer_id": customer, "content": "Paint the fence"})
			require.Equal(t, "manual", manual.Body["source"])
			require.Nil(t, manual.Body["catalog_item_id"])

			updated := a.must(http.StatusOK, http.MethodPatch, "/v1/service-requests/"+id, a.opA,
				map[string]any{"content": "Fix the sink and the tap", "expected_version": 1})
			require.Equal(t, 2, intOf(updated.Body["version"]))
			require.Equal(t, "side door", updated.Body["notes"], "absent fields keep their value")
			noop := a.must(http.StatusOK, http.MethodPatch, "/v1/service-requests/"+id, a.opA, map[string]any{"content": "Fix the sink and the tap "})
			require.Equal(t, 2, intOf(noop.Body["version"]), "a change to nothing appends nothing")
			stale := a.do(http.MethodPatch, "/v1/service-requests/"+id, a.opA, map[string]any{"notes": "x", "expected_version": 1})
			requireProblem(t, stale, http.StatusConflict, "/problems/conflict")

			// Converting a request that is not confirmed breaks a rule.
			before := a.events("")
			r := a.do(http.MethodPost, "/v1/service-requests/"+id+"/convert", a.opA, nil)
			requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/rule-broken")
			require.Equal(t, "service_request.not_confirmed", r.Body["rule"])
			require.Equal(t, before, a.events(""))

			a.must(http.StatusOK, http.MethodPost, "/v1/service-requests/"+id+"/status", a.opA, map[string]any{"status": "confirmed"})
			converted := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests/"+id+"/convert", a.opA, nil)
			orderID := converted.Body["id"].(string)
			require.Equal(t, "/v1/orders/"+orderID, converted.Header.Get("Location"))
			require.Equal(t, "pending", converted.Body["status"])
			require.Equal(t, id, converted.Body["request_id"])
			require.Equal(t, customer, converted.Body["customer_id"])
			require.Equal(t, float64(8900), converted.Body["amount_cents"], "the catalog item's base price")
			require.Equal(t, "2030-04-01T07:00:00Z", converted.Body["scheduled_start_at"])
			require.Equal(t, "2030-04-01T09:00:00Z", converted.Body["scheduled_end_at"])
			require.Equal(t, "side door", converted.Body["notes"])
			require.Equal(t, []string{"ServiceRequestCreated", "ServiceRequestDetailsUpdated", "ServiceRequestStatusChanged", "ServiceRequestConverted"},
				types(a.stream(id)))
			require.Equal(t, []string{"OrderCreated"}, types(a.stream(orderID)))
			order := a.awaitOrder(a.opA, orderID, 1)
			require.Equal(t, "Ada Lovelace", order.Body["customer_name"])
			request := a.crmAwaitVersion(a.opA, "/v1/service-requests/"+id, 4)
			require.Equal(t, "converted", request.Body["status"])
			require.Equal(t, orderID, request.Body["order_id"])

			// A converted request is final.
			before = a.events("")
			for _, c := range []struct {
				method, path string
				body         map[string]any
				rule         string
			}{
				{http.MethodPost, "/convert", nil, "service_request.not_confirmed"},
				{http.MethodPatch, "", map[string]any{"notes": "late"}, "service_request.final"},
				{http.MethodPost, "/status", map[string]any{"status": "cancelled"}, "service_request.invalid_transition"},
				{http.MethodPost, "/status", map[string]any{"status": "new"}, "service_request.invalid_transition"},
			} {
				r := a.do(c.method, "/v1/service-requests/"+id+c.path, a.opA, c.body)
				requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/rule-broken")
				require.Equal(t, c.rule, r.Body["rule"], "%s %s: %s", c.method, c.path, r)
			}
			require.Equal(t, before, a.events(""), "refusals append nothing")

			// Cancel: new -> cancelled is final too.
			cancelled := a.must(http.StatusOK, http.MethodPost, "/v1/service-requests/"+manual.Body["id"].(string)+"/status", a.opA,
				map[string]any{"status": "cancelled"})
			require.Equal(t, "cancelled", cancelled.Body["status"])
			r = a.do(http.MethodPost, "/v1/service-requests/"+manual.Body["id"].(string)+"/status", a.opA, map[string]any{"status": "confirmed"})
			require.Equal(t, "service_request.invalid_transition", r.Body["rule"], "%s", r)

			// Lists and their filters.
			a.crmAwaitVersion(a.opA, "/v1/service-requests/"+manual.Body["id"].(string), 2)
			other := a.createCustomer(a.opA, "Grace Hopper")
			third := a.crmRequest(a.opA, other, "")
			a.crmAwaitVersion(a.opA, "/v1/service-requests/"+third, 1)
			for path, want := range map[string][]string{
				"/v1/service-requests":                                                   {third, manual.Body["id"].(string), id},
				"/v1/service-requests?status=converted":                                  {id},
				"/v1/service-requests?status=new&status=cancelled":                       {third, manual.Body["id"].(string)},
				"/v1/service-requests?customer_id=" + other:                              {third},
				"/v1/service-requests?from=2030-04-01T06:00:00Z&to=2030-04-02T00:00:00Z": {id, third},
				"/v1/service-requests?to=2030-04-01T07:00:00Z":                           {},
			} {
				ids, total := a.crmAll(a.opA, path, 2)
				if path == "/v1/service-requests?from=2030-04-01T06:00:00Z&to=2030-04-02T00:00:00Z" {
					require.ElementsMatch(t, want, ids, path) // same start: ordered by id
				} else {
					require.Equal(t, want, append([]string{}, ids...), path)
				}
				require.Equal(t, len(want), total, path)
			}
			list := a.must(http.StatusOK, http.MethodGet, "/v1/service-requests?customer_id="+customer, a.opA, nil)
			for _, it := range list.Body["items"].([]any) {
				require.Equal(t, "Ada Lovelace", it.(map[string]any)["customer_name"])
			}
			for _, bad := range []string{"status=open", "customer_id=7", "from=yesterday", "page_size=500"} {
				requireProblem(t, a.do(http.MethodGet, "/v1/service-requests?"+bad, a.opA, nil), http.StatusBadRequest, "/problems/malformed-request")
			}
			ids, _ := a.crmAll(a.opB, "/v1/service-requests", 50)
			require.Empty(t, ids, "merchant B sees none of A's requests")
			requireProblem(t, a.do(http.MethodGet, "/v1/service-requests", a.worker, nil), http.StatusForbidden, "/problems/forbidden")
		})
	}
}

func types(events []storedEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

// Every invalid input of a service request answers 400 or 422 problem+json
// naming the field or the rule, and appends nothing.
func TestServiceRequestBadInput(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	foreignCustomer := a.createCustomer(a.opB, "Gus")
	foreignItem := a.crmCreate(a.opB, "/v1/catalog-items", map[string]any{"name": "Theirs", "base_price_cents": 1})
	id := a.crmRequest(a.opA, customer, "")
	valid := func(changes map[string]any) map[string]any {
		body := map[string]any{"customer_id": customer, "content": "Clean the windows", "source": "web",
			"appointment_start_at": "2030-04-01T09:00:00Z", "appointment_end_at": "2030-04-01T10:00:00Z"}
		for k, v := range changes {
			if v == nil {
				delete(body, k)
			} else {
				body[k] = v
			}
		}
		return body
	}
	cases := []struct {
		name         string
		method, path string
		body         any
		status       int
		typ          string
		field, rule  string
	}{
		{"content missing", "POST", "", valid(map[string]any{"content": nil}), 422, "validation-failed", "content", ""},
		{"content blank", "POST", "", valid(map[string]any{"content": " \t\n "}), 422, "validation-failed", "content", ""},
		{"content too long", "POST", "", valid(map[string]any{"content": strings.Repeat("é", 2001)}), 422, "validation-failed", "content", ""},
		{"end before start", "POST", "", valid(map[string]any{"appointment_end_at": "2030-04-01T08:59:59Z"}), 422, "validation-failed", "appointment_end_at", ""},
		{"bad source", "POST", "", valid(map[string]any{"source": "email"}), 422, "validation-failed", "source", ""},
		{"customer missing", "POST", "", valid(map[string]any{"customer_id": nil}), 422, "validation-failed", "customer_id", ""},
		{"customer not a uuid", "POST", "", valid(map[string]any{"customer_id": "42"}), 422, "validation-failed", "customer_id", ""},
		{"unknown customer", "POST", "", valid(map[string]any{"customer_id": uuid.New()}), 422, "validation-failed", "customer_id", ""},
		{"another merchant's customer", "POST", "", valid(map[string]any{"customer_id": foreignCustomer}), 422, "validation-failed", "customer_id", ""},
		{"another merchant's catalog item", "POST", "", valid(map[string]any{"catalog_item_id": foreignItem}), 422, "validation-failed", "catalog_item_id", ""},
		{"time without offset", "POST", "", valid(map[string]any{"appointment_start_at": "2030-04-01T09:00:00"}), 400, "malformed-request", "appointment_start_at", ""},
		{"unknown field", "POST", "", valid(map[string]any{"priority": "high"}), 400, "malformed-request", "priority", ""},
		{"wrong type", "POST", "", valid(map[string]any{"content": 12}), 400, "malformed-request", "content", ""},
		{"expected_version on create", "POST", "", valid(map[string]any{"expected_version": 1}), 400, "malformed-request", "expected_version", ""},
		{"malformed JSON", "POST", "", `{"content": `, 400, "malformed-request", "", ""},
		{"update: content too long", "PATCH", "/" + id, map[string]any{"content": strings.Repeat("x", 2001)}, 422, "validation-failed", "content", ""},
		{"update: content blank", "PATCH", "/" + id, map[string]any{"content": "  "}, 422, "validation-failed", "content", ""},
		{"update: end before start", "PATCH", "/" + id, map[string]any{"appointment_end_at": "2030-04-01T06:00:00Z"}, 422, "validation-failed", "appointment_end_at", ""},
		{"update: customer", "PATCH", "/" + id, map[string]any{"customer_id": customer}, 400, "malformed-request", "customer_id", ""},
		{"update: source", "PATCH", "/" + id, map[string]any{"source": "web"}, 400, "malformed-request", "source", ""},
		{"update: foreign catalog item", "PATCH", "/" + id, map[string]any{"catalog_item_id": foreignItem}, 422, "validation-failed", "catalog_item_id", ""},
		{"status: unknown", "POST", "/" + id + "/status", map[string]any{"status": "done"}, 422, "validation-failed", "status", ""},
		{"status: converted", "POST", "/" + id + "/status", map[string]any{"status": "converted"}, 422, "rule-broken", "", "service_request.convert_via_endpoint"},
		{"convert: not confirmed", "POST", "/" + id + "/convert", nil, 422, "rule-broken", "", "service_request.not_confirmed"},
		{"convert: stale version", "POST", "/" + id + "/convert", map[string]any{"expected_version": 7}, 409, "conflict", "", ""},
		{"bad path id", "PATCH", "/nope", map[string]any{"notes": "x"}, 400, "invalid-id", "id", ""},
	}
	for _, c := range cases {
		before := a.events("")
		r := a.do(c.method, "/v1/service-requests"+c.path, a.opA, c.body)
		requireProblem(t, r, c.status, "/problems/"+c.typ)
		if c.field != "" {
			require.Contains(t, problemFields(r), c.field, "%s: %s", c.name, r)
		}
		if c.rule != "" {
			require.Equal(t, c.rule, r.Body["rule"], "%s: %s", c.name, r)
		}
		require.Equal(t, before, a.events(""), "%s appends nothing", c.name)
	}
	// 2,000 characters (not bytes) is the limit.
	a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA, valid(map[string]any{"content": strings.Repeat("é", 2000)}))
	// end == start is allowed for a request.
	a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA, valid(map[string]any{"appointment_end_at": "2030-04-01T09:00:00Z"}))
}

// Assignment, schedules and the order following its schedule, over HTTP.
func TestAssignmentAndSchedules(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	first, second, third := a.createOrder(a.opA, customer, 100), a.createOrder(a.opA, customer, 200), a.createOrder(a.opA, customer, 300)
	window := map[string]any{"staff_id": a.staffA, "start_at": "2030-06-01T10:00:00Z", "end_at": "2030-06-01T12:00:00Z", "dispatch_note": "van 2"}

	assigned := a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+first+"/assignment", a.opA, window)
	require.Equal(t, "dispatching", assigned.Body["status"])
	require.Equal(t, a.staffA, assigned.Body["staff_id"])
	sch := a.crmSchedule(a.opA, first)
	scheduleID := sch.Body["id"].(string)
	require.Equal(t, "planned", sch.Body["status"])
	require.Equal(t, "Wanda Worker", sch.Body["staff_name"])
	require.Equal(t, "2030-06-01T10:00:00Z", sch.Body["start_at"])
	detail := a.must(http.StatusOK, http.MethodGet, "/v1/schedules/"+scheduleID, a.opA, nil)
	require.Equal(t, sch.Body, detail.Body)
	order := a.awaitOrder(a.opA, first, 3)
	require.Equal(t, "Wanda Worker", order.Body["staff_name"])

	// A clash names the schedule; touching windows do not clash.
	before := a.events("")
	clash := a.do(http.MethodPut, "/v1/orders/"+second+"/assignment", a.opA,
		map[string]any{"staff_id": a.staffA, "start_at": "2030-06-01T11:59:00Z", "end_at": "2030-06-01T13:00:00Z"})
	requireProblem(t, clash, http.StatusConflict, "/problems/conflict")
	require.Equal(t, scheduleID, clash.Body["conflicting_schedule_id"], "%s", clash)
	require.Equal(t, before, a.events(""))
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+second+"/assignment", a.opA,
		map[string]any{"staff_id": a.staffA, "start_at": "2030-06-01T12:00:00Z", "end_at": "2030-06-01T13:00:00Z"})

	// Bad assignments: 422 naming the field or rule, nothing appended.
	inactive := a.crmCreate(a.opA, "/v1/staff", map[string]any{"name": "On Leave", "active": false})
	for _, c := range []struct {
		body        map[string]any
		field, rule string
	}{
		{map[string]any{"staff_id": a.staffA, "start_at": "2030-06-02T10:00:00Z", "end_at": "2030-06-02T10:00:00Z"}, "end_at", ""},
		{map[string]any{"staff_id": a.staffA, "start_at": "2030-06-02T10:00:00Z"}, "end_at", ""},
		{map[string]any{"start_at": "2030-06-02T10:00:00Z", "end_at": "2030-06-02T11:00:00Z"}, "staff_id", ""},
		{map[string]any{"staff_id": a.staffB, "start_at": "2030-06-02T10:00:00Z", "end_at": "2030-06-02T11:00:00Z"}, "staff_id", ""},
		{map[string]any{"staff_id": inactive, "start_at": "2030-06-02T10:00:00Z", "end_at": "2030-06-02T11:00:00Z"}, "", "order.staff_inactive"},
	} {
		before := a.events("")
		r := a.do(http.MethodPut, "/v1/orders/"+third+"/assignment", a.opA, c.body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%v: %s", c.body, r)
		if c.field != "" {
			require.Contains(t, problemFields(r), c.field, "%s", r)
		} else {
			require.Equal(t, c.rule, r.Body["rule"], "%s", r)
		}
		require.Equal(t, before, a.events(""))
	}

	// Status drives the order: in_service, then done completes it.
	moved := a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+scheduleID+"/status", a.opA, map[string]any{"status": "in_service"})
	require.Equal(t, "in_service", moved.Body["status"])
	require.NotEmpty(t, moved.Body["position"])
	require.Equal(t, "in_service", a.awaitOrder(a.opA, first, 4).Body["status"])
	r := a.do(http.MethodPost, "/v1/schedules/"+scheduleID+"/status", a.opA, map[string]any{"status": "planned"})
	requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/rule-broken")
	require.Equal(t, "schedule.invalid_transition", r.Body["rule"])
	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+scheduleID+"/status", a.opA, map[string]any{"status": "done"})
	done := a.awaitOrder(a.opA, first, 5)
	require.Equal(t, "completed", done.Body["status"])
	require.NotNil(t, done.Body["completed_at"])

	// Cancelled: the order loses its staff member and returns to confirmed.
	secondSchedule := a.crmSchedule(a.opA, second).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+secondSchedule+"/status", a.opA, map[string]any{"status": "cancelled"})
	back := a.awaitOrder(a.opA, second, 5)
	require.Equal(t, "confirmed", back.Body["status"])
	require.Nil(t, back.Body["staff_id"])
	require.NotContains(t, back.Body, "staff_name")

	// Schedule lists: filters by status, staff and window.
	a.crmAwaitVersion(a.opA, "/v1/schedules/"+secondSchedule, 2)
	for path, want := range map[string][]string{
		"/v1/schedules?status=done":                                       {scheduleID},
		"/v1/schedules?status=cancelled&status=planned":                   {secondSchedule},
		"/v1/schedules?staff_id=" + a.staffA:                              {secondSchedule, scheduleID},
		"/v1/schedules?from=2030-06-01T11:00:00Z&to=2030-06-02T00:00:00Z": {secondSchedule},
		"/v1/schedules?from=2030-06-01T00:00:00Z":                         {scheduleID, secondSchedule},
	} {
		ids, total := a.crmAll(a.opA, path, 1)
		require.Equal(t, want, ids, path)
		require.Equal(t, len(want), total, path)
	}
	for _, bad := range []string{"status=open", "staff_id=x", "to=tomorrow"} {
		requireProblem(t, a.do(http.MethodGet, "/v1/schedules?"+bad, a.opA, nil), http.StatusBadRequest, "/problems/malformed-request")
	}
	ids, _ := a.crmAll(a.opB, "/v1/schedules", 50)
	require.Empty(t, ids)
	requireProblem(t, a.do(http.MethodPost, "/v1/schedules/"+scheduleID+"/status", a.opA, map[string]any{"status": "paused"}),
		http.StatusUnprocessableEntity, "/problems/validation-failed")
	requireProblem(t, a.do(http.MethodGet, "/v1/schedules", a.admin, nil), http.StatusForbidden, "/problems/forbidden")
}

// A worker key sees only its staff member's schedules and their orders, and
// may only move its own schedules to in_service or done.
func TestWorkerConfinement(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	colleague := a.crmCreate(a.opA, "/v1/staff", map[string]any{"name": "Colin Colleague"})
	own, others := a.createOrder(a.opA, customer, 100), a.createOrder(a.opA, customer, 200)
	unassigned := a.createOrder(a.opA, customer, 300)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+own+"/assignment", a.opA,
		map[string]any{"staff_id": a.staffA, "start_at": "2030-06-01T10:00:00Z", "end_at": "2030-06-01T12:00:00Z"})
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+others+"/assignment", a.opA,
		map[string]any{"staff_id": colleague, "start_at": "2030-06-01T10:00:00Z", "end_at": "2030-06-01T12:00:00Z"})
	ownSchedule := a.crmSchedule(a.opA, own).Body["id"].(string)
	otherSchedule := a.crmSchedule(a.opA, others).Body["id"].(string)
	a.awaitOrder(a.opA, others, 3)
	a.awaitOrder(a.opA, unassigned, 1)

	ids, total := a.crmAll(a.worker, "/v1/schedules", 20)
	require.Equal(t, []string{ownSchedule}, ids)
	require.Equal(t, 1, total)
	ids, _ = a.crmAll(a.worker, "/v1/schedules?staff_id="+colleague, 20)
	require.Empty(t, ids, "a filter cannot widen the worker's scope")
	ids, _ = a.crmAll(a.worker, "/v1/orders", 20)
	require.Equal(t, []string{own}, ids)
	a.must(http.StatusOK, http.MethodGet, "/v1/schedules/"+ownSchedule, a.worker, nil)
	a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+own, a.worker, nil)
	a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+own+"/changes", a.worker, nil)
	for _, path := range []string{"/v1/schedules/" + otherSchedule, "/v1/orders/" + others, "/v1/orders/" + unassigned, "/v1/orders/" + others + "/changes"} {
		requireProblem(t, a.do(http.MethodGet, path, a.worker, nil), http.StatusNotFound, "/problems/not-found")
	}

	before := a.events("")
	requireProblem(t, a.do(http.MethodPost, "/v1/schedules/"+otherSchedule+"/status", a.worker, map[string]any{"status": "in_service"}),
		http.StatusNotFound, "/problems/not-found")
	for _, st := range []string{"cancelled", "planned"} {
		requireProblem(t, a.do(http.MethodPost, "/v1/schedules/"+ownSchedule+"/status", a.worker, map[string]any{"status": st}),
			http.StatusForbidden, "/problems/forbidden")
	}
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/orders"}, {"PATCH", "/v1/orders/" + own}, {"POST", "/v1/orders/" + own + "/status"},
		{"POST", "/v1/orders/" + own + "/cancel"}, {"PUT", "/v1/orders/" + own + "/assignment"}, {"PUT", "/v1/orders/" + own + "/settlement"},
		{"POST", "/v1/service-requests"}, {"GET", "/v1/service-requests"}, {"GET", "/v1/customers"}, {"POST", "/v1/staff"},
	} {
		requireProblem(t, a.do(c.method, c.path, a.worker, map[string]any{}), http.StatusForbidden, "/problems/forbidden")
	}
	require.Equal(t, before, a.events(""), "refused worker commands append nothing")

	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+ownSchedule+"/status", a.worker, map[string]any{"status": "in_service"})
	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+ownSchedule+"/status", a.worker, map[string]any{"status": "done"})
	order := a.awaitOrder(a.worker, own, 5)
	require.Equal(t, "completed", order.Body["status"])
	changes := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+own+"/changes", a.worker, nil)
	items := changes.Body["items"].([]any)
	require.Len(t, items, 5)
	require.Equal(t, "OrderStatusChanged", items[4].(map[string]any)["action"])
	require.True(t, strings.HasPrefix(items[4].(map[string]any)["actor"].(string), "key:"))
}

// Every route with an id answers 404 to another merchant's id, exactly as
// to a missing one, and changes nothing.
func TestForeignIDsAreNotFound(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	item := a.crmCreate(a.opA, "/v1/catalog-items", map[string]any{"name": "Plumbing", "base_price_cents": 100})
	request := a.crmRequest(a.opA, customer, item)
	order := a.createOrder(a.opA, customer, 100)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA,
		map[string]any{"staff_id": a.staffA, "start_at": "2030-06-01T10:00:00Z", "end_at": "2030-06-01T12:00:00Z"})
	schedule := a.crmSchedule(a.opA, order).Body["id"].(string)
	a.crmAwaitVersion(a.opA, "/v1/service-requests/"+request, 1)
	a.awaitOrder(a.opA, order, 3)
	customerB := a.createCustomer(a.opB, "Gus")
	window := map[string]any{"staff_id": a.staffB, "start_at": "2030-07-01T10:00:00Z", "end_at": "2030-07-01T11:00:00Z"}

	routes := []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/customers/" + customer, nil},
		{"PATCH", "/v1/customers/" + customer, map[string]any{"name": "x"}},
		{"GET", "/v1/staff/" + a.staffA, nil},
		{"PATCH", "/v1/staff/" + a.staffA, map[string]any{"active": false}},
		{"GET", "/v1/catalog-items/" + item, nil},
		{"PATCH", "/v1/catalog-items/" + item, map[string]any{"base_price_cents": 1}},
		{"GET", "/v1/service-requests/" + request, nil},
		{"PATCH", "/v1/service-requests/" + request, map[string]any{"notes": "x"}},
		{"POST", "/v1/service-requests/" + request + "/status", map[string]any{"status": "confirmed"}},
		{"POST", "/v1/service-requests/" + request + "/convert", nil},
		{"GET", "/v1/orders/" + order, nil},
		{"GET", "/v1/orders/" + order + "/changes", nil},
		{"PATCH", "/v1/orders/" + order, map[string]any{"notes": "x", "customer_id": customerB}},
		{"POST", "/v1/orders/" + order + "/status", map[string]any{"status": "in_service"}},
		{"POST", "/v1/orders/" + order + "/cancel", map[string]any{"reason": "mine now"}},
		{"PUT", "/v1/orders/" + order + "/assignment", window},
		{"PUT", "/v1/orders/" + order + "/settlement", map[string]any{"settlement_status": "settled", "paid_amount_cents": 1}},
		{"GET", "/v1/schedules/" + schedule, nil},
		{"POST", "/v1/schedules/" + schedule + "/status", map[string]any{"status": "cancelled"}},
	}
	require.Len(t, routes, 19, "every route with an id (ports/http/server.go)")

	before := a.events("")
	var bookings int
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM bookings WHERE live`).Scan(&bookings))
	for _, rt := range routes {
		foreign := a.do(rt.method, rt.path, a.opB, rt.body)
		requireProblem(t, foreign, http.StatusNotFound, "/problems/not-found")
		missingPath := rt.path
		for _, id := range []string{customer, a.staffA, item, request, order, schedule} {
			missingPath = strings.Replace(missingPath, id, uuid.New(), 1)
		}
		missing := a.do(rt.method, missingPath, a.opB, rt.body)
		requireProblem(t, missing, http.StatusNotFound, "/problems/not-found")
		require.Equal(t, missing.Body["detail"], foreign.Body["detail"], "%s %s: a foreign id reads like a missing one", rt.method, rt.path)
	}
	require.Equal(t, before, a.events(""), "nothing appended")
	var after int
	require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM bookings WHERE live`).Scan(&after))
	require.Equal(t, bookings, after)
	// Merchant A's data is untouched.
	require.Equal(t, "Ada Lovelace", a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+customer, a.opA, nil).Body["name"])
	require.Equal(t, true, a.must(http.StatusOK, http.MethodGet, "/v1/staff/"+a.staffA, a.opA, nil).Body["active"])
	require.Equal(t, float64(100), a.must(http.StatusOK, http.MethodGet, "/v1/catalog-items/"+item, a.opA, nil).Body["base_price_cents"])
	require.Equal(t, "dispatching", a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+order, a.opA, nil).Body["status"])
}

// Lists over a generated data set of several merchants: paging returns every
// matching row exactly once in the documented order, total is the SQL
// count, each filter returns exactly the rows SQL says, and names come from
// the same merchant only. Split layout: the names live in another database
// than the orders.
func TestListOrdersGenerated(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewSplitDBs(t))
	ctx := t.Context()
	merchantC := uuid.New()
	_, err := a.dbs.es.DB.ExecContext(ctx, `INSERT INTO merchants (id, name) VALUES ($1, $2)`, merchantC, "initech")
	require.NoError(t, err)

	type merchant struct {
		id        string
		orders    int
		customers []string
		staff     []string
	}
	newCustomers := func(merchantID string, n int) []string {
		var ids []string
		for i := range n {
			id := uuid.New()
			_, err := a.dbs.es.DB.ExecContext(ctx, `INSERT INTO customers (id, merchant_id, name) VALUES ($1, $2, $3)`,
				id, merchantID, fmt.Sprintf("Customer %d of %s", i, merchantID[:8]))
			require.NoError(t, err)
			ids = append(ids, id)
		}
		return ids
	}
	newStaff := func(merchantID string, n int) []string {
		var ids []string
		for i := range n {
			id, err := a.w.refdata.CreateStaff(ctx, merchantID, fmt.Sprintf("Staff %d of %s", i, merchantID[:8]))
			require.NoError(t, err)
			ids = append(ids, id)
		}
		return ids
	}
	merchants := []merchant{
		{id: a.merchantA, orders: 3000, customers: newCustomers(a.merchantA, 20), staff: append([]string{a.staffA}, newStaff(a.merchantA, 4)...)},
		{id: a.merchantB, orders: 1500, customers: newCustomers(a.merchantB, 10), staff: append([]string{a.staffB}, newStaff(a.merchantB, 2)...)},
		{id: merchantC, orders: 500, customers: newCustomers(merchantC, 5), staff: newStaff(merchantC, 2)},
	}
	// Merchant A's order list also references a customer of merchant B (as a
	// corrupt or hostile row might): its name must not show.
	planted := merchants[1].customers[0]
	merchants[0].customers = append(merchants[0].customers, planted)
	for _, m := range merchants {
		_, err := a.dbs.rm.DB.ExecContext(ctx, `
			INSERT INTO orders (id, merchant_id, customer_id, amount_cents, status, scheduled_start_at, scheduled_end_at,
				staff_id, settlement_status, created_at, updated_at, version)
			SELECT gen_random_uuid(), $1::uuid,
				($2::uuid[])[1 + i % cardinality($2::uuid[])], i,
				(ARRAY['pending','confirmed','dispatching','in_service','completed','cancelled'])[1 + (i / 7) % 6],
				CASE WHEN i % 11 = 0 THEN NULL ELSE timestamptz '2030-01-01' + (i % 97) * interval '1 day' + (i % 5) * interval '1 hour' END,
				CASE WHEN i % 11 = 0 THEN NULL ELSE timestamptz '2030-01-01' + (i % 97) * interval '1 day' + (i % 5 + 1) * interval '1 hour' END,
				CASE WHEN i % 4 = 0 THEN NULL ELSE ($3::uuid[])[1 + i % cardinality($3::uuid[])] END,
				CASE WHEN i % 3 = 0 THEN 'settled' ELSE 'unsettled' END,
				timestamptz '2029-01-01' + (i / 3) * interval '1 minute', timestamptz '2029-01-01' + (i / 3) * interval '1 minute', 1
			FROM generate_series(1, $4::int) AS i`,
			m.id, "{"+strings.Join(m.customers, ",")+"}", "{"+strings.Join(m.staff, ",")+"}", m.orders)
		require.NoError(t, err)
	}
	sqlIDs := func(merchantID, where, order string, args ...any) []string {
		return column[string](t, a.dbs.rm.DB, `SELECT id FROM orders WHERE merchant_id = $1 AND (`+where+`) ORDER BY `+order,
			append([]any{merchantID}, args...)...)
	}
	const newest = "created_at DESC, id DESC"
	const byStart = "scheduled_start_at ASC, id ASC"
	A := merchants[0]
	from, to := "2030-02-01T00:00:00Z", "2030-03-01T00:00:00Z"

	// One filter combination, paged through with page_size 50.
	combo := "/v1/orders?status=pending&status=dispatching&settlement_status=unsettled&staff_id=" + A.staff[1]
	ids, total := a.crmAll(a.opA, combo, 50)
	want := sqlIDs(A.id, `status IN ('pending','dispatching') AND settlement_status = 'unsettled' AND staff_id = $2`, newest, A.staff[1])
	require.NotEmpty(t, want)
	require.Equal(t, want, ids, combo)
	require.Equal(t, len(want), total)

	// Every page of the whole list, page_size 50: 60 pages.
	ids, total = a.crmAll(a.opA, "/v1/orders", 50)
	require.Equal(t, A.orders, total)
	require.Equal(t, sqlIDs(A.id, "true", newest), ids)

	// Each filter alone, and some together.
	for _, c := range []struct {
		query, where, order string
		args                []any
	}{
		{"status=completed", "status = 'completed'", newest, nil},
		{"status=pending&status=cancelled&status=in_service", "status IN ('pending','cancelled','in_service')", newest, nil},
		{"settlement_status=settled", "settlement_status = 'settled'", newest, nil},
		{"settlement_status=unsettled", "settlement_status = 'unsettled'", newest, nil},
		{"customer_id=" + A.customers[3], "customer_id = $2", newest, []any{A.customers[3]}},
		{"staff_id=" + a.staffA, "staff_id = $2", newest, []any{a.staffA}},
		{"from=" + from, "scheduled_start_at >= $2", byStart, []any{from}},
		{"to=" + to, "scheduled_start_at < $2", byStart, []any{to}},
		{"from=" + from + "&to=" + to, "scheduled_start_at >= $2 AND scheduled_start_at < $3", byStart, []any{from, to}},
		{"from=" + url.QueryEscape("2030-02-01T02:00:00+02:00") + "&to=" + url.QueryEscape("2030-02-03T00:00:00+02:00"),
			"scheduled_start_at >= $2 AND scheduled_start_at < $3", byStart, []any{"2030-02-01T00:00:00Z", "2030-02-02T22:00:00Z"}},
		{"status=confirmed&customer_id=" + A.customers[5] + "&from=" + from, "status = 'confirmed' AND customer_id = $2 AND scheduled_start_at >= $3",
			byStart, []any{A.customers[5], from}},
		{"customer_id=" + planted, "customer_id = $2", newest, []any{planted}},
		{"customer_id=" + merchants[2].customers[0], "customer_id = $2", newest, []any{merchants[2].customers[0]}},
	} {
		want := sqlIDs(A.id, c.where, c.order, c.args...)
		ids, total := a.crmAll(a.opA, "/v1/orders?"+c.query, 200)
		require.Equal(t, want, ids, c.query)
		require.Equal(t, len(want), total, c.query)
	}

	// The worker key: only its staff member's orders, whatever the filter.
	want = sqlIDs(A.id, "staff_id = $2", newest, a.staffA)
	ids, _ = a.crmAll(a.worker, "/v1/orders", 200)
	require.Equal(t, want, ids)
	ids, _ = a.crmAll(a.worker, "/v1/orders?staff_id="+A.staff[2], 200)
	require.Empty(t, ids)

	// Merchant B and C see exactly their own.
	ids, total = a.crmAll(a.opB, "/v1/orders?status=completed", 200)
	require.Equal(t, sqlIDs(a.merchantB, "status = 'completed'", newest), ids)
	require.Equal(t, len(ids), total)

	// Names: joined from the same merchant only.
	names := map[string]string{}
	rows, err := a.dbs.es.DB.QueryContext(ctx, `SELECT id, name FROM customers WHERE merchant_id = $1 UNION ALL SELECT id, name FROM staff WHERE merchant_id = $1`, A.id)
	require.NoError(t, err)
	for rows.Next() {
		var id, name string
		require.NoError(t, rows.Scan(&id, &name))
		names[id] = name
	}
	require.NoError(t, rows.Err())
	rows.Close()
	require.NotContains(t, names, planted)
	seenPlanted := false
	for page := 1; page <= 3; page++ {
		r := a.must(http.StatusOK, http.MethodGet, fmt.Sprintf("/v1/orders?page=%d&page_size=200", page), a.opA, nil)
		for _, it := range r.Body["items"].([]any) {
			o := it.(map[string]any)
			customer := o["customer_id"].(string)
			if customer == planted {
				seenPlanted = true
				require.NotContains(t, o, "customer_name", "another merchant's customer name never shows: %v", o)
			} else {
				require.Equal(t, names[customer], o["customer_name"], "%v", o)
			}
			if staff, ok := o["staff_id"].(string); ok {
				require.Equal(t, names[staff], o["staff_name"], "%v", o)
			} else {
				require.NotContains(t, o, "staff_name")
			}
		}
	}
	require.True(t, seenPlanted, "the planted order is on the first pages")
	planted1 := sqlIDs(A.id, "customer_id = $2", newest, planted)[0]
	detail := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+planted1, a.opA, nil)
	require.NotContains(t, detail.Body, "customer_name")

	// Out-of-range pages are empty but keep the total.
	r := a.must(http.StatusOK, http.MethodGet, "/v1/orders?page=50&page_size=200", a.opA, nil)
	require.Empty(t, r.Body["items"])
	require.Equal(t, A.orders, intOf(r.Body["total"]))
	for _, bad := range []string{"status=lost", "settlement_status=paid", "customer_id=1", "staff_id=x", "from=2030-01-01", "to=now", "page=0", "page_size=201", "page=51&page_size=200"} {
		requireProblem(t, a.do(http.MethodGet, "/v1/orders?"+bad, a.opA, nil), http.StatusBadRequest, "/problems/malformed-request")
	}
}
