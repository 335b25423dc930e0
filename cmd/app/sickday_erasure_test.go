package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A sick day is health data, held in the staff member's working hours
// only (docs/personal-data.md), which their erasure deletes. A visit the
// generator could not give the preferred staff member because they were
// off sick is created unassigned, and its ledger row and its order's notes
// say they were off, never why: once the staff member is erased, their
// sick day is nowhere, neither in the event store nor in the read models
// nor in the order as the API shows it.
func TestVisitUnassignedOnASickDayKeepsNoSickDayPastTheStaffErasure(t *testing.T) {
	t.Parallel()
	e := newGeneratorEnv(t)
	a := e.a
	day0 := e.firstDay()
	week := map[string]any{}
	for _, d := range []string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"} {
		week[d] = []map[string]any{{"start": "08:00", "end": "18:00"}}
	}
	a.must(http.StatusOK, http.MethodPut, "/v1/staff/"+a.staffA+"/working-hours", a.opA, map[string]any{
		"week": week, "exceptions": []map[string]any{{"date": day0.Format(time.DateOnly), "reason": "sick_day"}}})

	done, err := e.run(t, e.generator(t))
	require.NoError(t, err)
	require.Equal(t, 1, done.Unassigned, "the visit on the sick day is not assigned")
	_, staff, reason := e.ledgerRow(t, day0)
	require.Nil(t, staff)
	require.Contains(t, reason, "is not working then", "the ledger still says it could not be assigned")
	var orderID string
	require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT order_id::text FROM plan_visits WHERE visit_key = $1`,
		e.planID+"/"+day0.Format(time.DateOnly)).Scan(&orderID))
	order := a.crmAwait(a.opA, "/v1/orders/"+orderID, func(r response) bool { return r.Status == http.StatusOK })
	require.Contains(t, order.Body["notes"], "Not assigned: the preferred staff member "+a.staffA+" is not working then")

	a.must(http.StatusOK, http.MethodPost, "/v1/staff/"+a.staffA+"/erase", a.opA, map[string]any{"confirm": a.staffA})
	hours := a.must(http.StatusOK, http.MethodGet, "/v1/staff/"+a.staffA+"/working-hours", a.opA, nil)
	require.NotContains(t, hours.Raw, "sick_day", "the hours went with the erasure")

	_, _, reason = e.ledgerRow(t, day0)
	require.NotContains(t, reason, "sick", "the visit's ledger row")
	require.NotContains(t, a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+orderID, a.opA, nil).Raw, "sick",
		"the order's notes, as the API shows them")
	require.NotContains(t, a.must(http.StatusOK, http.MethodGet, "/v1/orders/"+orderID+"/changes", a.opA, nil).Raw, "sick",
		"the order's change log")
	require.NotContains(t, dumpDB(t, a.dbs.es.DB), "sick_day", "the event store")
	require.NotContains(t, dumpDB(t, a.dbs.rm.DB), "sick_day", "the read models")
}
