package webhooks

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"hearth/domain/uuid"
	"hearth/domain/webhook"
	"hearth/internal/pgtest"
)

// A round's sends all end within its claim's hold, even when every one
// takes the whole timeout: a round claims claimBatch deliveries and sends
// inFlightPerEndpoint at a time, so its last sends start several timeouts
// after the claim. (Otherwise a leader paused or slowed in the middle of a
// round would send what the next leader claimed after the hold.) And a
// send that could no longer end within the hold does not start: its claim
// is put back.
func TestRoundSendsEndWithinTheClaim(t *testing.T) {
	t.Parallel()
	db := pgtest.Open(t, pgtest.NewDB(t).EventStore)
	// The hold's margin is a few seconds: the timeout must be long enough
	// for the round's later waves to go past a hold of one timeout.
	const timeout = 2 * time.Second
	var mu sync.Mutex
	var arrivals []time.Time
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // net/http notices a client gone only once the body is read
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		<-r.Context().Done() // no answer: every send takes the whole timeout
	}))
	defer receiver.Close()
	merchant, endpoint := uuid.New(), uuid.New()
	_, err := db.DB.Exec(`INSERT INTO merchants (id, name) VALUES ($1, $2)`, merchant, "m-"+merchant)
	require.NoError(t, err)
	_, err = db.DB.Exec(`INSERT INTO webhook_endpoints (id, merchant_id, url, secret, created_at, updated_at)
		VALUES ($1, $2, $3, $4, now(), now())`, endpoint, merchant, receiver.URL, webhook.NewSecret())
	require.NoError(t, err)
	// A round's worth of test pings, each of its own aggregate.
	_, err = db.DB.Exec(`INSERT INTO webhook_deliveries (endpoint_id, merchant_id, event_id, event_type, aggregate_id, aggregate_version, ping_payload)
		SELECT $1, $2, gen_random_uuid(), 'webhook_endpoint.ping', gen_random_uuid(), 1, '{}' FROM generate_series(1, $3)`, endpoint, merchant, claimBatch)
	require.NoError(t, err)

	sender, err := NewSender(SenderConfig{Timeout: timeout, AllowPrivate: true})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := NewDispatcher(ctx, DispatcherConfig{DB: db.DB, Sender: sender, Keep: time.Hour,
		Schedule: webhook.Schedule{Initial: time.Hour, Max: time.Hour, For: 24 * time.Hour},
		OnStale:  func(err error) { t.Errorf("stale term: %v", err) }})
	require.NoError(t, err)
	d.poke([]string{endpoint}, false)

	// The claim's hold: when the next leader could claim them again.
	var holdEnds time.Time
	require.Eventually(t, func() bool {
		var claimed int
		require.NoError(t, db.DB.QueryRow(`SELECT count(*), coalesce(min(next_attempt_at), now()) FROM webhook_deliveries
			WHERE endpoint_id = $1 AND status = 'pending' AND attempts = 1`, endpoint).Scan(&claimed, &holdEnds))
		return claimed == claimBatch
	}, 10*time.Second, 5*time.Millisecond, "one round claims them all")
	require.Eventually(t, func() bool {
		var failed int
		require.NoError(t, db.DB.QueryRow(`SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'failed'`, endpoint).Scan(&failed))
		return failed == claimBatch
	}, time.Duration(sendWaves+3)*timeout, 10*time.Millisecond, "every ping tried once, then recorded")
	mu.Lock()
	got := arrivals
	mu.Unlock()
	require.Len(t, got, claimBatch)
	for i, at := range got {
		require.True(t, at.Add(timeout).Before(holdEnds), "send %d may end at %s, after the claim's hold, %s", i, at.Add(timeout), holdEnds)
	}

	// A send that could not end within the hold does not start (the round
	// began a hold ago: the leader was paused since); its claim is put
	// back, untried.
	out := d.send(ctx, webhook.Endpoint{URL: receiver.URL, Secret: webhook.NewSecret()},
		[]claim{{id: uuid.New(), eventID: uuid.New(), body: []byte("{}")}}, time.Now().Add(-d.hold))
	require.Len(t, out, 1)
	require.True(t, out[0].release, "%+v", out[0])
	mu.Lock()
	require.Len(t, arrivals, claimBatch, "nothing sent")
	mu.Unlock()
	cancel()
	d.wg.Wait()
}
