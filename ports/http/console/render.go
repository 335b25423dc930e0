package console

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"hearth/app/access"
	httpport "hearth/ports/http"
)

//go:embed templates/*.html
var templateFS embed.FS

// page is what every template gets.
type page struct {
	Title string
	Nav   string // the navigation entry to mark as current
	S     *sessionView
	Flash flash
	Data  any
	// Form is the submitted form the application refused, shown again
	// with the problem next to its fields.
	Form *form

	loc  *time.Location
	src  string // the page's address, which its live parts poll
	name string // its template
}

func (p *page) template() string { return p.name }

// DocTitle is the page's title in the browser (<title>), which a screen
// reader reads first: a page shown again with its refused form, or a
// refused sign-in, says so there.
func (p *page) DocTitle() string {
	if d, ok := p.Data.(signinData); ok && d.Error != "" {
		return "Not signed in: " + p.Title
	}
	if p.Form != nil && p.Form.Refused() {
		return "Not saved: " + p.Title
	}
	return p.Title
}

type sessionView struct {
	Role    access.Role
	CSRF    string
	Zone    string
	Subject string // the key, as events and the change log name it
}

// option is one choice of a select.
type option struct{ Value, Label string }

// form is a submitted form that the application refused: its values, to
// show them again, and the API's problem, each field's message next to
// its field.
type form struct {
	ID      string
	Values  url.Values
	Problem httpport.Problem
	fields  map[string]string
	// Other are the messages of fields the form does not show.
	Other []string
}

// newForm is the form id refused with err; shown are the fields it has.
func newForm(id string, values url.Values, err error, shown ...string) *form {
	p, _ := httpport.ProblemOf(err)
	f := &form{ID: id, Values: values, Problem: p, fields: map[string]string{}}
	for _, fe := range p.Errors {
		if slices.Contains(shown, fe.Field) {
			if f.fields[fe.Field] == "" { // the first message of a field
				f.fields[fe.Field] = fe.Message
			}
			continue
		}
		f.Other = append(f.Other, fe.Field+": "+fe.Message)
	}
	return f
}

// F is the refused form id, or an empty one when another form (or none)
// was submitted.
func (p *page) F(id string) *form {
	if p.Form != nil && p.Form.ID == id {
		return p.Form
	}
	return &form{ID: id}
}

// Refused reports whether this form was submitted and refused.
func (f *form) Refused() bool { return f.Problem.Status != 0 }

// Summary is the problem's detail, unless every message stands next to its
// field.
func (f *form) Summary() string {
	if len(f.Problem.Errors) > 0 && len(f.Other) == 0 {
		return "Check the fields marked below."
	}
	return f.Problem.Detail
}

// When is t in the session's zone, e.g. "Tue 7 May 09:00".
func (p *page) When(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return ""
		}
		return v.In(p.zone()).Format("Mon 2 Jan 15:04")
	case *time.Time:
		if v == nil {
			return ""
		}
		return p.When(*v)
	}
	return ""
}

// Day is t's date in the session's zone (2006-01-02).
func (p *page) Day(t time.Time) string { return t.In(p.zone()).Format(time.DateOnly) }

// Clock is t's time of day in the session's zone.
func (p *page) Clock(t time.Time) string { return t.In(p.zone()).Format("15:04") }

// Stamp is t with its date and seconds, for logs and timelines.
func (p *page) Stamp(t time.Time) string { return t.In(p.zone()).Format("2006-01-02 15:04:05 MST") }

// Local is t as a datetime-local input's value.
func (p *page) Local(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return ""
		}
		return v.In(p.zone()).Format(localLayout)
	case *time.Time:
		if v == nil {
			return ""
		}
		return p.Local(*v)
	}
	return ""
}

// Instant is t as an exact instant (RFC 3339 with the zone's offset), for
// a hidden input the page fills itself, such as a free slot's: a
// datetime-local value names both instants of an hour the clocks show
// twice, and reads back as the earlier (formReader.when).
func (p *page) Instant(t time.Time) string { return t.In(p.zone()).Format(time.RFC3339) }

func (p *page) zone() *time.Location { return cmp.Or(p.loc, time.UTC) }

// localLayout is the value of an input of type datetime-local.
const localLayout = "2006-01-02T15:04"

// fieldView is one labelled input, select or text area with its message.
type fieldView struct {
	ID, Name, Label, Type, Value, Err, Hint string
	Options                                 []option
	Required                                bool
}

// Described is the ids of the field's hint and message, for
// aria-describedby.
func (f fieldView) Described() string {
	var ids []string
	if f.Hint != "" {
		ids = append(ids, f.ID+"-hint")
	}
	if f.Err != "" {
		ids = append(ids, f.ID+"-err")
	}
	return strings.Join(ids, " ")
}

// field builds a field of form f: its value is what was submitted, else
// value. opts: "required", "hint:<text>".
func field(f *form, name, label, typ string, value any, opts ...any) fieldView {
	v := fmt.Sprint(cmp.Or(value, any("")))
	if f.Values != nil {
		v = f.Values.Get(name)
		if typ == "checkbox" && f.Values.Get(name) == "" {
			v = "false"
		}
	}
	fv := fieldView{ID: f.ID + "-" + name, Name: name, Label: label, Type: typ, Value: v, Err: f.fields[name]}
	for _, o := range opts {
		switch o := o.(type) {
		case []option:
			fv.Options = o
		case string:
			switch {
			case o == "required":
				fv.Required = true
			case strings.HasPrefix(o, "hint:"):
				fv.Hint = strings.TrimPrefix(o, "hint:")
			}
		}
	}
	return fv
}

// money shows cents as an amount with two decimals.
func money(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s%d.%02d", sign, cents/100, cents%100)
}

func (c *Console) templates() (*template.Template, error) {
	var t *template.Template
	funcs := template.FuncMap{
		"field": field,
		"money": money,
		"asset": c.assets.url,
		"label": label,
		// customer is a row's customer's name: only an erasure empties
		// it (a name is required), and an erased person reads as erased,
		// never as a blank (domain: personal data).
		"customer": func(name string) string {
			if name == "" {
				return "erased customer"
			}
			return name
		},
		"pollMs": func() int64 { return c.cfg.PollEvery.Milliseconds() },
		// A new form key each time a form is rendered (once.go).
		"formKey": randomToken,
		"live": func(name string, p *page) (template.HTML, error) {
			inner, err := execute(t, name, p)
			if err != nil {
				return "", err
			}
			return liveRegion(name, p.src, c.cfg.PollEvery, inner), nil
		},
		"lower": strings.ToLower,
		"blank": func(label string, opts []option) []option {
			return append([]option{{Value: "", Label: label}}, opts...)
		},
		"opts": func(values ...any) []option {
			var out []option
			for _, v := range values {
				switch v := v.(type) {
				case string:
					out = append(out, option{Value: v, Label: label(v)})
				case []string:
					for _, x := range v {
						out = append(out, option{Value: x, Label: label(x)})
					}
				}
			}
			return out
		},
		// defaultOf is a new record's value of a field of the type: a
		// checkbox starts checked (new staff and items are active).
		"defaultOf": func(typ string) string {
			if typ == "checkbox" {
				return "true"
			}
			return ""
		},
		"req": func(required bool) string {
			if required {
				return "required"
			}
			return ""
		},
		"pair": func(a, b any) struct{ A, B any } { return struct{ A, B any }{a, b} },
	}
	t, err := template.New("console").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	return t, err
}

// label turns a status or field name into words: in_service -> in service.
func label(s string) string { return strings.ReplaceAll(s, "_", " ") }

func execute(t *template.Template, name string, data any) ([]byte, error) {
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, data); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return buf.Bytes(), nil
}

// show serves a page that build reads, and its live parts (parts).
func (c *Console) show(build func(r *http.Request, s *session) (*page, error), parts ...string) handler {
	return func(w http.ResponseWriter, r *http.Request, s *session) error {
		p, err := build(r, s)
		if err != nil {
			return err
		}
		if c.part(w, r, s, p, parts...) {
			return nil
		}
		c.render(w, r, s, http.StatusOK, p.name, p)
		return nil
	}
}

// pageAddress is the address of the page a request shows, which its live
// parts poll: the request's own for a GET; for a form the page re-rendered
// with its refusal, the page the form was on (the Referer, a console page of
// this host: the console sends it to itself, Referrer-Policy same-origin),
// since the form's own address takes only POSTs.
func pageAddress(r *http.Request) string {
	u := r.URL
	if !safe(r) {
		if ref, err := url.Parse(r.Referer()); err == nil && ref.Host == r.Host && safeNext(ref.Path) != "" {
			u = ref
		}
	}
	src := u.Path
	if q := u.Query(); len(q) > 0 {
		q.Del("part")
		if len(q) > 0 {
			src += "?" + q.Encode()
		}
	}
	return src
}

// render writes the page: the named template with the session's view.
func (c *Console) render(w http.ResponseWriter, r *http.Request, s *session, status int, name string, p *page) {
	prepare(r, s, p)
	body, err := execute(c.tmpl, name, p)
	if err != nil {
		c.log.ErrorContext(r.Context(), "render failed", "template", name, "error", err)
		http.Error(w, "internal error; the server log has the details", http.StatusInternalServerError)
		return
	}
	write(w, r, status, "text/html; charset=utf-8", body)
}

// prepare fills what every page shows from the request's session.
func prepare(r *http.Request, s *session, p *page) {
	p.src = pageAddress(r)
	if s != nil {
		p.loc = s.loc
		p.S = &sessionView{Role: s.principal.Role, CSRF: s.csrf, Zone: s.loc.String(), Subject: shortActor(s.principal.Subject())}
		if p.Flash.Text == "" && r.Header.Get("HX-Request") == "" {
			// Should clearing it fail, the next page shows it again.
			p.Flash, _ = s.takeFlash(r.Context())
		}
	}
}

// errorPage shows a problem on a page of its own.
func (c *Console) errorPage(w http.ResponseWriter, r *http.Request, s *session, status int, title, detail string) {
	if r.Header.Get("HX-Request") != "" {
		// A live part's poll: leave the part as it is; the next full page
		// shows the problem.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	p := &page{Title: title, Data: detail}
	if s != nil {
		p.Nav = "error"
	}
	c.render(w, r, s, status, "error", p)
}

// write sends body, gzipped when the browser takes it and it is worth it.
func write(w http.ResponseWriter, r *http.Request, status int, contentType string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Add("Vary", "Accept-Encoding")
	if len(body) > 1024 && acceptsGzip(r) {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		_, _ = zw.Write(body)
		_ = zw.Close()
		body = buf.Bytes()
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(name) == "gzip" && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// seeOther ends a write: the flash for the next page, and a redirect to
// it (POST, redirect, GET: a reload does not send the form again).
func seeOther(w http.ResponseWriter, r *http.Request, s *session, to string, f flash) error {
	if f.Text != "" {
		if err := s.setFlash(r.Context(), f); err != nil {
			return err
		}
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}

// refusal is the status a page shows a refused form with: the API's.
func refusal(f *form) int { return cmp.Or(f.Problem.Status, http.StatusUnprocessableEntity) }

// known reports whether the API answers err with a problem of its own
// (not a 500): the console then shows it with the form.
func known(err error) bool {
	_, ok := httpport.ProblemOf(err)
	return ok
}
