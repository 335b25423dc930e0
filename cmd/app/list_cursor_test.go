package main

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// A next_cursor fits only the list, the filters and the merchant it was
// answered for: given to another list (both newest first), with another
// filter, or by another merchant's key, it is refused naming cursor rather
// than read as a place in that list, which answers a page that looks
// complete and silently leaves out every row newer than the cursor's.
// The same cursor with the same filters walks on, whatever the page size.
func TestAListCursorFitsOnlyItsListFiltersAndMerchant(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	for _, name := range []string{"Ada", "Grace", "Hedy"} {
		a.createCustomer(a.opA, name)
	}
	for _, name := range []string{"Alan", "Edsger"} {
		a.crmCreate(a.opA, "/v1/staff", map[string]any{"name": name})
	}
	first := a.must(http.StatusOK, http.MethodGet, "/v1/customers?page_size=1", a.opA, nil)
	cursor, ok := first.Body["next_cursor"].(string)
	require.True(t, ok, "%s", first)
	c := url.QueryEscape(cursor)

	for _, tc := range []struct{ what, path, key string }{
		{"another list", "/v1/staff?page_size=1&cursor=" + c, a.opA},
		{"another filter", "/v1/customers?page_size=1&q=a&cursor=" + c, a.opA},
		{"another merchant", "/v1/customers?page_size=1&cursor=" + c, a.opB},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r := a.do(http.MethodGet, tc.path, tc.key, nil)
			require.NotEqual(t, http.StatusOK, r.Status, "a cursor of /v1/customers?page_size=1 was read on %s as a place in it: %s", tc.path, r)
			requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
			require.Equal(t, []string{"cursor"}, problemFields(r), "%s", r)
		})
	}

	// The list it was answered for walks on, at any page size, and every
	// customer comes once.
	seen := itemIDs(first)
	r := a.must(http.StatusOK, http.MethodGet, "/v1/customers?page_size=5&cursor="+c, a.opA, nil)
	seen = append(seen, itemIDs(r)...)
	require.NotContains(t, r.Body, "next_cursor")
	require.Len(t, seen, 3)
	require.ElementsMatch(t, seen, itemIDs(a.must(http.StatusOK, http.MethodGet, "/v1/customers", a.opA, nil)))
}

// itemIDs are the ids of a list answer's items, in order.
func itemIDs(r response) []string {
	var out []string
	items, _ := r.Body["items"].([]any)
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			id, _ := m["id"].(string)
			out = append(out, id)
		}
	}
	return out
}

// A cursor whose sort column is no column name (very long, or with a
// control character) was never answered by this API: it is 400 naming
// cursor, like any other tampered cursor, and its text is not echoed back
// in the problem.
func TestAListCursorOfNoSortColumnIsMalformed(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	for _, order := range []string{strings.Repeat("x", 3000), "created_at\u0000", "created at", "Created_At"} {
		cursor := base64.RawURLEncoding.EncodeToString([]byte(`{"o":"` + order + `","t":"2030-01-01T00:00:00Z","i":"00000000-0000-4000-8000-000000000001"}`))
		r := a.do(http.MethodGet, "/v1/customers?cursor="+cursor, a.opA, nil)
		requireProblem(t, r, http.StatusBadRequest, "/problems/malformed-request")
		require.Equal(t, []string{"cursor"}, problemFields(r), "%.200s", r)
	}
}

// The availability's next_cursor fits only the query it was answered for,
// as every list's does (api.md, pages): given with another staff member,
// duration or range, or by another merchant's key, it is refused naming
// cursor rather than read as a time to start from, which silently leaves
// out every slot of that query before it. With the same query it walks on,
// and the pages together are the slots of one page.
func TestAnAvailabilityCursorFitsOnlyItsQuery(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	monday := map[string]any{"week": map[string]any{"monday": []any{map[string]any{"start": "08:00", "end": "12:00"}}}}
	other := a.crmCreate(a.opA, "/v1/staff", map[string]any{"name": "Alan"})
	for _, staff := range []string{a.staffA, other} {
		a.must(http.StatusOK, http.MethodPut, "/v1/staff/"+staff+"/working-hours", a.opA, monday)
	}
	a.must(http.StatusOK, http.MethodPut, "/v1/staff/"+a.staffB+"/working-hours", a.opB, monday)
	const day = "&from=2030-01-07T00:00:00Z&to=2030-01-08T00:00:00Z"
	query := "/v1/availability?duration=2h&staff_id=" + a.staffA + day
	first := a.must(http.StatusOK, http.MethodGet, query+"&page_size=2", a.opA, nil)
	cursor, ok := first.Body["next_cursor"].(string)
	require.True(t, ok, "%s", first)
	c := url.QueryEscape(cursor)

	for _, tc := range []struct{ what, path, key string }{
		{"another staff member", "/v1/availability?duration=2h&staff_id=" + other + day + "&cursor=" + c, a.opA},
		{"another duration", "/v1/availability?duration=1h&staff_id=" + a.staffA + day + "&cursor=" + c, a.opA},
		{"no staff filter", "/v1/availability?duration=2h" + day + "&cursor=" + c, a.opA},
		{"another merchant", "/v1/availability?duration=2h&staff_id=" + a.staffB + day + "&cursor=" + c, a.opB},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r := a.do(http.MethodGet, tc.path, tc.key, nil)
			require.NotEqual(t, http.StatusOK, r.Status, "a cursor of %s was read on %s as a place in it: %s", query, tc.path, r)
			requireProblem(t, r, http.StatusUnprocessableEntity, "/problems/validation-failed")
			require.Equal(t, []string{"cursor"}, problemFields(r), "%s", r)
		})
	}

	slots := func(r response) []string {
		var out []string
		for _, it := range r.Body["items"].([]any) {
			out = append(out, it.(map[string]any)["start_at"].(string))
		}
		return out
	}
	seen := slots(first)
	for cursor != "" {
		r := a.must(http.StatusOK, http.MethodGet, query+"&page_size=3&cursor="+url.QueryEscape(cursor), a.opA, nil)
		seen = append(seen, slots(r)...)
		cursor, _ = r.Body["next_cursor"].(string)
	}
	require.Equal(t, slots(a.must(http.StatusOK, http.MethodGet, query+"&page_size=200", a.opA, nil)), seen)
}
