package httpport

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/domain/uuid"
)

// routeParam is a path parameter of a route pattern.
var routeParam = regexp.MustCompile(`\{[a-z_]+\}`)

// requestPath is a path the route's pattern matches: "orders" for a
// projection, a fresh UUID for any other path parameter.
func requestPath(pattern string) (method, path string) {
	method, path, _ = strings.Cut(pattern, " ")
	return method, routeParam.ReplaceAllStringFunc(path, func(p string) string {
		if p == "{projection}" {
			return "orders"
		}
		return uuid.New()
	})
}

// keyFor is a key of a role the route lets through.
func (f *fakeApp) keyFor(rt route) string {
	switch {
	case slices.Contains(rt.roles, access.Operator):
		return f.op
	case slices.Contains(rt.roles, access.Admin):
		return f.admin
	}
	return f.worker
}

// unknownParameters are the fields a problem names as query parameters the
// operation does not take.
func unknownParameters(a answer) []string {
	var names []string
	errs, _ := a.body["errors"].([]any)
	for _, e := range errs {
		fe := e.(map[string]any)
		if msg, _ := fe["message"].(string); strings.HasPrefix(msg, "is not a query parameter of ") {
			names = append(names, fe["field"].(string))
		}
	}
	return names
}

// Every route under /v1 and /admin refuses a query parameter its operation
// in the OpenAPI document does not declare (a typo such as ?stauts= would
// otherwise answer as if no filter were given), 400 naming each such
// parameter, before it does anything; the parameters it declares are
// never refused as unknown.
func TestUnknownQueryParametersAreRefused(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	doc, _ := loadOpenAPI(t)
	declared := documentedQueryParameters(t, doc)
	checked := 0
	for _, rt := range (&server{}).routes() {
		if !rt.api {
			continue
		}
		checked++
		method, path := requestPath(rt.pattern)
		key := f.keyFor(rt)
		t.Run(rt.pattern, func(t *testing.T) {
			before := f.tx.Position()
			a := f.do(method, path+"?stauts=confirmed", key, `{}`)
			require.Equal(t, http.StatusBadRequest, a.Code, a.Body.String())
			require.Equal(t, "application/problem+json", a.Header().Get("Content-Type"))
			require.Equal(t, "/problems/malformed-request", a.body["type"])
			require.Equal(t, []string{"stauts"}, unknownParameters(a), a.Body.String())
			require.Contains(t, a.body["detail"], `"stauts"`)

			// With every declared parameter beside them (values no
			// parameter takes, so that nothing runs: no long poll waits),
			// only the undeclared ones are named, each once, in order.
			q := "Status=x&zzz=1&zzz=2&aaa="
			for _, name := range declared[rt.pattern] {
				q += "&" + name + "=~"
			}
			a = f.do(method, path+"?"+q, key, `{}`)
			require.Equal(t, http.StatusBadRequest, a.Code, a.Body.String())
			require.Equal(t, []string{"Status", "aaa", "zzz"}, unknownParameters(a), a.Body.String())
			require.Equal(t, before, f.tx.Position(), "a refused request writes nothing")

			// The declared ones alone are not refused as unknown (whatever
			// the handler then makes of their values).
			if len(declared[rt.pattern]) > 0 {
				a = f.do(method, path+"?"+strings.TrimPrefix(q, "Status=x&zzz=1&zzz=2&aaa=&"), key, `{}`)
				require.Empty(t, unknownParameters(a), a.Body.String())
			}
		})
	}
	require.Greater(t, checked, 70, "every route under /v1 and /admin")
}

// The web console (not under /v1: its pages read their own parameters,
// htmx and cache busters among them) and the unauthenticated endpoints
// (probes, Prometheus, the document) are not checked.
func TestQueryParametersOutsideTheAPIAreNotChecked(t *testing.T) {
	t.Parallel()
	console := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h, err := NewHandler(Config{Auth: noKeys{}, APIEnabled: true, Console: console})
	require.NoError(t, err)
	for _, path := range []string{"/console/board?week=2030-01-01&part=slots&v=abc", "/console/static/app.js?v=1",
		"/healthz?probe=1", "/openapi.json?v=2"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Less(t, rec.Code, 300, "%s: %s", path, rec.Body.String())
	}
}

// documentedQueryParameters is each operation's query parameters, by route
// pattern, read from the document independently of the server's own
// reading.
func documentedQueryParameters(t *testing.T, doc openAPIDoc) map[string][]string {
	t.Helper()
	_, raw := loadOpenAPI(t)
	components := raw["components"].(map[string]any)["parameters"].(map[string]any)
	out := map[string][]string{}
	for path, item := range doc.Paths {
		for method, rawOp := range item {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			var op openAPIOperation
			require.NoError(t, json.Unmarshal(rawOp, &op))
			pattern := strings.ToUpper(method) + " " + path
			out[pattern] = []string{}
			for _, p := range op.Parameters {
				if ref, ok := p["$ref"].(string); ok {
					p = components[strings.TrimPrefix(ref, "#/components/parameters/")].(map[string]any)
				}
				if p["in"] == "query" {
					out[pattern] = append(out[pattern], p["name"].(string))
				}
			}
		}
	}
	return out
}

// A query string net/url cannot read whole (a ';' between parameters, a
// bad %-escape) is refused naming the parameter, on every API route:
// url.Values leaves such a pair out, so ?status=confirmed;page=2 would
// otherwise answer as if no status had been asked for.
func TestMalformedQueryStringsAreRefused(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	named := func(a answer) []string {
		var names []string
		errs, _ := a.body["errors"].([]any)
		for _, e := range errs {
			fe := e.(map[string]any)
			if msg, _ := fe["message"].(string); strings.HasPrefix(msg, "is not a well-formed query parameter") {
				names = append(names, fe["field"].(string))
			}
		}
		return names
	}
	for _, rt := range (&server{}).routes() {
		if !rt.api {
			continue
		}
		method, path := requestPath(rt.pattern)
		key := f.keyFor(rt)
		t.Run(rt.pattern, func(t *testing.T) {
			a := f.do(method, path+"?a%zz=1", key, `{}`)
			require.Equal(t, http.StatusBadRequest, a.Code, a.Body.String())
			require.Equal(t, "/problems/malformed-request", a.body["type"])
			require.Equal(t, []string{"a%zz"}, named(a), a.Body.String())
		})
	}
	for query, field := range map[string]string{
		"status=confirmed;page=2":            "status",
		"status=confirmed%":                  "status",
		"page_size=1&status=confirmed%2":     "status",
		"status=confirmed&customer_id=a;b=c": "customer_id",
	} {
		a := f.do(http.MethodGet, "/v1/orders?"+query, f.op, "")
		require.Equal(t, http.StatusBadRequest, a.Code, "%s: %s", query, a.Body.String())
		require.Equal(t, []string{field}, named(a), "%s: %s", query, a.Body.String())
	}
}

// A parameter that takes one value (all but those the document declares
// as arrays: status, types) given twice is refused naming it, on every
// route that declares it, before anything runs: reading the first of two
// would answer for a filter the client did not mean, and look complete.
func TestSingleValuedQueryParametersGivenTwiceAreRefused(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	checked := 0
	eachQueryParameter(t, func(rt route, name string, schema map[string]any) {
		if schema["type"] == "array" {
			return
		}
		checked++
		method, path := requestPath(rt.pattern)
		a := f.do(method, path+"?"+name+"=1&"+name+"=2", f.keyFor(rt), `{}`)
		require.Equal(t, http.StatusBadRequest, a.Code, "%s ?%s twice: %s", rt.pattern, name, a.Body.String())
		require.Equal(t, "/problems/malformed-request", a.body["type"])
		errs, _ := a.body["errors"].([]any)
		require.Len(t, errs, 1, a.Body.String())
		require.Equal(t, name, errs[0].(map[string]any)["field"], a.Body.String())
		require.Contains(t, errs[0].(map[string]any)["message"], "at most once", a.Body.String())
	})
	require.Greater(t, checked, 50)
	// The arrays repeat: ?status=a&status=b asks for both.
	a := f.do(http.MethodGet, "/v1/orders?status=pending&status=confirmed", f.op, "")
	require.Equal(t, http.StatusOK, a.Code, a.Body.String())
}

// The parked lists read projection themselves (not through params): given
// twice, it is refused rather than read as the first, with nothing replayed.
func TestParkedProjectionGivenTwiceIsRefused(t *testing.T) {
	t.Parallel()
	h, f := newAdminHandler(t)
	for _, method := range []string{"GET", "POST"} {
		path := map[string]string{"GET": "/admin/parked", "POST": "/admin/parked/replay"}[method]
		r := adminDo(h, method, path+"?projection=orders&projection=plans", "admin-key", "")
		require.Equal(t, http.StatusBadRequest, r.Code, "%s %s: %s", method, path, r.Body.String())
		require.Contains(t, r.Body.String(), `"field":"projection"`)
	}
	require.Empty(t, f.calls, "nothing listed or replayed")
}

// A filter given with no value (?customer_id=, as a URL template with an
// empty variable writes it) is refused naming it, on every route whose
// document declares a UUID or a time parameter: read as absent, it would
// answer every customer's orders. (The document's formats already say an
// empty string is no UUID and no time.)
func TestEmptyUUIDAndTimeParametersAreRefused(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	admin, _ := newAdminHandler(t)
	checked := 0
	eachQueryParameter(t, func(rt route, name string, schema map[string]any) {
		if schema["format"] == "uuid" || schema["format"] == "date-time" {
			checked++
			requireEmptyRefused(t, f, admin, rt, name)
		}
	})
	require.Equal(t, 18, checked)
}

// A number or a duration given with no value (?page_size=, ?wait=) is
// refused naming it, as the UUID and time parameters are: a client that
// sends one meant a value, and reading it as absent would answer with the
// default without a word. cursor, after and q stay allowed empty: clients
// send the first two empty for the first page, and an empty search is no
// search.
func TestEmptyNumberAndDurationParametersAreRefused(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	admin, _ := newAdminHandler(t)
	checked := 0
	eachQueryParameter(t, func(rt route, name string, _ map[string]any) {
		if slices.Contains([]string{"page", "page_size", "limit", "wait", "duration", "step"}, name) {
			checked++
			requireEmptyRefused(t, f, admin, rt, name)
		}
	})
	require.NotZero(t, checked)
}

// Every operation that takes a key may answer 400 whatever its other
// input (a query parameter it does not declare, a header sent twice), so
// the document says so for each: a client generated from it has a type
// for the problem.
func TestEveryKeyedOperationDocumentsBadRequest(t *testing.T) {
	t.Parallel()
	doc, _ := loadOpenAPI(t)
	for _, rt := range (&server{}).routes() {
		if len(rt.roles) == 0 {
			continue
		}
		method, path, _ := strings.Cut(rt.pattern, " ")
		var op openAPIOperation
		require.NoError(t, json.Unmarshal(doc.Paths[path][strings.ToLower(method)], &op))
		require.Contains(t, op.Responses, "400", rt.pattern)
	}
}

// net/url gives up on a query of more than 10,000 parameters (counting the
// &s) and reads none of it: ?status=confirmed followed by 10,000 &s would
// answer every order. It is refused instead.
func TestAQueryNetURLGivesUpOnIsRefused(t *testing.T) {
	t.Parallel()
	f := newFakeApp(t)
	a := f.do(http.MethodGet, "/v1/orders?status=confirmed"+strings.Repeat("&", 10_000), f.op, "")
	require.Equal(t, http.StatusBadRequest, a.Code, a.Body.String())
	require.Equal(t, "/problems/malformed-request", a.body["type"])
	a = f.do(http.MethodGet, "/v1/orders?status=confirmed"+strings.Repeat("&", 9_999), f.op, "")
	require.Equal(t, http.StatusOK, a.Code, a.Body.String())
}

// wellFormedQuery refuses exactly the query strings url.ParseQuery (and so
// URL.Query, which every handler reads) cannot read whole.
func FuzzWellFormedQueryAgreesWithNetURL(f *testing.F) {
	for _, seed := range []string{"", "a=1", "a=1&b=2", "a=1;b=2", "a%zz=1", "a=%", "&&", "=x", "a=1&" + strings.Repeat("&", 10_000), "%3B=1", "a=%3B"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		_, err := url.ParseQuery(raw)
		require.Equal(t, err == nil, wellFormedQuery(raw) == nil, "%q: net/url says %v", raw, err)
	})
}

// projection given empty (?projection=, a script whose variable was empty)
// is refused, not read as absent: POST /admin/parked/replay would replay
// every projection's parked aggregates rather than the one meant.
func TestParkedProjectionGivenEmptyIsRefused(t *testing.T) {
	t.Parallel()
	h, f := newAdminHandler(t)
	for _, method := range []string{"GET", "POST"} {
		path := map[string]string{"GET": "/admin/parked", "POST": "/admin/parked/replay"}[method]
		r := adminDo(h, method, path+"?projection=", "admin-key", "")
		require.Equal(t, http.StatusBadRequest, r.Code, "%s %s: %s", method, path, r.Body.String())
		require.Contains(t, r.Body.String(), `"field":"projection"`)
	}
	require.Empty(t, f.calls, "nothing listed or replayed")
	require.Equal(t, http.StatusOK, adminDo(h, "POST", "/admin/parked/replay", "admin-key", "").Code, "absent: every projection")
	require.Equal(t, []string{"replay all  by key:4"}, f.calls)
}

// eachQueryParameter calls fn with every API route and each query
// parameter its operation declares in the document, its $ref resolved:
// its name and its schema.
func eachQueryParameter(t *testing.T, fn func(rt route, name string, schema map[string]any)) {
	t.Helper()
	doc, raw := loadOpenAPI(t)
	components := raw["components"].(map[string]any)["parameters"].(map[string]any)
	for _, rt := range (&server{}).routes() {
		if !rt.api {
			continue
		}
		m, p, _ := strings.Cut(rt.pattern, " ")
		var op openAPIOperation
		require.NoError(t, json.Unmarshal(doc.Paths[p][strings.ToLower(m)], &op))
		for _, prm := range op.Parameters {
			if ref, ok := prm["$ref"].(string); ok {
				prm = components[strings.TrimPrefix(ref, "#/components/parameters/")].(map[string]any)
			}
			if prm["in"] == "query" {
				schema, _ := prm["schema"].(map[string]any)
				fn(rt, prm["name"].(string), schema)
			}
		}
	}
}

// requireEmptyRefused checks that rt refuses its query parameter name
// given empty (?name=), 400 naming it: the admin routes through admin, the
// rest through f.
func requireEmptyRefused(t *testing.T, f *fakeApp, admin http.Handler, rt route, name string) {
	t.Helper()
	method, path := requestPath(rt.pattern)
	var code int
	var body string
	if strings.HasPrefix(path, "/admin/") {
		rec := adminDo(admin, method, path+"?"+name+"=", "admin-key", "")
		code, body = rec.Code, rec.Body.String()
	} else {
		a := f.do(method, path+"?"+name+"=", f.keyFor(rt), "")
		code, body = a.Code, a.Body.String()
	}
	require.Equal(t, http.StatusBadRequest, code, "%s ?%s=: %s", rt.pattern, name, body)
	require.Contains(t, body, `"field":"`+name+`"`, "%s ?%s=", rt.pattern, name)
}
