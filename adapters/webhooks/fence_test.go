package webhooks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/adapters/readmodel"
	"hearth/domain/event"
	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/pgtest"
)

// A leader whose term is no longer the event store's records nothing: its
// fan-out inserts no delivery and its dispatcher claims none (and steps
// down), while the current term's do.
func TestStaleTermRecordsNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	ctx := context.Background()
	const lock = "test/webhooks"
	fence := func(term int64) context.Context {
		return readmodel.WithFence(ctx, readmodel.Fence{Lock: lock, Term: term, Lease: 3 * time.Second, Function: FenceFunction})
	}
	begin := func(term int64) error {
		return BeginTerm(ctx, db.DB, readmodel.Fence{Lock: lock, Term: term})
	}

	var hits atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer receiver.Close()
	merchant, endpoint := uuid.New(), uuid.New()
	_, err := db.DB.Exec(`INSERT INTO merchants (id, name) VALUES ($1, $2)`, merchant, "m-"+merchant)
	require.NoError(t, err)
	_, err = db.DB.Exec(`INSERT INTO webhook_endpoints (id, merchant_id, url, secret, created_at, updated_at)
		VALUES ($1, $2, $3, $4, now() - interval '1 hour', now())`, endpoint, merchant, receiver.URL, webhook.NewSecret())
	require.NoError(t, err)
	deliveries := func() (n, attempts int) {
		require.NoError(t, db.DB.QueryRow(`SELECT count(*), coalesce(sum(attempts), 0) FROM webhook_deliveries WHERE endpoint_id = $1`, endpoint).Scan(&n, &attempts))
		return n, attempts
	}
	fanout, err := NewFanout(db)
	require.NoError(t, err)
	rec := func() event.Recorded { return orderCreated(merchant, time.Now()) }

	require.ErrorIs(t, fanout.FanOut(fence(1), []event.Recorded{rec()}, nil), readmodel.ErrStaleTerm, "no term begun")
	require.NoError(t, begin(2))
	require.NoError(t, fanout.FanOut(fence(2), []event.Recorded{rec()}, nil))
	n, _ := deliveries()
	require.Equal(t, 1, n)

	require.NoError(t, begin(3)) // a new leader
	require.ErrorIs(t, begin(2), readmodel.ErrStaleTerm, "a term never goes back")
	require.ErrorIs(t, fanout.FanOut(fence(2), []event.Recorded{rec()}, nil), readmodel.ErrStaleTerm)
	n, _ = deliveries()
	require.Equal(t, 1, n, "the stale fan-out inserted nothing")

	sender, err := NewSender(SenderConfig{Timeout: time.Second, AllowPrivate: true})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(fence(2))
	defer cancel()
	stale := make(chan error, 1)
	d, err := NewDispatcher(runCtx, DispatcherConfig{DB: db.DB, Sender: sender, Secrets: testKeys, Keep: time.Hour,
		Schedule: webhook.Schedule{Initial: time.Millisecond, Max: time.Millisecond, For: time.Second},
		OnStale:  func(err error) { stale <- err; cancel() }})
	require.NoError(t, err)
	d.poke([]string{endpoint}, false)
	require.ErrorIs(t, <-stale, readmodel.ErrStaleTerm)
	d.wg.Wait()
	_, attempts := deliveries()
	require.Zero(t, attempts, "the stale dispatcher claimed nothing")
	require.Zero(t, hits.Load(), "and sent nothing")
}
