package console

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"hearth/domain/apperr"
	"hearth/domain/civil"
	"hearth/domain/event"
	"hearth/domain/uuid"
)

// formReader reads a submitted form's fields into a command's values,
// collecting every field it cannot read as the API would name it
// (apperr.Fields: a 422 with the field named).
type formReader struct {
	r   *http.Request
	loc *time.Location
	apperr.Fields
}

func newFormReader(r *http.Request, s *session) *formReader {
	return &formReader{r: r, loc: s.loc}
}

// text is the field's value. A field named id or *_id that holds a UUID,
// in any case, reads in its canonical lower-case form, as the API reads a
// body's ids (cleanInput): the aggregates store and compare ids as they
// are given (a worker finds their schedule by its staff id), and a
// customer's data key opens only for the id it was sealed for.
func (f *formReader) text(name string) string {
	v := f.r.PostFormValue(name)
	if name == "id" || strings.HasSuffix(name, "_id") {
		if id, ok := uuid.Parse(v); ok {
			return id
		}
	}
	return v
}

// optText is nil when the field is not in the form at all.
func (f *formReader) optText(name string) *string {
	if _, ok := f.r.PostForm[name]; !ok {
		return nil
	}
	v := f.r.PostFormValue(name)
	return &v
}

// cents reads an amount such as 120, 120.5 or 120.50 as cents.
func (f *formReader) cents(name string) int64 {
	v := strings.TrimSpace(f.text(name))
	if v == "" {
		return 0
	}
	whole, frac, hasFrac := strings.Cut(v, ".")
	if hasFrac && len(frac) == 1 {
		frac += "0"
	}
	n, err := strconv.ParseInt(whole, 10, 64)
	ok := err == nil && !strings.HasPrefix(whole, "+") && len(whole) <= 12
	var fn int64
	if hasFrac {
		fn, err = strconv.ParseInt(frac, 10, 64)
		ok = ok && err == nil && len(frac) == 2 && !strings.HasPrefix(frac, "-") && !strings.HasPrefix(frac, "+")
	}
	if !ok {
		f.Add(name, "must be an amount such as 120 or 120.50, got %q", v)
		return 0
	}
	if strings.HasPrefix(whole, "-") {
		return n*100 - fn
	}
	return n*100 + fn
}

// optCents is nil when the field is not in the form.
func (f *formReader) optCents(name string) *int64 {
	if _, ok := f.r.PostForm[name]; !ok {
		return nil
	}
	v := f.cents(name)
	return &v
}

// when reads a datetime-local field in the session's zone; empty is nil.
// The wall time becomes an instant by civil.Resolve, the rule of every
// local time (a time the clocks skip moves forward by the jump, one they
// show twice is the earlier): time.ParseInLocation promises neither. A
// value with an offset (page.Instant, which a page writes into a hidden
// input) is that instant.
func (f *formReader) when(name string) *time.Time {
	v := strings.TrimSpace(f.text(name))
	if v == "" {
		return nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		if problem := event.InstantProblem(t); problem != "" {
			f.Add(name, "%s, got %q", problem, v)
			return nil
		}
		return &t
	}
	wall, err := time.Parse(localLayout, v)
	if err != nil {
		if wall, err = time.Parse(localLayout+":05", v); err != nil {
			f.Add(name, "must be a date and time such as 2030-05-06T09:00, got %q", v)
			return nil
		}
	}
	t := civil.Resolve(civil.DateOf(wall, time.UTC), civil.At(wall.Hour(), wall.Minute()), f.loc).
		Add(time.Duration(wall.Second()) * time.Second)
	if problem := event.InstantProblem(t); problem != "" {
		f.Add(name, "%s, got %q", problem, v)
		return nil
	}
	return &t
}

// instant reads a time the page itself wrote into the form (RFC 3339),
// such as the updated_at a record's edit form showed.
func (f *formReader) instant(name string) time.Time {
	v := f.text(name)
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		f.Add(name, "must be the time the page showed (RFC 3339), got %q: reload the page", v)
	}
	return t
}

// checkbox reads a checkbox: checked is true.
func (f *formReader) checkbox(name string) bool { return f.text(name) != "" }

// version reads the version the page showed (expected_version).
func (f *formReader) version() *int {
	v := f.text("expected_version")
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		f.Add("expected_version", "must be a version number, got %q", v)
		return nil
	}
	return &n
}

// pathID reads the {id} path value, which must be a UUID.
func pathID(r *http.Request) (string, error) {
	id, ok := uuid.Parse(r.PathValue("id"))
	if !ok {
		return "", apperr.ErrNotFound
	}
	return id, nil
}
