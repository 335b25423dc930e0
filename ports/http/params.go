package httpport

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"hearth/app/query"
	"hearth/domain/event"
	"hearth/domain/uuid"
)

// params reads query parameters, keeping the first error; each names its
// parameter.
type params struct {
	v   url.Values
	err error
}

func newParams(r *http.Request) *params { return &params{v: r.URL.Query()} }

func (p *params) fail(name, format string, args ...any) {
	if p.err == nil {
		p.err = malformed(name, format, args...)
	}
}

// one is the value of a parameter that takes one (empty when absent). Given
// twice it is refused: a filter given two values would otherwise answer
// for one of them, and look complete.
func (p *params) one(name string) string {
	if len(p.v[name]) > 1 {
		p.fail(name, "must be given at most once")
	}
	return p.v.Get(name)
}

// int reads an integer parameter; given empty it is refused, as uuid's
// are: a client that sends ?page_size= meant a size, and the default would
// answer without a word.
func (p *params) int(name string, def, min, max int) int {
	s := p.one(name)
	if s == "" && !p.v.Has(name) {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < min || n > max {
		p.fail(name, "must be an integer from %d to %d, got %q", min, max, s)
		return def
	}
	return n
}

// page reads a numbered page (the admin lists, whose tables stay small).
func (p *params) page() query.Page {
	return query.Page{Number: p.int("page", 1, 1, 1_000_000), Size: p.int("page_size", 20, 1, 200)}
}

// listPage reads a page of a /v1 list: page_size, and page or cursor (a
// next_cursor this API returned). Numbered pages reach query.MaxDepth rows
// deep, since an OFFSET walks every row it skips; a cursor goes anywhere at
// the cost of the first page.
func (p *params) listPage() query.Page {
	pg := p.page()
	if c := p.one("cursor"); c != "" {
		if p.v.Has("page") {
			p.fail("page", "must not be given with cursor: the cursor says where the page starts")
		}
		after, ok := parseCursor(c)
		if !ok {
			p.fail("cursor", "must be a next_cursor of this API, unchanged")
		}
		pg.Number, pg.After = 0, after
		return pg
	}
	if pg.Offset()+pg.Size > query.MaxDepth {
		p.fail("page", "must end within the first %d rows (page x page_size); follow next_cursor to go deeper", query.MaxDepth)
	}
	return pg
}

// cursorToken is a cursor as clients see it: opaque, base64url of JSON.
type cursorToken struct {
	Order string `json:"o"`
	At    string `json:"t"`
	ID    string `json:"i"`
}

// FormatCursor is the next_cursor of c.
func FormatCursor(c *query.Cursor) string {
	b, _ := json.Marshal(cursorToken{Order: c.Order, At: c.At.UTC().Format(time.RFC3339Nano), ID: c.ID})
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseCursor(s string) (*query.Cursor, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	var tok cursorToken
	if err != nil || json.Unmarshal(b, &tok) != nil || tok.Order == "" {
		return nil, false
	}
	at, err := time.Parse(time.RFC3339Nano, tok.At)
	id, ok := uuid.Parse(tok.ID)
	// A time the database cannot hold was never a row's: no cursor of
	// this API names one.
	if err != nil || !ok || event.InstantProblem(at) != "" {
		return nil, false
	}
	return &query.Cursor{Order: tok.Order, At: at, ID: id}, true
}

// uuid reads a UUID parameter. Given empty (?customer_id=, a URL template
// whose variable was empty) it is refused, not read as absent: that would
// answer for every customer.
func (p *params) uuid(name string) string {
	s := p.one(name)
	if s == "" && !p.v.Has(name) {
		return ""
	}
	id, ok := uuid.Parse(s)
	if !ok {
		p.fail(name, "must be a UUID, got %q", s)
	}
	return id
}

// time reads an RFC 3339 time parameter; given empty it is refused, as
// uuid's are.
func (p *params) time(name string) *time.Time {
	s := p.one(name)
	if s == "" && !p.v.Has(name) {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		p.fail(name, "must be an RFC 3339 time with an offset, got %q", s)
		return nil
	}
	if problem := event.InstantProblem(t); problem != "" {
		p.fail(name, "%s, got %q", problem, s)
		return nil
	}
	return &t
}

// oneOf reads a parameter that may repeat, each value from allowed.
func (p *params) oneOf(name string, allowed []string) []string {
	vals := p.v[name]
	for _, v := range vals {
		ok := false
		for _, a := range allowed {
			ok = ok || v == a
		}
		if !ok {
			p.fail(name, "must be one of %v, got %q", allowed, v)
		}
	}
	return vals
}

// parseTime reads an optional RFC 3339 time field of a request body.
func parseTime(field string, s *string) (*time.Time, error) {
	if s == nil {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return nil, malformed(field, "must be an RFC 3339 time with an offset, got %q", *s)
	}
	if problem := event.InstantProblem(t); problem != "" {
		return nil, malformed(field, "%s, got %q", problem, *s)
	}
	return &t, nil
}
