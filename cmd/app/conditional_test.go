package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

func header(key string, kv ...string) http.Header {
	h := auth(key)
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestConditionalRequests(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	order := a.createOrder(a.opA, customer, 100)
	path := "/v1/orders/" + order

	// GET answers the version as a strong ETag; If-None-Match with it is
	// 304 without a body; with another tag, the order.
	got := a.awaitOrder(a.opA, order, 1)
	require.Equal(t, `"1"`, got.Header.Get("ETag"))
	for _, tag := range []string{`"1"`, `W/"1"`, `"7", "1"`, `*`} {
		r := a.sendOK(http.MethodGet, path, header(a.opA, "If-None-Match", tag), nil)
		require.Equal(t, http.StatusNotModified, r.Status, "If-None-Match: %s: %s", tag, r)
		require.Empty(t, r.Raw)
		require.Equal(t, `"1"`, r.Header.Get("ETag"))
	}
	r := a.sendOK(http.MethodGet, path, header(a.opA, "If-None-Match", `"2"`), nil)
	require.Equal(t, http.StatusOK, r.Status)

	// If-Match with a stale version: 412, with the current tag; nothing
	// written. With the current one: the write, and the new tag.
	confirm := map[string]any{"status": "confirmed"}
	stale := a.sendOK(http.MethodPost, path+"/status", header(a.opA, "If-Match", `"2"`), confirm)
	requireProblem(t, stale, http.StatusPreconditionFailed, "/problems/precondition-failed")
	require.Equal(t, `"1"`, stale.Header.Get("ETag"))
	require.Equal(t, 1, a.events(order))
	ok := a.sendOK(http.MethodPost, path+"/status", header(a.opA, "If-Match", `"1"`), confirm)
	require.Equal(t, http.StatusOK, ok.Status, "%s", ok)
	require.Equal(t, `"2"`, ok.Header.Get("ETag"))
	a.awaitOrder(a.opA, order, 2)
	r = a.sendOK(http.MethodGet, path, header(a.opA, "If-None-Match", `"1"`), nil)
	require.Equal(t, http.StatusOK, r.Status, "a changed order is sent again")

	// The body's expected_version still answers 409 when stale.
	conflict := a.sendOK(http.MethodPatch, path, auth(a.opA), map[string]any{"expected_version": 1, "notes": "x"})
	requireProblem(t, conflict, http.StatusConflict, "/problems/conflict")

	// Malformed or contradictory preconditions are refused precisely.
	bad := []struct {
		ifMatch string
		body    map[string]any
		status  int
		typ     string
	}{
		{`W/"2"`, nil, http.StatusPreconditionFailed, "/problems/precondition-failed"},
		{`2`, nil, http.StatusBadRequest, "/problems/malformed-request"},
		{`"two"`, nil, http.StatusBadRequest, "/problems/malformed-request"},
		{`"1", "2"`, nil, http.StatusBadRequest, "/problems/malformed-request"},
		{`"2"`, map[string]any{"expected_version": 1}, http.StatusBadRequest, "/problems/malformed-request"},
	}
	for _, tc := range bad {
		body := map[string]any{"notes": "y"}
		for k, v := range tc.body {
			body[k] = v
		}
		r := a.sendOK(http.MethodPatch, path, header(a.opA, "If-Match", tc.ifMatch), body)
		requireProblem(t, r, tc.status, tc.typ)
	}
	require.Equal(t, 2, a.events(order), "none of them wrote")
	star := a.sendOK(http.MethodPatch, path, header(a.opA, "If-Match", "*"), map[string]any{"notes": "z"})
	require.Equal(t, http.StatusOK, star.Status, "%s", star)

	// Resources without entity tags (creates, reference records): no tag
	// matches them.
	create := a.sendOK(http.MethodPost, "/v1/orders", header(a.opA, "If-Match", `"1"`), map[string]any{"customer_id": customer})
	requireProblem(t, create, http.StatusPreconditionFailed, "/problems/precondition-failed")
	patch := a.sendOK(http.MethodPatch, "/v1/customers/"+customer, header(a.opA, "If-Match", `"1"`), map[string]any{"name": "B"})
	requireProblem(t, patch, http.StatusPreconditionFailed, "/problems/precondition-failed")

	// Service requests and schedules have tags too.
	request := a.createRequest(customer)
	rq := a.crmAwaitVersion(a.opA, "/v1/service-requests/"+request, 2)
	require.Equal(t, `"2"`, rq.Header.Get("ETag"))
	r = a.sendOK(http.MethodGet, "/v1/service-requests/"+request, header(a.opA, "If-None-Match", `"2"`), nil)
	require.Equal(t, http.StatusNotModified, r.Status)
	sr := a.sendOK(http.MethodPost, "/v1/service-requests/"+request+"/status", header(a.opA, "If-Match", `"1"`), map[string]any{"status": "cancelled"})
	requireProblem(t, sr, http.StatusPreconditionFailed, "/problems/precondition-failed")

	a.must(http.StatusOK, http.MethodPut, path+"/assignment", a.opA,
		map[string]any{"staff_id": a.staffA, "start_at": "2030-01-02T09:00:00Z", "end_at": "2030-01-02T10:00:00Z"})
	sch := a.crmSchedule(a.opA, order)
	schedule := sch.Body["id"].(string)
	got = a.crmAwaitVersion(a.opA, "/v1/schedules/"+schedule, 1)
	require.Equal(t, `"1"`, got.Header.Get("ETag"))
	r = a.sendOK(http.MethodGet, "/v1/schedules/"+schedule, header(a.opA, "If-None-Match", `"1"`), nil)
	require.Equal(t, http.StatusNotModified, r.Status)
	st := a.sendOK(http.MethodPost, "/v1/schedules/"+schedule+"/status", header(a.opA, "If-Match", `"3"`), map[string]any{"status": "in_service"})
	requireProblem(t, st, http.StatusPreconditionFailed, "/problems/precondition-failed")
	st = a.sendOK(http.MethodPost, "/v1/schedules/"+schedule+"/status", header(a.opA, "If-Match", `"1"`), map[string]any{"status": "in_service"})
	require.Equal(t, http.StatusOK, st.Status, "%s", st)
}

// A staff member's working hours have an entity tag, their version (0
// before any are set): a PUT that states the version it read (If-Match, or
// expected_version) is refused once another write has moved it on, and
// changes nothing; a PUT that states none replaces them.
func TestWorkingHoursHaveAnEntityTag(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	path := "/v1/staff/" + a.staffA + "/working-hours"
	monday := func(start string) map[string]any {
		return map[string]any{"week": map[string]any{"monday": []any{map[string]any{"start": start, "end": "17:00"}}}}
	}
	got := a.must(http.StatusOK, http.MethodGet, path, a.opA, nil)
	require.Equal(t, `"0"`, got.Header.Get("ETag"))
	require.EqualValues(t, 0, got.Body["version"])
	r := a.sendOK(http.MethodGet, path, header(a.opA, "If-None-Match", `"0"`), nil)
	require.Equal(t, http.StatusNotModified, r.Status)

	// Two clients read version 0; the first write wins, the second is told.
	first := a.sendOK(http.MethodPut, path, header(a.opA, "If-Match", `"0"`), monday("08:00"))
	require.Equal(t, http.StatusOK, first.Status, "%s", first)
	require.Equal(t, `"1"`, first.Header.Get("ETag"))
	require.EqualValues(t, 1, first.Body["version"])
	second := a.sendOK(http.MethodPut, path, header(a.opA, "If-Match", `"0"`), monday("10:00"))
	requireProblem(t, second, http.StatusPreconditionFailed, "/problems/precondition-failed")
	require.Equal(t, `"1"`, second.Header.Get("ETag"))
	body := monday("10:00")
	body["expected_version"] = 0
	requireProblem(t, a.do(http.MethodPut, path, a.opA, body), http.StatusConflict, "/problems/conflict")
	got = a.must(http.StatusOK, http.MethodGet, path, a.opA, nil)
	require.Equal(t, "08:00", got.Body["week"].(map[string]any)["monday"].([]any)[0].(map[string]any)["start"], "the refused writes changed nothing")

	// Without a version, the last write wins.
	last := a.must(http.StatusOK, http.MethodPut, path, a.opA, monday("10:00"))
	require.Equal(t, `"2"`, last.Header.Get("ETag"))

	// A retry with the same Idempotency-Key gets the first attempt's
	// answer, its tag included, not a 412 from its own write.
	retry := header(a.opA, "If-Match", `"2"`, "Idempotency-Key", "hours-1")
	once := a.sendOK(http.MethodPut, path, retry, monday("07:00"))
	require.Equal(t, http.StatusOK, once.Status, "%s", once)
	again := a.sendOK(http.MethodPut, path, retry, monday("07:00"))
	require.Equal(t, http.StatusOK, again.Status, "%s", again)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, `"3"`, again.Header.Get("ETag"))
	require.Equal(t, once.Raw, again.Raw)
}
