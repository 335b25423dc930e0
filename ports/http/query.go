package httpport

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"hearth/domain/apperr"
)

// queryParameters is the query and header parameters each operation of
// the OpenAPI document declares, by route pattern ("GET /v1/orders"). The
// document is the one declaration of what a route takes (clients are
// generated from it, and openapi_test.go holds it to the route table), so
// the checks of unknown parameters read it rather than a list of their own
// that could drift from it.
var queryParameters = sync.OnceValues(func() (map[string][]queryParam, error) {
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Parameters map[string]openAPIParameter `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		return nil, fmt.Errorf("read openapi.json: %w", err)
	}
	resolve := func(ps []openAPIParameter) ([]queryParam, error) {
		var qs []queryParam
		for _, p := range ps {
			if p.Ref != "" {
				var ok bool
				if p, ok = doc.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]; !ok {
					return nil, fmt.Errorf("read openapi.json: parameter %s does not resolve", p.Ref)
				}
			}
			if (p.In == "query" || p.In == "header") && !slices.ContainsFunc(qs, func(q queryParam) bool { return q.name == p.Name && q.in == p.In }) {
				qs = append(qs, queryParam{name: p.Name, in: p.In, repeats: p.Schema.Type == "array"})
			}
		}
		return qs, nil
	}
	out := map[string][]queryParam{}
	for path, item := range doc.Paths {
		var common []openAPIParameter // declared for every method of the path
		if raw, ok := item["parameters"]; ok {
			if err := json.Unmarshal(raw, &common); err != nil {
				return nil, fmt.Errorf("read openapi.json: %s parameters: %w", path, err)
			}
		}
		for method, raw := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
			default:
				continue
			}
			var op struct {
				Parameters []openAPIParameter `json:"parameters"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				return nil, fmt.Errorf("read openapi.json: %s %s: %w", method, path, err)
			}
			names, err := resolve(append(slices.Clone(common), op.Parameters...))
			if err != nil {
				return nil, err
			}
			out[strings.ToUpper(method)+" "+path] = names
		}
	}
	return out, nil
})

// openAPIParameter is a parameter of the document, or a $ref to one.
type openAPIParameter struct {
	Ref    string `json:"$ref"`
	Name   string `json:"name"`
	In     string `json:"in"`
	Schema struct {
		Type any `json:"type"` // a string, or in 3.1 a list of them
	} `json:"schema"`
}

// queryParam is a query (or header) parameter an operation declares.
type queryParam struct {
	name string
	in   string // "query" or "header"
	// repeats: the document declares an array (?status=a&status=b);
	// any other parameter takes one value.
	repeats bool
}

// routeInput is what an API route's operation declares of the input
// checkQuery and checkHeaders look at, worked out once.
type routeInput struct {
	query []queryParam // its query parameters
	takes string       // them, for a problem's detail: "takes a, b"
	// idempotencyKey: it takes an Idempotency-Key header.
	idempotencyKey bool
	// position, timeout: it takes the Consistency-Position and
	// Consistency-Timeout headers (a GET under /v1, which waits for them).
	position, timeout bool
}

// declaredInput is each API route's (under /v1 and /admin) routeInput, by
// pattern.
func declaredInput(rts []route) (map[string]routeInput, error) {
	documented, err := queryParameters()
	if err != nil {
		return nil, err
	}
	out := map[string]routeInput{}
	for _, rt := range rts {
		if !rt.api {
			continue
		}
		params, ok := documented[rt.pattern]
		if !ok {
			return nil, errors.New("route " + rt.pattern + " has no operation in openapi.json")
		}
		var in routeInput
		var names []string
		for _, p := range params {
			switch {
			case p.in == "query":
				in.query = append(in.query, p)
				names = append(names, p.name)
			case p.name == HeaderIdempotencyKey:
				in.idempotencyKey = true
			case p.name == HeaderPosition:
				in.position = true
			case p.name == HeaderTimeout:
				in.timeout = true
			}
		}
		in.takes = "takes no query parameters"
		if len(names) > 0 {
			in.takes = "takes " + strings.Join(names, ", ")
		}
		out[rt.pattern] = in
	}
	return out, nil
}

// checkQuery refuses a request to an API route that carries a query
// parameter its operation does not declare: a filter with a typo
// (?stauts=confirmed) would otherwise be ignored, and the answer look like
// the one asked for. Every such parameter is named (400, like any bad
// parameter). The route is the pattern the mux matched (Request.Pattern);
// routes outside the API (the console, probes, the document) have no entry
// and are not checked.
func (s *server) checkQuery(r *http.Request) error {
	in, ok := s.input[r.Pattern]
	if !ok || r.URL.RawQuery == "" {
		return nil
	}
	if err := wellFormedQuery(r.URL.RawQuery); err != nil {
		return err
	}
	declared := in.query
	var unknown, twice []string
	for name, values := range r.URL.Query() {
		i := slices.IndexFunc(declared, func(q queryParam) bool { return q.name == name })
		switch {
		case i < 0:
			unknown = append(unknown, name)
		case len(values) > 1 && !declared[i].repeats:
			twice = append(twice, name)
		}
	}
	if len(unknown) == 0 {
		if len(twice) == 0 {
			return nil
		}
		// Reading the first of two would answer for a filter the client
		// may not have meant, and look complete.
		slices.Sort(twice)
		bad := malformed(twice[0], "must be given at most once")
		for _, name := range twice[1:] {
			bad.fields = append(bad.fields, apperr.FieldError{Field: name, Message: "must be given at most once"})
			bad.detail += "; " + name + ": must be given at most once"
		}
		return bad
	}
	slices.Sort(unknown)
	takes := in.takes
	msg := "is not a query parameter of " + r.Pattern + ", which " + takes
	var quoted []string
	var fields apperr.Fields // at most apperr.MaxFieldErrors listed
	for _, name := range unknown {
		if len(quoted) < apperr.MaxFieldErrors {
			quoted = append(quoted, apperr.Quote(name))
		}
		fields.Add(apperr.Clip(name), "%s", msg)
	}
	what := "unknown query parameter "
	if len(unknown) > 1 {
		what = "unknown query parameters "
	}
	return &badRequest{slug: "malformed-request", detail: what + strings.Join(quoted, ", ") + notListed(fields) + ": " + r.Pattern + " " + takes,
		fields: fields.List()}
}

// notListed is what a detail that names the fields adds when fields left
// some out: how many.
func notListed(fields apperr.Fields) string {
	if n := fields.Omitted(); n > 0 {
		return fmt.Sprintf(" and %d more not listed", n)
	}
	return ""
}

// wellFormedQuery refuses a query string that url.ParseQuery cannot read
// whole, naming each parameter it would leave out: ParseQuery drops a pair
// with a ';' in it or a bad %-escape and carries on, so
// ?status=confirmed;page=2 would read as no status at all.
func wellFormedQuery(raw string) error {
	var fields apperr.Fields // at most apperr.MaxFieldErrors listed
	var quoted []string
	for pair := range strings.SplitSeq(raw, "&") {
		rawKey, rawValue, _ := strings.Cut(pair, "=")
		key, keyErr := url.QueryUnescape(rawKey)
		if keyErr != nil {
			key = rawKey // named as sent: it has no other spelling
		}
		var problem string
		switch _, valueErr := url.QueryUnescape(rawValue); {
		case strings.Contains(pair, ";"):
			problem = "parameters are separated by &, not ;"
		case keyErr != nil || valueErr != nil:
			problem = "a % must begin an escape of two hexadecimal digits"
		default:
			continue
		}
		fields.Add(apperr.Clip(key), "is not a well-formed query parameter: %s", problem)
		if len(quoted) < apperr.MaxFieldErrors {
			quoted = append(quoted, apperr.Quote(key))
		}
	}
	if len(fields) == 0 {
		// What no one pair shows: past its limit of parameters (10,000,
		// counting the &s), ParseQuery reads none of them.
		if _, err := url.ParseQuery(raw); err != nil {
			return &badRequest{slug: "malformed-request", detail: "the query string cannot be read: " + err.Error() + " (at most 10000, counting every &)"}
		}
		return nil
	}
	return &badRequest{slug: "malformed-request", detail: "the query string cannot be read at " + strings.Join(quoted, ", ") + notListed(fields) + ": " + fields[0].Message,
		fields: fields.List()}
}

// oneValueHeaders are the request headers the API reads one value of.
// net/http's Header.Get reads the first line of a header sent on several,
// and the rest would be dropped unseen: an If-Match of two lines would run
// a write at the version its first names. (Idempotency-Key is checked the
// same way where it is read; If-None-Match is a list, so several lines are
// one longer list.)
var oneValueHeaders = []string{"If-Match", HeaderPosition, HeaderTimeout}

// checkHeaders refuses a header of oneValueHeaders sent on more than one
// line, naming it (400, like a parameter given twice), and a header the
// route's operation does not declare, where ignoring it would leave the
// client believing something that did not happen:
//
//   - an Idempotency-Key on a write that does not take one: the key would
//     be ignored, and the client take a retry with it for a safe one (a
//     repeated POST /admin/keys makes a second key whose secret nobody
//     saw). A read ignores one: it is safe to repeat anyway.
//   - Consistency-Position or Consistency-Timeout on a write or an /admin
//     route: only a GET under /v1 waits for a position (awaitPosition), so
//     the answer would be taken for one that waited.
//   - Consistency-Timeout without a position (the header or min_position):
//     there is no wait for it to bound.
func (s *server) checkHeaders(r *http.Request) error {
	for _, name := range oneValueHeaders {
		if len(r.Header.Values(name)) > 1 {
			return malformed(name, "must be sent once")
		}
	}
	in, ok := s.input[r.Pattern]
	if !ok {
		return nil
	}
	for _, h := range []struct {
		name     string
		declared bool
	}{{HeaderPosition, in.position}, {HeaderTimeout, in.timeout}} {
		if !h.declared && len(r.Header.Values(h.name)) > 0 {
			return malformed(h.name, "is not taken by %s: only a GET under /v1 waits for a write's position; send it with the read that must see the write", r.Pattern)
		}
	}
	if len(r.Header.Values(HeaderTimeout)) > 0 && len(r.Header.Values(HeaderPosition)) == 0 && !r.URL.Query().Has("min_position") {
		return malformed(HeaderTimeout, "bounds the wait for a position, and none was given: send it with %s or min_position, or not at all", HeaderPosition)
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead || len(r.Header.Values(HeaderIdempotencyKey)) == 0 {
		return nil
	}
	if !in.idempotencyKey {
		return malformed(HeaderIdempotencyKey, "is not taken by %s: its answer is not kept, and a repeat runs it again; read the result before you send it again", r.Pattern)
	}
	return nil
}
