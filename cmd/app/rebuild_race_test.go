package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/client"
	"hearth/internal/pgtest"
)

// A customer's export reads the read models in one REPEATABLE READ
// snapshot, statement after statement. A rebuild's swap puts a new table in
// the old one's place meanwhile: read under a snapshot taken before the
// new table's rows were written, it looks empty. An export whose snapshot
// was taken before `app rebuild schedules` swapped, and which reads the
// schedules after, must still list the customer's schedule.
//
// The export is held after its first reads by a lock on plans (the table it
// reads before schedules); the rebuild of schedules runs meanwhile. The
// read models have a database of their own, so that every backend waiting
// for a lock there is the export's or the rebuild's.
func TestCustomerExportTakenWhileARebuildSwapsListsEverySchedule(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewSplitDBs(t))
	ctx := t.Context()
	c := a.createCustomer(a.opA, "Ada")
	o := a.createOrder(a.opA, c, 5000)
	start := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)
	a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+o+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": start.Format(time.RFC3339), "end_at": start.Add(time.Hour).Format(time.RFC3339)})
	a.liveSchedule(a.opA, o)
	require.Eventually(t, a.caughtUp, 10*time.Second, 10*time.Millisecond)

	blocker, err := a.dbs.rm.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback() }()
	_, err = blocker.ExecContext(ctx, `LOCK TABLE plans IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	type exported struct {
		r   *client.ExportCustomerResponse
		err error
	}
	export := make(chan exported, 1)
	go func() {
		r, err := a.hearth().ExportCustomerWithResponse(ctx, uid(t, c), nil, as(a.opA))
		export <- exported{r, err}
	}()
	require.False(t, pgtest.DoneOrWaiting(t, a.dbs.rm.DB, export), "the export waits for plans")

	type rebuild struct {
		out string
		err error
	}
	rebuilt := make(chan rebuild, 1)
	go func() {
		out, err := cli(ctx, a.urls(), "rebuild", "schedules")
		rebuilt <- rebuild{out, err}
	}()
	// Until the rebuild is done, or waits for a lock itself (the export's).
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, a.dbs.rm.DB.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return len(rebuilt) > 0 || waiting > 1
	}, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, blocker.Rollback())

	x := <-export
	expect(t, http.StatusOK, x.r, x.err)
	rb := <-rebuilt
	require.NoError(t, rb.err)
	require.Contains(t, rb.out, "rebuild schedules: done")
	require.Len(t, x.r.JSON200.Orders, 1)
	require.Len(t, x.r.JSON200.Schedules, 1, "the export taken while schedules was rebuilt lists the customer's schedule")
}
