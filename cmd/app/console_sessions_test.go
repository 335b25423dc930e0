package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
	httpport "hearth/ports/http"
	"hearth/ports/http/console"
)

// splitListeners serves a's Hearth as serve does with ADMIN_ADDR: a public
// listener whose console takes operator and worker keys, and an admin
// listener whose console takes admin keys (cookie hearth_console_admin).
func splitListeners(t *testing.T, a *api) (public, admin string) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	hcfg, err := httpConfig(a.cfg, a.dbs, a.w, nil, log)
	require.NoError(t, err)
	closeConsole(hcfg.Console) // one per surface below, as serve makes them
	serve := func(sf httpport.Surface) string {
		h := hcfg
		h.Surface = sf
		h.Console, err = consoleFor(sf, a.cfg, a.w, h, log)
		require.NoError(t, err)
		t.Cleanup(func() { closeConsole(h.Console) })
		handler, err := httpport.NewHandler(h)
		require.NoError(t, err)
		srv := httptest.NewServer(handler)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	return serve(httpport.SurfacePublic), serve(httpport.SurfaceAdmin)
}

// signInAs signs c in with key through the form and returns the answer's
// status and the session's token under the cookie named cookie.
func (c *consoleClient) signInAs(key, cookie string) (int, string) {
	c.t.Helper()
	_, _, page := c.do(http.MethodGet, "/console/signin", nil)
	m := signinTokenRe.FindStringSubmatch(page)
	require.NotNil(c.t, m, "the sign-in form has a token")
	status, _, _ := c.do(http.MethodPost, "/console/signin", url.Values{"token": {m[1]}, "key": {key}, "tz": {"UTC"}})
	return status, c.cookies[cookie]
}

// The roles a listener's console takes hold for every request, not only
// at sign-in: an admin's session token sent to the public listener under
// its cookie's name does not open the on-call view there (nor run its
// actions), and an operator's does not open the board on the admin one.
func TestConsoleSessionsKeepToTheirListenersRoles(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	public, admin := splitListeners(t, a)

	status, _ := newConsoleClient(t, public).signInAs(a.admin, "hearth_console")
	require.Equal(t, http.StatusForbidden, status, "the public console takes no admin key")
	status, _ = newConsoleClient(t, admin).signInAs(a.opA, "hearth_console_admin")
	require.Equal(t, http.StatusForbidden, status, "the admin console takes no operator key")

	oncall := newConsoleClient(t, admin)
	status, adminToken := oncall.signInAs(a.admin, "hearth_console_admin")
	require.Equal(t, http.StatusSeeOther, status)
	status, _, _ = oncall.do(http.MethodGet, "/console/oncall", nil)
	require.Equal(t, http.StatusOK, status)

	outside := newConsoleClient(t, public)
	outside.cookies["hearth_console"] = adminToken
	for _, try := range []struct{ method, path string }{{http.MethodGet, "/console/oncall"}, {http.MethodPost, "/console/oncall/verify"}} {
		status, location, _ := outside.do(try.method, try.path, url.Values{})
		require.Equal(t, http.StatusSeeOther, status, "%s %s on the public listener", try.method, try.path)
		require.Contains(t, location, "/console/signin", "no session there")
	}

	dispatcher := newConsoleClient(t, public)
	status, opToken := dispatcher.signInAs(a.opA, "hearth_console")
	require.Equal(t, http.StatusSeeOther, status)
	require.True(t, dispatcher.signedIn())
	onAdmin := newConsoleClient(t, admin)
	onAdmin.cookies["hearth_console_admin"] = opToken
	status, location, _ := onAdmin.do(http.MethodGet, "/console/board", nil)
	require.Equal(t, http.StatusSeeOther, status, "an operator's board on the admin listener")
	require.Contains(t, location, "/console/signin")
}

// A live part's refresh is the page's, not the person's: a page left open
// signs out SessionIdle after the last request of the person, as a session
// without a page open does.
func TestConsoleLivePollsDoNotKeepASessionOpen(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	log := slog.New(slog.DiscardHandler)
	hcfg, err := httpConfig(a.cfg, a.dbs, a.w, nil, log)
	require.NoError(t, err)
	closeConsole(hcfg.Console)
	hcfg.Console, err = console.New(console.Config{App: a.w.app, Sessions: a.w.refdata, Now: clock, Log: log})
	require.NoError(t, err)
	t.Cleanup(func() { closeConsole(hcfg.Console) })
	hcfg.Now = clock
	handler, err := httpport.NewHandler(hcfg)
	require.NoError(t, err)
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)

	noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	open := newConsoleClient(t, srv.URL)
	open.signIn(a.opA)
	poll := func() int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/console/board?part=board-grid", nil)
		require.NoError(t, err)
		req.Header.Set("HX-Request", "true")
		req.AddCookie(&http.Cookie{Name: "hearth_console", Value: open.cookies["hearth_console"]})
		res, err := noRedirects.Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		return res.StatusCode
	}
	require.Less(t, 2*time.Hour, console.SessionIdle)
	advance(2 * time.Hour)
	require.Contains(t, []int{http.StatusOK, http.StatusNoContent}, poll(), "the session is open: the part is answered")
	require.True(t, open.signedIn(), "a page load is a use")
	for range 9 { // the page polls, nobody clicks
		advance(time.Hour)
		poll()
	}
	require.Less(t, console.SessionIdle, 9*time.Hour)
	require.False(t, open.signedIn(), "signed out %s after the last page load, polls or not", console.SessionIdle)
}

// A page shown again with a form's refusal keeps polling its live parts at
// the page's own address (the form's takes only POSTs): the board after a
// refused assignment still refreshes.
func TestConsoleRefusedFormKeepsItsPageLive(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	c := newConsoleClient(t, a.base)
	c.signIn(a.opA)
	_, _, page := c.do(http.MethodGet, "/console/board", nil)
	m := csrfTokenRe.FindStringSubmatch(page)
	require.NotNil(t, m)
	require.Contains(t, page, `hx-get="/console/board?part=board-grid"`)
	c.referer = "/console/board"
	status, _, body := c.do(http.MethodPost, "/console/board/assign", url.Values{"csrf": {m[1]}, "order_id": {"not-an-id"}})
	require.Equal(t, http.StatusUnprocessableEntity, status, body)
	require.Contains(t, body, `hx-get="/console/board?part=board-grid"`, "the board's parts poll the board")
	require.NotContains(t, body, `hx-get="/console/board/assign`)
}

// The two listeners' consoles share a browser's cookies (cookies do not
// tell ports apart), so their sign-in forms must not share one: opening
// the public console's sign-in page, or signing in there, leaves the admin
// console's sign-in form (open in another tab) working, and the other way
// round.
func TestConsoleSignInFormsOfTwoListenersDoNotClash(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	public, admin := splitListeners(t, a)
	browser := newConsoleClient(t, public)
	signinForm := func(c *consoleClient) string {
		t.Helper()
		status, _, page := c.do(http.MethodGet, "/console/signin", nil)
		require.Equal(t, http.StatusOK, status)
		m := signinTokenRe.FindStringSubmatch(page)
		require.NotNil(t, m, "the sign-in form has a token")
		return m[1]
	}
	signIn := func(c *consoleClient, token, key string) int {
		t.Helper()
		status, _, _ := c.do(http.MethodPost, "/console/signin", url.Values{"token": {token}, "key": {key}, "tz": {"UTC"}})
		return status
	}

	onAdmin := signinForm(browser.at(admin))
	onPublic := signinForm(browser)
	require.Equal(t, http.StatusSeeOther, signIn(browser, onPublic, a.opA), "the public console's form, opened last")
	require.Equal(t, http.StatusSeeOther, signIn(browser.at(admin), onAdmin, a.admin),
		"the admin console's form, opened first in another tab")
	require.NotEmpty(t, browser.cookies["hearth_console"])
	require.NotEmpty(t, browser.cookies["hearth_console_admin"])
	require.True(t, browser.signedIn(), "both sessions stay open")
	status, _, _ := browser.at(admin).do(http.MethodGet, "/console/oncall", nil)
	require.Equal(t, http.StatusOK, status)

	// The other way round, in a fresh browser.
	browser = newConsoleClient(t, public)
	onPublic = signinForm(browser)
	onAdmin = signinForm(browser.at(admin))
	require.Equal(t, http.StatusSeeOther, signIn(browser.at(admin), onAdmin, a.admin))
	require.Equal(t, http.StatusSeeOther, signIn(browser, onPublic, a.opA))
}
