package main

import (
	"errors"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/domain/servicerequest"
	"hearth/internal/pgtest"
)

// formRe is a POST form of a console page: its action and its inside.
var (
	formRe   = regexp.MustCompile(`(?s)<form[^>]*? method="post" action="([^"]+)"[^>]*>(.*?)</form>`)
	hiddenRe = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
)

// formAt is what the form of page posting to action sends as rendered:
// its hidden inputs (the CSRF token, and whatever else the page put there).
func formAt(t *testing.T, page, action string) url.Values {
	t.Helper()
	for _, m := range formRe.FindAllStringSubmatch(page, -1) {
		if m[1] != action {
			continue
		}
		v := url.Values{}
		for _, h := range hiddenRe.FindAllStringSubmatch(m[2], -1) {
			v.Add(h[1], html.UnescapeString(h[2]))
		}
		return v
	}
	t.Fatalf("no form posts to %s", action)
	return nil
}

// A console form sent twice (a double click without JavaScript, a reload
// of the page its POST answered, the back button and Send again, a flaky
// network's retry) writes once, as a write sent twice with one
// Idempotency-Key does through the API: the second sending lands on a page
// that says the form was saved already. The same form sent with other
// values (back, changed, sent again) writes nothing and comes back with
// what was typed, saying why.
func TestConsoleFormSentTwiceWritesOnce(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	c := newConsoleClient(t, a.base)
	c.signIn(a.opA)
	count := func(query string, args ...any) int {
		t.Helper()
		var n int
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), query, args...).Scan(&n))
		return n
	}
	requests := func() int {
		return count(`SELECT count(*) FROM events WHERE merchant_id = $1 AND stream_type = $2 AND version = 1`,
			a.merchantA, servicerequest.StreamType)
	}
	catalog := func() int {
		return count(`SELECT count(*) FROM catalog_items WHERE merchant_id = $1`, a.merchantA)
	}

	// A new service request, sent again as it was.
	page, form := inboxForm(t, c, customer, "The boiler knocks")
	before := requests()
	status, location, body := c.do(http.MethodPost, "/console/requests", form)
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "/console/requests", location)
	require.Equal(t, before+1, requests(), "the form recorded its request")
	status, location, body = c.do(http.MethodPost, "/console/requests", form)
	require.Equal(t, http.StatusSeeOther, status, "the form sent again lands on a page: %s", body)
	require.Equal(t, "/console/requests", location, "the page the form was on")
	require.Equal(t, before+1, requests(), "the form sent again recorded no second request")
	_, _, page = c.do(http.MethodGet, location, nil)
	require.Contains(t, page, "already sent", "the page says the form had been saved")

	// Sent again with other values: refused, nothing written, what was typed kept.
	form.Set("content", "The boiler knocks, and leaks")
	status, _, page = c.do(http.MethodPost, "/console/requests", form)
	require.Equal(t, http.StatusConflict, status, "the same form sent with other values is refused")
	require.Equal(t, before+1, requests(), "and writes nothing")
	require.Contains(t, page, "The boiler knocks, and leaks", "what was typed comes back")
	require.Contains(t, page, "already sent", "with why")
	again := formAt(t, page, "/console/requests")
	again.Set("customer_id", customer)
	again.Set("content", "The boiler knocks, and leaks")
	again.Set("source", "phone")
	status, _, body = c.do(http.MethodPost, "/console/requests", again)
	require.Equal(t, http.StatusSeeOther, status, "the form shown again sends anew: %s", body)
	require.Equal(t, before+2, requests(), "and records its request knowingly")

	// A new catalog item, its form sent twice at once (a double click
	// without JavaScript): one item.
	c.referer = "/console/catalog"
	_, _, page = c.do(http.MethodGet, "/console/catalog", nil)
	form = formAt(t, page, "/console/catalog")
	form.Set("name", "Chimney sweep")
	form.Set("base_price_cents", "80.00")
	items := catalog()
	var wg sync.WaitGroup
	statuses, errs := make([]int, 2), make([]error, 2)
	for i := range statuses {
		wg.Go(func() { statuses[i], errs[i] = c.post("/console/catalog", form) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, []int{http.StatusSeeOther, http.StatusSeeOther}, statuses, "both sendings land on a page")
	require.Equal(t, items+1, catalog(), "one catalog item for a form sent twice at once")

	// A form's key is its own: the next form of the page, with the same
	// values, is a new write.
	_, _, page = c.do(http.MethodGet, "/console/catalog", nil)
	next := formAt(t, page, "/console/catalog")
	next.Set("name", "Chimney sweep")
	next.Set("base_price_cents", "80.00")
	status, _, body = c.do(http.MethodPost, "/console/catalog", next)
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, items+2, catalog(), "a new form writes anew")
	require.False(t, strings.Contains(body, "already sent"))
}

// post sends form as the browser would, from any goroutine (do may fail
// the test, which only the test's own goroutine may): its status.
func (c *consoleClient) post(path string, form url.Values) (int, error) {
	req, err := http.NewRequestWithContext(c.t.Context(), http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c.referer != "" {
		req.Header.Set("Referer", c.base+c.referer)
	}
	for name, v := range c.cookies {
		req.AddCookie(&http.Cookie{Name: name, Value: v})
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	return resp.StatusCode, resp.Body.Close()
}

// The inbox's list is a live part whose rows hold forms (confirm, convert,
// cancel), each stating the list to come back to. Refreshed by its poll, the
// list stays the page's: the rows' forms come back to the inbox, not to the
// poll's address (which answers the bare list, without the page around it),
// and a list nothing changed in is not sent again (which would take a
// keyboard's focus off the row every few seconds).
func TestConsoleRequestsListRefreshedStaysThePages(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	c, _ := inboxWithARequest(t, a, "Ada Lovelace")
	_, _, page := c.do(http.MethodGet, "/console/requests", nil)
	seen := regexp.MustCompile(`id="live-requests-list"[^>]*"X-Console-Seen":"([0-9a-f]+)"`).FindStringSubmatch(page)
	require.NotNil(t, seen, "the list is a live part")
	poll := func(seen string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, a.base+"/console/requests?part=requests-list", nil)
		require.NoError(t, err)
		req.Header.Set("HX-Request", "true")
		req.Header.Set("X-Console-Seen", seen)
		req.AddCookie(&http.Cookie{Name: "hearth_console", Value: c.cookies["hearth_console"]})
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}

	// The list as a poll sends it (after a change made elsewhere, say).
	status, part := poll("")
	require.Equal(t, http.StatusOK, status)
	confirm := regexp.MustCompile(`action="(/console/requests/[^"]+/status)"`).FindStringSubmatch(part)
	require.NotNil(t, confirm, "the refreshed list has the row's forms")
	status, location, body := c.do(http.MethodPost, confirm[1], formAt(t, part, confirm[1]))
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "/console/requests", location, "a row's form of the refreshed list comes back to the inbox")

	_, _, page = c.do(http.MethodGet, "/console/requests", nil)
	seen = regexp.MustCompile(`id="live-requests-list"[^>]*"X-Console-Seen":"([0-9a-f]+)"`).FindStringSubmatch(page)
	require.NotNil(t, seen)
	status, _ = poll(seen[1])
	require.Equal(t, http.StatusNoContent, status, "a list nothing changed in is not sent again")
}

// A form sent after its session ended (unused overnight, signed out in
// another tab) is not saved, and the sign-in page says so; signed in
// again, the person is back on the page the form was on, to send it
// again, not on the key's home page.
func TestConsoleFormAfterTheSessionEndedReturnsToItsPage(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	c := newConsoleClient(t, a.base)
	cookie := c.signIn(a.opA)
	from := "/console/requests?filtered=1&status=new"
	c.referer = from
	_, _, page := c.do(http.MethodGet, from, nil)
	form := formAt(t, page, "/console/requests")
	form.Set("customer_id", customer)
	form.Set("content", "The boiler knocks")
	// A form of a page rendered before forms had keys, which the sign-in
	// page does not carry (TestConsoleFormAfterTheSessionEndedIsKeptThroughSignIn).
	form.Del("form_key")
	status, _, body := c.do(http.MethodPost, "/console/signout", formAt(t, page, "/console/signout"))
	require.Equal(t, http.StatusSeeOther, status, body)

	c.cookies["hearth_console"] = cookie // the other tab, its page still open
	status, location, _ := c.do(http.MethodPost, "/console/requests", form)
	require.Equal(t, http.StatusSeeOther, status)
	u, err := url.Parse(location)
	require.NoError(t, err)
	require.Equal(t, "/console/signin", u.Path)
	require.Equal(t, "session", u.Query().Get("ended"), "the sign-in page says the session ended")
	require.Equal(t, from, u.Query().Get("next"), "and signed in again, the person is back on the form's page")

	_, _, page = c.do(http.MethodGet, location, nil)
	require.Contains(t, page, "was not saved")
	token := signinTokenRe.FindStringSubmatch(page)
	require.NotNil(t, token)
	next := regexp.MustCompile(`name="next" value="([^"]*)"`).FindStringSubmatch(page)
	require.NotNil(t, next)
	status, location, body = c.do(http.MethodPost, "/console/signin", url.Values{"token": {token[1]}, "key": {a.opA},
		"next": {html.UnescapeString(next[1])}, "tz": {"Europe/Paris"}})
	require.Equal(t, http.StatusSeeOther, status, body)
	status, location, _ = c.do(http.MethodGet, location, nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, from, location)
}

// A console form's record names what it wrote, so an erasure finds it as it
// finds an API answer: the form that created a customer, sent again after
// the customer's erasure, does not make the erased person anew.
func TestConsoleFormSentAgainAfterAnErasureWritesNothing(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	c := newConsoleClient(t, a.base)
	c.signIn(a.opA)
	c.referer = "/console/customers"
	_, _, page := c.do(http.MethodGet, "/console/customers", nil)
	form := formAt(t, page, "/console/customers")
	form.Set("name", "Ada Lovelace")
	form.Set("phone", "+44 20 7946 0000")
	status, _, body := c.do(http.MethodPost, "/console/customers", form)
	require.Equal(t, http.StatusSeeOther, status, body)
	var customer string
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(),
		`SELECT id FROM customers WHERE merchant_id = $1 ORDER BY created_at DESC LIMIT 1`, a.merchantA).Scan(&customer))
	a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+customer+"/erase", a.opA, map[string]any{"confirm": customer})
	var forgotten int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(),
		`SELECT count(*) FROM idempotency_forgotten WHERE merchant_id = $1 AND key = $2`, a.merchantA, form.Get("form_key")).Scan(&forgotten))
	require.Equal(t, 1, forgotten, "the erasure forgot the form's record, which named the customer")

	customers := func() int {
		var n int
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(),
			`SELECT count(*) FROM customers WHERE merchant_id = $1`, a.merchantA).Scan(&n))
		return n
	}
	before := customers()
	status, _, body = c.do(http.MethodPost, "/console/customers", form)
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, before, customers(), "the form sent again made nobody anew")
}

// A form sent after its session ended (unused overnight, signed out in
// another tab) keeps what was typed: the sign-in page it gets holds the
// form, and signed in again, the person is shown it to send with a click,
// not a blank form to fill again. Sent so, it writes once.
func TestConsoleFormAfterTheSessionEndedIsKeptThroughSignIn(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	c := newConsoleClient(t, a.base)
	cookie := c.signIn(a.opA)
	page, form := inboxForm(t, c, customer, "The boiler knocks & leaks")
	status, _, body := c.do(http.MethodPost, "/console/signout", formAt(t, page, "/console/signout"))
	require.Equal(t, http.StatusSeeOther, status, body)
	requests := func() int {
		var n int
		require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM events WHERE merchant_id = $1 AND stream_type = $2`,
			a.merchantA, servicerequest.StreamType).Scan(&n))
		return n
	}
	before := requests()

	c.cookies["hearth_console"] = cookie // the other tab, its page still open
	status, _, page = c.do(http.MethodPost, "/console/requests", form)
	require.Equal(t, http.StatusUnauthorized, status, "the form is answered with the sign-in page: %s", page)
	require.Contains(t, page, "was not saved", "which says the form was not saved")
	require.Contains(t, page, "The boiler knocks &amp; leaks", "and holds what was typed")
	require.Equal(t, before, requests())

	signin := formAt(t, page, "/console/signin")
	signin.Set("key", a.opA)
	status, _, page = c.do(http.MethodPost, "/console/signin", signin)
	require.Equal(t, http.StatusOK, status, "signed in, the person is shown the form: %s", page)
	require.Contains(t, page, "The boiler knocks &amp; leaks")
	resend := formAt(t, page, "/console/requests")
	require.Equal(t, "The boiler knocks & leaks", resend.Get("content"))
	require.Equal(t, form.Get("form_key"), resend.Get("form_key"), "under its own key")
	status, location, body := c.do(http.MethodPost, "/console/requests", resend)
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "/console/requests", location)
	require.Equal(t, before+1, requests(), "sent, it is saved")
	status, _, _ = c.do(http.MethodPost, "/console/requests", resend)
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, before+1, requests(), "once")
}

// inboxWithARequest signs an operator of merchant A in to the console and
// files a service request for a new customer named name through the
// inbox's form, as a dispatcher taking a call does.
func inboxWithARequest(t *testing.T, a *api, name string) (*consoleClient, string) {
	t.Helper()
	customer := a.createCustomer(a.opA, name)
	c := newConsoleClient(t, a.base)
	c.signIn(a.opA)
	_, form := inboxForm(t, c, customer, "The boiler knocks")
	status, _, body := c.do(http.MethodPost, "/console/requests", form)
	require.Equal(t, http.StatusSeeOther, status, body)
	return c, customer
}

// inboxForm opens the inbox as c and fills its new request's form for
// customer (a phone call about content), not sent: the page and the form.
func inboxForm(t *testing.T, c *consoleClient, customer, content string) (string, url.Values) {
	t.Helper()
	c.referer = "/console/requests"
	_, _, page := c.do(http.MethodGet, "/console/requests", nil)
	form := formAt(t, page, "/console/requests")
	form.Set("customer_id", customer)
	form.Set("content", content)
	form.Set("source", "phone")
	return page, form
}

// A form carried through a sign-in (its session ended on the way) is
// offered to send again only to a key that may send it: a worker signing in
// at the computer where a dispatcher's form was left is not shown what the
// dispatcher typed about a customer (a worker sees a customer only through
// their own jobs), nor offered a form it would be refused, and lands on its
// own page rather than the dispatcher's.
func TestConsoleCarriedFormIsOfferedOnlyToAKeyThatMaySendIt(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Ada Lovelace")
	dispatcher, err := a.w.refdata.CreateKey(t.Context(), "acme", access.Operator, "")
	require.NoError(t, err)
	c := newConsoleClient(t, a.base)
	c.signIn(dispatcher.Secret)
	_, form := inboxForm(t, c, customer, "Alarm code 4321, the key is under the mat")
	a.revokeSecret(dispatcher.Secret)
	status, _, page := c.do(http.MethodPost, "/console/requests", form)
	require.Equal(t, http.StatusUnauthorized, status, "the form is answered with the sign-in page: %s", page)

	signin := formAt(t, page, "/console/signin")
	require.NotEmpty(t, signin.Get("carry_action"), "the sign-in form carries the form")
	signin.Set("key", a.worker)
	status, location, page := c.do(http.MethodPost, "/console/signin", signin)
	require.NotContains(t, page, "Alarm code 4321", "a worker signing in is not shown the dispatcher's form (%d)", status)
	require.Equal(t, http.StatusSeeOther, status, "the worker is signed in and sent on: %s", page)
	require.Equal(t, "/console/signin?next=%2Fconsole%2Fjobs&nocookie", location, "to the worker's own page")
}
