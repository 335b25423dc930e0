package webhooks

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/webhook"
	"hearth/internal/pgtest"
)

// An endpoint is disabled once one delivery's retries ran out
// (WEBHOOK_RETRY_FOR): by then it holds that long of the merchant's events
// pending, hundreds of thousands for a busy one whose receiver is down.
// The round that records the last attempt and disables the endpoint ran
// inside stepTimeout; it also locked and failed every pending delivery of
// the endpoint in its transaction, so with a big backlog it could not end
// in time, rolled back, and was tried again for ever: the endpoint never
// disabled, its backlog never failed. The disable commits with the attempt
// alone; the pending deliveries fail after it, a batch a transaction (each
// batch locked in id order, as an erasure's scrub locks them: a batch
// waits for a row the scrub holds, never the other way round as well).
//
// Here the last pending delivery queued is held, as a scrub holds it: the
// round waits for it in its last batch, and by then the endpoint is
// disabled and the batches before it have failed.
func TestDisablingAnEndpointDoesNotFailItsBacklogInTheRound(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	const url = "https://example.com/hook"
	merchant, endpoint := anEndpoint(t, db, url)
	const backlog = 2*pruneBatch + 500
	_, err := db.DB.ExecContext(ctx, `INSERT INTO webhook_deliveries
		(endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version)
		SELECT $1, $2, gen_random_uuid(), 'order.created', gen_random_uuid(), 1 FROM generate_series(1, $3)`,
		endpoint, merchant, backlog)
	require.NoError(t, err)
	var tried, held string
	require.NoError(t, db.DB.QueryRowContext(ctx, `UPDATE webhook_deliveries SET attempts = 5, first_attempt_at = now() - interval '1 day'
		WHERE id = (SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY seq LIMIT 1) RETURNING id`, endpoint).Scan(&tried))
	require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 AND id <> $2 ORDER BY seq DESC LIMIT 1`,
		endpoint, tried).Scan(&held))

	holder, err := db.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.ExecContext(ctx, `SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE`, held)
	require.NoError(t, err)

	sender, err := NewSender(SenderConfig{Timeout: time.Second, AllowPrivate: true})
	require.NoError(t, err)
	d, err := NewDispatcher(ctx, DispatcherConfig{DB: db.DB, Sender: sender, Secrets: testKeys, Keep: time.Hour,
		Schedule: webhook.Schedule{Initial: time.Hour, Max: time.Hour, For: 24 * time.Hour},
		OnStale:  func(err error) { t.Errorf("stale term: %v", err) }})
	require.NoError(t, err)
	last := result{id: tried, status: webhook.Failed, code: 500, err: "the receiver answered HTTP 500",
		disable: "its retries ran out", url: url}
	done := make(chan error, 1)
	go func() {
		_, _, _, err := d.round(ctx, endpoint, []result{last}, false)
		done <- err
	}()
	count := func(status string) int {
		t.Helper()
		var n int
		require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = $2`,
			endpoint, status).Scan(&n))
		return n
	}
	if !pgtest.DoneOrWaiting(t, db.DB, done) {
		var enabled bool
		require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT enabled FROM webhook_endpoints WHERE id = $1`, endpoint).Scan(&enabled))
		require.False(t, enabled,
			"the endpoint is not disabled while the round waits for one of its %d pending deliveries: it fails the whole backlog in the transaction that disables it", backlog)
		require.GreaterOrEqual(t, count(webhook.Failed), 2*pruneBatch, "the batches before the held delivery have failed")
	}
	require.NoError(t, holder.Rollback())
	require.NoError(t, <-done)

	require.Zero(t, count(webhook.Pending))
	require.Equal(t, backlog, count(webhook.Failed), "the backlog fails")
	var why string
	require.NoError(t, db.DB.QueryRowContext(ctx, `SELECT error FROM webhook_deliveries WHERE id = $1`, held).Scan(&why))
	require.Equal(t, webhook.NotSent+"the endpoint was disabled: its retries ran out", why)
}
