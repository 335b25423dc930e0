package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"hearth/app/access"
	"hearth/domain/apperr"
	"hearth/domain/reference"
	"hearth/domain/uuid"
	"hearth/internal/chromium"
	"hearth/internal/pgtest"
	httpport "hearth/ports/http"
	"hearth/ports/http/console"
)

// The console, end to end: headless Chromium (Debian's, driven by
// chromedp) against a real Hearth on a real Postgres (setup), as a person
// would use it. Each test saves screenshots under artifacts/screenshots/
// (kept by CI, ignored by git) and fails on any error in the browser's
// console.

// screenshotDir is where the tests leave their screenshots: the
// repository's artifacts/screenshots (cmd/app's tests run in cmd/app).
var screenshotDir = filepath.Join("..", "..", "artifacts", "screenshots")

// tab is one headless browser on the console.
type tab struct {
	t    *testing.T
	ctx  context.Context
	base string

	mu   sync.Mutex
	errs []string // errors the browser reported (exceptions, console.error, failed loads)
}

// stepTimeout bounds one browser step: a slow CI machine may take
// seconds, a hang must not take the whole test timeout.
const stepTimeout = 30 * time.Second

// openTab starts a browser with a fresh profile, sized width x height.
func openTab(t *testing.T, base string, width, height int) *tab {
	t.Helper()
	if chromium.Path() == "" && os.Getenv("CI") == "" {
		t.Skip(chromium.ErrNotFound.Error() + " (CI installs it and runs these tests)")
	}
	ctx, stop, err := chromium.Start(context.Background(), chromium.Options{UserDataDir: t.TempDir(), Width: width, Height: height})
	require.NoError(t, err)
	tb := &tab{t: t, ctx: ctx, base: strings.Replace(base, "127.0.0.1", "localhost", 1)}
	if width < 500 { // a phone: the window cannot be that narrow, the viewport can
		tb.do(chromedp.EmulateViewport(int64(width), int64(height), chromedp.EmulateMobile, chromedp.EmulateTouch))
	}
	var wg sync.WaitGroup
	collect := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	exceptions, console, entries := chromedp.Events(ctx, runtime.ExceptionThrown), chromedp.Events(ctx, runtime.ConsoleAPICalled),
		chromedp.Events(ctx, log.EntryAdded)
	collect(func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			tb.note("exception: %s %s", ev.ExceptionDetails.Text, describe(ev.ExceptionDetails.Exception))
		}
	})
	collect(func() {
		for ev, err := range console {
			if err != nil {
				return
			}
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, describe(a))
				}
				tb.note("console.%s: %s", ev.Type, strings.Join(args, " "))
			}
		}
	})
	collect(func() {
		for ev, err := range entries {
			if err != nil {
				return
			}
			if ev.Entry.Level == log.EntryLevelError && !refusedForm(ev.Entry) {
				tb.note("log %s: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
			}
		}
	})
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	return tb
}

// refusedForm is Chrome's log line for a console page answered with the
// API's status: a form the application refused (422, 409) is shown again
// with that status, which Chrome logs as a failed load of the page.
func refusedForm(e *log.Entry) bool {
	return e.Source == log.EntrySourceNetwork && strings.Contains(e.URL, "/console/") &&
		(strings.Contains(e.Text, "status of 422") || strings.Contains(e.Text, "status of 409"))
}

func describe(o *runtime.RemoteObject) string {
	if o == nil {
		return ""
	}
	if o.Description != "" {
		return o.Description
	}
	return string(o.Value)
}

func (tb *tab) note(format string, args ...any) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.errs = append(tb.errs, fmt.Sprintf(format, args...))
}

// noErrors checks that the browser reported no error so far.
func (tb *tab) noErrors() {
	tb.t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	require.Empty(tb.t, tb.errs, "the browser's console shows errors")
}

// do runs steps, each bounded by stepTimeout.
func (tb *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	for i, step := range steps {
		ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
		err := chromedp.Do(ctx, step)
		cancel()
		if err != nil {
			tb.shot("failed")
			require.NoError(tb.t, err, "step %d of %d; the page showed:\n%s", i+1, len(steps), tb.shows())
		}
	}
}

// shows is what the page shows when a step failed: its address and the
// text of its main part, for the failure message.
func (tb *tab) shows() string {
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname + location.search + "\n" + (document.querySelector("main") || document.body).innerText`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return s
}

// open loads a console page.
func (tb *tab) open(path string) {
	tb.t.Helper()
	tb.do(chromedp.Navigate(tb.base + path))
}

// see waits until the page shows an element that XPath expr finds.
func (tb *tab) see(expr string) {
	tb.t.Helper()
	tb.do(chromedp.WaitVisible(expr))
}

// seeText waits until an element of the CSS class shows text.
func (tb *tab) seeText(class, text string) {
	tb.t.Helper()
	tb.see(fmt.Sprintf(`//*[contains(concat(" ", @class, " "), " %s ") and contains(., %q)]`, class, text))
}

// text is the text of the first element the CSS selector finds.
func (tb *tab) text(css string) string {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
	require.NoError(tb.t, err, "text of %s", css)
	return s
}

// fill sets the fields' values, by id: typed into text fields, set on
// date and time fields (whose typing depends on the locale).
func (tb *tab) fill(fields ...string) {
	tb.t.Helper()
	for i := 0; i+1 < len(fields); i += 2 {
		id, v := fields[i], fields[i+1]
		tb.do(chromedp.WaitVisible(chromedp.ID(id)))
		ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
		typ, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => {
			const el = document.getElementById(%q);
			el.value = "";
			if (el.type === "datetime-local" || el.type === "date") { el.value = %q; }
			return el.type;
		})()`, id, v)))
		cancel()
		require.NoError(tb.t, err)
		if typ != "datetime-local" && typ != "date" {
			tb.do(chromedp.SendKeys(chromedp.ID(id), v))
		}
	}
}

// choose selects the option with the visible label in a select, by id.
func (tb *tab) choose(id, label string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
		const s = document.getElementById(%q);
		const opts = s ? [...s.options] : [];
		const o = opts.find(o => o.textContent.trim() === %[2]q) || opts.find(o => o.textContent.includes(%[2]q));
		if (!o) return false;
		s.value = o.value;
		return true;
	})()`, id, label)))
	require.NoError(tb.t, err)
	require.True(tb.t, ok, "select %s has an option %q", id, label)
}

// click clicks the first element the XPath expression finds. A link or a
// button of a plain form loads the next page: click waits until it has
// loaded, so that the next step reads that page. Otherwise the next
// step's query can find a node of the page being left, and the browser
// drops it under the query ("Could not find node with given id"), or
// read that page's text.
func (tb *tab) click(expr string) {
	tb.t.Helper()
	tb.do(chromedp.WaitVisible(expr))
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	navigates, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
		const el = document.evaluate(%q, document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue;
		if (!el) return false;
		const htmx = (e) => !!e && ["hx-get", "hx-post", "hx-put", "hx-patch", "hx-delete"].some((a) => e.hasAttribute(a));
		if (el.tagName === "A") return !!el.getAttribute("href") && !el.getAttribute("href").startsWith("#") && !htmx(el);
		return el.tagName === "BUTTON" && el.type === "submit" && !!el.form && !htmx(el) && !htmx(el.form);
	})()`, expr)))
	cancel()
	require.NoError(tb.t, err, "is %s a link or a form's button", expr)
	if !navigates {
		tb.do(chromedp.Click(expr, chromedp.NodeVisible))
		return
	}
	ctx, cancel = context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(expr, chromedp.NodeVisible)); err != nil {
		tb.shot("failed")
		require.NoError(tb.t, err, "click %s and load the page it leads to; the page showed:\n%s", expr, tb.shows())
	}
}

// button clicks the button with the label.
func (tb *tab) button(label string) {
	tb.t.Helper()
	tb.click(fmt.Sprintf(`//button[normalize-space(.)=%q]`, label))
}

// shot saves a screenshot of the whole page as <test>-<name>.png.
func (tb *tab) shot(name string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Logf("screenshot %s: %v", name, err)
		return
	}
	require.NoError(tb.t, os.MkdirAll(screenshotDir, 0o755))
	file := filepath.Join(screenshotDir, strings.ReplaceAll(tb.t.Name(), "/", "-")+"-"+name+".png")
	require.NoError(tb.t, os.WriteFile(file, png, 0o644))
}

// signIn signs in with key and waits for the role's first page.
func (tb *tab) signIn(key, title string) {
	tb.t.Helper()
	tb.open("/console/")
	tb.see(`//input[@id="key"]`)
	tb.fill("key", key)
	tb.button("Sign in")
	tb.see(fmt.Sprintf(`//h1[normalize-space(.)=%q]`, title))
}

// A dispatcher's day: sign in, a form refused with the API's problem next
// to its field, a customer, a staff member and a catalog item created, a
// request taken through confirm and convert to an order, the order
// assigned on the board (and a double booking refused plainly), the job
// started and finished, the order settled, and its change log read as a
// timeline. Meanwhile a change made through the API appears on the board
// without a reload.
func TestConsoleDispatcher(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	tb := openTab(t, a.base, 1366, 900)
	tb.signIn(a.opA, "Dispatch board")

	// A customer without a name: the API's problem stands next to the
	// field it names; nothing is created.
	tb.open("/console/customers")
	tb.button("Create customer")
	tb.seeText("err", "is required")
	require.Equal(t, "is required", tb.text("#new-name-err"))
	require.Contains(t, tb.text(".problem"), "Check the fields marked below")
	tb.shot("refused")
	tb.fill("new-name", "Ada Lovelace", "new-phone", "+44 20 7946 0000", "new-address", "12 St James's Square, London")
	tb.button("Create customer")
	tb.seeText("flash", "Created the new customer.")
	tb.see(`//table//a[normalize-space(.)="Ada Lovelace"]`)

	tb.open("/console/catalog")
	tb.fill("new-name", "Deep clean", "new-base_price_cents", "120.50")
	tb.button("Create catalog item")
	tb.seeText("flash", "Created the new catalog item.")
	tb.see(`//td[normalize-space(.)="120.50"]`)

	// A request, from the inbox to an order.
	day := time.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
	tb.open("/console/requests")
	tb.choose("new-request-customer_id", "Ada Lovelace")
	tb.choose("new-request-catalog_item_id", "Deep clean")
	tb.fill("new-request-content", "Deep clean of the library",
		"new-request-appointment_start_at", day+"T09:00", "new-request-appointment_end_at", day+"T11:00")
	tb.button("Record request")
	tb.seeText("flash", "Request recorded")
	tb.see(`//tr[contains(., "Deep clean of the library")]//button[normalize-space(.)="Confirm"]`)
	tb.click(`//tr[contains(., "Deep clean of the library")]//button[normalize-space(.)="Confirm"]`)
	tb.seeText("flash", "Request confirmed")
	tb.click(`//tr[contains(., "Deep clean of the library")]//button[normalize-space(.)="Convert to order"]`)
	tb.seeText("flash", "Request converted into this order")
	require.Equal(t, "120.50", strings.TrimSpace(strings.Split(tb.text("dl.facts"), "Amount")[1][:7]))

	// To the board, with the order picked and its window filled in.
	tb.click(`//a[normalize-space(.)="Assign on the board"]`)
	tb.see(`//h1[normalize-space(.)="Dispatch board"]`)
	tb.choose("assign-staff_id", "Wanda Worker")
	tb.button("Assign")
	tb.seeText("flash", "Assigned for ")
	tb.see(`//table[contains(@class,"board")]//a[contains(@class,"chip") and contains(., "Ada Lovelace")]`)

	// A change made elsewhere (the API) appears on the board by itself.
	bob := a.createCustomer(a.opA, "Bob Elsewhere")
	other := a.createOrder(a.opA, bob, 5000)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+other+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": day + "T14:00:00Z", "end_at": day + "T15:00:00Z"})
	tb.see(`//table[contains(@class,"board")]//a[contains(@class,"chip") and contains(., "Bob Elsewhere")]`)
	tb.shot("board")

	// The API's writes reach the console's read models asynchronously
	// (only the console's own writes wait for them): the board picks an
	// order from ?order only once the read model has it, else it says so
	// and shows an empty choice.
	tb.open("/console/board?order=" + uuid.New())
	tb.seeText("flash", "The order to assign was not found")

	// A double booking is refused, and the board says so plainly.
	third := a.createOrder(a.opA, bob, 7000)
	a.awaitOrder(a.opA, third, 1)
	tb.open("/console/board?order=" + third)
	tb.choose("assign-staff_id", "Wanda Worker")
	tb.fill("assign-start_at", day+"T10:00", "assign-end_at", day+"T12:00")
	tb.button("Assign")
	tb.see(`//div[@id="double-booking"]`)
	require.Contains(t, tb.text("#double-booking"), "Double booking refused")
	require.Contains(t, tb.text("#double-booking"), "Wanda Worker is already booked")
	tb.shot("double-booking")

	// The job, started and done from the order's page; then settled.
	tb.click(`//table[contains(@class,"board")]//a[contains(@class,"chip") and contains(., "Ada Lovelace")]`)
	tb.button("Start the job")
	tb.seeText("flash", "Schedule in service")
	require.Equal(t, "in service", tb.text("#order-status"))
	tb.button("Job done")
	tb.seeText("flash", "Schedule done")
	require.Equal(t, "completed", tb.text("#order-status"))
	tb.choose("settle-settlement_status", "settled")
	tb.fill("settle-paid_amount_cents", "120.50")
	tb.choose("settle-payment_method", "card")
	tb.button("Save settlement")
	tb.seeText("flash", "Settlement saved")
	require.True(t, strings.HasPrefix(tb.text("#order-settlement"), "settled, paid 120.50 by card"), tb.text("#order-settlement"))

	// The change log as a timeline: who, when, before and after.
	timeline := tb.text("ol.timeline")
	for _, want := range []string{"OrderCreated", "OrderAssignmentUpdated", "OrderStatusChanged", "OrderSettlementUpdated", "(you)"} {
		require.Contains(t, timeline, want)
	}
	tb.see(`//ol[contains(@class,"timeline")]//tr[th[normalize-space(.)="status"] and td[1][normalize-space(.)="in_service"] and td[2][normalize-space(.)="completed"]]`)
	tb.see(`//ol[contains(@class,"timeline")]//tr[th[normalize-space(.)="staff"] and td[2][normalize-space(.)="Wanda Worker"]]`)
	tb.see(`//ol[contains(@class,"timeline")]//tr[th[normalize-space(.)="paid amount"] and td[1][normalize-space(.)="0.00"] and td[2][normalize-space(.)="120.50"]]`)
	tb.shot("order")
	tb.noErrors()
}

// A field worker on a phone: today's job with the customer's address and
// phone, started and finished with two buttons.
func TestConsoleWorker(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	c := a.must(http.StatusCreated, http.MethodPost, "/v1/customers", a.opA, map[string]any{
		"name": "Grace Hopper", "phone": "+1 202 555 0143", "address": "1 Navy Yard, Arlington"}).Body["id"].(string)
	id := a.createOrder(a.opA, c, 9000)
	start := time.Now().UTC().Truncate(time.Minute).Add(10 * time.Minute)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+id+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": start.Format(time.RFC3339), "end_at": start.Add(time.Hour).Format(time.RFC3339),
		"dispatch_note": "key under the mat"})
	a.awaitOrder(a.opA, id, 3)

	tb := openTab(t, a.base, 390, 844) // a phone
	tb.signIn(a.worker, "My jobs")
	tb.see(`//li[contains(@class,"job") and contains(., "Grace Hopper")]`)
	job := tb.text("li.job")
	require.Contains(t, job, "1 Navy Yard, Arlington")
	require.Contains(t, job, "+1 202 555 0143")
	require.Contains(t, job, "key under the mat")
	tb.shot("jobs")
	tb.button("Start")
	tb.seeText("flash", "Job started")
	tb.seeText("badge", "in service")
	tb.button("Done")
	tb.seeText("flash", "Job done")
	tb.seeText("badge", "done")
	tb.shot("done")
	require.Equal(t, "completed", a.awaitOrder(a.opA, id, 5).Body["status"])
	tb.noErrors()
}

// The engineer on call: a parked aggregate with its waiting events,
// replayed once its cause is gone; leadership, the lag chart and a
// verification on the same view.
//
// Not parallel: the failing projection retries inside its subscriber's
// transaction (TestParkedAdminAPIAndCLI).
func TestConsoleOnCall(t *testing.T) {
	a := setup(t, pgtest.NewDB(t))
	lagCtx, stopLags := context.WithCancel(context.Background())
	lagsDone := make(chan struct{})
	go func() {
		defer close(lagsDone)
		a.w.lags.Run(lagCtx)
	}()
	t.Cleanup(func() {
		stopLags()
		<-lagsDone
	})
	c := a.createCustomer(a.opA, "Ada")
	bad := a.createOrder(a.opA, c, 100)
	a.awaitOrder(a.opA, bad, 1)
	_, err := a.dbs.rm.DB.Exec(fmt.Sprintf(`ALTER TABLE orders ADD CONSTRAINT test_cause CHECK (id <> '%s' OR status = 'pending')`, bad))
	require.NoError(t, err)
	a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+bad+"/status", a.opA, map[string]any{"status": "confirmed"})

	tb := openTab(t, a.base, 1280, 900)
	tb.signIn(a.admin, "On call")
	tb.see(`//section//a[contains(., "` + bad + `")]`) // parks after its retries; the page shows it by itself
	tb.do(chromedp.WaitVisible(chromedp.CSS("svg.chart polyline")))
	tb.shot("oncall")
	tb.click(`//section//a[contains(., "` + bad + `")]`)
	tb.see(`//h2[contains(., "Waiting events (1)")]`)
	tb.button("Replay")
	tb.seeText("flash", "Still parked")

	// The cause is removed: the replay applies the waiting event.
	_, err = a.dbs.rm.DB.Exec(`ALTER TABLE orders DROP CONSTRAINT test_cause`)
	require.NoError(t, err)
	tb.button("Replay")
	tb.seeText("flash", "it flows again")
	tb.see(`//p[@id="nothing-parked"]`)
	require.Equal(t, "confirmed", a.awaitOrder(a.opA, bad, 2).Body["status"])

	tb.button("Verify")
	tb.seeText("flash", "Verification of every projection started")
	tb.see(`//p[@id="verify-status"]`)
	require.Contains(t, tb.text("ul.verify"), "orders")
	require.NotContains(t, tb.text("ul.verify"), "differences: ") // every projection: 0 differences
	tb.shot("verified")
	tb.noErrors()
}

// consoleClient is a browser without a page: cookies kept by hand (Go's
// cookie jar holds back Secure cookies on http://), redirects not
// followed, so that a test can show one session to several instances.
type consoleClient struct {
	t       *testing.T
	base    string
	cookies map[string]string
	referer string // the page a form is sent from, as a browser says (Referer)
}

func newConsoleClient(t *testing.T, base string) *consoleClient {
	return &consoleClient{t: t, base: base, cookies: map[string]string{}}
}

// at is the same browser talking to another instance.
func (c *consoleClient) at(base string) *consoleClient {
	return &consoleClient{t: c.t, base: base, cookies: c.cookies}
}

func (c *consoleClient) do(method, path string, form url.Values) (status int, location, body string) {
	c.t.Helper()
	var rd io.Reader
	if form != nil {
		rd = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+path, rd)
	require.NoError(c.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if c.referer != "" {
		req.Header.Set("Referer", c.base+c.referer)
	}
	for name, v := range c.cookies {
		req.AddCookie(&http.Cookie{Name: name, Value: v})
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	for _, ck := range resp.Cookies() {
		if ck.MaxAge < 0 {
			delete(c.cookies, ck.Name)
		} else {
			c.cookies[ck.Name] = ck.Value
		}
	}
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

var (
	signinTokenRe = regexp.MustCompile(`name="token" value="([^"]+)"`)
	csrfTokenRe   = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	updatedAtRe   = regexp.MustCompile(`name="updated_at" value="([^"]+)"`)
)

// signIn signs in with key through the form; it returns the session's
// cookie.
func (c *consoleClient) signIn(key string) string {
	c.t.Helper()
	_, _, page := c.do(http.MethodGet, "/console/signin", nil)
	m := signinTokenRe.FindStringSubmatch(page)
	require.NotNil(c.t, m, "the sign-in form has a token")
	status, _, body := c.do(http.MethodPost, "/console/signin", url.Values{"token": {m[1]}, "key": {key}, "tz": {"Europe/Paris"}})
	require.Equal(c.t, http.StatusSeeOther, status, body)
	require.NotEmpty(c.t, c.cookies["hearth_console"])
	return c.cookies["hearth_console"]
}

// signedIn reports whether the browser's session opens a page of the
// operator (or is sent to sign in).
func (c *consoleClient) signedIn() bool {
	c.t.Helper()
	status, location, body := c.do(http.MethodGet, "/console/customers", nil)
	if status == http.StatusSeeOther && strings.HasPrefix(location, "/console/signin") {
		return false
	}
	require.Equal(c.t, http.StatusOK, status, body)
	return true
}

// instance is one more Hearth API process on a's databases, as a second
// instance behind a load balancer, or a restart, would be: pools, wiring,
// key cache and console of its own, nothing shared but the databases. stop
// ends it (and runs at the test's end if not called).
func (a *api) instance() (base string, stop func()) {
	t := a.t
	t.Helper()
	cfg := a.cfg
	cfg.Mode = ModeAPI
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	dbs, err := openDatabases(t.Context(), cfg)
	require.NoError(t, err)
	require.NoError(t, dbs.openRequestPools(t.Context(), cfg))
	w, err := wire(cfg, dbs, log)
	require.NoError(t, err)
	require.NoError(t, w.wireEventFeed(cfg, dbs, log))
	hcfg, err := httpConfig(cfg, dbs, w, nil, log)
	require.NoError(t, err)
	handler, err := httpport.NewHandler(hcfg)
	require.NoError(t, err)
	srv := httptest.NewServer(handler)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			srv.Close()
			closeConsole(hcfg.Console)
			w.maintenance.Close()
			dbs.close()
		})
	}
	t.Cleanup(stop)
	return srv.URL, stop
}

// sessionRows counts the console sessions of a key in the database.
func (a *api) sessionRows(keyID string) int {
	a.t.Helper()
	var n int
	require.NoError(a.t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM console_sessions WHERE key_id = $1`, keyID).Scan(&n))
	return n
}

// A session opened on one instance works on another on the same database
// (no sticky sessions), its flash message reaches the page the other
// instance serves, and it outlives the instance that opened it (a
// restart signs nobody out).
func TestConsoleSessionsAcrossInstances(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	first, stopFirst := a.instance()
	second, _ := a.instance()
	alice := newConsoleClient(t, first)
	alice.signIn(a.opA)
	require.True(t, alice.signedIn())
	require.True(t, alice.at(second).signedIn(), "the other instance knows the session")

	// A write on the first instance; its redirect, served by the second,
	// shows its message.
	_, _, page := alice.do(http.MethodGet, "/console/customers", nil)
	m := csrfTokenRe.FindStringSubmatch(page)
	require.NotNil(t, m)
	status, location, body := alice.do(http.MethodPost, "/console/customers", url.Values{"name": {"Ada Lovelace"}, "csrf": {m[1]}})
	require.Equal(t, http.StatusSeeOther, status, body)
	status, _, page = alice.at(second).do(http.MethodGet, location, nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, "Created the new customer.")

	stopFirst()
	restarted, _ := a.instance()
	require.True(t, alice.at(restarted).signedIn(), "a restart keeps the session")
	require.True(t, alice.at(a.base).signedIn())

	// Signing out on one instance ends the session on all.
	_, _, page = alice.at(restarted).do(http.MethodGet, "/console/customers", nil)
	m = csrfTokenRe.FindStringSubmatch(page)
	require.NotNil(t, m)
	cookie := alice.cookies["hearth_console"]
	status, _, _ = alice.at(restarted).do(http.MethodPost, "/console/signout", url.Values{"csrf": {m[1]}})
	require.Equal(t, http.StatusSeeOther, status)
	kept := newConsoleClient(t, second)
	kept.cookies["hearth_console"] = cookie
	require.False(t, kept.signedIn(), "signed out everywhere")
}

// One key keeps at most console.SessionsPerKey sessions: a sign-in past the cap
// ends the key's least recently used session, so no key can fill the
// store; other keys' sessions are untouched.
func TestConsoleSessionsPerKey(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	other := newConsoleClient(t, a.base)
	other.signIn(a.opB)
	oldest := newConsoleClient(t, a.base)
	oldest.signIn(a.opA)
	var rest []*consoleClient
	for range console.SessionsPerKey {
		c := newConsoleClient(t, a.base)
		c.signIn(a.opA)
		rest = append(rest, c)
	}
	require.Equal(t, console.SessionsPerKey, a.sessionRows(a.opAKeyID))
	require.False(t, oldest.signedIn(), "the least recently used session ended")
	for _, c := range rest {
		require.True(t, c.signedIn())
	}
	require.True(t, other.signedIn())
}

// The database holds a session's token hashed, and neither the token nor
// the key; revoking the key ends its sessions at once, rows and all; and a
// sign-in prunes expired sessions.
func TestConsoleSessionsStored(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	alice := newConsoleClient(t, a.base)
	token := alice.signIn(a.opA)
	var hash []byte
	var row string
	require.NoError(t, a.dbs.es.DB.QueryRowContext(ctx, `SELECT token_hash, cs::text FROM console_sessions cs WHERE key_id = $1`,
		a.opAKeyID).Scan(&hash, &row))
	sum := sha256.Sum256([]byte(token))
	require.Equal(t, sum[:], hash)
	require.NotContains(t, row, token)
	require.NotContains(t, row, a.opA)
	require.Contains(t, row, "Europe/Paris")

	// An expired session of another key, and one about to be: the next
	// sign-in deletes the first only.
	expired, live := make([]byte, 32), make([]byte, 32)
	expired[0], live[0] = 1, 2
	now := time.Now()
	for _, s := range []struct {
		hash []byte
		at   time.Time
	}{{expired, now.Add(-console.SessionLifetime - time.Minute)}, {live, now.Add(-console.SessionLifetime + time.Hour)}} {
		require.NoError(t, a.w.refdata.OpenSession(ctx, access.NewSession{TokenHash: s.hash, KeyID: a.adminKeyID, TimeZone: "UTC",
			At: s.at, Idle: console.SessionLifetime, Lifetime: console.SessionLifetime, PerKey: console.SessionsPerKey}))
	}
	require.Equal(t, 2, a.sessionRows(a.adminKeyID))
	newConsoleClient(t, a.base).signIn(a.opB)
	require.Equal(t, 1, a.sessionRows(a.adminKeyID), "the expired session was pruned")

	// Each use keeps a session alive for its idle time (an hour here)
	// more, up to its lifetime (three hours); past either it is gone.
	open := func(b byte) []byte {
		hash := make([]byte, 32)
		hash[0] = b
		require.NoError(t, a.w.refdata.OpenSession(ctx, access.NewSession{TokenHash: hash, KeyID: a.adminKeyID, TimeZone: "UTC",
			At: now, Idle: time.Hour, Lifetime: 3 * time.Hour, PerKey: console.SessionsPerKey}))
		return hash
	}
	use := func(hash []byte, after time.Duration) error {
		_, err := a.w.refdata.Session(ctx, access.SessionUse{TokenHash: hash, At: now.Add(after), Idle: time.Hour})
		return err
	}
	used, idle := open(3), open(4)
	for _, after := range []time.Duration{50 * time.Minute, 100 * time.Minute, 150 * time.Minute, 179 * time.Minute} {
		require.NoError(t, use(used, after), "used within the hour, %s after sign-in", after)
	}
	require.ErrorIs(t, use(used, 181*time.Minute), apperr.ErrNotFound, "past its lifetime")
	require.ErrorIs(t, use(idle, 61*time.Minute), apperr.ErrNotFound, "idle for more than an hour")

	a.must(http.StatusOK, http.MethodPost, "/admin/keys/"+a.opAKeyID+"/revoke", a.admin, nil)
	require.Zero(t, a.sessionRows(a.opAKeyID), "revoking the key deletes its sessions")
	require.False(t, alice.signedIn())
}

// An edit form sends every field as the page showed it: a record changed
// since (through the API, another tab) is not overwritten with the values
// the page showed, and the refusal keeps what the user typed.
func TestConsoleRecordFormDoesNotOverwriteAChangeMadeMeanwhile(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	id := a.createCustomer(a.opA, "Grace")
	a.must(http.StatusOK, http.MethodPatch, "/v1/customers/"+id, a.opA, map[string]any{"phone": "+1 555 0101"})

	c := newConsoleClient(t, a.base)
	c.signIn(a.opA)
	form := func() url.Values {
		status, _, page := c.do(http.MethodGet, "/console/customers/"+id, nil)
		require.Equal(t, http.StatusOK, status)
		csrf, seen := csrfTokenRe.FindStringSubmatch(page), updatedAtRe.FindStringSubmatch(page)
		require.NotNil(t, csrf)
		require.NotNil(t, seen, "the edit form states the updated_at it showed")
		return url.Values{"csrf": {csrf[1]}, "updated_at": {seen[1]}, "name": {"Grace Hopper"}, "phone": {"+1 555 0101"}, "email": {""}, "address": {""}, "notes": {""}}
	}
	shown := form()
	a.must(http.StatusOK, http.MethodPatch, "/v1/customers/"+id, a.opA, map[string]any{"phone": "+1 555 0202"})

	status, _, body := c.do(http.MethodPost, "/console/customers/"+id, shown)
	require.Equal(t, http.StatusConflict, status, body)
	require.Contains(t, body, `value="Grace Hopper"`, "the refusal keeps what the user typed")
	r := a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+id, a.opA, nil)
	require.Equal(t, "+1 555 0202", r.Body["phone"], "the change made meanwhile stays")
	require.Equal(t, "Grace", r.Body["name"])

	// Read again, the form saves.
	status, _, _ = c.do(http.MethodPost, "/console/customers/"+id, form())
	require.Equal(t, http.StatusSeeOther, status)
	r = a.must(http.StatusOK, http.MethodGet, "/v1/customers/"+id, a.opA, nil)
	require.Equal(t, "Grace Hopper", r.Body["name"])

	// A form without the time it showed (a page from before) is refused.
	stale := form()
	stale.Del("updated_at")
	status, _, _ = c.do(http.MethodPost, "/console/customers/"+id, stale)
	require.Equal(t, http.StatusUnprocessableEntity, status)
}

// A customer found by a search, beyond the newest 200 the forms list, stays
// chosen when the form is refused, and the plan form can search too.
func TestConsoleFormsKeepACustomerFoundBySearch(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	target := a.createCustomer(a.opA, "Zebulon Target")
	now := time.Now()
	for i := range 200 {
		_, err := a.w.app.Commands.Customers.Create(t.Context(), a.merchantA,
			reference.Customer{Name: fmt.Sprintf("Newer customer %03d", i)}, now.Add(time.Duration(i+1)*time.Second))
		require.NoError(t, err)
	}
	offered := `<option value="` + target + `"`
	c := newConsoleClient(t, a.base)
	c.signIn(a.opA)
	var csrf string
	for _, path := range []string{"/console/requests", "/console/plans"} {
		status, _, page := c.do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, status)
		require.NotContains(t, page, offered, "%s: only the newest 200 without a search", path)
		status, _, page = c.do(http.MethodGet, path+"?cq=Zebulon", nil)
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, page, offered, "%s: the search offers the customer", path)
		csrf = csrfTokenRe.FindStringSubmatch(page)[1]
	}

	c.referer = "/console/requests?cq=Zebulon"
	status, _, body := c.do(http.MethodPost, "/console/requests", url.Values{"csrf": {csrf},
		"customer_id": {target}, "catalog_item_id": {""}, "content": {""}, "source": {"phone"}, "notes": {"call first"}})
	require.Equal(t, http.StatusUnprocessableEntity, status, "refused: no content")
	require.Contains(t, body, "call first", "the notes typed come back")
	require.Contains(t, body, offered+` selected>`, "the customer chosen comes back chosen")

	c.referer = "/console/plans?cq=Zebulon"
	status, _, body = c.do(http.MethodPost, "/console/plans", url.Values{"csrf": {csrf},
		"customer_id": {target}, "catalog_item_id": {""}, "recurrence_frequency": {"weekly"}})
	require.Equal(t, http.StatusUnprocessableEntity, status, "refused: no service")
	require.Contains(t, body, offered+` selected>`, "the customer chosen comes back chosen")
}

// An assignment refused because the order changed since the board showed
// it comes back with the order's version now: sent again, it assigns.
func TestConsoleBoardAssignAfterAConflictStatesTheNewVersion(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	order := a.createOrder(a.opA, a.createCustomer(a.opA, "Bob"), 5000)
	c := newConsoleClient(t, a.base)
	c.signIn(a.opA)
	status, _, page := c.do(http.MethodGet, "/console/board", nil)
	require.Equal(t, http.StatusOK, status)
	csrf := csrfTokenRe.FindStringSubmatch(page)[1]
	a.must(http.StatusOK, http.MethodPatch, "/v1/orders/"+order, a.opA, map[string]any{"amount_cents": 6000}) // version 2

	day := time.Now().AddDate(0, 0, 2).Format(time.DateOnly)
	form := url.Values{"csrf": {csrf}, "order_id": {order}, "expected_version": {"1"}, "staff_id": {a.staffA},
		"start_at": {day + "T10:00"}, "end_at": {day + "T12:00"}}
	status, _, body := c.do(http.MethodPost, "/console/board/assign", form)
	require.Equal(t, http.StatusConflict, status, body)
	require.Contains(t, body, `name="expected_version" value="2"`, "the form comes back with the order's version now")

	form.Set("expected_version", "2")
	status, _, body = c.do(http.MethodPost, "/console/board/assign", form)
	require.Equal(t, http.StatusSeeOther, status, body)
}

// A list's filters come from the page's address, which anyone can edit
// (or a date picker fill with year 0001): a value the read models cannot
// take is left out, as the orders page leaves out an id that is not one,
// never a 500 page and an error in the log. The session's zone (Europe/Paris,
// whose clock before 1891 ran 9 minutes ahead of UTC) puts midnight of
// 0001-01-01 in year 0 in UTC, which Postgres refuses.
func TestConsoleBadFiltersInTheAddressAreLeftOut(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	order := a.createOrder(a.opA, a.createCustomer(a.opA, "Ada Lovelace"), 4200)
	a.awaitOrder(a.opA, order, 1)
	c := newConsoleClient(t, a.base)
	c.signIn(a.opA)
	for _, path := range []string{
		"/console/requests?customer_id=not-an-id",
		"/console/requests?filtered=1&status=new&customer_id=7",
		"/console/requests?from=0001-01-01",
		"/console/orders?from=0001-01-01&to=0001-01-02",
		"/console/board?week=0001-01-01",
		"/console/board?order=" + order + "&staff=not-an-id&slots=1",
	} {
		status, _, body := c.do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
	}
	status, _, body := c.do(http.MethodGet, "/console/requests?customer_id=not-an-id", nil)
	require.Equal(t, http.StatusOK, status, body)
	require.NotContains(t, body, `value="not-an-id"`, "the filter left out is not shown as applied")
}

// The customer search above the request and plan forms (?cq=) is the
// address's, which anyone can edit: a search the API would refuse (a
// control character, which Postgres cannot take, or more than 200 bytes,
// which the search's index does not bound) is left out, as the customers
// page and the orders page leave theirs out, never a 500 page and an error
// in the log.
func TestConsoleCustomerSearchInTheAddressIsChecked(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	a.createCustomer(a.opA, "Ada Lovelace")
	c := newConsoleClient(t, a.base)
	c.signIn(a.opA)
	long := strings.Repeat("a", 201)
	for _, page := range []string{"/console/requests", "/console/plans"} {
		for _, cq := range []string{"Ada\x00", "\xff", long} {
			status, _, body := c.do(http.MethodGet, page+"?cq="+url.QueryEscape(cq), nil)
			require.Equal(t, http.StatusOK, status, "%s?cq=%q: %s", page, cq, body)
			require.Contains(t, body, "Ada Lovelace", "%s?cq=%q: the search left out, the customers are offered", page, cq)
			require.NotContains(t, body, `value="`+long, "the search left out is not shown as applied")
		}
	}
}

// A worker key whose staff member is made inactive ends its console
// sessions at once (console.md), as a revocation does: they are gone, not
// put aside. Made active again, the staff member's key works again, but a
// phone still holding the old session's cookie (switched off meanwhile, or
// handed on) is not signed in by it: someone signs in again with the key.
func TestConsoleSessionsOfADeactivatedWorkerStayEnded(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	k, err := a.w.refdata.CreateKey(t.Context(), "acme", access.Worker, a.staffA)
	require.NoError(t, err)
	phone := newConsoleClient(t, a.base)
	cookie := phone.signIn(k.Secret)
	status, _, _ := phone.do(http.MethodGet, "/console/jobs", nil)
	require.Equal(t, http.StatusOK, status)

	a.must(http.StatusOK, http.MethodPatch, "/v1/staff/"+a.staffA, a.opA, map[string]any{"active": false})
	a.must(http.StatusOK, http.MethodPatch, "/v1/staff/"+a.staffA, a.opA, map[string]any{"active": true})
	a.must(http.StatusOK, http.MethodGet, "/v1/schedules", k.Secret, nil) // the key works again

	off := newConsoleClient(t, a.base) // the phone, switched off while the staff member was inactive
	off.cookies["hearth_console"] = cookie
	status, location, _ := off.do(http.MethodGet, "/console/jobs", nil)
	require.Equal(t, http.StatusSeeOther, status, "the old session does not come back with the staff member")
	require.Equal(t, "/console/signin?ended=session&next=%2Fconsole%2Fjobs", location)
	require.Zero(t, a.sessionRows(k.ID), "nothing of the ended session stays")
}
