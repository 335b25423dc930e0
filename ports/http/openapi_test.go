package httpport

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/domain/apperr"
)

type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		SecuritySchemes map[string]json.RawMessage `json:"securitySchemes"`
	} `json:"components"`
}

type openAPIOperation struct {
	Security   *[]map[string][]string `json:"security"`
	Roles      []string               `json:"x-roles"`
	Parameters []map[string]any       `json:"parameters"`
	Responses  map[string]any         `json:"responses"`
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func loadOpenAPI(t *testing.T) (openAPIDoc, map[string]any) {
	t.Helper()
	var doc openAPIDoc
	require.NoError(t, json.Unmarshal(openAPI, &doc))
	var raw map[string]any
	require.NoError(t, json.Unmarshal(openAPI, &raw))
	return doc, raw
}

// The document and the route table agree: every route the server serves is
// in the document with its roles, and the document has no path or method
// the server does not serve.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	doc, _ := loadOpenAPI(t)
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."), "an OpenAPI 3 document: %q", doc.OpenAPI)
	require.Contains(t, doc.Components.SecuritySchemes, "bearer")

	served := map[string]route{}
	for _, rt := range (&server{}).routes() {
		method, path, ok := strings.Cut(rt.pattern, " ")
		require.True(t, ok, "pattern %q has a method", rt.pattern)
		key := strings.ToLower(method) + " " + path
		require.NotContains(t, served, key, "route declared twice")
		served[key] = rt
	}
	documented := map[string]openAPIOperation{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			if !slices.Contains(httpMethods, method) {
				continue // parameters, summary, ...
			}
			var op openAPIOperation
			require.NoError(t, json.Unmarshal(raw, &op), "%s %s", method, path)
			documented[method+" "+path] = op
		}
	}

	var missing, extra []string
	for key := range served {
		if _, ok := documented[key]; !ok {
			missing = append(missing, key)
		}
	}
	for key := range documented {
		if _, ok := served[key]; !ok {
			extra = append(extra, key)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	require.Empty(t, missing, "routes the server serves that openapi.json lacks")
	require.Empty(t, extra, "operations in openapi.json the server does not serve")

	for key, rt := range served {
		op := documented[key]
		if len(rt.roles) == 0 {
			require.NotNil(t, op.Security, "%s is public: security: []", key)
			require.Empty(t, *op.Security, "%s is public: security: []", key)
			continue
		}
		require.Nil(t, op.Security, "%s takes the document's bearer security", key)
		roles := make([]string, len(rt.roles))
		for i, r := range rt.roles {
			roles[i] = string(r)
		}
		require.ElementsMatch(t, roles, op.Roles, "%s: x-roles", key)
		require.Contains(t, op.Responses, "401", key)
		require.Contains(t, op.Responses, "403", key)
	}
}

var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// Each operation declares its path parameters, a success answer and the
// problem answers; every $ref resolves.
func TestOpenAPIOperationsAreComplete(t *testing.T) {
	t.Parallel()
	doc, raw := loadOpenAPI(t)
	resolve := func(ref string) (any, bool) {
		var node any = raw
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			m, ok := node.(map[string]any)
			if !ok {
				return nil, false
			}
			if node, ok = m[part]; !ok {
				return nil, false
			}
		}
		return node, true
	}
	var walk func(path string, node any)
	walk = func(path string, node any) {
		switch n := node.(type) {
		case map[string]any:
			if ref, ok := n["$ref"].(string); ok {
				_, found := resolve(ref)
				require.True(t, found, "%s: $ref %s does not resolve", path, ref)
			}
			for k, v := range n {
				walk(path+"/"+k, v)
			}
		case []any:
			for _, v := range n {
				walk(path, v)
			}
		}
	}
	walk("#", raw)

	for path, item := range doc.Paths {
		for method, rawOp := range item {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			var op openAPIOperation
			require.NoError(t, json.Unmarshal(rawOp, &op))
			declared := map[string]bool{}
			for _, p := range op.Parameters {
				if ref, ok := p["$ref"].(string); ok {
					r, _ := resolve(ref)
					p = r.(map[string]any)
				}
				if p["in"] == "path" {
					declared[p["name"].(string)] = true
				}
			}
			for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
				require.True(t, declared[m[1]], "%s %s: path parameter %s is not declared", method, path, m[1])
			}
			success := false
			for code, resp := range op.Responses {
				if strings.HasPrefix(code, "2") {
					success = true
				}
				if code >= "400" {
					r := resp.(map[string]any)
					if ref, ok := r["$ref"].(string); ok {
						resolved, _ := resolve(ref)
						r = resolved.(map[string]any)
					}
					content, _ := r["content"].(map[string]any)
					if code != "503" {
						require.Contains(t, content, "application/problem+json", "%s %s answers %s as problem+json", method, path, code)
					}
				}
			}
			require.True(t, success, "%s %s has a success answer", method, path)
			if method == "get" && strings.HasPrefix(path, "/v1/") {
				// The consistency wait serves every GET under /v1
				// (docs/api.md, read your writes).
				var refs []string
				for _, p := range op.Parameters {
					if ref, ok := p["$ref"].(string); ok {
						refs = append(refs, ref)
					}
				}
				for _, want := range []string{"#/components/parameters/min_position", "#/components/parameters/consistency_position"} {
					require.Contains(t, refs, want, "GET %s declares what its wait reads", path)
				}
			}
			require.Contains(t, op.Responses, "500", "%s %s", method, path)
			require.Contains(t, op.Responses, "429", "%s %s: every operation may be rate limited", method, path)
			require.Contains(t, op.Responses, "431", "%s %s: net/http refuses headers over the cap before any route (httpport.Listener)", method, path)
			tooMany := op.Responses["429"].(map[string]any)
			if ref, ok := tooMany["$ref"].(string); ok {
				resolved, _ := resolve(ref)
				tooMany = resolved.(map[string]any)
			}
			headers, _ := tooMany["headers"].(map[string]any)
			for _, h := range []string{"Retry-After", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
				require.Contains(t, headers, h, "%s %s: 429 tells %s", method, path, h)
			}
		}
	}
}

type noKeys struct{}

func (noKeys) Authenticate(context.Context, string) (access.Principal, error) {
	return access.Principal{}, apperr.ErrNotFound
}

// The document is served without a key, in every mode.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	for _, apiEnabled := range []bool{true, false} {
		h, err := NewHandler(Config{Auth: noKeys{}, APIEnabled: apiEnabled})
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		res, err := srv.Client().Get(srv.URL + "/openapi.json")
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		res.Body.Close()
		srv.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Equal(t, "application/json", res.Header.Get("Content-Type"))
		require.JSONEq(t, string(openAPI), string(body))
	}
	// And /v1 still needs one.
	h, err := NewHandler(Config{Auth: noKeys{}, APIEnabled: true})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/orders", nil))
	require.Equal(t, http.StatusUnauthorized, rec.Code)
}

// Every write under /v1 takes an Idempotency-Key; the writes with entity
// tags take If-Match, and their GETs If-None-Match (answering 304).
func TestOpenAPIConditionalAndIdempotentHeaders(t *testing.T) {
	t.Parallel()
	doc, raw := loadOpenAPI(t)
	// conflictHeaders is the headers the 409 of op declares: a write that
	// takes Idempotency-Key answers a repeat 409 idempotency-in-progress
	// with Retry-After, and 409 secret-shown-once with Idempotent-Replayed
	// and Location, which a generated client reads only when declared.
	conflictHeaders := func(op openAPIOperation) map[string]any {
		r, _ := op.Responses["409"].(map[string]any)
		if ref, ok := r["$ref"].(string); ok {
			r, _ = raw["components"].(map[string]any)["responses"].(map[string]any)[strings.TrimPrefix(ref, "#/components/responses/")].(map[string]any)
		}
		h, _ := r["headers"].(map[string]any)
		return h
	}
	param := func(op openAPIOperation, name string) bool {
		for _, p := range op.Parameters {
			if p["$ref"] == "#/components/parameters/"+name {
				return true
			}
		}
		return false
	}
	writes := 0
	for _, rt := range (&server{}).routes() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		var op openAPIOperation
		require.NoError(t, json.Unmarshal(doc.Paths[path][strings.ToLower(method)], &op), rt.pattern)
		if rt.api && method != http.MethodGet {
			// Every write reads If-Match (noIfMatch where it checks no
			// version), so every one may answer 412.
			require.Contains(t, op.Responses, "412", rt.pattern)
		}
		if isWrite(rt.pattern) {
			writes++
			require.True(t, param(op, "IdempotencyKey"), "%s takes Idempotency-Key", rt.pattern)
			for _, h := range []string{"Retry-After", "Idempotent-Replayed", "Location"} {
				require.Contains(t, conflictHeaders(op), h, "%s: a repeat's 409 declares %s", rt.pattern, h)
			}
			require.Equal(t, rt.etag, param(op, "IfMatch"), "%s: If-Match exactly where versions are", rt.pattern)
			require.Contains(t, op.Responses, "412", rt.pattern)
		}
		if method == http.MethodGet && slices.Contains([]string{"/v1/orders/{id}", "/v1/service-requests/{id}", "/v1/schedules/{id}", "/v1/webhook-endpoints/{id}", "/v1/plans/{id}"}, path) {
			require.True(t, param(op, "IfNoneMatch"), rt.pattern)
			require.Contains(t, op.Responses, "304", rt.pattern)
		}
	}
	require.Equal(t, 33, writes, "the writes under /v1")
}

// The document's text patterns agree with the decoder's: the fields it
// documents as multi-line (tab and line breaks allowed) are those tagged
// text:"multiline" in the request types.
func TestOpenAPIMultiLineFields(t *testing.T) {
	t.Parallel()
	tagged := map[string]bool{}
	for _, newInput := range requestInputs {
		typ := reflect.TypeOf(newInput()).Elem()
		for i := range typ.NumField() {
			if f := typ.Field(i); f.Tag.Get("text") == "multiline" {
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				tagged[name] = true
			}
		}
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Pattern string `json:"pattern"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(openAPI, &doc))
	documented, oneLine := map[string]bool{}, 0
	for _, schema := range doc.Components.Schemas {
		for name, prop := range schema.Properties {
			switch {
			case strings.Contains(prop.Pattern, `\u0009`), strings.Contains(prop.Pattern, `\u0000-\u0008`):
				documented[name] = true
			case strings.Contains(prop.Pattern, `\u0000-\u001F`):
				oneLine++
			}
		}
	}
	require.Equal(t, tagged, documented)
	require.NotZero(t, oneLine, "one-line text fields have their pattern too")
}
