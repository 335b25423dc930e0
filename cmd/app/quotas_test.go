package main

import (
	"net/http"
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
	tooMany(a.do(http.MethodPut, order+"/settlement", a.opA, map[string]any{"settlement_status": "settled"}), "order.too_many_events")
	tooMany(a.do(http.MethodPost, order+"/status", a.opA, map[string]any{"status": "confirmed"}), "order.too_many_events")
	tooMany(a.do(http.MethodPut, order+"/assignment", a.opA, map[string]any{"staff_id": a.staffA,
		"start_at": "2030-01-01T09:00:00Z", "end_at": "2030-01-01T10:00:00Z"}), "order.too_many_events")
	require.Equal(t, 200, a.events(order[len("/v1/orders/"):]), "nothing refused was written")
	a.must(http.StatusOK, http.MethodPatch, order, a.opA, map[string]any{"amount_cents": 1200}) // a no-op still answers 200
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
