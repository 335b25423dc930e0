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

// A customer's erasure marks their order and its schedule (both hold events
// sealed for them), in the order of the streams' ids, while a command
// writes the same order and schedule, holding the schedule's booking:
//   - a worker's status change, which writes no personal data and so does
//     not wait for the erasure, appends to the two streams in the other
//     order (held after its first append);
//   - the order's cancel, whose reason is personal data: it waits for the
//     subject's lock, which the erasure holds (held after its booking).
//
// One of them may lose as a race loses (the command a 409, the erasure a
// conflict it runs again), never as a deadlock (a 500, an erasure that
// fails).
func TestAnErasureAndACommandOnTheSameScheduleNeverDeadlock(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"status change", "cancel"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := setup(t, pgtest.NewDB(t))
			customer := a.createCustomer(a.opA, "Ada")
			orderID := a.createOrder(a.opA, customer, 1000)
			start := time.Date(2031, 3, 4, 9, 0, 0, 0, time.UTC)
			a.must(http.StatusOK, http.MethodPut, "/v1/orders/"+orderID+"/assignment", a.opA, map[string]any{
				"staff_id": a.staffA, "start_at": start, "end_at": start.Add(time.Hour)})
			var scheduleID string
			require.NoError(t, a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT schedule_id::text FROM bookings WHERE order_id = $1`,
				orderID).Scan(&scheduleID))

			var path, hold, held string
			var body map[string]any
			switch name {
			case "status change":
				// The one that writes the stream the erasure writes second
				// first: the order's (order, then schedule) or the
				// schedule's (schedule, then order).
				path, body, hold = "/v1/orders/"+orderID+"/status", map[string]any{"status": "in_service"}, "watermill_orders"
				if orderID < scheduleID {
					path, hold = "/v1/schedules/"+scheduleID+"/status", "watermill_schedules"
				}
				hold, held = `BEFORE INSERT ON `+hold+` FOR EACH STATEMENT`, `%INSERT INTO "`+hold+`"%`
			case "cancel":
				path, body = "/v1/orders/"+orderID+"/cancel", map[string]any{"reason": "moved away"}
				hold, held = `AFTER UPDATE ON bookings FOR EACH STATEMENT`, `%UPDATE bookings%`
			}
			release := a.holdIn(hold)
			written := a.sendAsync(http.MethodPost, path, auth(a.opA), body)
			require.Eventually(t, a.lockWaiting(held), 20*time.Second, 10*time.Millisecond, "the command holds the booking")

			_, _, eraser := a.writeInstance()
			req := ops.ErasureRequest{By: "test", MerchantID: a.merchantA, SubjectType: event.SubjectCustomer, SubjectID: customer, Confirm: customer}
			audit := func(ops.Erasure) ops.AuditEntry {
				return ops.AuditEntry{Actor: "test", Action: ops.ActionCustomerErase, Target: "customer/" + customer}
			}
			erased := make(chan error, 1)
			go func() {
				_, err := eraser.EraseSubject(t.Context(), req, audit)
				erased <- err
			}()
			// The erasure waits for the command, or gives up at once.
			var eerr error
			done := false
			require.Eventually(t, func() bool {
				select {
				case eerr = <-erased:
					done = true
					return true
				default:
				}
				var n int
				err := a.dbs.es.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n)
				return err == nil && n == 2
			}, 20*time.Second, 10*time.Millisecond, "the erasure waits for the command, or ends")
			release()
			r := <-written
			if !done {
				eerr = <-erased
			}

			var pgErr *pgconn.PgError
			require.False(t, errors.As(eerr, &pgErr) && pgErr.Code == "40P01", "the erasure died in a deadlock: %v", eerr)
			if eerr != nil {
				var conflict *apperr.ConflictError
				require.ErrorAs(t, eerr, &conflict, "the erasure may only lose as a conflict (which it runs again)")
			}
			require.Contains(t, []int{http.StatusOK, http.StatusConflict}, r.Status, "the command: %s", r)
			require.False(t, r.Status == http.StatusConflict && eerr != nil, "one of them wins: %s; %v", r, eerr)
		})
	}
}
