package webhooks

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"hearth/adapters/readmodel"
	"hearth/app/publicevent"
	"hearth/domain/event"
	"hearth/domain/order"
	"hearth/domain/uuid"
	"hearth/internal/pgtest"
)

// An event an operator skipped in the fan-out (app parked skip on
// webhooks_orders) goes out as the event feed and the relay give a skipped
// event, <aggregate>.event_skipped naming its stored type and nothing else,
// the type its delivery was queued as: not in its stored form, whose
// personal fields an operator's skip should not send on, nor failed for a
// stored form that no longer decodes.
func TestASkippedEventIsDeliveredAsSkipped(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	const lock = "test/webhooks"
	require.NoError(t, BeginTerm(ctx, db.DB, readmodel.Fence{Lock: lock, Term: 1}))
	fenced := readmodel.WithFence(ctx, readmodel.Fence{Lock: lock, Term: 1, Lease: 3 * time.Second, Function: FenceFunction})

	var mu sync.Mutex
	var bodies []string
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
	}))
	defer receiver.Close()
	merchant, endpoint := anEndpoint(t, db, receiver.URL)

	// Stored: an order.created whose notes are in clear, and an event whose
	// type no longer decodes; both skipped, so the fan-out gets them as
	// event.Skipped.
	const mark = "MARK-skipped-notes"
	var skipped []event.Recorded
	for _, typ := range []string{"OrderCreated", "OrderTeleported"} {
		id := uuid.New()
		data, err := json.Marshal(order.Created{OrderID: id, CustomerID: uuid.New(), AmountCents: 100, Notes: mark, Status: order.StatusPending})
		require.NoError(t, err)
		rec := event.Recorded{Envelope: event.Envelope{ID: uuid.New(), Type: typ, StreamType: order.StreamType, StreamID: id, Version: 1,
			MerchantID: merchant, OccurredAt: time.Now().UTC().Truncate(time.Microsecond), CorrelationID: uuid.New(), Actor: "key:test", Data: data}}
		_, err = db.DB.Exec(`INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, actor)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, rec.ID, rec.StreamType, rec.StreamID, rec.Version, rec.MerchantID, rec.Type,
			string(rec.Data), rec.OccurredAt, rec.CorrelationID, rec.Actor)
		require.NoError(t, err)
		_, err = db.DB.Exec(`INSERT INTO skipped_events (projection, event_id, stream_id, version, type, skipped_by, reason)
			VALUES ($1, $2, $3, 1, $4, 'key:test', 'cannot fan out')`, ProjectionPrefix+"orders", rec.ID, rec.StreamID, typ)
		require.NoError(t, err)
		skipped = append(skipped, event.Skip(rec))
	}
	fanout, err := NewFanout(db)
	require.NoError(t, err)
	require.NoError(t, fanout.FanOut(fenced, skipped, nil))

	sender, err := NewSender(SenderConfig{Timeout: 5 * time.Second, AllowPrivate: true})
	require.NoError(t, err)
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hourlyDispatcher(t, dctx, db, sender, endpoint)
	require.Eventually(t, func() bool {
		var pending int
		require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'pending'`,
			endpoint).Scan(&pending))
		return pending == 0
	}, 20*time.Second, 10*time.Millisecond, "both deliveries tried")

	rows, err := db.DB.Query(`SELECT event_type, status, coalesce(error, '') FROM webhook_deliveries WHERE endpoint_id = $1`, endpoint)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var typ, status, why string
		require.NoError(t, rows.Scan(&typ, &status, &why))
		require.Equal(t, "order.event_skipped", typ, "the fan-out queues the skipped form")
		assert.Equal(t, "succeeded", status, "%s: %s", typ, why)
	}
	require.NoError(t, rows.Err())
	mu.Lock()
	defer mu.Unlock()
	var of []string
	for _, b := range bodies {
		assert.NotContains(t, b, mark)
		var pe struct {
			Type string                  `json:"type"`
			Data publicevent.SkippedData `json:"data"`
		}
		require.NoError(t, json.Unmarshal([]byte(b), &pe))
		assert.Equal(t, "order.event_skipped", pe.Type, b)
		of = append(of, pe.Data.Of)
	}
	require.ElementsMatch(t, []string{"OrderCreated", "OrderTeleported"}, of, "one body of each")
}

// A delivery of an event whose type this release does not know (queued by
// a newer release's fan-out during a rolling upgrade, while this release's
// dispatcher leads the endpoint) is tried again later, as after a
// receiver's failure, and nothing is sent: once a release that reads the
// type leads, it goes out. Failed at once, it was never sent: nothing but an
// operator's redelivery tries a failed delivery again.
func TestADeliveryOfAnEventTypeOfANewerReleaseWaits(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	var received sync.Map
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		received.Store(string(b), true)
	}))
	defer receiver.Close()
	merchant, endpoint := anEndpoint(t, db, receiver.URL)

	eventID, streamID := uuid.New(), uuid.New()
	_, err := db.DB.Exec(`INSERT INTO events (event_id, stream_type, stream_id, version, merchant_id, type, data, occurred_at, correlation_id, actor)
		VALUES ($1, 'order', $2, 1, $3, 'OrderTeleported', '{"to":"Mars"}', now(), $4, 'key:test')`, eventID, streamID, merchant, uuid.New())
	require.NoError(t, err)
	_, err = db.DB.Exec(`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version)
		VALUES ($1, $2, $3, 'order.teleported', $4, 1)`, endpoint, merchant, eventID, streamID)
	require.NoError(t, err)

	sender, err := NewSender(SenderConfig{Timeout: 5 * time.Second, AllowPrivate: true})
	require.NoError(t, err)
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hourlyDispatcher(t, dctx, db, sender, endpoint)
	var status, why string
	require.Eventually(t, func() bool {
		var attempts int
		require.NoError(t, db.DB.QueryRow(`SELECT status, attempts, coalesce(error, '') FROM webhook_deliveries WHERE event_id = $1`,
			eventID).Scan(&status, &attempts, &why))
		return attempts > 0 && (why != "" || status != "pending") // its attempt judged
	}, 20*time.Second, 10*time.Millisecond, "the delivery was never tried")
	require.Equal(t, "pending", status, "tried again later: %s", why)
	require.Contains(t, why, `unknown event type "OrderTeleported"`)
	empty := true
	received.Range(func(any, any) bool { empty = false; return false })
	require.True(t, empty, "nothing sent")
}
