package pubsub_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
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

	// The third transaction, holding k3.
	holderPID, hold := holdRow(t, db, `SELECT 1 FROM idempotency_keys WHERE merchant_id = $1 AND scope = 'operator' AND key = 'k3' FOR UPDATE`,
		f.MerchantID)

	customer := eraseInBackground(ctx, f.Store, f.MerchantID, event.SubjectCustomer, f.CustomerID)
	customerPID := blockedBy(t, db, holderPID, "the customer's erasure waits for k3")
	member := eraseInBackground(ctx, f.Store, f.MerchantID, event.SubjectStaffMember, staff)
	blockedBy(t, db, customerPID, "the staff member's erasure waits for the customer's")
	require.NoError(t, hold.Commit())

	c, m := <-customer, <-member
	requireNoDeadlock(t, c, m)
	require.Equal(t, 3, c.erasure.IdempotentAnswers+m.erasure.IdempotentAnswers, "k1, k2 and k3, each deleted once")
	var left int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM idempotency_keys WHERE key IN ('k1', 'k2', 'k3')`).Scan(&left))
	require.Zero(t, left)
}

// holdRow begins a transaction that runs lock (a statement that locks a
// row, found through an index: a sequential scan would leave where it
// ended as the next scan's start) and returns its backend's pid and the
// transaction, rolled back when the test ends unless committed.
func holdRow(t *testing.T, db *sql.DB, lock string, args ...any) (int, *sql.Tx) {
	t.Helper()
	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	tx, err := conn.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	var pid int
	require.NoError(t, tx.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid))
	_, err = tx.Exec(`SET LOCAL enable_seqscan = off`)
	require.NoError(t, err)
	_, err = tx.Exec(lock, args...)
	require.NoError(t, err)
	return pid, tx
}

// blockedBy returns the backend that waits for pid, once there is one.
func blockedBy(t *testing.T, db *sql.DB, pid int, what string) int {
	t.Helper()
	var waiter int
	require.Eventually(t, func() bool {
		err := db.QueryRow(`SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&waiter)
		return err == nil
	}, 20*time.Second, 5*time.Millisecond, what)
	return waiter
}

type erasureResult struct {
	erasure ops.Erasure
	err     error
}

// eraseInBackground runs an erasure of the subject on store, and reports
// its result on the channel it returns.
func eraseInBackground(ctx context.Context, store *pubsub.Store, merchantID, subjectType, id string) <-chan erasureResult {
	done := make(chan erasureResult, 1)
	go func() {
		req := ops.ErasureRequest{By: "test", MerchantID: merchantID, SubjectType: subjectType, SubjectID: id,
			Confirm: id, CorrelationID: uuid.New()}
		e, err := store.EraseSubject(context.WithoutCancel(ctx), req, func(ops.Erasure) ops.AuditEntry {
			return ops.AuditEntry{Actor: "test", Action: ops.ActionCustomerErase, Target: subjectType + "/" + id}
		})
		done <- erasureResult{e, err}
	}()
	return done
}

// requireNoDeadlock fails the test if an erasure failed, naming a
// deadlock as one.
func requireNoDeadlock(t *testing.T, results ...erasureResult) {
	t.Helper()
	for _, r := range results {
		if r.err != nil && strings.Contains(r.err.Error(), "40P01") {
			require.Fail(t, "an erasure deadlocked", "%v", r.err)
		}
		require.NoError(t, r.err)
	}
}
