package httpport

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"unicode"

	"hearth/app/access"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/servicerequest"
)

// problem is an RFC 9457 problem+json body. Type is a stable URI reference
// (/problems/<slug>); clients branch on it, not on Detail.
type problem struct {
	Type   string              `json:"type"`
	Title  string              `json:"title"`
	Status int                 `json:"status"`
	Detail string              `json:"detail"`
	Rule   string              `json:"rule,omitempty"`
	Errors []apperr.FieldError `json:"errors,omitempty"`
	// ConflictingScheduleID names the schedule a booking clashed with.
	ConflictingScheduleID string `json:"conflicting_schedule_id,omitempty"`
	// Limit names the limit a 429 hit: key, merchant, in-flight,
	// client-address, or webhook-queue and exports (apperr.LimitError's).
	Limit string `json:"limit,omitempty"`
	// EventID names the event the event feed cannot give in its public
	// form (/problems/unpublishable-event), or the stored event of the
	// resource a write cannot read (/problems/unreadable-event).
	EventID string `json:"event_id,omitempty"`
}

func newProblem(status int, slug, detail string) problem {
	return problem{Type: "/problems/" + slug, Title: http.StatusText(status), Status: status, Detail: detail}
}

// badRequest is input that cannot be read at all: malformed JSON, a wrong
// JSON type, an unknown field, a path id that is not a UUID, a bad query
// parameter. It answers 400.
type badRequest struct {
	slug   string
	detail string
	fields []apperr.FieldError
}

func (e *badRequest) Error() string { return e.detail }

func malformed(field, format string, args ...any) *badRequest {
	msg := apperr.Message(format, args...)
	return &badRequest{slug: "malformed-request", detail: field + ": " + msg,
		fields: []apperr.FieldError{{Field: field, Message: msg}}}
}

// Problem is the problem+json body the API answers an error with.
type Problem = problem

// ProblemOf is the problem the API answers err with, for another port that
// shows the API's errors (the console shows each field's message next to
// the field). ok is false for an error the API does not expect: p is then
// the 500 problem, without internals, and the caller logs err.
func ProblemOf(err error) (p Problem, ok bool) {
	var (
		bad      *badRequest
		version  *apperr.VersionError
		precond  *preconditionFailed
		idem     *idempotencyError
		invalid  *apperr.ValidationError
		rule     *apperr.RuleError
		conflict *apperr.ConflictError
		limited  *apperr.LimitError
		tooBig   *http.MaxBytesError
		encoded  *encodedBody
		ruled    interface{ Rule() string }

		unpublishable *query.UnpublishableEventError
		unreadable    *event.UnreadableError
	)
	switch {
	case errors.As(err, &bad):
		p = newProblem(http.StatusBadRequest, bad.slug, bad.detail)
		p.Errors = bad.fields
	case errors.As(err, &precond):
		p = newProblem(http.StatusPreconditionFailed, "precondition-failed", precond.detail)
	case errors.As(err, &version):
		p = newProblem(http.StatusConflict, "conflict", version.Error())
	case errors.As(err, &idem):
		p = newProblem(idem.status, idem.slug, idem.detail)
	case errors.As(err, &tooBig):
		p = newProblem(http.StatusRequestEntityTooLarge, "body-too-large",
			fmt.Sprintf("request body is larger than %d bytes", tooBig.Limit))
	case errors.Is(err, errBodyTimeout):
		p = newProblem(http.StatusRequestTimeout, "request-timeout", err.Error())
	case errors.As(err, &encoded):
		p = newProblem(http.StatusUnsupportedMediaType, "unsupported-content-encoding", encoded.Error())
	case errors.As(err, &invalid):
		p = newProblem(http.StatusUnprocessableEntity, "validation-failed", invalid.Error())
		p.Errors = invalid.Fields
	case errors.As(err, &rule):
		p = newProblem(http.StatusUnprocessableEntity, "rule-broken", cmp.Or(ruleHints[rule.Rule], rule.Detail))
		p.Rule = rule.Rule
	case errors.As(err, &ruled):
		p = newProblem(http.StatusUnprocessableEntity, "rule-broken", err.Error())
		p.Rule = ruled.Rule()
	case errors.As(err, &limited):
		p = newProblem(http.StatusTooManyRequests, "rate-limited", limited.Detail)
		p.Limit = limited.Limit
	case errors.As(err, &conflict):
		p = newProblem(http.StatusConflict, "conflict", conflict.Detail)
		p.ConflictingScheduleID = conflict.With["conflicting_schedule_id"]
	case errors.As(err, &unpublishable):
		p = newProblem(http.StatusInternalServerError, "unpublishable-event", err.Error()+
			"; the feed stops before it until a fix is deployed or an operator skips it (docs/operations.md, parked aggregates)")
		p.EventID = unpublishable.EventID
	case errors.As(err, &unreadable):
		// Not the client's doing, and no retry helps until the event reads:
		// a 500, but one that says so and names the event, where the bare
		// internal problem left client and operator guessing. Its cause
		// stays in the log: it may name a data subject or the configured
		// master keys.
		p = newProblem(http.StatusInternalServerError, "unreadable-event", fmt.Sprintf(
			"the resource's stored event %s (version %d, type %s) cannot be read by this server; writes to the resource fail "+
				"until a release that reads it serves them (a rolling upgrade under way) or the event is repaired (docs/operations.md, unreadable events)",
			unreadable.EventID, unreadable.Version, unreadable.Type))
		p.EventID = unreadable.EventID
	case errors.Is(err, errTooManyFeedWaits):
		p = newProblem(http.StatusServiceUnavailable, "too-many-waits", err.Error())
	case errors.Is(err, errTooManyExports):
		p = newProblem(http.StatusServiceUnavailable, "too-many-exports", err.Error())
	case errors.Is(err, apperr.ErrNotFound):
		p = newProblem(http.StatusNotFound, "not-found", "no such resource")
	case errors.Is(err, apperr.ErrForbidden):
		p = newProblem(http.StatusForbidden, "forbidden", "this key's role may not do this")
	default:
		return newProblem(http.StatusInternalServerError, "internal", "internal error; the server log has the details"), false
	}
	return p, true
}

// writeError maps an error to its problem (ProblemOf) and writes it.
// Unexpected errors are logged here, once, and answered without internals.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	p, known := ProblemOf(err)
	var (
		version       *apperr.VersionError
		idem          *idempotencyError
		limited       *apperr.LimitError
		unpublishable *query.UnpublishableEventError
		unreadable    *event.UnreadableError
	)
	switch {
	case errors.Is(err, access.ErrKeyRefused): // found by the write's own check (keygate.go)
		refuseKey(w)
		return
	case known && errors.As(err, &unpublishable):
		// A bug or a corruption that stops a merchant's feed: the operator
		// must hear of it.
		s.log.ErrorContext(r.Context(), "event feed stopped before an event", "method", r.Method, "path", r.URL.Path,
			"event_id", unpublishable.EventID, "position", unpublishable.Position, "error", err)
	case known && errors.As(err, &unreadable):
		// Every write to the aggregate fails until someone acts.
		s.log.ErrorContext(r.Context(), "write refused: a stored event does not read", "method", r.Method, "path", r.URL.Path,
			"event_id", unreadable.EventID, "type", unreadable.Type, "stream_id", unreadable.StreamID, "version", unreadable.Version, "error", err)
	case known && p.Status == http.StatusConflict && errors.As(err, &version) && ifMatchStatesVersion(r):
		w.Header().Set("ETag", etag(version.Actual))
		p = newProblem(http.StatusPreconditionFailed, "precondition-failed", version.Error())
	case known && errors.As(err, &idem) && idem.status == http.StatusConflict:
		w.Header().Set("Retry-After", "1")
	case known && errors.As(err, &limited):
		w.Header().Set("Retry-After", strconv.Itoa(max(int(limited.RetryAfter.Seconds()), 1)))
	case known && errors.As(err, new(*encodedBody)):
		// RFC 9110's answer to a content coding the server does not read.
		w.Header().Set("Accept-Encoding", "identity")
	case known:
	case r.Context().Err() != nil && (errors.Is(err, context.Canceled) || sqlState(err) == queryCanceled):
		return // the client went away; nobody reads an answer
	case sqlState(err) == queryCanceled:
		// statement_timeout (REQUEST_STATEMENT_TIMEOUT) cut a query.
		s.log.WarnContext(r.Context(), "request query timed out", "method", r.Method, "path", r.URL.Path, "error", err)
		w.Header().Set("Retry-After", "1")
		p = newProblem(http.StatusServiceUnavailable, "timeout", "the request took longer than the server allows; try again later")
	case errors.Is(r.Context().Err(), context.DeadlineExceeded):
		// The request outlived HTTP_WRITE_TIMEOUT: a database server that
		// went silent held it (the answer may still reach the client).
		s.log.WarnContext(r.Context(), "request timed out", "method", r.Method, "path", r.URL.Path, "error", err)
		w.Header().Set("Retry-After", "1")
		p = newProblem(http.StatusServiceUnavailable, "timeout", "the request took longer than the server allows; try again later")
	case errors.As(err, new(interface{ DatabaseUnavailable() })):
		// A failover or a restart under way (internal/database's
		// NoPrimaryError, UnreachableError).
		s.log.WarnContext(r.Context(), "no database server accepts writes", "method", r.Method, "path", r.URL.Path, "error", err)
		w.Header().Set("Retry-After", "1")
		p = newProblem(http.StatusServiceUnavailable, "database-unavailable", "no database server accepts writes (a failover or a restart is under way); try again later")
	default:
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	writeProblem(w, p)
}

// ruleHints are the API's details of rules whose remedy is another route:
// the domain names the rule, the HTTP port names the route.
var ruleHints = map[string]string{
	order.RuleCancelNeedsReason:                "cancel an order with POST /v1/orders/{id}/cancel and a reason",
	servicerequest.RuleConvertOnlyByConversion: "convert a request with POST /v1/service-requests/{id}/convert",
}

// queryCanceled is Postgres' SQLSTATE for a statement cancelled by
// statement_timeout (or by a cancel request).
const queryCanceled = "57014"

// sqlState is the SQLSTATE of a database error in err's chain, or "".
func sqlState(err error) string {
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		return pg.SQLState()
	}
	return ""
}

func writeProblem(w http.ResponseWriter, p problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// decode reads a JSON body strictly: one object, no unknown fields, every
// type right. Each failure names the field or the byte offset. The
// Content-Type header is not checked: the body must be JSON whatever it says
// (curl -d sends a form type by default). Its text must then be clean and
// its ids are made canonical (cleanInput).
func decode(r *http.Request, dst any) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	return parseBody(body, dst)
}

// decodeOptional is decode for a body that may be left out: an empty one
// (or only white space), whatever its framing (a Content-Length of 0, or
// chunked with no data), leaves dst as it is.
func decodeOptional(r *http.Request, dst any) error {
	body, err := readBody(r)
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return err
	}
	return parseBody(body, dst)
}

// noBody is decode for a write that takes no body: one that is not empty
// (or only white space) is refused, as an unknown field is. The client
// meant something by it, a reason or a filter, and an answer that ignored
// it would look as if it was heard.
func noBody(r *http.Request) error {
	body, err := readBody(r)
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return err
	}
	return &badRequest{slug: "malformed-request", detail: r.Pattern + " takes no request body; send none"}
}

// parseBody decodes a request body into dst and checks its text.
func parseBody(body []byte, dst any) error {
	if err := decodeJSON(body, dst); err != nil {
		return err
	}
	return cleanInput(body, dst)
}

// errBodyTimeout is a request body that had not all arrived when the
// server's read deadline passed (HTTP_READ_TIMEOUT): trickled or stalled.
// It answers 408, which tells the client what happened; its request was not
// malformed, and nothing failed in Hearth.
var errBodyTimeout = errors.New("the request body did not arrive within the time the server allows for reading a request; send it at once")

// encodedBody is a request body sent with a content coding (gzip, br, ...):
// the API reads a body as it is sent. Parsed as it came, a compressed body
// would answer a baffling "malformed JSON at byte 1", and a plain one
// labelled gzip would be taken despite its label. It answers 415.
type encodedBody struct{ coding string }

func (e *encodedBody) Error() string {
	return "the request body is sent with Content-Encoding " + apperr.Quote(e.coding) + ", which the API does not read; send it uncompressed"
}

// contentCoding is the request's Content-Encoding, every line of it, when
// it names a coding other than identity ("" when none does).
func contentCoding(h http.Header) string {
	codings := strings.Join(h.Values("Content-Encoding"), ", ")
	for c := range strings.SplitSeq(codings, ",") {
		if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
			return codings
		}
	}
	return ""
}

// readBody reads the whole body: a body over MaxBodyBytes is the
// *http.MaxBytesError (413), one not arrived by the read deadline
// errBodyTimeout (408), one sent with a content coding *encodedBody (415),
// any other failure (the client went away mid-body) a 400.
func readBody(r *http.Request) ([]byte, error) {
	if coding := contentCoding(r.Header); coding != "" {
		return nil, &encodedBody{coding: coding}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, err
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, errBodyTimeout
		}
		return nil, &badRequest{slug: "malformed-request", detail: "request body could not be read: " + err.Error()}
	}
	return body, nil
}

// byteOrderMark is UTF-8's byte order mark, which some tools write at the
// start of a file (PowerShell's Out-File -Encoding utf8).
var byteOrderMark = []byte("\uFEFF")

// decodeJSON is decode's strict JSON decoding.
func decodeJSON(body []byte, dst any) error {
	if bytes.HasPrefix(body, byteOrderMark) {
		// JSON texts must not begin with one (RFC 8259, 8.1), and
		// encoding/json would name the character it decodes its first byte
		// as ('ï'), which the client never wrote.
		return &badRequest{slug: "malformed-request", detail: "request body begins with a UTF-8 byte order mark (EF BB BF), which JSON does not allow; send the body without it"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	var (
		syntax  *json.SyntaxError
		typeErr *json.UnmarshalTypeError
	)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		return &badRequest{slug: "malformed-request", detail: "request body is empty; a JSON object is required"}
	case errors.As(err, &syntax):
		return &badRequest{slug: "malformed-request", detail: fmt.Sprintf("malformed JSON at byte %d: %v", syntax.Offset, err)}
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return &badRequest{slug: "malformed-request", detail: "request body must be a JSON object"}
		}
		value := typeErr.Value // "number" and its text, for a number: as long as the client made it
		if len(value) > apperr.MaxQuoted {
			value, _, _ = strings.Cut(value, " ")
		}
		return malformed(field, "must be a JSON %s, got %s", jsonKind(typeErr.Type.Kind().String()), value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return malformed(apperr.Clip(field), "is not a field of this request")
	default:
		return &badRequest{slug: "malformed-request", detail: "malformed JSON: " + err.Error()}
	}
	value, alone := decodedValue(body, dec)
	if !alone {
		return &badRequest{slug: "malformed-request", detail: "request body has data after the JSON object"}
	}
	if hasRepeatedMember(value) {
		return malformed(repeatedMember(value), "is given more than once (member names match whatever their case)")
	}
	return nil
}

// decodedValue is the part of body that dec decoded, and whether only
// white space follows it. (Decoder.More is no test of that: it reports a
// closing ']' or '}' as the end.)
func decodedValue(body []byte, dec *json.Decoder) (value []byte, alone bool) {
	value = body[:dec.InputOffset()]
	return value, len(bytes.TrimLeft(body[len(value):], " \t\r\n")) == 0
}

// hasRepeatedMember reports whether an object of body, JSON that decoded,
// has two members whose names are equal ignoring case (bytes.EqualFold is
// how encoding/json matches a name to a field): a scan of the bytes that
// allocates nothing for most bodies, since every request body goes through
// it. repeatedMember then finds which.
func hasRepeatedMember(body []byte) bool {
	var namesBuf [32][]byte
	var startsBuf [8]int // per open container: where its names begin; -1 for an array
	var setsBuf [8]map[string]struct{}
	names, starts := namesBuf[:0], startsBuf[:0]
	// sets holds, per open container, its names by foldKey once it has
	// more than manyNames: a map target (the week of working hours) takes
	// any names, and comparing each with all before would be quadratic.
	sets := setsBuf[:0]
	key := false // the next string is a member name
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '{':
			starts, sets, key = append(starts, len(names)), append(sets, nil), true
		case '[':
			starts, sets, key = append(starts, -1), append(sets, nil), false
		case '}', ']':
			if top := starts[len(starts)-1]; top >= 0 {
				names = names[:top]
			}
			starts, sets, key = starts[:len(starts)-1], sets[:len(sets)-1], false
		case ',':
			key = len(starts) > 0 && starts[len(starts)-1] >= 0
		case '"':
			start, escaped := i+1, false
			for i++; body[i] != '"'; i++ {
				if body[i] == '\\' {
					i, escaped = i+1, true
				}
			}
			if !key {
				continue
			}
			name := body[start:i]
			if escaped { // rare: compare the name as decoded
				var s string
				if json.Unmarshal(body[start-1:i+1], &s) != nil {
					return false
				}
				name = []byte(s)
			}
			top := len(starts) - 1
			key = false
			if set := sets[top]; set != nil {
				k := foldKey(string(name))
				if _, dup := set[k]; dup {
					return true
				}
				set[k] = struct{}{}
				continue
			}
			own := names[starts[top]:]
			for _, n := range own {
				if bytes.EqualFold(n, name) {
					return true
				}
			}
			names = append(names, name)
			if len(own) >= manyNames {
				set := make(map[string]struct{}, 2*manyNames)
				for _, n := range names[starts[top]:] {
					set[foldKey(string(n))] = struct{}{}
				}
				sets[top], names = set, names[:starts[top]]
			}
		}
	}
	return false
}

// manyNames is how many member names an object's scan compares one by one
// before it keys them by foldKey.
const manyNames = 16

// foldKey is s with each rune replaced by the smallest of its case-folding
// orbit (unicode.SimpleFold): two names have the same key exactly when
// strings.EqualFold (and so encoding/json) takes them for one.
func foldKey(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// repeatedMember is the path of the first member of an object whose name
// an earlier member of the same object already has, compared as
// encoding/json matches names to fields (ignoring case); "" when there is
// none, or when body is not JSON (decoding says why). Such a body is
// ambiguous: the decoder keeps the last of the two, while the
// Idempotency-Key fingerprint (its canonical form keeps both) would take
// {"amount_cents":1,"AMOUNT_CENTS":2} and its reordering, which decode to
// different amounts, for the same request. It walks the tokens, at some
// cost: decodeJSON calls it only once hasRepeatedMember found one.
func repeatedMember(body []byte) string {
	// frame is an open object or array: its path, and the member names
	// read so far (an object) or the index of its next element (an array).
	type frame struct {
		object bool
		path   string
		names  []string
		seen   map[string]bool // the names, by foldKey
		next   int
		name   bool // an object's next token is a member name
	}
	var open []*frame
	// valuePath is the path of the value about to be read in top.
	valuePath := func(top *frame) string {
		if top.object {
			return joinPath(top.path, top.names[len(top.names)-1])
		}
		top.next++
		return top.path + "[" + strconv.Itoa(top.next-1) + "]"
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		var top *frame
		if len(open) > 0 {
			top = open[len(open)-1]
		}
		if name, ok := tok.(string); ok && top != nil && top.object && top.name {
			if top.seen == nil {
				top.seen = map[string]bool{}
			}
			if k := foldKey(name); top.seen[k] {
				return joinPath(top.path, name)
			} else {
				top.seen[k] = true
			}
			top.names, top.name = append(top.names, name), false
			continue
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			open = open[:len(open)-1]
		} else {
			path := ""
			if top != nil {
				path = valuePath(top)
			}
			if ok {
				open = append(open, &frame{object: d == '{', path: path, name: d == '{'})
				continue
			}
		}
		if len(open) == 0 {
			return ""
		}
		if top := open[len(open)-1]; top.object {
			top.name = true
		}
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "int32", "float64":
		return "integer"
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice":
		return "array"
	}
	return "object"
}
