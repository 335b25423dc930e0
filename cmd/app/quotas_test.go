package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// An order and a service request take at most 200 events from their
// edits: each is loaded whole (every event) by every command on it, and
// its change log (GET /v1/orders/{id}/changes) is answered whole, so one
// client patching one order in a loop grew both without end, in the API's
// memory and on the shared database. Past the bound an edit is 422
// order.too_many_events (service_request.too_many_events); what ends the
// record (cancelling, completing, converting) still works.
func TestEditsPerOrderAndServiceRequestAreBounded(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	order := "/v1/orders/" + a.createOrder(a.opA, customer, 1000)
	for i := 2; i <= 200; i++ { // OrderCreated, then 199 edits
		a.must(http.StatusOK, http.MethodPatch, order, a.opA, map[string]any{"amount_cents": 1000 + i})
	}
	tooMany := func(r response, rule string) {
		t.Helper()
		requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/rule-broken")
		require.Equal(t, rule, r.Body["rule"], "%s", r)
	}
	tooMany(a.do(http.MethodPatch, order, a.opA, map[string]any{"amount_cents": 1}), "order.too_many_events")
	tooMany(a.do(http.MethodPut, order+"/settlement", a.opA, map[string]any{"settlement_status": "unsettled", "settlement_note": "later"}), "order.too_many_events")
	tooMany(a.do(http.MethodPost, order+"/status", a.opA, map[string]any{"status": "confirmed"}), "order.too_many_events")
	tooMany(a.do(http.MethodPut, order+"/assignment", a.opA, map[string]any{"staff_id": a.staffA,
		"start_at": "2030-01-01T09:00:00Z", "end_at": "2030-01-01T10:00:00Z"}), "order.too_many_events")
	require.Equal(t, 200, a.events(order[len("/v1/orders/"):]), "nothing refused was written")
	a.must(http.StatusOK, http.MethodPatch, order, a.opA, map[string]any{"amount_cents": 1200}) // a no-op still answers 200
	// A payment received is recorded past the bound, once: the way back to
	// unsettled, and any other change of the settlement, is an edit.
	a.must(http.StatusOK, http.MethodPut, order+"/settlement", a.opA, map[string]any{"settlement_status": "settled", "paid_amount_cents": 1200})
	tooMany(a.do(http.MethodPut, order+"/settlement", a.opA, map[string]any{"settlement_status": "settled", "paid_amount_cents": 1300}), "order.too_many_events")
	tooMany(a.do(http.MethodPut, order+"/settlement", a.opA, map[string]any{"settlement_status": "unsettled"}), "order.too_many_events")
	a.must(http.StatusOK, http.MethodPost, order+"/cancel", a.opA, map[string]any{"reason": "edited too often"})

	created := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA,
		map[string]any{"customer_id": customer, "content": "leaking tap", "source": "phone"})
	request := "/v1/service-requests/" + created.Body["id"].(string)
	for i := 2; i <= 200; i++ {
		a.must(http.StatusOK, http.MethodPatch, request, a.opA, map[string]any{"content": "leaking tap " + string(rune('a'+i%2))})
	}
	tooMany(a.do(http.MethodPatch, request, a.opA, map[string]any{"content": "a new leak"}), "service_request.too_many_events")
	a.must(http.StatusOK, http.MethodPost, request+"/status", a.opA, map[string]any{"status": "confirmed"})
	a.must(http.StatusCreated, http.MethodPost, request+"/convert", a.opA, nil)
}

// A refusal lists at most 100 field errors, then says how many more it
// left out: a body of 1 MiB may hold a hundred thousand wrong array items,
// and each had its own error (an unknown event type's listing every type
// there is), so a 400 KB request was answered 160 MB, built in the API's
// memory. The first field errors are listed as before.
func TestProblemListsABoundedNumberOfFieldErrors(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	types := make([]string, 100_000)
	for i := range types {
		types[i] = "x"
	}
	r := a.do(http.MethodPost, "/v1/webhook-endpoints", a.opA, map[string]any{"url": "https://example.com/hooks", "event_types": types})
	requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
	require.Less(t, len(r.Raw), 256<<10, "the answer stays small")
	errs := r.Body["errors"].([]any)
	require.Len(t, errs, 101, "100 errors, then one that says how many more")
	require.Equal(t, "event_types[0]", errs[0].(map[string]any)["field"])
	require.Equal(t, "event_types[99]", errs[99].(map[string]any)["field"])
	last := errs[100].(map[string]any)
	require.Equal(t, "event_types[100]", last["field"], "the first error left out")
	require.Contains(t, last["message"], "99900 more", "%v", last)
	require.Contains(t, r.Body["detail"], "99900 more")
}

// So does a refusal of a query string: 9,000 unknown parameters (or 9,000
// that cannot be read) in a 50 KB query were each an entry of errors, and
// each unknown one's message lists what the operation takes, answered in
// 1.7 MB. Now the first 100, then how many more.
func TestQueryProblemListsABoundedNumberOfParameters(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	for name, sep := range map[string]string{"unknown": "=", "unreadable": ";"} {
		var q []string
		for i := range 9000 {
			q = append(q, fmt.Sprintf("%x%s", i, sep))
		}
		r := a.do(http.MethodGet, "/v1/orders?"+strings.Join(q, "&"), a.opA, nil)
		requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
		require.Less(t, len(r.Raw), 64<<10, "%s: the answer stays small", name)
		errs := r.Body["errors"].([]any)
		require.Len(t, errs, 101, "%s: 100 parameters, then one that says how many more", name)
		require.Contains(t, errs[100].(map[string]any)["message"], "8900 more", name)
		require.Contains(t, r.Body["detail"], "8900 more", name)
	}
}
