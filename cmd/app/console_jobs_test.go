package main

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// A worker's job started on an earlier day and not finished yet (a night's
// caretaking, a Done forgotten the evening before), or planned then and
// never started, is still the worker's to finish: My jobs lists it, with
// its buttons, for the console is where a worker key moves its jobs. A job
// done on an earlier day is not listed again.
func TestConsoleJobsListsEarlierJobsNotFinished(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.must(http.StatusCreated, http.MethodPost, "/v1/customers", a.opA, map[string]any{
		"name": "Grace Hopper", "address": "1 Navy Yard, Arlington"}).Body["id"].(string)
	// Two days ago: before today's midnight in any zone.
	start := time.Now().UTC().Truncate(time.Hour).Add(-48 * time.Hour)
	assign := func(at time.Time) (order, sched string) {
		t.Helper()
		order = a.createOrder(a.opA, customer, 9000)
		a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, map[string]any{
			"staff_id": a.staffA, "start_at": at.Format(time.RFC3339), "end_at": at.Add(time.Hour).Format(time.RFC3339)})
		return order, a.crmSchedule(a.opA, order).Body["id"].(string)
	}
	_, started := assign(start)
	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+started+"/status", a.worker, map[string]any{"status": "in_service"})
	_, planned := assign(start.Add(2 * time.Hour))
	doneOrder, done := assign(start.Add(4 * time.Hour))
	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+done+"/status", a.worker, map[string]any{"status": "in_service"})
	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+done+"/status", a.worker, map[string]any{"status": "done"})
	a.awaitOrder(a.opA, doneOrder, 5)
	for id, status := range map[string]string{started: "in_service", done: "done"} {
		require.Eventually(t, func() bool {
			r, err := a.send(http.MethodGet, "/v1/schedules/"+id, auth(a.opA), nil)
			return err == nil && r.Status == http.StatusOK && r.Body["status"] == status
		}, 5*time.Second, 10*time.Millisecond, "the read model shows schedule %s %s", id, status)
	}

	c := newConsoleClient(t, a.base)
	c.signIn(a.worker)
	_, _, page := c.do(http.MethodGet, "/console/jobs", nil)
	require.Contains(t, page, `id="job-`+started+`"`, "the job started two days ago and not finished is on My jobs")
	require.Contains(t, page, `action="/console/jobs/`+started+`/status"`, "with its Done button")
	require.Contains(t, page, `id="job-`+planned+`"`, "the job planned two days ago and never started is listed too")
	require.NotContains(t, page, `id="job-`+done+`"`, "a job done on an earlier day is not")

	status, location, body := c.do(http.MethodPost, "/console/jobs/"+started+"/status", formAt(t, page, "/console/jobs/"+started+"/status"))
	require.Equal(t, http.StatusSeeOther, status, body)
	require.Equal(t, "/console/jobs", location)
}

// A row's buttons name their row for a screen reader, which tabbing from
// button to button hears no table around them: not "Confirm" over and over
// down the inbox, or "Start" on each job, but whose.
func TestConsoleRowButtonsNameTheirRow(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	c, customer := inboxWithARequest(t, a, "Grace Hopper")
	_, _, page := c.do(http.MethodGet, "/console/requests", nil)
	buttons := regexp.MustCompile(`<button [^>]*>`)
	for _, visible := range []string{"Confirm", "Cancel request"} {
		b := regexp.MustCompile(`<button [^>]*>` + visible + `</button>`).FindString(page)
		require.NotEmpty(t, b, "the inbox's row has %s", visible)
		require.Regexp(t, `aria-label="`+visible+`[^"]*Grace Hopper`, buttons.FindString(b), "%s names the request's customer", visible)
	}

	order := a.createOrder(a.opA, customer, 9000)
	start := time.Now().UTC().Truncate(time.Minute).Add(10 * time.Minute)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": start.Format(time.RFC3339), "end_at": start.Add(time.Hour).Format(time.RFC3339)})
	a.crmSchedule(a.opA, order)
	w := newConsoleClient(t, a.base)
	w.signIn(a.worker)
	_, _, page = w.do(http.MethodGet, "/console/jobs", nil)
	b := regexp.MustCompile(`<button [^>]*>Start</button>`).FindString(page)
	require.NotEmpty(t, b, "the job has Start")
	require.Regexp(t, `aria-label="Start[^"]*Grace Hopper`, b, "Start names the job's customer")
}

// An erased person leaves a gap that still reads well (domain.md: "erased
// customer", never a blank): a worker's job for a customer erased since
// says so on My jobs, instead of a card without anyone to go to; and the
// jobs an erased staff member still has (an erasure leaves their
// assignments to the dispatcher) sit on the board in a row that says whose
// they were, and an order's page names its schedule's staff member as
// erased, rather than a row and a line without a name.
func TestConsoleNamesErasedPeopleAsErased(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	start := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	assign := func(customer, staff string) (order, sched string) {
		t.Helper()
		order = a.createOrder(a.opA, customer, 9000)
		a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, map[string]any{
			"staff_id": staff, "start_at": start.Format(time.RFC3339), "end_at": start.Add(time.Hour).Format(time.RFC3339)})
		sched = a.crmSchedule(a.opA, order).Body["id"].(string)
		a.awaitOrder(a.opA, order, 3)
		return order, sched
	}
	ada := a.must(http.StatusCreated, http.MethodPost, "/v1/customers", a.opA, map[string]any{
		"name": "Ada Gone", "address": "1 Lane End"}).Body["id"].(string)
	_, adasJob := assign(ada, a.staffA)
	sam := a.crmCreate(a.opA, "/v1/staff", map[string]any{"name": "Sam Gone"})
	samsOrder, _ := assign(a.createCustomer(a.opA, "Bob Stays"), sam)
	a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+ada+"/erase", a.opA, map[string]any{"confirm": ada})
	a.must(http.StatusOK, http.MethodPost, "/v1/staff/"+sam+"/erase", a.opA, map[string]any{"confirm": sam})

	w := newConsoleClient(t, a.base)
	w.signIn(a.worker)
	_, _, jobs := w.do(http.MethodGet, "/console/jobs", nil)
	card := regexp.MustCompile(`(?s)<li class="card job" id="job-` + adasJob + `">.*?</li>`).FindString(jobs)
	require.NotEmpty(t, card, "the job is on My jobs: %s", jobs)
	require.NotContains(t, card, "Ada Gone")
	require.Regexp(t, `<p class="customer">erased customer</p>`, card, "the job's customer reads as erased, not as a blank")

	op := newConsoleClient(t, a.base)
	op.signIn(a.opA)
	_, _, board := op.do(http.MethodGet, "/console/board?week="+start.Format(time.DateOnly), nil)
	require.Contains(t, board, "Bob Stays", "the erased staff member's job is on the board")
	require.NotContains(t, board, `<th scope="row"> <small>(inactive)</small></th>`, "a row without a name")
	require.Contains(t, board, `<th scope="row">erased staff member <small>(inactive)</small></th>`)
	_, _, order := op.do(http.MethodGet, "/console/orders/"+samsOrder, nil)
	require.NotContains(t, order, "<p>, ", "a schedule line without its staff member")
	require.Contains(t, order, "<p>erased staff member, ")
}

// An erased customer reads as erased on every console page that names the
// customer of a row, not as a blank (a link with no text, a chip with a
// time and nothing else): the board's chips, the orders list, the request
// inbox and the customers list, as My jobs and the order's page already do.
func TestConsoleListsNameAnErasedCustomerAsErased(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	start := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	ada := a.must(http.StatusCreated, http.MethodPost, "/v1/customers", a.opA, map[string]any{"name": "Ada Gone"}).Body["id"].(string)
	order := a.createOrder(a.opA, ada, 9000)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+order+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": start.Format(time.RFC3339), "end_at": start.Add(time.Hour).Format(time.RFC3339)})
	request := a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA, map[string]any{"customer_id": ada, "content": "boiler"}).Body["id"].(string)
	a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+ada+"/erase", a.opA, map[string]any{"confirm": ada})
	a.awaitOrder(a.opA, order, 4) // created, assigned, scheduled, erased
	require.Eventually(t, func() bool {
		r := a.must(http.StatusOK, http.MethodGet, "/v1/service-requests/"+request, a.opA, nil)
		return r.Body["customer_name"] == nil
	}, 10*time.Second, 10*time.Millisecond, "the request's read model shows the erasure")

	op := newConsoleClient(t, a.base)
	op.signIn(a.opA)
	for path, want := range map[string]string{
		"/console/board?week=" + start.Format(time.DateOnly): `(?s)<a class="chip [a-z_]+" href="/console/orders/` + order + `">[^<]*erased customer <span`,
		"/console/orders":    `<a href="/console/orders/` + order + `">erased customer</a>`,
		"/console/requests":  `<td data-label="Customer">erased customer<br>`,
		"/console/customers": `erased customer`,
	} {
		_, _, body := op.do(http.MethodGet, path, nil)
		require.NotContains(t, body, "Ada Gone", path)
		require.Regexp(t, want, body, "%s names the erased customer as erased, not as a blank", path)
	}
}
