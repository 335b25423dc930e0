package httpport

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// Conditional requests (RFC 9110, section 13). The entity tag of an order,
// a service request or a schedule is its version, as a strong tag ("3"):
// it changes with every event of the aggregate. Names joined into the view
// (customer, staff, catalog item) are not part of it. A webhook endpoint's
// tag is its version too, which every change moves on, and so is a staff
// member's working hours' (0 before any were set).

// etag is the entity tag of a version.
func etag(version int) string { return strconv.Quote(strconv.Itoa(version)) }

// notModified answers 304 when the request's If-None-Match names the
// resource's current tag (weak comparison, or "*"); the caller sends the
// resource otherwise. It sets the ETag header either way.
func notModified(w http.ResponseWriter, r *http.Request, version int) bool {
	tag := etag(version)
	w.Header().Set("ETag", tag)
	header := r.Header.Get("If-None-Match")
	if header == "" {
		return false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == tag {
			w.WriteHeader(http.StatusNotModified)
			return true
		}
	}
	return false
}

// expectedVersion is the version a write states, from If-Match or the
// body's expected_version (nil: none). If-Match takes one strong tag or
// "*" (any version); given both, they must agree.
func expectedVersion(r *http.Request, fromBody *int) (*int, error) {
	if fromBody != nil && *fromBody < 0 { // no stream is at it: not stale, wrong
		return nil, malformed("expected_version", "must be a version of 0 or more, got %d", *fromBody)
	}
	n, stated, err := ifMatchVersion(r)
	if err != nil || !stated {
		return fromBody, err
	}
	if fromBody != nil && *fromBody != n {
		return nil, malformed("If-Match", "names version %d, but expected_version is %d; send one of them", n, *fromBody)
	}
	return &n, nil
}

// ifMatchVersion reads the request's If-Match, the same way on every
// write: none or "*" (stated false), one strong tag of a version, a weak
// tag (412: a write compares strongly, so it never matches), or anything
// else, a list of tags among them (400: the API takes one tag, and a
// write must not run on a guess at what the client meant).
func ifMatchVersion(r *http.Request) (n int, stated bool, err error) {
	header := strings.TrimSpace(r.Header.Get("If-Match"))
	if header == "" || header == "*" {
		return 0, false, nil
	}
	if weak, ok := strings.CutPrefix(header, "W/"); ok && isOpaqueTag(weak) {
		return 0, false, &preconditionFailed{detail: "If-Match needs a strong entity tag, such as \"3\"; a weak tag never matches"}
	}
	v, err := strconv.Unquote(header)
	n, convErr := strconv.Atoi(v)
	if err != nil || convErr != nil || n < 0 || v != strconv.Itoa(n) || !strings.HasPrefix(header, `"`) {
		return 0, false, malformed("If-Match", "must be one entity tag as an ETag header gave it, such as \"3\", or *; got %q", header)
	}
	return n, true, nil
}

// isOpaqueTag reports whether s is one quoted entity tag (RFC 9110,
// section 8.8.3: etagc is %x21 / %x23-7E / obs-text), so that a weak tag
// is told from a list that begins with one (W/"1", "2") or a spelling of
// none (W/1).
func isOpaqueTag(s string) bool {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return false
	}
	for _, c := range []byte(s[1 : len(s)-1]) {
		if c < 0x21 || c == '"' || c == 0x7f {
			return false
		}
	}
	return true
}

// ifMatchStatesVersion reports whether the request's If-Match names a
// version, so that a stale version is its failed precondition (412). "*"
// names none (any current version matches): a stale version is then the
// body's expected_version, the conflict (409) it is without the header.
func ifMatchStatesVersion(r *http.Request) bool {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	return v != "" && v != "*"
}

// preconditionFailed is an If-Match that does not match: 412.
type preconditionFailed struct {
	detail string
}

func (e *preconditionFailed) Error() string { return e.detail }

// noIfMatch refuses If-Match on writes that check no version: creates,
// reference records, and the writes that take none (a webhook endpoint's
// test ping and redelivery, the /admin writes). No tag can match there (412), so a client
// that sent one must not see the write run as if it had not; "*" runs it.
// A value that is no tag at all is 400, as on every write.
func noIfMatch(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		var bad *badRequest
		switch _, stated, err := ifMatchVersion(r); {
		case errors.As(err, &bad):
			return err
		case err != nil || stated:
			return &preconditionFailed{detail: "If-Match: " + r.Pattern + " checks no entity tag; only the writes of orders, service requests, schedules, service plans, webhook endpoints and working hours do"}
		}
		return h(w, r)
	}
}
