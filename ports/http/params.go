package httpport

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"hearth/app/query"
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

func (p *params) int(name string, def, min, max int) int {
	s := p.v.Get(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < min || n > max {
		p.fail(name, "must be an integer from %d to %d, got %q", min, max, s)
		return def
	}
	return n
}

func (p *params) page() query.Page {
	return query.Page{Number: p.int("page", 1, 1, 1_000_000), Size: p.int("page_size", 20, 1, 200)}
}

func (p *params) uuid(name string) string {
	s := p.v.Get(name)
	if s == "" {
		return ""
	}
	id, ok := uuid.Parse(s)
	if !ok {
		p.fail(name, "must be a UUID, got %q", s)
	}
	return id
}

func (p *params) time(name string) *time.Time {
	s := p.v.Get(name)
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		p.fail(name, "must be an RFC 3339 time with an offset, got %q", s)
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
	return &t, nil
}
