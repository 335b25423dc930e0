package httpport

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
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

	waits, h := waitingOrders(t)
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

// Consistency-Position and Consistency-Timeout make a GET wait for a
// write. A route whose operation does not declare them (every write, the
// admin routes) refuses them, naming the header, rather than ignore them:
// a client that sends its last position with a write (or with a read of
// /admin) would take the answer for one that waited for it. Every GET
// under /v1 declares both, since every one of them waits.
func TestReadYourWritesHeadersOnlyWhereTheDocumentDeclaresThem(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	doc, _ := loadOpenAPI(t)
	refused := 0
	for _, rt := range (&server{}).routes() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		if !rt.api {
			continue
		}
		var op openAPIOperation
		require.NoError(t, json.Unmarshal(doc.Paths[path][strings.ToLower(method)], &op))
		declares := func(ref string) bool {
			return slices.ContainsFunc(op.Parameters, func(p map[string]any) bool { return p["$ref"] == "#/components/parameters/"+ref })
		}
		position, timeout := declares("consistency_position"), declares("consistency_timeout")
		require.Equal(t, position, timeout, "%s: the wait's bound wherever there is a wait", rt.pattern)
		require.Equal(t, method == http.MethodGet && strings.HasPrefix(path, "/v1/"), position,
			"%s: every GET under /v1 waits for a position, nothing else does", rt.pattern)
		_, reqPath := requestPath(rt.pattern)
		for _, header := range [][]string{{HeaderPosition, "5"}, {HeaderPosition, "5", HeaderTimeout, "1s"}} {
			before := f.tx.Position()
			a := f.do(method, reqPath, f.keyFor(rt), `{}`, header...)
			errs, _ := a.body["errors"].([]any)
			named := len(errs) == 1 && (errs[0].(map[string]any)["field"] == HeaderPosition || errs[0].(map[string]any)["field"] == HeaderTimeout)
			if position {
				require.False(t, named, "%s takes %v: %s", rt.pattern, header, a.Body.String())
				continue
			}
			refused++
			require.Equal(t, http.StatusBadRequest, a.Code, "%s %v: %s", rt.pattern, header, a.Body.String())
			require.Equal(t, "/problems/malformed-request", a.body["type"], rt.pattern)
			require.True(t, named, "%s %v: %s", rt.pattern, header, a.Body.String())
			require.Equal(t, before, f.tx.Position(), "%s: nothing written", rt.pattern)
		}
	}
	require.Greater(t, refused, 2*40, "every write and admin route, twice")
	// A write with only the timeout names it.
	a := f.do(http.MethodPost, "/v1/orders", f.op, `{"customer_id":"`+f.customer+`"}`, HeaderTimeout, "1s")
	require.Equal(t, http.StatusBadRequest, a.Code, a.Body.String())
	require.Contains(t, a.Body.String(), `"field":"`+HeaderTimeout+`"`)
}

// Consistency-Timeout bounds the wait for a position: sent without one
// (neither Consistency-Position nor min_position), there is no wait to
// bound, and the client that meant to read its write would get an answer
// that never waited. It is refused naming it; with a position it bounds
// the wait.
func TestConsistencyTimeoutWithoutAPositionIsRefused(t *testing.T) {
	t.Parallel()
	waits, h := waitingOrders(t)
	get := func(path string, header ...string) *httptest.ResponseRecorder {
		return asOperator(h, http.MethodGet, path, header...)
	}
	for _, timeout := range []string{"1s", "soon"} {
		rec := get("/v1/orders", HeaderTimeout, timeout)
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", timeout, rec.Body.String())
		var p problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
		require.Equal(t, "/problems/malformed-request", p.Type)
		require.Len(t, p.Errors, 1)
		require.Equal(t, HeaderTimeout, p.Errors[0].Field)
	}
	require.Empty(t, waits.positions, "no wait began")

	rec := get("/v1/orders?min_position=7", HeaderTimeout, "1s")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, int64(7), <-waits.positions)
	rec = get("/v1/orders", HeaderPosition, "8", HeaderTimeout, "1s")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, int64(8), <-waits.positions)
}

// waitingOrders is a handler of GET /v1/orders, for the key "op", whose
// Consistency records the positions it waits for.
func waitingOrders(t *testing.T) (waitsFor, http.Handler) {
	t.Helper()
	var a app.Application
	var err error
	a.Queries.Orders, err = query.NewOrders(orderRows{}, noNames{})
	require.NoError(t, err)
	waits := waitsFor{positions: make(chan int64, 10)}
	h, err := NewHandler(Config{App: a, APIEnabled: true, Log: slog.New(slog.DiscardHandler), Consistency: waits,
		Auth: keys{"op": {KeyID: "1", MerchantID: uuid.New(), Role: access.Operator}}})
	require.NoError(t, err)
	return waits, h
}

// asOperator sends h a request with waitingOrders' key and headers as
// name, value pairs (a name twice is two lines).
func asOperator(h http.Handler, method, path string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.Header.Set("Authorization", "Bearer op")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header[header[i]] = append(req.Header[header[i]], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// A position given empty (?min_position=, a URL template whose variable
// was empty, or an empty Consistency-Position line) is refused naming it,
// as an empty id or number is: read as absent, the answer would not have
// waited, and the client would take it for one that had. An empty
// Consistency-Timeout likewise: the client meant a bound, and would get
// the server's.
func TestEmptyPositionIsRefused(t *testing.T) {
	t.Parallel()
	waits, h := waitingOrders(t)
	for name, rec := range map[string]*httptest.ResponseRecorder{
		"min_position": asOperator(h, http.MethodGet, "/v1/orders?min_position="),
		HeaderPosition: asOperator(h, http.MethodGet, "/v1/orders", HeaderPosition, ""),
		HeaderTimeout:  asOperator(h, http.MethodGet, "/v1/orders", HeaderPosition, "5", HeaderTimeout, ""),
	} {
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", name, rec.Body.String())
		var p problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
		require.Len(t, p.Errors, 1, rec.Body.String())
		require.Equal(t, name, p.Errors[0].Field)
	}
	require.Empty(t, waits.positions, "no wait began")
}

// A HEAD answers the headers a GET would (ETag among them), so it waits
// for the position it names as the GET does, rather than answer what the
// read models had, unwaited and unsaid.
func TestHeadWaitsForItsPosition(t *testing.T) {
	t.Parallel()
	waits, h := waitingOrders(t)
	rec := asOperator(h, http.MethodHead, "/v1/orders?min_position=5")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, "reached", rec.Header().Get(HeaderStatus))
	require.Equal(t, int64(5), <-waits.positions)
	rec = asOperator(h, http.MethodHead, "/v1/orders", HeaderPosition, "6")
	require.Equal(t, "reached", rec.Header().Get(HeaderStatus))
	require.Equal(t, int64(6), <-waits.positions)
}
