package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/internal/pgtest"
	"hearth/internal/refdata"
	httpport "hearth/ports/http"
	"hearth/ports/http/console"
)

// sessionsThen is the console's session store with a step run once, right
// after the next session it finds: the moment between a request's session
// lookup and its write, where a key stopped working meanwhile.
type sessionsThen struct {
	*refdata.Store
	mu   sync.Mutex
	then func()
}

func (s *sessionsThen) Session(ctx context.Context, u access.SessionUse) (access.Session, error) {
	st, err := s.Store.Session(ctx, u)
	s.mu.Lock()
	then := s.then
	s.then = nil
	s.mu.Unlock()
	if err == nil && then != nil {
		then()
	}
	return st, err
}

// afterNextLookup arms the step.
func (s *sessionsThen) afterNextLookup(then func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.then = then
}

// consoleWithSessions serves a's API and console, the console's sessions
// found through the sessionsThen it returns.
func consoleWithSessions(t *testing.T, a *api) (*httptest.Server, *sessionsThen) {
	t.Helper()
	sessions := &sessionsThen{Store: a.w.refdata}
	log := slog.New(slog.DiscardHandler)
	hcfg, err := httpConfig(a.cfg, a.dbs, a.w, nil, log)
	require.NoError(t, err)
	closeConsole(hcfg.Console)
	hcfg.Console, err = console.New(console.Config{App: a.w.app, Sessions: sessions, Consistency: hcfg.Consistency, Log: log})
	require.NoError(t, err)
	t.Cleanup(func() { closeConsole(hcfg.Console) })
	handler, err := httpport.NewHandler(hcfg)
	require.NoError(t, err)
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv, sessions
}

// The console's record forms (a new customer, staff member, catalog item)
// check the session and its key in their transactions too: a key revoked
// after the request's session lookup creates nothing, and the person is
// signed out.
func TestConsoleRecordFormsCheckTheKeyInTheirTransaction(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	srv, sessions := consoleWithSessions(t, a)
	count := func(table string) int {
		t.Helper()
		var n int
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM `+table+` WHERE merchant_id = $1`, a.merchantA).Scan(&n))
		return n
	}
	for _, tc := range []struct{ path, table string }{
		{"customers", "customers"}, {"staff", "staff"}, {"catalog", "catalog_items"},
	} {
		k, err := a.w.refdata.CreateKey(t.Context(), "acme", access.Operator, "")
		require.NoError(t, err)
		c := newConsoleClient(t, srv.URL)
		c.signIn(k.Secret)
		form := func() url.Values {
			t.Helper()
			status, _, page := c.do(http.MethodGet, "/console/"+tc.path, nil)
			require.Equal(t, http.StatusOK, status, tc.path)
			m := csrfTokenRe.FindStringSubmatch(page)
			require.NotNil(t, m)
			return url.Values{"csrf": {m[1]}, "name": {"Mallory"}, "base_price_cents": {"1.00"}}
		}
		status, location, body := c.do(http.MethodPost, "/console/"+tc.path, form())
		require.Equal(t, http.StatusSeeOther, status, "%s: a working key writes: %s", tc.path, body)
		require.Equal(t, "/console/"+tc.path, location)
		before := count(tc.table)

		f := form()
		sessions.afterNextLookup(func() { a.must(http.StatusOK, http.MethodPost, "/admin/keys/"+k.ID+"/revoke", a.admin, nil) })
		status, location, body = c.do(http.MethodPost, "/console/"+tc.path, f)
		require.Equal(t, http.StatusSeeOther, status, "%s: %s", tc.path, body)
		require.Equal(t, "/console/signin?ended=key", location, "%s: sent to sign in", tc.path)
		require.Equal(t, before, count(tc.table), "%s: the refused write created nothing", tc.path)
	}
}

// A console session's write checks, in its transaction, that the session
// and its key still work, as the API's writes check their key: a key
// revoked, rotated away or expired while the form was on its way (after
// the request's session lookup) writes nothing, and the person is signed
// out and told why on the sign-in page. A form sent after that finds no
// session and writes nothing either.
func TestConsoleWritesCheckTheKeyInTheirTransaction(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada")
	srv, sessions := consoleWithSessions(t, a)

	created := func() int { return a.countEvents(a.merchantA, "ServiceRequestCreated") }
	request := func(c *consoleClient) url.Values {
		t.Helper()
		status, _, page := c.do(http.MethodGet, "/console/requests", nil)
		require.Equal(t, http.StatusOK, status)
		m := csrfTokenRe.FindStringSubmatch(page)
		require.NotNil(t, m)
		return url.Values{"csrf": {m[1]}, "customer_id": {customer}, "catalog_item_id": {""}, "content": {"Boiler service"},
			"source": {"phone"}, "notes": {""}}
	}
	for _, tc := range []struct {
		name string
		stop func(keyID string)
	}{
		{"revoked", func(keyID string) {
			a.must(http.StatusOK, http.MethodPost, "/admin/keys/"+keyID+"/revoke", a.admin, nil)
		}},
		{"rotated without grace", func(keyID string) {
			a.must(http.StatusCreated, http.MethodPost, "/admin/keys/"+keyID+"/rotate", a.admin, map[string]any{})
		}},
		{"expired, or rotated past its grace", func(keyID string) {
			_, err := a.dbs.es.DB.ExecContext(t.Context(), `UPDATE api_keys SET expires_at = now() WHERE id = $1`, keyID)
			require.NoError(t, err)
		}},
	} {
		k, err := a.w.refdata.CreateKey(t.Context(), "acme", access.Operator, "")
		require.NoError(t, err)
		c := newConsoleClient(t, srv.URL)
		c.signIn(k.Secret)
		form := request(c)
		status, location, body := c.do(http.MethodPost, "/console/requests", form)
		require.Equal(t, http.StatusSeeOther, status, "%s: a working key writes: %s", tc.name, body)
		require.Equal(t, "/console/requests", location)
		before := created()

		form = request(c)
		sessions.afterNextLookup(func() { tc.stop(k.ID) })
		status, location, body = c.do(http.MethodPost, "/console/requests", form)
		require.Equal(t, http.StatusSeeOther, status, "%s: %s", tc.name, body)
		require.Equal(t, "/console/signin?ended=key", location, "%s: sent to sign in", tc.name)
		require.Equal(t, before, created(), "%s: the refused write wrote nothing", tc.name)
		require.Empty(t, c.cookies["hearth_console"], "%s: the cookie is deleted", tc.name)
		require.Zero(t, a.sessionRows(k.ID), "%s: the session ended", tc.name)
		status, _, page := c.do(http.MethodGet, location, nil)
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, page, "no longer works", "%s: the sign-in page says why", tc.name)
		require.Contains(t, page, "was not saved", "%s", tc.name)
	}

	// A form sent after the key stopped working finds no session: it is
	// sent to sign in, told that its session ended, and writes nothing.
	k, err := a.w.refdata.CreateKey(t.Context(), "acme", access.Operator, "")
	require.NoError(t, err)
	c := newConsoleClient(t, srv.URL)
	c.signIn(k.Secret)
	form := request(c)
	before := created()
	a.must(http.StatusOK, http.MethodPost, "/admin/keys/"+k.ID+"/revoke", a.admin, nil)
	status, location, _ := c.do(http.MethodPost, "/console/requests", form)
	require.Equal(t, http.StatusSeeOther, status)
	require.True(t, strings.HasPrefix(location, "/console/signin?ended=session"), "%q", location)
	require.Equal(t, before, created())
	require.Empty(t, c.cookies["hearth_console"], "the stale cookie is deleted")
	_, _, page := c.do(http.MethodGet, location, nil)
	require.Contains(t, page, "Your session has ended")
}
