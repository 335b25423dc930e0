package webhooks

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/adapters/vault"
	"hearth/app/command"
	"hearth/app/ops"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/keyring"
	"hearth/internal/pgtest"
)

// A customer's erasure scrubs the receivers' error texts of the
// deliveries of their orders, locking them in id order; a worker that
// finds its endpoint disabled fails the endpoint's pending deliveries.
// Pending deliveries that were tried already carry their receiver's words,
// so the two statements lock the same rows: the worker may not take them
// in the order its scan meets them (insertion order, by the index of the
// pending deliveries or the heap), or each transaction holds a row the
// other waits for (a deadlock, and one of them fails).
//
// The steps are ordered by the locks they wait for (pg_blocking_pids),
// never by time, as in the erasure's deadlock tests: three pending
// deliveries of one order, inserted as d3, d2, d1 with ids in the order
// d1, d2, d3; a third transaction holds d2, so the erasure takes d1 and
// waits for d2; the worker then takes d3 (its scan's first row) and waits
// for d2 too; the third transaction ends.
func TestFailingADisabledEndpointsDeliveriesDoesNotDeadlockWithAnErasure(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := t.Context()
	line, err := keyring.New("test")
	require.NoError(t, err)
	ring, err := keyring.Parse(line)
	require.NoError(t, err)
	v, err := vault.New(db.DB, ring)
	require.NoError(t, err)
	store, err := pubsub.NewStore(db, nil, v)
	require.NoError(t, err)
	tx, err := pubsub.NewTransactor(store)
	require.NoError(t, err)
	orders, err := command.NewOrderHandlers(tx)
	require.NoError(t, err)
	merchant, endpoint := anEndpoint(t, db, "https://example.com/")
	customer := uuid.New()
	_, err = db.DB.Exec(`INSERT INTO customers (id, merchant_id, name) VALUES ($1, $2, 'Ada')`, customer, merchant)
	require.NoError(t, err)
	w, err := orders.Create(ctx, command.CreateOrder{CustomerID: customer, AmountCents: 500, Notes: "gate code 1234",
		Meta: event.Meta{MerchantID: merchant, Actor: "key:test", CorrelationID: uuid.New(), OccurredAt: time.Now()}})
	require.NoError(t, err)
	order := w.Stream[0].StreamID

	ids := []string{uuid.New(), uuid.New(), uuid.New()}
	slices.Sort(ids) // the text of a uuid sorts as the uuid does
	for i, key := range []string{"d3", "d2", "d1"} {
		_, err := db.DB.Exec(`INSERT INTO webhook_deliveries (id, endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version,
				status, attempts, response_status, error, next_attempt_at)
			VALUES ($1, $2, $3, $4, 'order.updated', $5, $6, 'pending', 1, 500, $7, now() + interval '1 hour')`,
			ids[key[1]-'1'], endpoint, merchant, uuid.New(), order, i+1, "the receiver said: "+key)
		require.NoError(t, err)
	}
	_, err = db.DB.Exec(`UPDATE webhook_endpoints SET enabled = false, disabled_reason = 'by an operator', disabled_at = now() WHERE id = $1`, endpoint)
	require.NoError(t, err)

	// The third transaction, holding d2.
	conn, err := db.DB.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	hold, err := conn.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Rollback() })
	var holderPID int
	require.NoError(t, hold.QueryRow(`SELECT pg_backend_pid()`).Scan(&holderPID))
	_, err = hold.Exec(`SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE`, ids[1])
	require.NoError(t, err)
	blockedBy := func(pid int, what string) int {
		t.Helper()
		var waiter int
		require.Eventually(t, func() bool {
			return db.DB.QueryRow(`SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, pid).Scan(&waiter) == nil
		}, 20*time.Second, 5*time.Millisecond, what)
		return waiter
	}

	erased := make(chan error, 1)
	go func() {
		_, err := store.EraseSubject(context.WithoutCancel(ctx), ops.ErasureRequest{By: "test", MerchantID: merchant,
			SubjectType: event.SubjectCustomer, SubjectID: customer, Confirm: customer, CorrelationID: uuid.New()},
			func(ops.Erasure) ops.AuditEntry {
				return ops.AuditEntry{Actor: "test", Action: ops.ActionCustomerErase, Target: "customer/" + customer}
			})
		erased <- err
	}()
	erasurePID := blockedBy(holderPID, "the erasure waits for d2")

	sender, err := NewSender(SenderConfig{Timeout: time.Second, AllowPrivate: true})
	require.NoError(t, err)
	d, err := NewDispatcher(ctx, DispatcherConfig{DB: db.DB, Sender: sender, Secrets: testKeys, Keep: time.Hour,
		Schedule: webhook.Schedule{Initial: time.Hour, Max: time.Hour, For: 24 * time.Hour},
		OnStale:  func(err error) { t.Errorf("stale term: %v", err) }})
	require.NoError(t, err)
	failed := make(chan error, 1)
	go func() {
		_, _, _, err := d.round(context.WithoutCancel(ctx), endpoint, nil, false)
		failed <- err
	}()
	blockedBy(erasurePID, "the worker waits for the erasure")
	require.NoError(t, hold.Commit())

	for _, err := range []error{<-erased, <-failed} {
		if err != nil && strings.Contains(err.Error(), "40P01") {
			require.Fail(t, "a deadlock", "%v", err)
		}
		require.NoError(t, err)
	}
	rows, err := db.DB.Query(`SELECT status, error FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id`, endpoint)
	require.NoError(t, err)
	defer rows.Close()
	n := 0
	for rows.Next() {
		var status, text string
		require.NoError(t, rows.Scan(&status, &text))
		require.Equal(t, "failed", status)
		require.Equal(t, "(erased); then: the endpoint is disabled", text, "scrubbed, then failed")
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 3, n)
}
