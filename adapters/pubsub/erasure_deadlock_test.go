package pubsub_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/ops"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// Two erasures of different subjects of one merchant (a customer and the
// staff member who served them) delete the stored answers that name both
// (an assignment's answer names the order's customer and its staff
// member). A table of stored answers past a quarter of shared_buffers is
// read by synchronized sequential scans: a scan that starts while another
// is under way starts where that one is and wraps around, so the two
// deletes meet the rows in different orders. Neither erasure may fail for
// it (a deadlock).
//
// The steps are ordered by the locks they wait for (pg_blocking_pids),
// never by time: a third transaction holds an answer that names the
// customer only (k3, mid-table), so the customer's erasure stops there
// after it took k2 (the table's first row); the staff member's erasure then
// starts its scan near k3, takes k1 (the last row) and waits for k2; the
// third transaction ends, and the customer's erasure goes on to k1.
func TestTwoErasuresDeletingTheSameStoredAnswersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	ctx := t.Context()
	db := f.ES.DB
	staff := uuid.New()
	_, err := db.Exec(`INSERT INTO staff (id, merchant_id, name) VALUES ($1, $2, 'Wanda')`, staff, f.MerchantID)
	require.NoError(t, err)

	var buffers int64
	require.NoError(t, db.QueryRow(`SELECT setting::bigint FROM pg_settings WHERE name = 'shared_buffers'`).Scan(&buffers))
	// Rows of about 1,900 bytes, four to a page, stored inline (under
	// TOAST's threshold), in two halves: a quarter more pages than a
	// quarter of the buffers, the size from which Postgres synchronizes
	// scans.
	filler := buffers * 5 / 8
	answer := func(key, body string) {
		t.Helper()
		_, err := db.Exec(`INSERT INTO idempotency_keys (merchant_id, scope, key, fingerprint, token, locked_until, status, header, body, completed_at)
			VALUES ($1, 'operator', $2, '\x00', $3, now(), 200, '{}', convert_to($4, 'UTF8'), now())`, f.MerchantID, key, uuid.New(), body)
		require.NoError(t, err)
	}
	fill := func(from int64) {
		t.Helper()
		_, err := db.Exec(`INSERT INTO idempotency_keys (merchant_id, scope, key, fingerprint, token, locked_until, status, header, body, completed_at)
			SELECT $1, 'operator', 'filler-' || i, '\x00', gen_random_uuid(), now(), 200, '{}', convert_to(repeat('x', 1800), 'UTF8'), now()
			FROM generate_series($2::bigint, $3::bigint) AS i`, f.MerchantID, from, from+filler-1)
		require.NoError(t, err)
	}
	both := `{"customer_id":"` + f.CustomerID + `","staff_id":"` + staff + `"}`
	answer("k2", both)
	fill(0)
	answer("k3", `{"customer_id":"`+f.CustomerID+`"}`)
	fill(filler)
	answer("k1", both)
	_, err = db.Exec(`ANALYZE idempotency_keys`)
	require.NoError(t, err)
	var pages int64
	require.NoError(t, db.QueryRow(`SELECT pg_relation_size('idempotency_keys') / current_setting('block_size')::bigint`).Scan(&pages))
	require.Greater(t, pages, buffers/4, "a table Postgres reads by synchronized scans")

	// The third transaction, holding k3 (found through the primary key: a
	// sequential scan would leave where it ended as the next scan's start).
	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	hold, err := holder.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback() }()
	var holderPID int
	require.NoError(t, hold.QueryRow(`SELECT pg_backend_pid()`).Scan(&holderPID))
	_, err = hold.Exec(`SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	_, err = hold.Exec(`SELECT 1 FROM idempotency_keys WHERE merchant_id = $1 AND scope = 'operator' AND key = 'k3' FOR UPDATE`, f.MerchantID)
	require.NoError(t, err)

	type result struct {
		erasure ops.Erasure
		err     error
	}
	erase := func(subjectType, id string) <-chan result {
		done := make(chan result, 1)
		go func() {
			req := ops.ErasureRequest{By: "test", MerchantID: f.MerchantID, SubjectType: subjectType, SubjectID: id,
				Confirm: id, CorrelationID: uuid.New()}
			e, err := f.Store.EraseSubject(context.WithoutCancel(ctx), req, func(ops.Erasure) ops.AuditEntry {
				return ops.AuditEntry{Actor: "test", Action: ops.ActionCustomerErase, Target: subjectType + "/" + id}
			})
			done <- result{e, err}
		}()
		return done
	}
	// blockedBy returns the backend that waits for pid, once there is one.
	blockedBy := func(pid int, what string) int {
		t.Helper()
		var waiter int
		require.Eventually(t, func() bool {
			err := db.QueryRow(`SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&waiter)
			return err == nil
		}, 20*time.Second, 5*time.Millisecond, what)
		return waiter
	}
	customer := erase(event.SubjectCustomer, f.CustomerID)
	customerPID := blockedBy(holderPID, "the customer's erasure waits for k3")
	member := erase(event.SubjectStaffMember, staff)
	blockedBy(customerPID, "the staff member's erasure waits for the customer's")
	require.NoError(t, hold.Commit())

	c, m := <-customer, <-member
	for _, r := range []result{c, m} {
		if r.err != nil && strings.Contains(r.err.Error(), "40P01") {
			require.Fail(t, "an erasure deadlocked", "%v", r.err)
		}
		require.NoError(t, r.err)
	}
	require.Equal(t, 3, c.erasure.IdempotentAnswers+m.erasure.IdempotentAnswers, "k1, k2 and k3, each deleted once")
	var left int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM idempotency_keys WHERE key IN ('k1', 'k2', 'k3')`).Scan(&left))
	require.Zero(t, left)
}
