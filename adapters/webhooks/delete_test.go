package webhooks

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/app/command"
	"hearth/domain/apperr"
	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/pgtest"
)

// An endpoint's DELETE is a request: it runs under the request path's
// statement timeout and must not wait on the endpoint's delivery log, which
// holds WEBHOOK_DELIVERY_KEEP of its deliveries (millions for a busy
// merchant) and whose rows a delivery round or an erasure's scrub may hold.
// Deleting them all in the request's statement took as long as the log is
// big, locked every row of it, and waited for any row another transaction
// held. The endpoint goes at once; its log goes with the delivery log's
// pruning, a batch at a time, and reads no more in the meantime.
func TestDeletingAnEndpointLeavesItsLogToThePruning(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	merchant, endpoint := anEndpoint(t, db, "https://example.com/hook")
	kept := uuid.New()
	_, err := db.DB.ExecContext(ctx, `INSERT INTO webhook_endpoints (id, merchant_id, url, secret, created_at, updated_at)
		VALUES ($1, $2, 'https://example.com/other', $3, now(), now())`, kept, merchant, webhook.NewSecret())
	require.NoError(t, err)

	// A log of more than two pruning batches, finished and pending, and a
	// few deliveries of the endpoint that stays.
	const logged = 2*pruneBatch + 500
	grow := func(endpointID string, n int, finished bool) {
		t.Helper()
		_, err := db.DB.ExecContext(ctx, `INSERT INTO webhook_deliveries
			(endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, status, attempts, completed_at)
			SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), 1,
				CASE WHEN $4 THEN 'succeeded' ELSE 'pending' END, CASE WHEN $4 THEN 1 ELSE 0 END,
				CASE WHEN $4 THEN now() END
			FROM generate_series(1, $3)`, endpointID, merchant, n, finished)
		require.NoError(t, err)
	}
	grow(endpoint, logged-100, true)
	grow(endpoint, 100, false)
	grow(kept, 10, true)
	var one string
	require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 LIMIT 1`, endpoint).Scan(&one))

	// A transaction that holds one of the endpoint's deliveries, as a
	// round recording its attempt does.
	holder, err := db.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.ExecContext(ctx, `SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE`, one)
	require.NoError(t, err)

	store, err := NewStore(db.DB, testKeys)
	require.NoError(t, err)
	h, err := command.NewWebhooks(store, func(context.Context, string) error { return nil })
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- h.DeleteEndpoint(ctx, merchant, "test", endpoint, nil) }()
	require.True(t, pgtest.DoneOrWaiting(t, db.DB, done),
		"the endpoint's DELETE waited for a lock on one of its %d deliveries: it deletes the whole delivery log in the request's transaction", logged)
	require.NoError(t, <-done)
	require.NoError(t, holder.Rollback())

	_, err = store.Endpoint(ctx, merchant, endpoint)
	require.ErrorIs(t, err, apperr.ErrNotFound)
	_, err = store.Delivery(ctx, merchant, endpoint, one)
	require.ErrorIs(t, err, apperr.ErrNotFound, "a delivery of a deleted endpoint is not shown while its log waits for the pruning")
	_, err = h.Redeliver(ctx, merchant, endpoint, one)
	require.ErrorIs(t, err, apperr.ErrNotFound, "a delivery of a deleted endpoint cannot be redelivered")

	// The pruning takes the log away, a batch a statement, and leaves the
	// other endpoint's recent deliveries.
	sender, err := NewSender(SenderConfig{Timeout: time.Second, AllowPrivate: true})
	require.NoError(t, err)
	d, err := NewDispatcher(ctx, DispatcherConfig{DB: db.DB, Sender: sender, Secrets: testKeys, Keep: time.Hour,
		Schedule: webhook.Schedule{Initial: time.Hour, Max: time.Hour, For: 24 * time.Hour},
		OnStale:  func(err error) { t.Errorf("stale term: %v", err) }})
	require.NoError(t, err)
	d.prune(ctx)
	count := func(endpointID string) int {
		t.Helper()
		var n int
		require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, endpointID).Scan(&n))
		return n
	}
	require.Zero(t, count(endpoint), "the deleted endpoint's delivery log is pruned")
	require.Equal(t, 10, count(kept), "another endpoint's deliveries younger than WEBHOOK_DELIVERY_KEEP stay")

	// A fan-out that read the endpoint before its deletion committed
	// queues deliveries for it after that pass: the next one takes them.
	// The endpoint is remembered until WEBHOOK_DELIVERY_KEEP has passed.
	grow(endpoint, 5, false)
	d.prune(ctx)
	require.Zero(t, count(endpoint), "deliveries queued for the endpoint after its deletion are pruned too")
	remembered := func() bool {
		t.Helper()
		var ok bool
		require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM webhook_endpoints_deleted WHERE endpoint_id = $1)`, endpoint).Scan(&ok))
		return ok
	}
	require.True(t, remembered(), "a deleted endpoint is remembered for WEBHOOK_DELIVERY_KEEP")
	_, err = db.DB.ExecContext(ctx, `UPDATE webhook_endpoints_deleted SET deleted_at = now() - interval '2 hours' WHERE endpoint_id = $1`, endpoint)
	require.NoError(t, err)
	d.prune(ctx)
	require.False(t, remembered(), "a deleted endpoint with no delivery left is forgotten after WEBHOOK_DELIVERY_KEEP")
}
