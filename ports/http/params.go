package httpport

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/domain/uuid"
)

// params reads query parameters, keeping the first error; each names its
// parameter.
type params struct {
	r   *http.Request
	v   url.Values
	err error
}

func newParams(r *http.Request) *params { return &params{r: r, v: r.URL.Query()} }

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
		} else if after.List != "" && after.List != p.list() && p.err == nil {
			// A cursor without List was answered before cursors named
			// their list (a rolling upgrade): it walks on as it did.
			p.err = errOtherList
		}
		pg.Number, pg.After = 0, after
		return pg
	}
	if pg.Offset()+pg.Size > query.MaxDepth {
		p.fail("page", "must end within the first %d rows (page x page_size); follow next_cursor to go deeper", query.MaxDepth)
	}
	return pg
}

// errOtherList refuses a cursor given with another path, other filters or
// another merchant's key than the page that answered it.
var errOtherList = apperr.Invalid("cursor", "was answered for another list, other filters or another merchant; give it with the path, filters and key of the page that answered it, or start again without a cursor")

// boundCursor is the cursor parameter of a list whose cursors are its own
// (the availability's: a slot's start and staff member), bound to the
// query that answered it as "<cursor>.<list>" (withList): one of another
// query would be read as a place in this one, and leave out every row
// before it. A cursor without ".<list>" was answered before they named
// their query (a rolling upgrade): it walks on as it did.
func (p *params) boundCursor() string {
	c, list, bound := strings.Cut(p.one("cursor"), ".")
	if bound && list != p.list() && p.err == nil {
		p.err = errOtherList
	}
	return c
}

// withList is next, a list's own cursor, bound to the query p asked
// (boundCursor reads it back); empty on the last page.
func (p *params) withList(next string) string {
	if next == "" {
		return ""
	}
	return next + "." + p.list()
}

// list names the list a page was asked of: the path, the key's merchant
// (and staff member, for worker keys), and every filter, that is every
// parameter but those that say where the page starts and how long it is
// (cursor, page, page_size) and min_position, which only waits. A digest:
// the cursor stays short and opaque, and shows no filter's text.
func (p *params) list() string {
	sc := scope(p.r)
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q", p.r.URL.Path, sc.MerchantID, sc.StaffID)
	names := make([]string, 0, len(p.v))
	for name, vals := range p.v {
		switch name {
		case "cursor", "page", "page_size", "min_position":
			continue
		}
		if slices.ContainsFunc(vals, func(v string) bool { return v != "" }) { // q= is no search
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		// Repeated values (status) are a set: their order says nothing.
		fmt.Fprintf(h, " %q=%q", name, slices.Sorted(slices.Values(p.v[name])))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:12])
}

// nextOf binds the page's next cursor to the list it was asked of
// (params.list), so that listPage refuses it on any other.
func nextOf[V any](p *params, l query.List[V]) query.List[V] {
	if l.Next != nil {
		next := *l.Next
		next.List = p.list()
		l.Next = &next
	}
	return l
}

// cursorToken is a cursor as clients see it: opaque, base64url of JSON.
// List is absent from the cursors answered before they named their list.
type cursorToken struct {
	Order string `json:"o"`
	At    string `json:"t"`
	ID    string `json:"i"`
	List  string `json:"l,omitempty"`
}

// FormatCursor is the next_cursor of c.
func FormatCursor(c *query.Cursor) string {
	b, _ := json.Marshal(cursorToken{Order: c.Order, At: c.At.UTC().Format(time.RFC3339Nano), ID: c.ID, List: c.List})
	return base64.RawURLEncoding.EncodeToString(b)
}

// columnName is a sort column's name as the lists' tables spell them: lower
// case, at most Postgres's 63 bytes of an identifier.
var columnName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

func parseCursor(s string) (*query.Cursor, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	var tok cursorToken
	// The sort column is a column name; anything else was made up, and a
	// refusal would echo it (internal/keyset names it in its 422).
	if err != nil || json.Unmarshal(b, &tok) != nil || !columnName.MatchString(tok.Order) {
		return nil, false
	}
	at, err := time.Parse(time.RFC3339Nano, tok.At)
	id, ok := uuid.Parse(tok.ID)
	// A time the database cannot hold was never a row's: no cursor of
	// this API names one.
	if err != nil || !ok || event.InstantProblem(at) != "" {
		return nil, false
	}
	return &query.Cursor{Order: tok.Order, At: at, ID: id, List: tok.List}, true
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
	t, ok := parseRFC3339(s)
	if !ok {
		p.fail(name, "must be an RFC 3339 time with an offset, got %q", s)
		return nil
	}
	if problem := event.InstantProblem(t); problem != "" {
		p.fail(name, "%s, got %q", problem, s)
		return nil
	}
	return &t
}

// timeRange reads a list's [from, to) range, each optional. A range that
// is empty or runs backwards is refused naming to, as a visits or an
// availability read refuses it: a client that swapped the two meant a
// range, and an empty page would read as "nothing then".
func (p *params) timeRange() (from, to *time.Time) {
	from, to = p.time("from"), p.time("to")
	if from != nil && to != nil && !to.After(*from) {
		p.fail("to", "must be after from (%s), got %q", from.Format(time.RFC3339Nano), p.v.Get("to"))
	}
	return from, to
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

// parseRFC3339 reads an RFC 3339 time of a client's. Go's parser takes an
// offset hour of 24, which RFC 3339 does not (00 to 23), and would read
// 2030-01-02T00:00:00+24:00 as the first of January: a client that wrote it
// meant something else.
func parseRFC3339(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, false
	}
	_, offset := t.Zone()
	return t, offset > -24*60*60 && offset < 24*60*60
}

// parseTime reads an optional RFC 3339 time field of a request body, to
// the microsecond: Hearth stores times so (event.Instant), and the rules
// must judge the time that is stored. Two times that differ only below a
// microsecond would otherwise pass a rule that one is after the other and
// be stored equal (an empty booking, which Postgres refuses).
func parseTime(field string, s *string) (*time.Time, error) {
	if s == nil {
		return nil, nil
	}
	t, ok := parseRFC3339(*s)
	if !ok {
		return nil, malformed(field, "must be an RFC 3339 time with an offset, got %q", *s)
	}
	t = t.Truncate(time.Microsecond) // as event.Instant does, keeping the offset given
	if problem := event.InstantProblem(t); problem != "" {
		return nil, malformed(field, "%s, got %q", problem, *s)
	}
	return &t, nil
}
