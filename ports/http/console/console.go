// Package console is Hearth's web console: server-rendered pages for the
// dispatcher (operator keys), the field worker (worker keys) and the
// engineer on call (admin keys), served under /console/ by the same binary
// as the API (modes api and all).
//
// It calls the application through the interfaces the HTTP API calls
// (app.Application, and the operator's interfaces declared in ports/http),
// never the database, and shows the API's problem details (httpport.ProblemOf)
// next to the field they name. Pages are html/template; the templates,
// the stylesheet, a small script and htmx (vendored, see assets.go) are
// embedded in the binary: there is no build step.
//
// Every write is a plain HTML form (POST, then a redirect to a GET), so the
// console works without JavaScript; htmx only refreshes the live parts of
// a page (live.go). Each form carries a key of its own, by which a form
// sent twice writes once (once.go). After its own write the console waits, bounded, until
// the read models have reached the write's position (the API's read your
// writes), so the page it shows next is never older than the write.
//
// Signing in with a key opens a session kept in the event store's
// database, beside the keys (session.go), so that every instance sees it;
// the cookie is Secure, HttpOnly, SameSite=Strict, and every form carries
// the session's CSRF token. The console is served inside the API's server
// (httpport.Config.Console) and spends its fair share: sign-ins and
// session lookups the client address's budget of unknown keys, a
// session's requests its key's and merchant's budgets (httpport.FairShare).
package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"hearth/app"
	"hearth/app/access"
	"hearth/app/ops"
	"hearth/domain/apperr"
	httpport "hearth/ports/http"
)

// Config is what New needs. The interfaces are those of the HTTP API
// (ports/http), so the console does what the API does and nothing else.
type Config struct {
	App app.Application
	// Sessions keeps the sessions where every instance sees them.
	Sessions SessionStore
	// KeyUsed is called with the key id of every request a session makes
	// (the keys' last_used_at). Optional.
	KeyUsed func(keyID string)
	// Consistency makes the page after a write wait for it (read your
	// writes). Optional: without it, nothing waits.
	Consistency httpport.Consistency
	// ConsistencyTimeout bounds that wait (CONSISTENCY_TIMEOUT). Defaults
	// to 2s.
	ConsistencyTimeout time.Duration
	// Roles are the keys that may sign in here. Defaults to all three.
	Roles []access.Role
	// CookieName names the session cookie, and with "_signin" the sign-in
	// form's. Defaults to hearth_console; two consoles on one host (the
	// admin listener's) need two names, as cookies do not tell ports
	// apart.
	CookieName string
	// PollEvery is how often the live parts of a page ask for changes.
	// Defaults to 5s.
	PollEvery time.Duration
	// Idempotency keeps the records the forms of operator and worker keys
	// are written once by (once.go), those of the API's Idempotency-Keys.
	// Optional: without it, a form sent twice writes twice.
	Idempotency httpport.Idempotency
	// IdempotencyWait bounds how long a form sent again waits for the
	// first sending's answer; IdempotencyLease is how long a sending holds
	// its form's key before another may take it over (its process died).
	// Default to 5s and 1m, as the API's.
	IdempotencyWait, IdempotencyLease time.Duration

	// The on-call view (admin keys); each part is optional.

	// Leadership reports leadership as GET /admin/leadership does.
	Leadership func(ctx context.Context) (map[string]any, error)
	// Parked and Rebuilds are the operator's use cases (ops.Operator),
	// as the admin API calls them; they record themselves in the audit
	// log as done by the session's key.
	Parked   httpport.ParkedAggregates
	Rebuilds httpport.ProjectionRebuilds
	// Projections are the projections' names (rebuild, verify).
	Projections []string
	// Lags is the lag history the on-call view charts (LagHistory.Run
	// samples it).
	Lags *LagHistory
	// Verifier compares the read models with the events, as app verify
	// does (ops.Operator).
	Verifier Verifier

	// Log defaults to slog.Default().
	Log *slog.Logger
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// Verifier verifies the read models against the events.
type Verifier interface {
	Verify(ctx context.Context, v ops.Verification) (ops.VerifyReport, error)
}

// Console serves the console's pages.
type Console struct {
	cfg    Config
	log    *slog.Logger
	tmpl   *template.Template
	assets *assets
	waits  chan struct{}
	mux    *http.ServeMux
	// roles are the key roles each pattern of a signed-in session's page
	// or form is for (nil: any), as with checks them.
	roles  map[string][]access.Role
	verify verifier
}

// maxWaits caps the read-your-writes waits in flight (each polls the read
// models); over it, the next page says it may not show the write yet.
const maxWaits = 64

// New checks the configuration and builds the console.
func New(cfg Config) (*Console, error) {
	if cfg.Sessions == nil {
		return nil, errors.New("console.New: Sessions is required")
	}
	cfg.Log = cmp.Or(cfg.Log, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.ConsistencyTimeout = cmp.Or(cfg.ConsistencyTimeout, 2*time.Second)
	cfg.PollEvery = cmp.Or(cfg.PollEvery, 5*time.Second)
	cfg.CookieName = cmp.Or(cfg.CookieName, "hearth_console")
	cfg.IdempotencyWait = cmp.Or(cfg.IdempotencyWait, 5*time.Second)
	cfg.IdempotencyLease = cmp.Or(cfg.IdempotencyLease, time.Minute)
	if len(cfg.Roles) == 0 {
		cfg.Roles = []access.Role{access.Operator, access.Worker, access.Admin}
	}
	as, err := loadAssets()
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, log: cfg.Log.With("component", "console"), assets: as, waits: make(chan struct{}, maxWaits)}
	if c.tmpl, err = c.templates(); err != nil {
		return nil, err
	}
	c.mux, c.roles = http.NewServeMux(), map[string][]access.Role{}
	c.routes()
	return c, nil
}

// Close stops what the console runs in the background (a verification).
func (c *Console) Close() { c.verify.stop() }

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// handler is a page or an action of a signed-in session.
type handler func(w http.ResponseWriter, r *http.Request, s *session) error

func (c *Console) routes() {
	op, worker, admin := []access.Role{access.Operator}, []access.Role{access.Worker}, []access.Role{access.Admin}
	m := c.mux
	m.HandleFunc("GET /console/static/{file}", c.serveAsset)
	m.HandleFunc("GET /console/{$}", c.home)
	m.HandleFunc("GET /console/signin", c.signinPage)
	m.HandleFunc("POST /console/signin", c.signin)
	c.handle("POST /console/signout", nil, c.signout)
	m.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		c.errorPage(w, r, nil, http.StatusNotFound, "No such page", "There is no console page at "+r.URL.Path+".")
	})

	c.handle("GET /console/board", op, c.show(c.board, "board-grid", "board-unassigned"))
	c.handle("POST /console/board/assign", op, c.assign)
	c.handle("GET /console/board/slots", op, c.boardSlots)
	c.handle("GET /console/requests", op, c.show(c.requestsPage, "requests-list"))
	c.handle("POST /console/requests", op, c.createRequest)
	c.handle("POST /console/requests/{id}/status", op, c.requestStatus)
	c.handle("POST /console/requests/{id}/convert", op, c.convertRequest)
	c.handle("GET /console/orders", op, c.orders)
	c.handle("GET /console/orders/{id}", op, c.show(c.orderPage, "order-live"))
	c.handle("POST /console/orders/{id}/{action}", op, c.orderAction)
	c.handle("GET /console/plans", op, c.show(c.plansPage))
	c.handle("POST /console/plans", op, c.createPlan)
	c.handle("GET /console/plans/{id}", op, c.show(c.planPage))
	c.handle("POST /console/plans/{id}/{action}", op, c.planAction)
	for _, k := range c.recordKinds() {
		c.handle("GET /console/"+k.path, op, k.list)
		c.handle("POST /console/"+k.path, op, k.create)
		c.handle("GET /console/"+k.path+"/{id}", op, k.edit)
		c.handle("POST /console/"+k.path+"/{id}", op, k.update)
		if k.path == "staff" {
			c.handle("POST /console/staff/{id}/hours/{action}", op, c.hoursAction(k.page))
		}
	}

	c.handle("GET /console/jobs", worker, c.show(c.jobsPage, "jobs-list"))
	c.handle("POST /console/jobs/{id}/status", worker, c.jobStatus)

	c.handle("GET /console/oncall", admin, c.show(c.oncallPage, "oncall-live"))
	c.handle("GET /console/oncall/parked/{projection}/{id}", admin, c.parkedDetail)
	c.handle("POST /console/oncall/parked/{projection}/{id}/replay", admin, c.replay)
	c.handle("POST /console/oncall/parked/{projection}/{id}/skip", admin, c.skip)
	c.handle("POST /console/oncall/rebuilds/{projection}", admin, c.startRebuild)
	c.handle("POST /console/oncall/rebuilds/{projection}/cancel", admin, c.cancelRebuild)
	c.handle("POST /console/oncall/verify", admin, c.startVerify)
}

// handle serves pattern with h for sessions of roles (with), and notes
// them: a sign-in then offers a carried form, or goes back to a page, only
// when its key may reach it (allows).
func (c *Console) handle(pattern string, roles []access.Role, h handler) {
	c.roles[pattern] = roles
	c.mux.Handle(pattern, c.with(roles, h))
}

// allows reports whether a session of role may reach method and path, a
// console address (a page, a form's action): false for an address no
// page of a session serves.
func (c *Console) allows(role access.Role, method, path string) bool {
	r, err := http.NewRequest(method, path, nil)
	if err != nil {
		return false
	}
	_, pattern := c.mux.Handler(r)
	roles, ok := c.roles[pattern]
	return ok && (roles == nil || slices.Contains(roles, role))
}

// with runs h for a signed-in session whose key has one of roles (any role
// when roles is nil); a form must carry the session's CSRF token. Without
// a session, a page redirects to sign-in; a live part's poll (htmx) is
// told to load the sign-in page instead of swapping it in.
func (c *Console) with(roles []access.Role, h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, release, err := c.session(w, r)
		defer release()
		if err != nil {
			c.fail(w, r, nil, err)
			return
		}
		if !c.readForm(w, r, s) {
			return
		}
		if s == nil {
			q := url.Values{}
			// A cookie that names no live session (signed out, idle, its key
			// revoked or expired): the sign-in page says the session ended,
			// rather than ask for a key as if nobody had signed in, and the
			// cookie goes, so that it spends no lookups again.
			if ck, err := r.Cookie(c.cfg.CookieName); err == nil && ck.Value != "" {
				q.Set("ended", "session")
				http.SetCookie(w, cookie(c.cfg.CookieName, "", -1))
			}
			switch {
			case r.Header.Get("HX-Request") != "":
			case safe(r):
				q.Set("next", r.URL.RequestURI())
			case formPage(r) != "":
				// A form not saved: signed in again, the person is back on
				// the page it was on, to send it again.
				q.Set("next", formPage(r))
			}
			if pending := pendingOf(r); pending != nil && q.Has("ended") {
				// Answered with the sign-in page itself, which carries the
				// form: what was typed is not lost (pending.go).
				c.renderSignin(w, r, http.StatusUnauthorized, signinData{Next: q.Get("next"), Ended: endedWhy["session"], Pending: pending})
				return
			}
			c.toSignin(w, r, q)
			return
		}
		if roles != nil && !slices.Contains(roles, s.principal.Role) {
			c.errorPage(w, r, s, http.StatusForbidden, "Not for this key",
				fmt.Sprintf("A %s key may not open this page.", s.principal.Role))
			return
		}
		if !safe(r) {
			if !sameOrigin(r) || !sameToken(r.PostFormValue("csrf"), s.csrf) {
				c.errorPage(w, r, s, http.StatusForbidden, "Form refused",
					"This form did not come from this console page (its security token is missing or out of date). Go back, reload the page and try again.")
				return
			}
			// The session was looked up, its key with it, when the request
			// came in; a write to the event store or to a reference record
			// checks both again in its transaction, before anything it reads
			// or writes, as the API's writes check their key
			// (access.KeyCheck): a key revoked, rotated away or expired
			// meanwhile writes nothing.
			r = r.WithContext(access.WithKeyCheck(r.Context(), c.cfg.Sessions.SessionCheck(s.hash, s.principal.KeyID, c.cfg.Now())))
		}
		if !safe(r) && slices.ContainsFunc(roles, func(role access.Role) bool { return slices.Contains(onceRoles, role) }) {
			// A form sent twice (a double click without JavaScript, a reload
			// of its answer, back and Send again, a retry) writes once.
			err = c.once(w, r, s, h)
		} else {
			err = h(w, r, s)
		}
		switch {
		case errors.Is(err, access.ErrKeyRefused):
			c.keyRefused(w, r, s)
		case err != nil:
			c.fail(w, r, s, err)
		}
	})
}

// keyRefused answers a write whose transaction found the session's key no
// longer working (or the session ended): nothing was written; the session
// ends and the person is sent to sign in, told why.
func (c *Console) keyRefused(w http.ResponseWriter, r *http.Request, s *session) {
	// An expired key's session row would stay until pruned (a revoked
	// key's went with it); its lookups fail anyway, so a failure here
	// changes nothing the person sees.
	if err := s.store.CloseSession(r.Context(), s.hash); err != nil && r.Context().Err() == nil {
		c.log.WarnContext(r.Context(), "end the session of a key refused", "key_id", s.principal.KeyID, "error", err)
	}
	http.SetCookie(w, cookie(c.cfg.CookieName, "", -1))
	q := url.Values{"ended": {"key"}}
	if from := formPage(r); from != "" {
		q.Set("next", from)
	}
	if pending := pendingOf(r); pending != nil {
		c.renderSignin(w, r, http.StatusUnauthorized, signinData{Next: q.Get("next"), Ended: endedWhy["key"], Pending: pending})
		return
	}
	c.toSignin(w, r, q)
}

// toSignin sends the browser to the sign-in page with the query q: a
// redirect, or for htmx (a live part's poll) an HX-Redirect, so that the
// sign-in page is loaded rather than swapped into the part.
func (c *Console) toSignin(w http.ResponseWriter, r *http.Request, q url.Values) {
	to := "/console/signin"
	if len(q) > 0 {
		to += "?" + q.Encode()
	}
	if r.Header.Get("HX-Request") != "" {
		w.Header().Set("HX-Redirect", to)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// endedWhy is what the sign-in page says of a session that ended while in
// use (?ended=).
var endedWhy = map[string]string{
	"key": "You are signed out: the key this session was opened with no longer works (revoked, expired, or " +
		"rotated past its grace period), so what you sent was not saved. Sign in with a key that works.",
	"session": "Your session has ended (signed out, unused for too long, or its key no longer works): " +
		"sign in again. A form sent with it was not saved.",
}

// safe reports a request that writes nothing: a GET, or a HEAD, which
// net/http's mux routes to the GET pattern and whose body the server drops.
// Only the others are forms that must carry the CSRF token.
func safe(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead
}

// readForm reads a write's form whole before any of its fields is looked
// at, and reports false when it answered the request itself because the
// body could not be read: over the server's body cap (http.MaxBytesReader,
// 413) or not all arrived by its read deadline (408). r.PostFormValue drops
// that error and reads every field as empty, so the form would otherwise
// be refused as one without its CSRF token, whose page says to reload and
// send it again, which fails the same way.
func (c *Console) readForm(w http.ResponseWriter, r *http.Request, s *session) bool {
	if safe(r) {
		return true
	}
	err := r.ParseForm()
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		c.errorPage(w, r, s, http.StatusRequestEntityTooLarge, "Form too large",
			fmt.Sprintf("This form is larger than the console takes (%d bytes), so nothing was saved. "+
				"Go back, shorten its longest field and send it again.", tooBig.Limit))
		return false
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.errorPage(w, r, s, http.StatusRequestTimeout, "Form not received",
			"This form did not all arrive in time (a slow or broken connection), so nothing was saved. Go back and send it again.")
		return false
	}
	// Any other error is a bad escape in the body, which no browser sends:
	// the fields that did parse are read as before.
	return true
}

// sameOrigin refuses a write a browser says comes from another site
// (Sec-Fetch-Site, Origin): defence in depth behind SameSite=Strict and
// the CSRF token.
//
// A browser's Sec-Fetch-Site decides when it is sent, as in net/http's
// CrossOriginProtection: the browser compared the page's origin with the
// public URL it sent the form to, and no page can set the header. Origin
// is compared with the request's Host only without it (an older browser):
// behind a proxy that passes its own upstream Host, the two differ for
// every form, and the console would refuse them all.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "":
	case "same-origin", "none":
		return true
	default:
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

// errNotMounted is a console request that did not come through the API's
// server (httpport.NewHandler), whose fair share it must spend.
var errNotMounted = errors.New("console request without the API server's fair share: serve the console through httpport.Config.Console")

func noRelease() {}

// session returns the request's live session (nil without one), its key
// checked in the same lookup: a session whose key was revoked or expired
// has ended. The lookup spends the client address's budget of unknown keys
// when the cookie names no live session, and a session's request spends
// its key's and merchant's budgets and holds one of the merchant's
// in-flight slots until release. err is a refusal
// (*httpport.RateLimitedError) or a failed lookup.
func (c *Console) session(w http.ResponseWriter, r *http.Request) (s *session, release func(), err error) {
	ck, err := r.Cookie(c.cfg.CookieName)
	if err != nil || ck.Value == "" || len(ck.Value) > 100 {
		return nil, noRelease, nil
	}
	fs := httpport.FairShareOf(r)
	if fs == nil {
		return nil, noRelease, errNotMounted
	}
	hash := tokenHash(ck.Value)
	var st access.Session
	err = fs.Lookup(w, r, ck.Value, func() error {
		var err error
		// A live part's poll is the page's, not the person's: it does not
		// put the session's idle end off, so a page left open still signs
		// out after SessionIdle.
		st, err = c.cfg.Sessions.Session(r.Context(), access.SessionUse{TokenHash: hash, At: c.cfg.Now(), Idle: SessionIdle,
			Poll: r.URL.Query().Has("part")})
		return err
	})
	switch {
	case errors.Is(err, apperr.ErrNotFound):
		return nil, noRelease, nil
	case err != nil:
		return nil, noRelease, err
	case len(c.cfg.Roles) > 0 && !slices.Contains(c.cfg.Roles, st.Principal.Role):
		// A session opened on another listener's console (its token sent
		// under this one's cookie): the roles this console takes hold for
		// every request, not only at sign-in.
		return nil, noRelease, nil
	}
	if release, err = fs.Admit(w, st.Principal); err != nil {
		return nil, noRelease, err
	}
	if c.cfg.KeyUsed != nil {
		c.cfg.KeyUsed(st.Principal.KeyID)
	}
	return &session{hash: hash, principal: st.Principal, csrf: csrfOf(ck.Value), loc: zone(st.TimeZone),
		flash: decodeFlash(st.Flash), store: c.cfg.Sessions}, release, nil
}

// home sends a signed-in key to its role's first page.
func (c *Console) home(w http.ResponseWriter, r *http.Request) {
	s, release, err := c.session(w, r)
	defer release()
	if err != nil {
		c.fail(w, r, nil, err)
		return
	}
	if s == nil {
		http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, homeOf(s.principal.Role), http.StatusSeeOther)
}

func homeOf(role access.Role) string {
	switch role {
	case access.Worker:
		return "/console/jobs"
	case access.Admin:
		return "/console/oncall"
	}
	return "/console/board"
}

type signinData struct {
	Token, Next, Error string
	Ended              string // why the session ended, when it did in use (endedWhy)
	NoCookie           bool
	// Pending is the form sent when the session had ended, carried
	// through the sign-in to be sent again (pending.go).
	Pending *pendingForm
}

func (c *Console) signinPage(w http.ResponseWriter, r *http.Request) {
	s, release, err := c.session(w, r)
	defer release()
	if err != nil {
		c.fail(w, r, nil, err)
		return
	}
	if s != nil {
		http.Redirect(w, r, cmp.Or(safeNext(r.URL.Query().Get("next")), homeOf(s.principal.Role)), http.StatusSeeOther)
		return
	}
	q := r.URL.Query()
	c.renderSignin(w, r, http.StatusOK, signinData{Next: safeNext(q.Get("next")), Ended: endedWhy[q.Get("ended")],
		NoCookie: q.Has("nocookie")})
}

func (c *Console) renderSignin(w http.ResponseWriter, r *http.Request, status int, d signinData) {
	d.Token = randomToken()
	if d.Pending == nil {
		d.Pending = carried(r) // a sign-in refused keeps carrying its form
	}
	http.SetCookie(w, cookie(c.cfg.CookieName+signinSuffix, d.Token, 3600))
	c.render(w, r, nil, status, "signin", &page{Title: "Sign in", Data: d})
}

// safeNext keeps a return address only when it is a console page.
func safeNext(next string) string {
	if strings.HasPrefix(next, "/console/") && !strings.HasPrefix(next, "//") && !strings.ContainsAny(next, "\\\r\n") {
		return next
	}
	return ""
}

func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	if !c.readForm(w, r, nil) {
		return
	}
	ck, _ := r.Cookie(c.cfg.CookieName + signinSuffix)
	next := safeNext(r.PostFormValue("next"))
	if ck == nil || !sameOrigin(r) || !sameToken(r.PostFormValue("token"), ck.Value) {
		c.renderSignin(w, r, http.StatusForbidden, signinData{Next: next,
			Error: "The sign-in form expired or did not come from this page; try again.", NoCookie: ck == nil})
		return
	}
	fs := httpport.FairShareOf(r)
	if fs == nil {
		c.fail(w, r, nil, errNotMounted)
		return
	}
	// The key is resolved as the API resolves one: the key cache, or a
	// lookup the client address's budget of unknown keys allows (the
	// address as the API reads it, TRUSTED_PROXIES).
	secret := strings.TrimSpace(r.PostFormValue("key"))
	p, err := access.Principal{}, apperr.ErrNotFound
	if secret != "" && len(secret) <= 200 {
		p, err = fs.Authenticate(w, r, secret)
	}
	var limited *httpport.RateLimitedError
	switch {
	case errors.As(err, &limited):
		c.renderSignin(w, r, http.StatusTooManyRequests, signinData{Next: next,
			Error: "Too many sign-ins with unknown keys from this address; wait a few seconds and try again."})
		return
	case errors.Is(err, apperr.ErrNotFound):
		c.renderSignin(w, r, http.StatusUnauthorized, signinData{Next: next, Error: "Unknown, revoked or expired key."})
		return
	case err != nil:
		c.fail(w, r, nil, err)
		return
	case !slices.Contains(c.cfg.Roles, p.Role):
		c.renderSignin(w, r, http.StatusForbidden, signinData{Next: next,
			Error: fmt.Sprintf("A %s key cannot sign in on this address.", p.Role)})
		return
	}
	// A sign-in is a request of the key: it spends the key's budgets.
	release, err := fs.Admit(w, p)
	defer release()
	if errors.As(err, &limited) {
		c.renderSignin(w, r, http.StatusTooManyRequests, signinData{Next: next, Error: limited.Problem.Detail + "."})
		return
	}
	// The browser's zone, when it is a zone's own name (zone): anything
	// else signs in on UTC rather than refuse the person a sign-in.
	tz := "UTC"
	if name := r.PostFormValue("tz"); name != "" && zone(name) != time.UTC {
		tz = name
	}
	token := randomToken()
	err = c.cfg.Sessions.OpenSession(r.Context(), access.NewSession{TokenHash: tokenHash(token), KeyID: p.KeyID, TimeZone: tz,
		At: c.cfg.Now(), Idle: SessionIdle, Lifetime: SessionLifetime, PerKey: SessionsPerKey})
	switch {
	case errors.Is(err, apperr.ErrNotFound): // revoked since the key cache saw it
		c.renderSignin(w, r, http.StatusUnauthorized, signinData{Next: next, Error: "Unknown, revoked or expired key."})
		return
	case err != nil:
		c.fail(w, r, nil, err)
		return
	}
	http.SetCookie(w, cookie(c.cfg.CookieName, token, int(SessionLifetime.Seconds())))
	http.SetCookie(w, cookie(c.cfg.CookieName+signinSuffix, "", -1))
	// The page to go back to, and a form carried, are the last session's
	// in this browser, which may have been someone else's (a computer a
	// dispatcher and a worker share): one this key may not reach is
	// dropped, so that a worker is not shown what a dispatcher typed about
	// a customer, nor offered a form it would be refused.
	if next != "" && !c.allows(p.Role, http.MethodGet, next) {
		next = ""
	}
	if pending := carried(r); pending != nil && c.allows(p.Role, http.MethodPost, pending.Action) {
		// The form sent when the session had ended, shown to send again
		// under the new session's token. Should the browser have dropped
		// the cookie, sending it comes back here, still carried.
		c.render(w, r, nil, http.StatusOK, "resend", &page{Title: "Send your form again",
			Data: resendData{CSRF: csrfOf(token), Pending: pending, Back: cmp.Or(next, homeOf(p.Role))}})
		return
	}
	// The next page checks that the browser kept the cookie: a Secure
	// cookie is dropped on plain http anywhere but localhost.
	to := cmp.Or(next, homeOf(p.Role))
	http.Redirect(w, r, "/console/signin?next="+url.QueryEscape(to)+"&nocookie", http.StatusSeeOther)
}

func (c *Console) signout(w http.ResponseWriter, r *http.Request, s *session) error {
	if err := s.store.CloseSession(r.Context(), s.hash); err != nil {
		return err
	}
	http.SetCookie(w, cookie(c.cfg.CookieName, "", -1))
	http.Redirect(w, r, "/console/signin", http.StatusSeeOther)
	return nil
}

// fail shows err: the API's problem for an error the API expects, a
// generic page (logged once, here) for any other.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		return // the browser went away
	}
	var limited *httpport.RateLimitedError
	if errors.As(err, &limited) { // its Retry-After is set
		c.errorPage(w, r, s, limited.Problem.Status, "Too many requests", limited.Problem.Detail+".")
		return
	}
	p, known := httpport.ProblemOf(err)
	if !known {
		c.log.ErrorContext(r.Context(), "console request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	c.errorPage(w, r, s, p.Status, p.Title, p.Detail)
}

// verifier runs one verification at a time in the background.
type verifier struct {
	mu      sync.Mutex
	running bool
	cancel  context.CancelFunc
	done    chan struct{}
	last    *verifyRun
}
