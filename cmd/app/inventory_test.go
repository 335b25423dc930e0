package main

import (
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"hearth/internal/advisory"
	"hearth/internal/pgtest"
)

// An erased staff member leaves no trace Hearth controls: a distinct marker
// in every place a write can put their data (the record, created and
// changed with stored idempotent answers, their working hours with a sick
// day, the name of their worker key and its audit entry) is in no table of
// either database after their erasure, while those of another staff member
// are still there.
func TestStaffErasureForgetsEveryCopy(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	a := withWebhooks(t, urls, nil)
	rc := newReceiver(t)
	a.createEndpoint(a.opA, rc.URL+"/hook")

	fields := []string{"staff-name", "staff-phone", "staff-name-changed", "staff-phone-changed", "key-name"}
	staff := map[string]string{}
	for _, tag := range []string{"SAM", "KIM"} {
		r := a.sendOK(http.MethodPost, "/v1/staff", withKey(a.opA, "staff-"+tag), map[string]any{
			"name": mark("staff-name", tag), "phone": mark("staff-phone", tag)})
		require.Equal(t, http.StatusCreated, r.Status, r.String())
		id := r.Body["id"].(string)
		staff[tag] = id
		r = a.sendOK(http.MethodPatch, "/v1/staff/"+id, withKey(a.opA, "staff-patch-"+tag), map[string]any{
			"name": mark("staff-name-changed", tag), "phone": mark("staff-phone-changed", tag)})
		require.Equal(t, http.StatusOK, r.Status, r.String())
		r = a.sendOK(http.MethodPut, "/v1/staff/"+id+"/working-hours", withKey(a.opA, "hours-"+tag), map[string]any{
			"week":       map[string]any{"monday": []any{map[string]any{"start": "09:00", "end": "17:00"}}},
			"exceptions": []any{map[string]any{"date": "2030-03-04", "reason": "sick_day"}}})
		require.Equal(t, http.StatusOK, r.Status, r.String())
		// Their worker key, named after them, as keys for a person are.
		a.must(http.StatusCreated, http.MethodPost, "/admin/keys", a.admin, map[string]any{
			"role": "worker", "merchant": "acme", "staff_id": id, "name": mark("key-name", tag)})
	}
	a.must(http.StatusOK, http.MethodPost, "/v1/staff/"+staff["SAM"]+"/erase", a.opA, map[string]any{"confirm": staff["SAM"]})

	dumps := map[string]string{"the event store": dumpDB(t, a.dbs.es.DB), "the read model": dumpDB(t, a.dbs.rm.DB)}
	everywhere := dumps["the event store"] + dumps["the read model"]
	for _, f := range fields {
		for where, text := range dumps {
			require.Empty(t, tablesHolding(text, mark(f, "SAM")), "staff member SAM's %s in %s", f, where)
		}
		require.Contains(t, everywhere, mark(f, "KIM"), "staff member KIM's %s", f)
	}
}

// A rebuild whose process died after its fold (kill -9, a lost machine)
// leaves its shadow table behind, holding the rows as the fold opened them;
// no rebuild will swap it in, and the erasure of a customer whose rows it
// holds must reach it all the same. A shadow table of a rebuild still
// running (its lock held) stays: that rebuild's catch-up erases its rows.
func TestErasureReachesALeftoverRebuildTable(t *testing.T) {
	t.Parallel()
	urls := pgtest.NewSplitDBs(t)
	a := withWebhooks(t, urls, nil)
	rc := newReceiver(t)
	a.createEndpoint(a.opA, rc.URL+"/hook")
	alpha := a.exportFixture("ALPHA", 9)
	a.exportFixture("BRAVO", 11)
	a.awaitProjectedAndDelivered()
	// What a rebuild leaves when it dies after step 1 (fold), for the
	// orders and the service requests; the schedules' rebuild is running.
	for _, table := range []string{"orders", "service_requests", "schedules"} {
		_, err := a.dbs.rm.DB.ExecContext(t.Context(), fmt.Sprintf(
			`CREATE TABLE %[1]s_rebuild (LIKE %[1]s INCLUDING ALL); INSERT INTO %[1]s_rebuild SELECT * FROM %[1]s`, table))
		require.NoError(t, err)
	}
	running, err := a.dbs.rm.DB.Conn(t.Context())
	require.NoError(t, err)
	defer running.Close()
	var locked bool
	require.NoError(t, running.QueryRowContext(t.Context(), `SELECT pg_try_advisory_lock($1)`,
		advisory.Key(advisory.Rebuild("schedules"))).Scan(&locked))
	require.True(t, locked)

	a.must(http.StatusOK, http.MethodPost, "/v1/customers/"+alpha.customer+"/erase", a.opA, map[string]any{"confirm": alpha.customer})
	a.awaitProjectedAndDelivered()

	rm := dumpDB(t, a.dbs.rm.DB)
	for _, f := range []string{"order-notes", "dispatch-note", "settlement-note", "cancel-reason", "request-content", "request-notes"} {
		require.Empty(t, tablesHolding(rm, mark(f, "ALPHA")), "customer A's %s in the read model", f)
		require.Contains(t, rm, mark(f, "BRAVO"), "customer B's %s", f)
	}
	var shadow sql.NullString
	require.NoError(t, a.dbs.rm.DB.QueryRowContext(t.Context(), `SELECT to_regclass('schedules_rebuild')::text`).Scan(&shadow))
	require.True(t, shadow.Valid, "the shadow table of a rebuild running stays")
}

// tablesHolding names the tables of a dumpDB that hold marker.
func tablesHolding(dump, marker string) []string {
	var out []string
	for _, part := range strings.Split(dump, "== ")[1:] {
		name, rows, _ := strings.Cut(part, "\n")
		if strings.Contains(rows, marker) {
			out = append(out, name)
		}
	}
	return out
}
