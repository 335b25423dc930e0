package webhooks

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/readmodel"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/pgtest"
)

// The fan-out leaves out, before any work, the events of a merchant
// without an endpoint that occurred well before it read the set of
// merchants with one; an event too recent for the set to tell still gets
// its delivery from an endpoint created since the set was read, and so do
// the events of a merchant in the set.
func TestFanOutSkipsMerchantsWithoutEndpoints(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	const lock = "test/webhooks"
	require.NoError(t, BeginTerm(ctx, db.DB, readmodel.Fence{Lock: lock, Term: 1}))
	ctx = readmodel.WithFence(ctx, readmodel.Fence{Lock: lock, Term: 1, Lease: 3 * time.Second, Function: FenceFunction})
	merchant := func() string {
		id := uuid.New()
		_, err := db.DB.Exec(`INSERT INTO merchants (id, name) VALUES ($1, $2)`, id, "m-"+id)
		require.NoError(t, err)
		return id
	}
	addEndpoint := func(merchantID string) string {
		id := uuid.New()
		_, err := db.DB.Exec(`INSERT INTO webhook_endpoints (id, merchant_id, url, secret, created_at, updated_at)
			VALUES ($1, $2, 'https://example.com/hook', $3, now() - interval '2 hours', now())`, id, merchantID, webhook.NewSecret())
		require.NoError(t, err)
		return id
	}
	deliveries := func(endpoint string) (n int) {
		require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, endpoint).Scan(&n))
		return n
	}
	hooked, quiet, late := merchant(), merchant(), merchant()
	hookedEndpoint := addEndpoint(hooked)
	fanout, err := NewFanout(db)
	require.NoError(t, err)

	old := time.Now().Add(-time.Hour)
	require.NoError(t, fanout.FanOut(ctx, []event.Recorded{orderCreated(quiet, old), orderCreated(hooked, old), orderCreated(quiet, old), orderCreated(late, old)}, nil))
	require.Equal(t, 1, deliveries(hookedEndpoint))
	require.Equal(t, 3, fanout.skipped, "the old events of the merchants without an endpoint")

	// An endpoint created after the set was read, before the next read.
	lateEndpoint := addEndpoint(late)
	require.NoError(t, fanout.FanOut(ctx, []event.Recorded{orderCreated(late, time.Now())}, nil))
	require.Equal(t, 1, deliveries(lateEndpoint), "a recent event goes through the query")
	require.Equal(t, 3, fanout.skipped)
}

// orderCreated is a recorded order.created of the merchant.
func orderCreated(merchantID string, occurred time.Time) event.Recorded {
	id := uuid.New()
	e := order.Created{OrderID: id, CustomerID: uuid.New(), AmountCents: 100, Status: order.StatusPending}
	return event.Recorded{Envelope: event.Envelope{ID: uuid.New(), Type: e.EventType(), StreamType: order.StreamType,
		StreamID: id, Version: 1, MerchantID: merchantID, OccurredAt: occurred, CorrelationID: uuid.New(), Actor: "key:test"}, Event: e}
}
