package main

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/client"
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

// The service request's walk-through, through Hearth's generated Go client:
// create, read, update, refusals, confirm, convert into an order, lists and
// their filters.
func TestServiceRequestLifecycle(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := setup(t, newDB(t))
			ctx, op := t.Context(), as(a.opA)
			customer := a.createCustomer(a.opA, "Ada Lovelace")
			itemR, err := a.hearth().CreateCatalogItemWithResponse(ctx, nil,
				client.CatalogItemInput{Name: new("Plumbing"), BasePriceCents: new(8900)}, op)
			item := expect(t, http.StatusCreated, itemR, err).JSON201.Id.String()

			createR, err := a.hearth().CreateServiceRequestWithResponse(ctx, nil, client.ServiceRequestCreate{
				CustomerId: uid(t, customer), CatalogItemId: new(uid(t, item)), Content: "  Fix the leaking sink  ",
				Source:             new(client.ServiceRequestCreateSourcePhone),
				AppointmentStartAt: new(instant(t, "2030-04-01T09:00:00+02:00")), AppointmentEndAt: new(instant(t, "2030-04-01T11:00:00+02:00")),
				Notes: new("side door")}, op)
			created := expect(t, http.StatusCreated, createR, err).JSON201
			id := created.Id.String()
			require.Equal(t, "/v1/service-requests/"+id, *createR.Headers201.Location)
			require.Equal(t, client.ServiceRequestWrittenStatusNew, created.Status)
			require.Equal(t, "Fix the leaking sink", *created.Content, "content is trimmed")
			require.Equal(t, "2030-04-01T07:00:00Z", rawField(t, createR.Body, "appointment_start_at"), "UTC")
			require.Equal(t, 1, created.Version)
			require.NotEmpty(t, created.Position)
			require.Equal(t, strconv.FormatInt(created.Position, 10), *createR.Headers201.ConsistencyPosition)
			got := a.awaitRequestAt(a.opA, id, 1)
			requireShows(t, fieldsMap(t, created), fieldsMap(t, got))
			require.Equal(t, "Ada Lovelace", *got.CustomerName)
			require.Equal(t, "Plumbing", *got.CatalogItemName)

			// A request without a source is manual.
			manualR, err := a.hearth().CreateServiceRequestWithResponse(ctx, nil,
				client.ServiceRequestCreate{CustomerId: uid(t, customer), Content: "Paint the fence"}, op)
			manual := expect(t, http.StatusCreated, manualR, err).JSON201
			require.Equal(t, client.ServiceRequestWrittenSourceManual, manual.Source)
			require.Nil(t, manual.CatalogItemId)
			require.Nil(t, rawField(t, manualR.Body, "catalog_item_id"), "answered as null")

			updateR, err := a.hearth().UpdateServiceRequestWithResponse(ctx, uid(t, id), nil,
				client.ServiceRequestUpdate{Content: new("Fix the sink and the tap"), ExpectedVersion: new(1)}, op)
			updated := expect(t, http.StatusOK, updateR, err).JSON200
			require.Equal(t, 2, updated.Version)
			require.Equal(t, "side door", *updated.Notes, "absent fields keep their value")
			noopR, err := a.hearth().UpdateServiceRequestWithResponse(ctx, uid(t, id), nil,
				client.ServiceRequestUpdate{Content: new("Fix the sink and the tap ")}, op)
			require.Equal(t, 2, expect(t, http.StatusOK, noopR, err).JSON200.Version, "a change to nothing appends nothing")
			staleR, err := a.hearth().UpdateServiceRequestWithResponse(ctx, uid(t, id), nil,
				client.ServiceRequestUpdate{Notes: new("x"), ExpectedVersion: new(1)}, op)
			problemOf(t, http.StatusConflict, "/problems/conflict", staleR, err)

			// Converting a request that is not confirmed breaks a rule.
			before := a.events("")
			convertR, err := a.hearth().ConvertServiceRequestWithResponse(ctx, uid(t, id), nil, client.ConvertInput{}, op)
			requireRule(t, "service_request.not_confirmed", convertR, err)
			require.Equal(t, before, a.events(""))

			statusR, err := a.hearth().ChangeServiceRequestStatusWithResponse(ctx, uid(t, id), nil,
				client.ServiceRequestStatusInput{Status: client.ServiceRequestStatusInputStatusConfirmed}, op)
			expect(t, http.StatusOK, statusR, err)
			convertR, err = a.hearth().ConvertServiceRequestWithResponse(ctx, uid(t, id), nil, client.ConvertInput{}, op)
			converted := expect(t, http.StatusCreated, convertR, err).JSON201
			orderID := converted.Id.String()
			require.Equal(t, "/v1/orders/"+orderID, *convertR.Headers201.Location)
			require.Equal(t, client.OrderWrittenStatusPending, converted.Status)
			require.Equal(t, id, converted.RequestId.String())
			require.Equal(t, customer, converted.CustomerId.String())
			require.Equal(t, 8900, converted.AmountCents, "the catalog item's base price")
			require.Equal(t, "2030-04-01T07:00:00Z", rawField(t, convertR.Body, "scheduled_start_at"))
			require.Equal(t, "2030-04-01T09:00:00Z", rawField(t, convertR.Body, "scheduled_end_at"))
			require.Equal(t, "side door", *converted.Notes)
			require.Equal(t, []string{"ServiceRequestCreated", "ServiceRequestDetailsUpdated", "ServiceRequestStatusChanged", "ServiceRequestConverted"},
				types(a.stream(id)))
			require.Equal(t, []string{"OrderCreated"}, types(a.stream(orderID)))
			order := a.awaitOrderAt(a.opA, orderID, 1)
			require.Equal(t, "Ada Lovelace", *order.CustomerName)
			request := a.awaitRequestAt(a.opA, id, 4)
			require.Equal(t, client.ServiceRequestStatusConverted, request.Status)
			require.Equal(t, orderID, request.OrderId.String())

			// A converted request is final.
			before = a.events("")
			convertR, err = a.hearth().ConvertServiceRequestWithResponse(ctx, uid(t, id), nil, client.ConvertInput{}, op)
			requireRule(t, "service_request.not_confirmed", convertR, err)
			updateR, err = a.hearth().UpdateServiceRequestWithResponse(ctx, uid(t, id), nil, client.ServiceRequestUpdate{Notes: new("late")}, op)
			requireRule(t, "service_request.final", updateR, err)
			for _, status := range []client.ServiceRequestStatusInputStatus{client.ServiceRequestStatusInputStatusCancelled, "new"} {
				statusR, err = a.hearth().ChangeServiceRequestStatusWithResponse(ctx, uid(t, id), nil, client.ServiceRequestStatusInput{Status: status}, op)
				requireRule(t, "service_request.invalid_transition", statusR, err)
			}
			require.Equal(t, before, a.events(""), "refusals append nothing")

			// Cancel: new -> cancelled is final too.
			statusR, err = a.hearth().ChangeServiceRequestStatusWithResponse(ctx, manual.Id, nil,
				client.ServiceRequestStatusInput{Status: client.ServiceRequestStatusInputStatusCancelled}, op)
			require.Equal(t, client.ServiceRequestWrittenStatusCancelled, expect(t, http.StatusOK, statusR, err).JSON200.Status)
			statusR, err = a.hearth().ChangeServiceRequestStatusWithResponse(ctx, manual.Id, nil,
				client.ServiceRequestStatusInput{Status: client.ServiceRequestStatusInputStatusConfirmed}, op)
			requireRule(t, "service_request.invalid_transition", statusR, err)

			// Lists and their filters.
			a.awaitRequestAt(a.opA, manual.Id.String(), 2)
			other := a.createCustomer(a.opA, "Grace Hopper")
			third := a.crmRequest(a.opA, other, "")
			a.awaitRequestAt(a.opA, third, 1)
			list := func(key string, params client.ListServiceRequestsParams, pageSize int) ([]string, int) {
				t.Helper()
				return listed(t, pageSize, func(page, pageSize int) (*client.ListServiceRequestsResponse, error) {
					params.Page, params.PageSize = &page, &pageSize
					return a.hearth().ListServiceRequestsWithResponse(ctx, &params, as(key))
				}, func(r *client.ListServiceRequestsResponse) (ids []string, total int) {
					require.Equal(t, params.Page, r.JSON200.Page, "a numbered page says its number")
					require.Equal(t, pageSize, r.JSON200.PageSize)
					for _, it := range r.JSON200.Items {
						ids = append(ids, it.Id.String())
					}
					return ids, r.JSON200.Total
				})
			}
			manualID := manual.Id.String()
			for _, c := range []struct {
				name   string
				params client.ListServiceRequestsParams
				want   []string
			}{
				{"all", client.ListServiceRequestsParams{}, []string{third, manualID, id}},
				{"converted", client.ListServiceRequestsParams{Status: &client.RequestStatuses{"converted"}}, []string{id}},
				{"new or cancelled", client.ListServiceRequestsParams{Status: &client.RequestStatuses{"new", "cancelled"}}, []string{third, manualID}},
				{"customer", client.ListServiceRequestsParams{CustomerId: new(uid(t, other))}, []string{third}},
				{"window", client.ListServiceRequestsParams{From: new(instant(t, "2030-04-01T06:00:00Z")), To: new(instant(t, "2030-04-02T00:00:00Z"))},
					[]string{id, third}},
				{"before", client.ListServiceRequestsParams{To: new(instant(t, "2030-04-01T07:00:00Z"))}, nil},
			} {
				ids, total := list(a.opA, c.params, 2)
				if c.name == "window" {
					require.ElementsMatch(t, c.want, ids, c.name) // same start: ordered by id
				} else {
					require.Equal(t, c.want, ids, c.name)
				}
				require.Equal(t, len(c.want), total, c.name)
			}
			byCustomer, err := a.hearth().ListServiceRequestsWithResponse(ctx, &client.ListServiceRequestsParams{CustomerId: new(uid(t, customer))}, op)
			for _, it := range expect(t, http.StatusOK, byCustomer, err).JSON200.Items {
				require.Equal(t, "Ada Lovelace", *it.CustomerName)
			}
			// What a typed client cannot send, the server refuses too.
			for _, bad := range []string{"status=open", "customer_id=7", "from=yesterday", "page_size=500"} {
				requireProblem(t, a.do(http.MethodGet, "/v1/service-requests?"+bad, a.opA, nil), http.StatusBadRequest, "/problems/malformed-request")
			}
			ids, _ := list(a.opB, client.ListServiceRequestsParams{}, 50)
			require.Empty(t, ids, "merchant B sees none of A's requests")
			forbidden, err := a.hearth().ListServiceRequestsWithResponse(ctx, nil, as(a.worker))
			problemOf(t, http.StatusForbidden, "/problems/forbidden", forbidden, err)
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
// A request's appointment is optional, answered null when there is none,
// and a PATCH that sends null takes it off (a booking to be arranged
// again): before, null was read as "keep", and the request answered 200
// with the appointment still there. An end taken off alone leaves the
// start; an absent field still keeps its value.
func TestServiceRequestAppointmentTakenOffWithNull(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	c := a.createCustomer(a.opA, "Ada")
	id := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA, map[string]any{"customer_id": c, "content": "boiler",
		"appointment_start_at": "2031-01-01T10:00:00Z", "appointment_end_at": "2031-01-01T11:00:00Z"}).Body["id"].(string)
	path := "/v1/service-requests/" + id

	end := a.must(http.StatusOK, http.MethodPatch, path, a.opA, map[string]any{"appointment_end_at": nil})
	require.Nil(t, end.Body["appointment_end_at"], "null takes the end off: %s", end)
	require.Equal(t, "2031-01-01T10:00:00Z", end.Body["appointment_start_at"], "%s", end)
	both := a.must(http.StatusOK, http.MethodPatch, path, a.opA, map[string]any{"appointment_start_at": nil, "notes": "call back"})
	require.Nil(t, both.Body["appointment_start_at"], "%s", both)
	require.Equal(t, 3, intOf(both.Body["version"]), "%s", both)
	got := a.must(http.StatusOK, http.MethodGet, path+"?min_position="+positionOf(both.Body), a.opA, nil)
	require.Nil(t, got.Body["appointment_start_at"], "%s", got)
	require.Nil(t, got.Body["appointment_end_at"], "%s", got)
	again := a.must(http.StatusOK, http.MethodPatch, path, a.opA, map[string]any{"appointment_start_at": nil, "appointment_end_at": nil})
	require.Equal(t, 3, intOf(again.Body["version"]), "no appointment taken off again changes nothing: %s", again)
}

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

// Assignment, schedules and the order following its schedule, through
// Hearth's generated Go client.
func TestAssignmentAndSchedules(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx, op := t.Context(), as(a.opA)
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	first, second, third := a.createOrder(a.opA, customer, 100), a.createOrder(a.opA, customer, 200), a.createOrder(a.opA, customer, 300)
	assign := func(order string, in client.AssignmentInput) (*client.AssignOrderResponse, error) {
		return a.hearth().AssignOrderWithResponse(ctx, uid(t, order), nil, in, op)
	}
	window := func(staff, start, end string) client.AssignmentInput {
		return client.AssignmentInput{StaffId: uid(t, staff), StartAt: instant(t, start), EndAt: instant(t, end)}
	}

	in := window(a.staffA, "2030-06-01T10:00:00Z", "2030-06-01T12:00:00Z")
	in.DispatchNote = new("van 2")
	assignR, err := assign(first, in)
	assigned := expect(t, http.StatusOK, assignR, err).JSON200
	require.Equal(t, client.OrderWrittenStatusDispatching, assigned.Status)
	require.Equal(t, a.staffA, assigned.StaffId.String())
	sch := a.liveSchedule(a.opA, first)
	scheduleID := sch.Id.String()
	require.Equal(t, client.ScheduleStatusPlanned, sch.Status)
	require.Equal(t, "Wanda Worker", *sch.StaffName)
	require.Equal(t, instant(t, "2030-06-01T10:00:00Z"), sch.StartAt)
	detailR, err := a.hearth().GetScheduleWithResponse(ctx, sch.Id, nil, op)
	require.Equal(t, sch, *expect(t, http.StatusOK, detailR, err).JSON200)
	order := a.awaitOrderAt(a.opA, first, 3)
	require.Equal(t, "Wanda Worker", *order.StaffName)

	// A clash names the schedule; touching windows do not clash.
	before := a.events("")
	assignR, err = assign(second, window(a.staffA, "2030-06-01T11:59:00Z", "2030-06-01T13:00:00Z"))
	clash := problemOf(t, http.StatusConflict, "/problems/conflict", assignR, err)
	require.Equal(t, sch.Id, *clash.ConflictingScheduleId)
	require.Equal(t, before, a.events(""))
	assignR, err = assign(second, window(a.staffA, "2030-06-01T12:00:00Z", "2030-06-01T13:00:00Z"))
	expect(t, http.StatusOK, assignR, err)

	// Bad assignments: 422 naming the field or rule, nothing appended.
	inactiveR, err := a.hearth().CreateStaffMemberWithResponse(ctx, nil, client.StaffInput{Name: new("On Leave"), Active: new(false)}, op)
	inactive := expect(t, http.StatusCreated, inactiveR, err).JSON201.Id.String()
	for _, c := range []struct {
		in          client.AssignmentInput
		field, rule string
	}{
		{window(a.staffA, "2030-06-02T10:00:00Z", "2030-06-02T10:00:00Z"), "end_at", ""},
		{window(a.staffB, "2030-06-02T10:00:00Z", "2030-06-02T11:00:00Z"), "staff_id", ""},
		{window(inactive, "2030-06-02T10:00:00Z", "2030-06-02T11:00:00Z"), "", "order.staff_inactive"},
	} {
		before := a.events("")
		r, err := assign(third, c.in)
		p := expect(t, http.StatusUnprocessableEntity, r, err).ApplicationproblemJSON422
		if c.field != "" {
			require.Contains(t, fieldsOf(p), c.field, "%s", r.Body)
		} else {
			require.Equal(t, c.rule, *p.Rule, "%s", r.Body)
		}
		require.Equal(t, before, a.events(""))
	}
	// What a typed client cannot leave out (staff_id, end_at), the server
	// refuses too.
	for field, body := range map[string]map[string]any{
		"end_at":   {"staff_id": a.staffA, "start_at": "2030-06-02T10:00:00Z"},
		"staff_id": {"start_at": "2030-06-02T10:00:00Z", "end_at": "2030-06-02T11:00:00Z"},
	} {
		r := a.do(http.MethodPut, "/v1/orders/"+third+"/assignment", a.opA, body)
		requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
		require.Contains(t, problemFields(r), field, "%s", r)
	}

	// Status drives the order: in_service, then done completes it.
	move := func(schedule client.Id, status client.ScheduleStatusInputStatus) (*client.ChangeScheduleStatusResponse, error) {
		return a.hearth().ChangeScheduleStatusWithResponse(ctx, schedule, nil, client.ScheduleStatusInput{Status: status}, op)
	}
	moveR, err := move(sch.Id, client.ScheduleStatusInputStatusInService)
	moved := expect(t, http.StatusOK, moveR, err).JSON200
	require.Equal(t, client.ScheduleWrittenStatusInService, moved.Status)
	require.NotEmpty(t, moved.Position)
	require.Equal(t, client.OrderStatusInService, a.awaitOrderAt(a.opA, first, 4).Status)
	moveR, err = move(sch.Id, "planned")
	requireRule(t, "schedule.invalid_transition", moveR, err)
	moveR, err = move(sch.Id, client.ScheduleStatusInputStatusDone)
	expect(t, http.StatusOK, moveR, err)
	done := a.awaitOrderAt(a.opA, first, 5)
	require.Equal(t, client.OrderStatusCompleted, done.Status)
	require.NotNil(t, done.CompletedAt)

	// Cancelled: the order loses its staff member and returns to confirmed.
	secondSchedule := a.liveSchedule(a.opA, second).Id
	moveR, err = move(secondSchedule, client.ScheduleStatusInputStatusCancelled)
	expect(t, http.StatusOK, moveR, err)
	back := a.awaitOrderAt(a.opA, second, 5)
	require.Equal(t, client.OrderStatusConfirmed, back.Status)
	require.Nil(t, back.StaffId)
	require.Nil(t, back.StaffName)

	// Schedule lists: filters by status, staff and window.
	awaitAt(t, "the cancelled schedule", 2, func() (*client.GetScheduleResponse, error) {
		return a.hearth().GetScheduleWithResponse(ctx, secondSchedule, nil, op)
	}, func(r *client.GetScheduleResponse) *client.Schedule { return r.JSON200 }, func(s *client.Schedule) int { return s.Version })
	list := func(key string, params client.ListSchedulesParams, pageSize int) ([]string, int) {
		t.Helper()
		return listed(t, pageSize, func(page, pageSize int) (*client.ListSchedulesResponse, error) {
			params.Page, params.PageSize = &page, &pageSize
			return a.hearth().ListSchedulesWithResponse(ctx, &params, as(key))
		}, func(r *client.ListSchedulesResponse) (ids []string, total int) {
			for _, it := range r.JSON200.Items {
				ids = append(ids, it.Id.String())
			}
			return ids, r.JSON200.Total
		})
	}
	for _, c := range []struct {
		name   string
		params client.ListSchedulesParams
		want   []string
	}{
		{"done", client.ListSchedulesParams{Status: &client.ScheduleStatuses{"done"}}, []string{scheduleID}},
		{"cancelled or planned", client.ListSchedulesParams{Status: &client.ScheduleStatuses{"cancelled", "planned"}}, []string{secondSchedule.String()}},
		{"staff", client.ListSchedulesParams{StaffId: new(uid(t, a.staffA))}, []string{secondSchedule.String(), scheduleID}},
		{"window", client.ListSchedulesParams{From: new(instant(t, "2030-06-01T11:00:00Z")), To: new(instant(t, "2030-06-02T00:00:00Z"))},
			[]string{secondSchedule.String()}},
		{"from", client.ListSchedulesParams{From: new(instant(t, "2030-06-01T00:00:00Z"))}, []string{scheduleID, secondSchedule.String()}},
	} {
		ids, total := list(a.opA, c.params, 1)
		require.Equal(t, c.want, ids, c.name)
		require.Equal(t, len(c.want), total, c.name)
	}
	for _, bad := range []string{"status=open", "staff_id=x", "to=tomorrow"} {
		requireProblem(t, a.do(http.MethodGet, "/v1/schedules?"+bad, a.opA, nil), http.StatusBadRequest, "/problems/malformed-request")
	}
	ids, _ := list(a.opB, client.ListSchedulesParams{}, 50)
	require.Empty(t, ids)
	moveR, err = move(sch.Id, "paused")
	problemOf(t, http.StatusUnprocessableEntity, "/problems/validation-failed", moveR, err)
	forbidden, err := a.hearth().ListSchedulesWithResponse(ctx, nil, as(a.admin))
	problemOf(t, http.StatusForbidden, "/problems/forbidden", forbidden, err)
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
	requireProblem(t, a.do(http.MethodGet, "/v1/orders/"+own+"/changes", a.worker, nil), http.StatusForbidden, "/problems/forbidden")
	for _, path := range []string{"/v1/schedules/" + otherSchedule, "/v1/orders/" + others, "/v1/orders/" + unassigned} {
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
	changes := a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+own+"/changes", a.opA, nil)
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

// An order's service request is its customer's (docs/api.md): creating an
// order for another customer's request is refused, and so is changing the
// customer of an order that came from a request.
func TestOrderFromARequestKeepsItsCustomer(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ada := a.createCustomer(a.opA, "Ada Lovelace")
	bob := a.createCustomer(a.opA, "Bob Builder")
	req := a.crmRequest(a.opA, ada, "")

	r := a.do(http.MethodPost, "/v1/orders", a.opA, map[string]any{"customer_id": bob, "request_id": req})
	requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")

	order := a.crmCreate(a.opA, "/v1/orders", map[string]any{"customer_id": ada, "request_id": req})
	r = a.do(http.MethodPatch, "/v1/orders/"+order, a.opA, map[string]any{"customer_id": bob})
	requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
	require.Equal(t, []string{"customer_id"}, problemFields(r), "%s", r)
	a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+order, a.opA, map[string]any{"amount_cents": 300}) // the rest still changes
}

// An order taken into service, then completed, through its own status
// moves its schedule along: the schedule is done and no longer books the
// staff member, whose window takes another order.
func TestCompletingAnOrderFreesItsStaffMember(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	window := map[string]any{"staff_id": a.staffA, "start_at": "2030-06-01T09:00:00Z", "end_at": "2030-06-01T10:00:00Z"}

	first := a.createOrder(a.opA, customer, 100)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+first+"/assignment", a.opA, window)
	sch := a.crmSchedule(a.opA, first).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+first+"/status", a.opA, map[string]any{"status": "in_service"})
	done := a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+first+"/status", a.opA, map[string]any{"status": "completed"})
	require.Equal(t, "completed", done.Body["status"])

	second := a.createOrder(a.opA, customer, 200)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+second+"/assignment", a.opA, window)
	a.crmAwait(a.opA, "/v1/schedules/"+sch, func(r response) bool { return r.Body["status"] == "done" })
}
