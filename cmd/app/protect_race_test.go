package main

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"hearth/app/ops"
	"hearth/domain/apperr"
	"hearth/domain/event"
	"hearth/internal/pgtest"
)

// app protect marks the aggregates of a customer erased before their events
// were sealed: here an order and its schedule, in the order the page meets
// them (the order's events first). A worker's status change of the
// schedule, which writes no personal data (so it is allowed on an erased
// customer's schedule), appends to the schedule and then the order while
// it holds the schedule's booking. Each could append to one of the two
// streams and wait for the other's append to the second: one of them may
// lose as a race loses (the command a 409, protect a conflict it runs
// again), never as a deadlock (a 500, a protect run that fails).
func TestProtectAndACommandOnTheSameScheduleNeverDeadlock(t *testing.T) {
	t.Parallel()
	a := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	old := a.previousRelease()
	customer := a.createCustomer(a.opA, "Ada")
	orderID := old.must(http.StatusCreated, http.MethodPost, "/v1/orders", a.opA, map[string]any{
		"customer_id": customer, "amount_cents": 1000, "notes": "ring twice"}).Body["id"].(string)
	start := time.Date(2031, 3, 4, 9, 0, 0, 0, time.UTC)
	old.must(http.StatusOK, http.MethodPut, "/v1/orders/"+orderID+"/assignment", a.opA, map[string]any{
		"staff_id": a.staffA, "start_at": start, "end_at": start.Add(time.Hour), "dispatch_note": "key under the mat"})
	var scheduleID string
	require.NoError(t, a.dbs.es.DB.QueryRowContext(ctx, `SELECT schedule_id::text FROM bookings WHERE order_id = $1`,
		orderID).Scan(&scheduleID))

	// Erased after the upgrade, before protect: the erasure cannot find
	// the events in clear, protect marks their aggregates.
	_, _, store := a.writeInstance()
	_, err := store.EraseSubject(ctx, ops.ErasureRequest{By: "test", MerchantID: a.merchantA, SubjectType: event.SubjectCustomer,
		SubjectID: customer, Confirm: customer}, func(ops.Erasure) ops.AuditEntry {
		return ops.AuditEntry{Actor: "test", Action: ops.ActionCustomerErase, Target: "customer/" + customer}
	})
	require.NoError(t, err)

	// The command holds the booking, and has appended to the schedule.
	release := a.holdIn(`BEFORE INSERT ON watermill_schedules FOR EACH STATEMENT`)
	written := a.sendAsync(http.MethodPost, "/v1/schedules/"+scheduleID+"/status", auth(a.opA), map[string]any{"status": "in_service"})
	require.Eventually(t, a.lockWaiting(`%INSERT INTO "watermill_schedules"%`), 20*time.Second, 10*time.Millisecond,
		"the command holds the booking")

	protected := a.queuedOrEnded(t, func() error {
		_, _, err := store.ProtectEvents(ctx, "test", 0, 100)
		return err
	}, "protect waits for the command, or ends")
	release()
	r := <-written
	perr := protected()

	var pgErr *pgconn.PgError
	require.False(t, errors.As(perr, &pgErr) && pgErr.Code == "40P01", "protect died in a deadlock: %v", perr)
	if perr != nil {
		var conflict *apperr.ConflictError
		require.ErrorAs(t, perr, &conflict, "protect may only lose as a conflict (which it runs again)")
	}
	require.Contains(t, []int{http.StatusOK, http.StatusConflict}, r.Status, "the command: %s", r)
	require.False(t, r.Status == http.StatusConflict && perr != nil, "one of them wins: %s; %v", r, perr)

	// A run afterwards finishes: both aggregates marked, nothing in clear.
	out, err := cli(ctx, a.urls(), "protect")
	require.NoError(t, err, out)
	var marks int
	require.NoError(t, a.dbs.es.DB.QueryRowContext(ctx, `SELECT count(DISTINCT stream_id) FROM events
		WHERE type = $1 AND data->>'subject_id' = $2`, event.PersonalDataErasedType, customer).Scan(&marks))
	require.Equal(t, 2, marks, "the order and its schedule are marked erased")
	for table, n := range clearCopies(t, a.dbs.es.DB) {
		require.Zero(t, n, "copies left in clear in %s", table)
	}
}

// queuedOrEnded runs fn, the second party of a race, and waits until it
// has ended or queued behind the first party's lock (two sessions of the
// database waiting on a lock: the first's other side and fn's); the
// function it returns gives fn's result, once the test has let the first
// party go.
func (a *api) queuedOrEnded(t *testing.T, fn func() error, msg string) func() error {
	t.Helper()
	ended := make(chan error, 1)
	go func() { ended <- fn() }()
	var result error
	done := false
	require.Eventually(t, func() bool {
		select {
		case result = <-ended:
			done = true
			return true
		default:
		}
		var n int
		err := a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n)
		return err == nil && n == 2
	}, 20*time.Second, 10*time.Millisecond, msg)
	return func() error {
		if !done {
			result = <-ended
		}
		return result
	}
}
