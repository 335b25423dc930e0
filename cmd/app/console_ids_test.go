package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// A form's ids are taken in any case, as the API takes a body's, and
// stored in their canonical lower-case form. A customer id kept as the
// form sent it would seal the request for a subject that is not the
// customer's id as the data keys store it: the key, sealed for the id as
// written, opens for no other writer, and the one made earlier opens not
// for this one.
func TestConsoleRequestFormTakesACustomerIdInAnyCase(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	customer := a.createCustomer(a.opA, "Bob")
	// Bob has a data key already: an order about him, with notes.
	a.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{"customer_id": customer, "notes": "blue door"})

	c := newConsoleClient(t, a.base)
	c.signIn(a.opA)
	status, _, page := c.do(http.MethodGet, "/console/requests", nil)
	require.Equal(t, http.StatusOK, status)
	csrf := csrfTokenRe.FindStringSubmatch(page)[1]
	status, _, body := c.do(http.MethodPost, "/console/requests", url.Values{"csrf": {csrf},
		"customer_id": {strings.ToUpper(customer)}, "source": {"phone"}, "content": {"Fix the gate"}, "notes": {"side door"}})
	require.Equal(t, http.StatusSeeOther, status, body)
	a.must(http.StatusCreated, http.MethodPost, "/v1/service-requests", a.opA,
		map[string]any{"customer_id": customer, "content": "And the fence", "notes": "back garden"})
}

// A staff id kept as the assignment form sent it would name, in the
// schedule's events, a staff member whose worker key no longer finds the
// job as their own.
func TestConsoleAssignFormTakesAStaffIdInAnyCase(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	order := a.createOrder(a.opA, a.createCustomer(a.opA, "Bob"), 5000)

	c := newConsoleClient(t, a.base)
	c.signIn(a.opA)
	status, _, page := c.do(http.MethodGet, "/console/board", nil)
	require.Equal(t, http.StatusOK, status)
	csrf := csrfTokenRe.FindStringSubmatch(page)[1]
	day := time.Now().AddDate(0, 0, 2).Format(time.DateOnly)
	status, _, body := c.do(http.MethodPost, "/console/board/assign", url.Values{"csrf": {csrf},
		"order_id": {strings.ToUpper(order)}, "staff_id": {strings.ToUpper(a.staffA)},
		"start_at": {day + "T10:00"}, "end_at": {day + "T12:00"}})
	require.Equal(t, http.StatusSeeOther, status, body)
	sch := a.crmSchedule(a.opA, order)
	a.must(http.StatusOK, http.MethodPost, "/v1/schedules/"+sch.Body["id"].(string)+"/status", a.worker,
		map[string]any{"status": "in_service"})
}
