package httpport

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/app"
	"hearth/app/access"
	"hearth/app/query"
	"hearth/domain/uuid"
)

// waitsFor is a Consistency that records the positions it was asked to
// wait for, and has always reached them.
type waitsFor struct{ positions chan int64 }

func (c waitsFor) Wait(_ context.Context, _ string, position int64) (bool, error) {
	c.positions <- position
	return true, nil
}

// A header that takes one value, sent on two lines, is refused naming it
// rather than read as its first line (net/http's Header.Get): If-Match
// would state a version the client may not have meant, and a write would
// run at it; two Consistency-Position lines are two positions, which the
// parameter refuses too; two Consistency-Timeout lines, two bounds.
func TestOneValueHeadersSentTwiceAreRefused(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	id := f.createOrder()
	send := func(h http.Handler, method, path, body string, header http.Header) answer {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header = header
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		a := answer{ResponseRecorder: rec}
		if rec.Body.Len() > 0 {
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &a.body), rec.Body.String())
		}
		return a
	}
	fields := func(a answer) []string {
		var names []string
		errs, _ := a.body["errors"].([]any)
		for _, e := range errs {
			names = append(names, e.(map[string]any)["field"].(string))
		}
		return names
	}
	before := f.tx.Position()
	for name, tc := range map[string]struct{ method, path, body, first, second string }{
		"versioned write": {"POST", "/v1/orders/" + id + "/status", `{"status":"confirmed"}`, `"1"`, `"7"`},
		"any, then a tag": {"POST", "/v1/orders/" + id + "/status", `{"status":"confirmed"}`, `*`, `"7"`},
		"untagged write":  {"POST", "/v1/orders", `{"customer_id":"` + f.customer + `"}`, `*`, `"3"`},
	} {
		h := http.Header{"Authorization": {"Bearer " + f.op}, "If-Match": {tc.first, tc.second}}
		a := send(f.h, tc.method, tc.path, tc.body, h)
		require.Equal(t, http.StatusBadRequest, a.Code, "%s: %s", name, a.Body.String())
		require.Equal(t, "/problems/malformed-request", a.body["type"], name)
		require.Equal(t, []string{"If-Match"}, fields(a), name)
	}
	require.Equal(t, before, f.tx.Position(), "nothing written")

	var a app.Application
	var err error
	a.Queries.Orders, err = query.NewOrders(orderRows{}, noNames{})
	require.NoError(t, err)
	waits := waitsFor{positions: make(chan int64, 10)}
	h, err := NewHandler(Config{App: a, APIEnabled: true, Log: slog.New(slog.DiscardHandler), Consistency: waits,
		Auth: keys{"op": {KeyID: "1", MerchantID: uuid.New(), Role: access.Operator}}})
	require.NoError(t, err)
	for name, header := range map[string]http.Header{
		HeaderPosition: {HeaderPosition: {"5", "9"}},
		HeaderTimeout:  {HeaderPosition: {"5"}, HeaderTimeout: {"1s", "0s"}},
	} {
		header.Set("Authorization", "Bearer op")
		r := send(h, "GET", "/v1/orders", "", header)
		require.Equal(t, http.StatusBadRequest, r.Code, "%s: %s", name, r.Body.String())
		require.Equal(t, []string{name}, fields(r), name)
	}
	require.Empty(t, waits.positions, "no wait began")
	header := http.Header{"Authorization": {"Bearer op"}, HeaderPosition: {"5"}, HeaderTimeout: {"1s"}}
	r := send(h, "GET", "/v1/orders", "", header)
	require.Equal(t, http.StatusOK, r.Code, r.Body.String())
	require.Equal(t, int64(5), <-waits.positions)
}

// A write whose operation does not take an Idempotency-Key (the admin
// routes, a DELETE) refuses one, naming it, rather than ignore it: the
// client would take a retry with the key for a safe one, and a repeated
// POST /admin/keys makes a second key whose secret nobody saw. The writes
// that declare it take it; reads ignore it (they are safe to repeat).
func TestIdempotencyKeyOnlyWhereTheDocumentDeclaresIt(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	doc, _ := loadOpenAPI(t)
	refused := 0
	for _, rt := range (&server{}).routes() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		if !rt.api || method == http.MethodGet {
			continue
		}
		var op openAPIOperation
		require.NoError(t, json.Unmarshal(doc.Paths[path][strings.ToLower(method)], &op))
		declared := false
		for _, p := range op.Parameters {
			declared = declared || p["$ref"] == "#/components/parameters/IdempotencyKey"
		}
		_, reqPath := requestPath(rt.pattern)
		a := f.do(method, reqPath, f.keyFor(rt), `{}`, HeaderIdempotencyKey, uuid.New())
		errs, _ := a.body["errors"].([]any)
		named := len(errs) == 1 && errs[0].(map[string]any)["field"] == HeaderIdempotencyKey
		if declared {
			require.False(t, named, "%s takes an Idempotency-Key: %s", rt.pattern, a.Body.String())
			continue
		}
		refused++
		require.Equal(t, http.StatusBadRequest, a.Code, "%s: %s", rt.pattern, a.Body.String())
		require.True(t, named, "%s: %s", rt.pattern, a.Body.String())
	}
	require.Equal(t, 9, refused, "the admin writes and DELETE /v1/webhook-endpoints/{id}")
	a := f.do(http.MethodGet, "/v1/orders", f.op, "", HeaderIdempotencyKey, uuid.New())
	require.Equal(t, http.StatusOK, a.Code, a.Body.String())
}

// Two Authorization lines are two keys: refused (400 naming the header, as
// RFC 6750's invalid_request is), not authenticated as the first, which the
// client may not have meant to act as.
func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	before := f.tx.Position()
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/v1/orders", ""},
		{"POST", "/v1/orders", `{"customer_id":"` + f.customer + `"}`},
	} {
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
		req.Header["Authorization"] = []string{"Bearer " + f.op, "Bearer " + f.worker}
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s %s: %s", tc.method, tc.path, rec.Body.String())
		require.Contains(t, rec.Body.String(), `"field":"Authorization"`)
	}
	require.Equal(t, before, f.tx.Position(), "nothing written")
}
