package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app"
	"hearth/app/access"
	"hearth/app/command"
	"hearth/app/query"
	"hearth/domain/apperr"
	"hearth/domain/reference"
	"hearth/domain/uuid"
	httpport "hearth/ports/http"
)

// The console's own rules, without a browser or a database: sessions and
// their cookie, CSRF, roles, the fair share it spends (served, as in
// production, by the API's server), revoked keys, live parts. The
// walk-throughs in a real browser, and the sessions in Postgres, are
// cmd/app's console_test.go.

type keys struct {
	mu sync.Mutex
	m  map[string]access.Principal
}

func (k *keys) Authenticate(_ context.Context, secret string) (access.Principal, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.m[secret]
	if !ok {
		return access.Principal{}, apperr.ErrNotFound
	}
	return p, nil
}

func (k *keys) revoke(secret string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, secret)
}

// byID is the principal of the key with the id, if it still works.
func (k *keys) byID(id string) (access.Principal, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.m {
		if p.KeyID == id {
			return p, true
		}
	}
	return access.Principal{}, false
}

// sessionStore keeps sessions in memory, checking their keys as the real
// store (refdata) does; cmd/app's tests run that one on Postgres.
type sessionStore struct {
	keys    *keys
	mu      sync.Mutex
	m       map[string]storedSession
	lookups int
}

type storedSession struct {
	keyID, tz, flash string
	expires          time.Time
}

func (ss *sessionStore) OpenSession(_ context.Context, n access.NewSession) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if _, ok := ss.keys.byID(n.KeyID); !ok {
		return apperr.ErrNotFound
	}
	ss.m[string(n.TokenHash)] = storedSession{keyID: n.KeyID, tz: n.TimeZone, expires: n.At.Add(n.Idle)}
	return nil
}

func (ss *sessionStore) Session(_ context.Context, u access.SessionUse) (access.Session, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.lookups++
	st, ok := ss.m[string(u.TokenHash)]
	p, works := ss.keys.byID(st.keyID)
	if !ok || !works || !u.At.Before(st.expires) {
		return access.Session{}, apperr.ErrNotFound
	}
	st.expires = u.At.Add(u.Idle)
	ss.m[string(u.TokenHash)] = st
	return access.Session{Principal: p, TimeZone: st.tz, Flash: st.flash}, nil
}

// SessionCheck is a check no in-memory transaction runs (internal/apptest
// ignores access.KeyCheck); cmd/app's tests run the real one on Postgres.
func (ss *sessionStore) SessionCheck(tokenHash []byte, keyID string, _ time.Time) *access.KeyCheck {
	return &access.KeyCheck{SQL: "session check", Args: []any{tokenHash, keyID}}
}

func (ss *sessionStore) SetSessionFlash(_ context.Context, tokenHash []byte, flash string) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if st, ok := ss.m[string(tokenHash)]; ok {
		st.flash = flash
		ss.m[string(tokenHash)] = st
	}
	return nil
}

func (ss *sessionStore) CloseSession(_ context.Context, tokenHash []byte) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, string(tokenHash))
	return nil
}

func (ss *sessionStore) lookupCount() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.lookups
}

// customers is a merchant's customers in memory (command.RecordStore and
// query.RecordReader).
type customers struct {
	mu   sync.Mutex
	rows []reference.Customer
}

func (c *customers) Insert(_ context.Context, v *reference.Customer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rows = append(c.rows, *v)
	return nil
}

func (c *customers) Update(context.Context, string, string, func(v *reference.Customer) (*command.Audit, error)) (reference.Customer, error) {
	return reference.Customer{}, apperr.ErrNotFound
}

func (c *customers) Get(context.Context, string, string) (reference.Customer, error) {
	return reference.Customer{}, apperr.ErrNotFound
}

func (c *customers) List(_ context.Context, merchantID, _ string, p query.Page) (query.List[reference.Customer], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []reference.Customer
	for _, v := range c.rows {
		if v.MerchantID == merchantID {
			out = append(out, v)
		}
	}
	return query.List[reference.Customer]{Items: out, Total: len(out), TotalExact: true, Page: p.Number, PageSize: p.Size}, nil
}

func (c *customers) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.rows)
}

type fixture struct {
	t         *testing.T
	con       *Console
	server    http.Handler // the API's server, the console mounted in it
	sessions  *sessionStore
	keys      *keys
	customers *customers
	now       time.Time
	mu        sync.Mutex
}

const (
	opKey     = "op-key"
	workerKey = "worker-key"
	adminKey  = "admin-key"
)

// The fair share of the fixture's server: a failed sign-in budget like
// the old console's own, keys and merchants limited only where a test says
// so, and 10.0.0.0/8 the trusted proxies.
var fixtureLimits = httpport.Limits{UnknownKeyRate: 0.5, UnknownKeyBurst: 10}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureLimited(t, fixtureLimits)
}

func newFixtureLimited(t *testing.T, limits httpport.Limits) *fixture {
	t.Helper()
	f := &fixture{t: t, customers: &customers{}, now: time.Date(2030, 5, 6, 9, 0, 0, 0, time.UTC)}
	merchant := uuid.New()
	f.keys = &keys{m: map[string]access.Principal{
		opKey:     {KeyID: uuid.New(), MerchantID: merchant, Role: access.Operator},
		workerKey: {KeyID: uuid.New(), MerchantID: merchant, Role: access.Worker, StaffID: uuid.New()},
		adminKey:  {KeyID: uuid.New(), Role: access.Admin},
	}}
	var a app.Application
	var err error
	a.Commands.Customers, err = command.NewRecords[reference.Customer, *reference.Customer](f.customers)
	require.NoError(t, err)
	a.Queries.Customers, err = query.NewRecords[reference.Customer](f.customers)
	require.NoError(t, err)
	f.sessions = &sessionStore{keys: f.keys, m: map[string]storedSession{}}
	f.con, err = New(Config{App: a, Sessions: f.sessions, Now: f.clock, Projections: []string{"orders"}})
	require.NoError(t, err)
	f.server, err = httpport.NewHandler(httpport.Config{App: a, Auth: f.keys, APIEnabled: true, Console: f.con, Now: f.clock,
		Limits: limits, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	require.NoError(t, err)
	return f
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// browser keeps cookies like a browser, for one client address.
type browser struct {
	f       *fixture
	cookies map[string]*http.Cookie
	addr    string
	via     string // X-Forwarded-For, when behind a proxy
}

func (f *fixture) browser(addr string) *browser {
	return &browser{f: f, cookies: map[string]*http.Cookie{}, addr: addr + ":50000"}
}

// browserVia is a browser at addr behind the proxy.
func (f *fixture) browserVia(proxy, addr string) *browser {
	b := f.browser(proxy)
	b.via = addr
	return b
}

func (b *browser) do(method, path string, form url.Values, header ...string) *httptest.ResponseRecorder {
	b.f.t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req := httptest.NewRequest(method, "http://localhost"+path, body)
	req.RemoteAddr = b.addr
	if b.via != "" {
		req.Header.Set("X-Forwarded-For", b.via)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	for _, c := range b.cookies {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	b.f.server.ServeHTTP(rec, req)
	for _, c := range rec.Result().Cookies() {
		if c.MaxAge < 0 {
			delete(b.cookies, c.Name)
		} else {
			b.cookies[c.Name] = c
		}
	}
	return rec
}

// doBody sends a form's raw body, for what url.Values cannot make (a body
// that breaks off).
func (b *browser) doBody(method, path string, body io.Reader) *httptest.ResponseRecorder {
	b.f.t.Helper()
	req := httptest.NewRequest(method, "http://localhost"+path, body)
	req.RemoteAddr = b.addr
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range b.cookies {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	b.f.server.ServeHTTP(rec, req)
	return rec
}

var (
	tokenRe = regexp.MustCompile(`name="token" value="([^"]+)"`)
	csrfRe  = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// signIn signs in with key through the form and returns the sign-in
// answer.
func (b *browser) signIn(key string) *httptest.ResponseRecorder {
	b.f.t.Helper()
	page := b.do(http.MethodGet, "/console/signin", nil)
	m := tokenRe.FindStringSubmatch(page.Body.String())
	require.NotNil(b.f.t, m, "the sign-in form has a token")
	return b.do(http.MethodPost, "/console/signin", url.Values{"token": {m[1]}, "key": {key}, "tz": {"Europe/Paris"}})
}

// csrf reads the session's CSRF token from a page.
func (b *browser) csrf(path string) string {
	b.f.t.Helper()
	rec := b.do(http.MethodGet, path, nil)
	require.Equal(b.f.t, http.StatusOK, rec.Code, rec.Body.String())
	m := csrfRe.FindStringSubmatch(rec.Body.String())
	require.NotNil(b.f.t, m, "the page's forms carry the CSRF token")
	return m[1]
}

// Signing in sets the session cookie Secure, HttpOnly, SameSite=Strict on
// /console/, and lands on the role's page; signing out ends the session.
func TestSessionCookie(t *testing.T) {
	f := newFixture(t)
	b := f.browser("192.0.2.1")
	rec := b.signIn(opKey)
	require.Equal(t, http.StatusSeeOther, rec.Code)
	c := b.cookies["hearth_console"]
	require.NotNil(t, c, "the session cookie")
	require.True(t, c.Secure)
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.Equal(t, "/console/", c.Path)
	require.NotContains(t, c.Value, opKey, "the cookie holds a random id, not the key")

	// The check that the browser kept the cookie passes it on to the
	// operator's first page.
	rec = b.do(http.MethodGet, rec.Header().Get("Location"), nil)
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.Equal(t, "/console/board", rec.Header().Get("Location"))

	csrf := b.csrf("/console/customers")
	rec = b.do(http.MethodPost, "/console/signout", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.Nil(t, b.cookies["hearth_console"])
	require.Equal(t, "/console/signin?next=%2Fconsole%2Fcustomers", b.do(http.MethodGet, "/console/customers", nil).Header().Get("Location"))

	// The old cookie, kept by someone, no longer opens a session.
	b.cookies["hearth_console"] = c
	require.Equal(t, http.StatusSeeOther, b.do(http.MethodGet, "/console/customers", nil).Code)
}

// A write without the session's CSRF token, or from another site, is
// refused and writes nothing; with it, it is written.
func TestFormsNeedTheCSRFToken(t *testing.T) {
	f := newFixture(t)
	b := f.browser("192.0.2.1")
	b.signIn(opKey)
	csrf := b.csrf("/console/customers")
	for name, tc := range map[string]struct {
		form   url.Values
		header []string
	}{
		"no token":      {form: url.Values{"name": {"Mallory"}}},
		"another token": {form: url.Values{"name": {"Mallory"}, "csrf": {"x" + csrf}}},
		"another site":  {form: url.Values{"name": {"Mallory"}, "csrf": {csrf}}, header: []string{"Sec-Fetch-Site", "cross-site"}},
		"another origin": {form: url.Values{"name": {"Mallory"}, "csrf": {csrf}},
			header: []string{"Origin", "https://evil.example"}},
	} {
		t.Run(name, func(t *testing.T) {
			rec := b.do(http.MethodPost, "/console/customers", tc.form, tc.header...)
			require.Equal(t, http.StatusForbidden, rec.Code)
			require.Contains(t, rec.Body.String(), "Form refused")
			require.Zero(t, f.customers.count())
		})
	}
	rec := b.do(http.MethodPost, "/console/customers", url.Values{"name": {"Ada"}, "csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	require.Equal(t, 1, f.customers.count())
}

// Behind a proxy that terminates TLS and passes its own upstream Host
// (nginx's proxy_pass does unless told proxy_set_header Host $host), the
// browser's Origin names the public host and the request's Host another.
// A browser that says the form is same-origin (Sec-Fetch-Site, which no
// page can set) is believed, as net/http's CrossOriginProtection does:
// otherwise every sign-in and form would be refused as another site's,
// with nothing to tell the operator why. Another site stays refused.
func TestFormsBehindAProxyThatPassesItsOwnHost(t *testing.T) {
	f := newFixture(t)
	b := f.browser("192.0.2.1")
	public := []string{"Sec-Fetch-Site", "same-origin", "Origin", "https://crm.example.com"}
	page := b.do(http.MethodGet, "/console/signin", nil)
	m := tokenRe.FindStringSubmatch(page.Body.String())
	require.NotNil(t, m, "the sign-in form has a token")
	rec := b.do(http.MethodPost, "/console/signin", url.Values{"token": {m[1]}, "key": {opKey}, "tz": {"Europe/Paris"}}, public...)
	require.Equal(t, http.StatusSeeOther, rec.Code, "the sign-in is refused: %s", rec.Body.String())
	csrf := b.csrf("/console/customers")
	rec = b.do(http.MethodPost, "/console/customers", url.Values{"name": {"Ada"}, "csrf": {csrf}}, public...)
	require.Equal(t, http.StatusSeeOther, rec.Code, "the form is refused: %s", rec.Body.String())
	require.Equal(t, 1, f.customers.count())

	rec = b.do(http.MethodPost, "/console/customers", url.Values{"name": {"Mallory"}, "csrf": {csrf}},
		"Sec-Fetch-Site", "cross-site", "Origin", "https://crm.example.com")
	require.Equal(t, http.StatusForbidden, rec.Code)
	require.Equal(t, 1, f.customers.count())
}

// A form whose body cannot be read whole (over the server's body cap, or
// not all arrived by its read deadline) is refused for that, with nothing
// written: not as a form without its CSRF token, whose page tells the
// person to reload and send it again, which fails the same way for ever.
// The sign-in form likewise.
func TestAFormThatCannotBeReadSaysWhy(t *testing.T) {
	f := newFixture(t)
	b := f.browser("192.0.2.1")
	page := b.do(http.MethodGet, "/console/signin", nil)
	m := tokenRe.FindStringSubmatch(page.Body.String())
	require.NotNil(t, m, "the sign-in form has a token")
	huge := strings.Repeat("a", 1<<20)
	rec := b.doBody(http.MethodPost, "/console/signin", strings.NewReader("token="+m[1]+"&key="+opKey+"&notes="+huge))
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "too large")

	b.signIn(opKey)
	csrf := b.csrf("/console/customers")
	rec = b.doBody(http.MethodPost, "/console/customers", strings.NewReader("csrf="+csrf+"&name=Ada&notes="+huge))
	require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "Form too large")
	require.NotContains(t, rec.Body.String(), "Form refused")

	rec = b.doBody(http.MethodPost, "/console/customers", io.MultiReader(strings.NewReader("csrf="+csrf+"&name=Ada&notes=a"),
		iotest.ErrReader(fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded))))
	require.Equal(t, http.StatusRequestTimeout, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "Form not received")
	require.Zero(t, f.customers.count())
}

// A HEAD request is as safe as a GET (net/http's mux routes it to the GET
// pattern): it answers as the GET would, not as a form without its token.
func TestHeadAnswersAsGet(t *testing.T) {
	f := newFixture(t)
	b := f.browser("192.0.2.1")
	require.Equal(t, "/console/signin?next=%2Fconsole%2Fcustomers",
		b.do(http.MethodHead, "/console/customers", nil).Header().Get("Location"))
	b.signIn(opKey)
	get := b.do(http.MethodGet, "/console/customers", nil)
	require.Equal(t, http.StatusOK, get.Code)
	head := b.do(http.MethodHead, "/console/customers", nil)
	require.Equal(t, http.StatusOK, head.Code, head.Body.String())
	require.Equal(t, get.Header().Get("Content-Type"), head.Header().Get("Content-Type"))
	require.Zero(t, f.customers.count())
}

// A refused form shows the API's problem next to the field it names, with
// the API's status.
func TestRefusedFormShowsTheProblemByItsField(t *testing.T) {
	f := newFixture(t)
	b := f.browser("192.0.2.1")
	b.signIn(opKey)
	csrf := b.csrf("/console/customers")
	rec := b.do(http.MethodPost, "/console/customers", url.Values{"name": {" "}, "email": {"nope"}, "csrf": {csrf}})
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	body := rec.Body.String()
	require.Contains(t, body, `<p class="err" id="new-name-err">is required</p>`)
	require.Contains(t, body, `<p class="err" id="new-email-err">must be an email address</p>`)
	require.Contains(t, body, `aria-describedby="new-name-err"`)
	require.Contains(t, body, `/problems/validation-failed`)
	require.Contains(t, body, `value="nope"`, "what was typed is kept")
	require.Zero(t, f.customers.count())
}

// Each role opens its own pages only.
func TestRolesOpenTheirPages(t *testing.T) {
	f := newFixture(t)
	for key, pages := range map[string]map[string]int{
		opKey:     {"/console/customers": http.StatusOK, "/console/jobs": http.StatusForbidden, "/console/oncall": http.StatusForbidden},
		workerKey: {"/console/customers": http.StatusForbidden, "/console/oncall": http.StatusForbidden},
		adminKey:  {"/console/customers": http.StatusForbidden, "/console/jobs": http.StatusForbidden, "/console/oncall": http.StatusOK},
	} {
		b := f.browser("192.0.2.1")
		b.signIn(key)
		for path, status := range pages {
			require.Equal(t, status, b.do(http.MethodGet, path, nil).Code, "%s %s", key, path)
		}
	}
}

// A console that takes operator keys only refuses the others at sign-in.
func TestSignInOnlyForTheConsoleRoles(t *testing.T) {
	f := newFixture(t)
	f.con.cfg.Roles = []access.Role{access.Operator, access.Worker}
	b := f.browser("192.0.2.1")
	rec := b.signIn(adminKey)
	require.Equal(t, http.StatusForbidden, rec.Code)
	require.Nil(t, b.cookies["hearth_console"])
}

// Failed sign-ins spend the API's budget of unknown keys per client
// address: past the burst the form answers 429 without looking the key
// up; another address still signs in.
func TestFailedSignInsAreLimited(t *testing.T) {
	f := newFixture(t)
	b := f.browser("192.0.2.1")
	for range fixtureLimits.UnknownKeyBurst {
		require.Equal(t, http.StatusUnauthorized, b.signIn("hk_made_up").Code)
	}
	rec := b.signIn(opKey)
	require.Equal(t, http.StatusTooManyRequests, rec.Code, "even a good key waits: the address spent its budget")
	require.NotEmpty(t, rec.Header().Get("Retry-After"))
	require.Equal(t, http.StatusSeeOther, f.browser("192.0.2.2").signIn(opKey).Code)
	f.advance(time.Duration(float64(time.Second) / fixtureLimits.UnknownKeyRate))
	require.Equal(t, http.StatusSeeOther, b.signIn(opKey).Code, "the budget refills")
}

// Behind a trusted proxy (TRUSTED_PROXIES), sign-ins count against the
// client's address, as the API's requests do: one client's failures do not
// lock out the others behind the same load balancer.
func TestSignInsCountTheClientBehindAProxy(t *testing.T) {
	f := newFixture(t)
	mallory, ada := f.browserVia("10.0.0.1", "198.51.100.1"), f.browserVia("10.0.0.1", "198.51.100.2")
	for range fixtureLimits.UnknownKeyBurst {
		require.Equal(t, http.StatusUnauthorized, mallory.signIn("hk_made_up").Code)
	}
	require.Equal(t, http.StatusTooManyRequests, mallory.signIn(opKey).Code)
	require.Equal(t, http.StatusSeeOther, ada.signIn(opKey).Code, "another client behind the proxy keeps its budget")
}

// An address that spent its budget stays refused while many other
// addresses fail too: the table of budgets is not started anew.
func TestSignInBudgetOutlastsManyAddresses(t *testing.T) {
	f := newFixture(t)
	b := f.browser("192.0.2.1")
	for range fixtureLimits.UnknownKeyBurst {
		require.Equal(t, http.StatusUnauthorized, b.signIn("hk_made_up").Code)
	}
	const token = "sign-in-form-token"
	form := url.Values{"token": {token}, "key": {"hk_made_up"}}.Encode()
	for i := range 10_000 {
		req := httptest.NewRequest(http.MethodPost, "http://localhost/console/signin", strings.NewReader(form))
		req.RemoteAddr = fmt.Sprintf("198.18.%d.%d:50000", i/256, i%256)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: "hearth_console" + signinSuffix, Value: token})
		rec := httptest.NewRecorder()
		f.server.ServeHTTP(rec, req)
		require.Equal(t, http.StatusUnauthorized, rec.Code)
	}
	require.Equal(t, http.StatusTooManyRequests, b.signIn(opKey).Code)
}

// A session's pages spend its key's budget, the one the API's requests
// spend: past it the console answers 429, and so does the API for that
// key.
func TestConsoleSpendsTheKeysBudget(t *testing.T) {
	limits := fixtureLimits
	limits.KeyRate, limits.KeyBurst = 0.001, 5
	f := newFixtureLimited(t, limits)
	b := f.browser("192.0.2.1")
	require.Equal(t, http.StatusSeeOther, b.signIn(opKey).Code)
	var rec *httptest.ResponseRecorder
	for i := 0; ; i++ {
		require.Less(t, i, limits.KeyBurst, "the console stops at the key's burst")
		if rec = b.do(http.MethodGet, "/console/customers", nil); rec.Code != http.StatusOK {
			break
		}
	}
	require.Equal(t, http.StatusTooManyRequests, rec.Code)
	require.NotEmpty(t, rec.Header().Get("Retry-After"))
	require.Contains(t, rec.Body.String(), "this API key is over its rate limit")

	req := httptest.NewRequest(http.MethodGet, "http://localhost/v1/customers", nil)
	req.Header.Set("Authorization", "Bearer "+opKey)
	api := httptest.NewRecorder()
	f.server.ServeHTTP(api, req)
	require.Equal(t, http.StatusTooManyRequests, api.Code, "the API spends the same budget")
}

// A cookie that names no session spends the address's budget of unknown
// keys: past it, made-up cookies are refused without a lookup.
func TestUnknownSessionsSpendTheAddressBudget(t *testing.T) {
	f := newFixture(t)
	b := f.browser("192.0.2.1")
	guess := func() *httptest.ResponseRecorder {
		b.cookies["hearth_console"] = &http.Cookie{Name: "hearth_console", Value: randomToken()}
		return b.do(http.MethodGet, "/console/customers", nil)
	}
	for range fixtureLimits.UnknownKeyBurst {
		require.Equal(t, http.StatusSeeOther, guess().Code)
	}
	looked := f.sessions.lookupCount()
	require.Equal(t, http.StatusTooManyRequests, guess().Code)
	require.Equal(t, looked, f.sessions.lookupCount(), "not looked up")
}

// A flood of made-up keys from a session's address does not end the
// session: a token found lately is looked up past the spent budget, as a
// key that authenticated lately is.
func TestSessionsOutlastAFloodFromTheirAddress(t *testing.T) {
	f := newFixture(t)
	ada, mallory := f.browser("192.0.2.1"), f.browser("192.0.2.1")
	require.Equal(t, http.StatusSeeOther, ada.signIn(opKey).Code)
	require.Equal(t, http.StatusOK, ada.do(http.MethodGet, "/console/customers", nil).Code)
	for range fixtureLimits.UnknownKeyBurst {
		require.Equal(t, http.StatusUnauthorized, mallory.signIn("hk_made_up").Code)
	}
	require.Equal(t, http.StatusTooManyRequests, mallory.signIn("hk_made_up").Code)
	require.Equal(t, http.StatusOK, ada.do(http.MethodGet, "/console/customers", nil).Code)
}

// A revoked key ends its sessions at once: each lookup checks the key.
func TestRevokedKeyEndsItsSessions(t *testing.T) {
	f := newFixture(t)
	b := f.browser("192.0.2.1")
	b.signIn(opKey)
	require.Equal(t, http.StatusOK, b.do(http.MethodGet, "/console/customers", nil).Code)
	f.keys.revoke(opKey)
	rec := b.do(http.MethodGet, "/console/customers", nil)
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.True(t, strings.HasPrefix(rec.Header().Get("Location"), "/console/signin"))
}

// A live part answers 204 while what the browser shows is current, and the
// new part when it is not.
func TestLivePartsAnswerOnlyChanges(t *testing.T) {
	f := newFixture(t)
	b := f.browser("192.0.2.1")
	b.signIn(opKey)
	poll := func(seen string) *httptest.ResponseRecorder {
		return b.do(http.MethodGet, "/console/customers?part=records-list", nil, "HX-Request", "true", seenHeader, seen)
	}
	first := poll("")
	require.Equal(t, http.StatusOK, first.Code)
	fp := regexp.MustCompile(`"X-Console-Seen":"([0-9a-f]+)"`).FindStringSubmatch(first.Body.String())
	require.NotNil(t, fp)
	require.Equal(t, http.StatusNoContent, poll(fp[1]).Code)

	csrf := b.csrf("/console/customers")
	b.do(http.MethodPost, "/console/customers", url.Values{"name": {"Ada"}, "csrf": {csrf}})
	changed := poll(fp[1])
	require.Equal(t, http.StatusOK, changed.Code)
	require.Contains(t, changed.Body.String(), "Ada")
	require.Equal(t, http.StatusNoContent, b.do(http.MethodGet, "/console/customers?part=nope", nil, "HX-Request", "true").Code)
}

// Every page sends a Content-Security-Policy without 'unsafe-inline' or
// 'unsafe-eval': htmx runs with allowEval off and no inline styles.
func TestContentSecurityPolicy(t *testing.T) {
	f := newFixture(t)
	rec := f.browser("192.0.2.1").do(http.MethodGet, "/console/signin", nil)
	csp := rec.Header().Get("Content-Security-Policy")
	require.Contains(t, csp, "script-src 'self'")
	require.NotContains(t, csp, "unsafe")
	require.Contains(t, rec.Body.String(), `"allowEval":false`)
	require.Contains(t, rec.Body.String(), `"includeIndicatorStyles":false`)
}

func TestFormReaderCents(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "120": 12000, "120.5": 12050, "120.50": 12050, "0.07": 7, "-1.25": -125} {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("a="+url.QueryEscape(in)))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		f := &formReader{r: req, loc: time.UTC}
		require.Equal(t, want, f.cents("a"), in)
		require.NoError(t, f.Err(), in)
	}
	for _, in := range []string{"12,50", "1.234", "abc", "1.-5", "+3"} {
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("a="+url.QueryEscape(in)))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		f := &formReader{r: req, loc: time.UTC}
		f.cents("a")
		require.Error(t, f.Err(), in)
	}
}

func TestSafeNext(t *testing.T) {
	require.Equal(t, "/console/orders?x=1", safeNext("/console/orders?x=1"))
	for _, bad := range []string{"https://evil.example/", "//evil.example", "/v1/orders", "/console\\x", "/console/\r\n"} {
		require.Empty(t, safeNext(bad), bad)
	}
}

// The lag chart draws one point per sample, the newest at the right edge.
func TestLagChart(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 10, 0, 0, time.UTC)
	svg, peak := lagChart("orders", []lagPoint{{At: now.Add(-10 * time.Minute), Events: 0}, {At: now.Add(-5 * time.Minute), Events: 8}, {At: now, Events: 4}},
		now, 10*time.Minute)
	require.Equal(t, int64(8), peak)
	require.Contains(t, string(svg), `points="0.0,46.0 120.0,2.0 240.0,24.0"`)
	require.Contains(t, string(svg), `role="img"`)
}

// The on-call view reads who leads each unit from the leadership report
// (GET /admin/leadership): the current term's holder, and this instance's
// role; a unit no one has led yet has no holder.
func TestLeadersOf(t *testing.T) {
	t.Parallel()
	report := map[string]any{"holder": "w1", "workers": 2, "units": []any{
		map[string]any{"name": "hearth/projections/orders", "role": "leader", "term": 4, "since": "s1",
			"current": map[string]any{"term": 4, "holder": "w1", "since": "s1"}},
		map[string]any{"name": "hearth/projections/schedules", "role": "standby", "term": 0, "since": "s2"},
	}}
	got := leadersOf(report, strings.ToUpper)
	require.Equal(t, []leaderView{
		{Unit: "hearth/projections/orders", Holder: "w1", Term: "4", Since: "S1", Role: "leader", ThisSince: "S1"},
		{Unit: "hearth/projections/schedules", Role: "standby", ThisSince: "S2"},
	}, got)
	require.Empty(t, leadersOf(map[string]any{}, strings.ToUpper))
}

// The browser's time zone is taken only when it is a zone of its own name,
// as the API's settings take one (civil.LoadZone): "Local" and "localtime"
// are the server's zone, not the person's; "./Europe/Paris" and the like
// load the same zone under endless names, each of which the zone cache
// would keep. Any such name signs in on UTC, and names no cached zone.
func TestSignInTakesOnlyAZoneOfItsOwnName(t *testing.T) {
	f := newFixture(t)
	for tz, want := range map[string]string{
		"Europe/Paris": "Europe/Paris", "Local": "UTC", "localtime": "UTC", "posixrules": "UTC",
		"./Europe/Paris": "UTC", "Europe//Paris": "UTC", "right/Europe/Paris": "UTC", "Mars/Olympus": "UTC",
	} {
		b := f.browser("192.0.2.7")
		page := b.do(http.MethodGet, "/console/signin", nil)
		m := tokenRe.FindStringSubmatch(page.Body.String())
		require.NotNil(t, m, "the sign-in form has a token")
		rec := b.do(http.MethodPost, "/console/signin", url.Values{"token": {m[1]}, "key": {opKey}, "tz": {tz}})
		require.Equal(t, http.StatusSeeOther, rec.Code, tz)
		f.sessions.mu.Lock()
		var got []string
		for _, s := range f.sessions.m {
			got = append(got, s.tz)
		}
		clear(f.sessions.m)
		f.sessions.mu.Unlock()
		require.Equal(t, []string{want}, got, tz)
		if want == "UTC" {
			require.Equal(t, time.UTC, zone(tz), "%s names no zone of the cache", tz)
		}
	}
}

// A refusal is told where a screen reader looks first: a refused form's
// page says so in its title, and a refused sign-in ties its message to the
// key's field (aria-invalid, aria-describedby), as the forms tie theirs.
func TestRefusalsAreInTheTitleAndTiedToTheirField(t *testing.T) {
	f := newFixture(t)
	b := f.browser("192.0.2.1")
	rec := b.signIn("hk_made_up")
	require.Equal(t, http.StatusUnauthorized, rec.Code)
	body := rec.Body.String()
	key := regexp.MustCompile(`<input id="key"[^>]*>`).FindString(body)
	require.Contains(t, key, `aria-invalid="true"`, "the refused key's field is marked")
	errID := regexp.MustCompile(`<div class="problem" role="alert" id="([^"]+)"><p>Unknown, revoked or expired key.`).FindStringSubmatch(body)
	require.NotNil(t, errID, "the refusal has an id: %s", body)
	require.Regexp(t, `aria-describedby="[^"]*\b`+errID[1]+`\b`, key, "and the field names it")
	require.Contains(t, body, "<title>Not signed in: Sign in · Hearth</title>")

	b.signIn(opKey)
	csrf := b.csrf("/console/customers")
	rec = b.do(http.MethodPost, "/console/customers", url.Values{"name": {" "}, "csrf": {csrf}})
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	require.Contains(t, rec.Body.String(), "<title>Not saved: Customers · Hearth</title>")
}
