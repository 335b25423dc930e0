package console

import (
	"crypto/sha256"
	"encoding/hex"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"
)

// A live part of a page is a template whose output htmx asks for again
// every PollEvery (hx-trigger "every"), with the fingerprint of what the
// browser shows in a header: when nothing changed the server answers 204
// and htmx leaves the part alone (no flicker, focus and scroll kept); else
// it swaps the new part in. A part holds no half-filled form: forms sit
// outside the live parts, so a refresh never loses what someone typed.

// seenHeader carries the fingerprint of the part the browser shows.
const seenHeader = "X-Console-Seen"

// fingerprint identifies a part's content, but for its forms' keys (once.go):
// drawn anew at each render, they would make every poll a change, and a
// form left as it was keeps the key it was shown with.
func fingerprint(inner []byte) string {
	sum := sha256.Sum256(formKeyRe.ReplaceAll(inner, nil))
	return hex.EncodeToString(sum[:12])
}

// formKeyRe is a form's key as the "csrf" template writes it.
var formKeyRe = regexp.MustCompile(`<input type="hidden" name="` + formKeyField + `" value="[^"]*">`)

// liveRegion wraps a part's content in the element that polls for it.
func liveRegion(name, src string, every time.Duration, inner []byte) template.HTML {
	u, _ := url.Parse(src)
	q := u.Query()
	q.Set("part", name)
	u.RawQuery = q.Encode()
	return template.HTML(`<div id="live-` + template.HTMLEscapeString(name) + `" class="live" hx-get="` + template.HTMLEscapeString(u.String()) +
		`" hx-trigger="every ` + strconv.FormatInt(every.Milliseconds(), 10) + `ms" hx-swap="outerHTML" hx-headers='{"` + seenHeader + `":"` +
		fingerprint(inner) + `"}'>` + string(inner) + `</div>`)
}

// part answers a live part's poll when the request is one (part names one
// of the page's parts) and reports whether it did: 204 when the browser's
// fingerprint is the content's, else the part.
func (c *Console) part(w http.ResponseWriter, r *http.Request, s *session, p *page, parts ...string) bool {
	name := r.URL.Query().Get("part")
	if name == "" {
		return false
	}
	known := false
	for _, pt := range parts {
		known = known || pt == name
	}
	if !known {
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	prepare(r, s, p)
	inner, err := execute(c.tmpl, name, p)
	if err != nil {
		c.log.ErrorContext(r.Context(), "render failed", "template", name, "error", err)
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	if r.Header.Get(seenHeader) == fingerprint(inner) {
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	write(w, r, http.StatusOK, "text/html; charset=utf-8", []byte(liveRegion(name, p.src, c.cfg.PollEvery, inner)))
	return true
}
