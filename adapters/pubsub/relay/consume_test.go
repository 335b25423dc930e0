package relay_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"hearth/internal/pgtest"
)

// The consumer of docs/api.md ("Events on NATS JetStream"), as written
// there: a durable pull consumer of one merchant's events gets each of them,
// in order per aggregate, against the NATS server the tests use.
func TestDocumentedConsumer(t *testing.T) {
	t.Parallel()
	f := setup(t, pgtest.NewDB(t))
	f.startInstance(t, "a", f.config())
	f.write(10).wait(t)
	want := len(f.requireAllRelayed(t))
	merchantID := f.MerchantID

	// --- as in docs/api.md ---
	ctx := context.Background()
	nc, err := nats.Connect(f.nats.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       "billing",
		FilterSubject: "hearth." + merchantID + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxAckPending: 1, // one at a time: redeliveries cannot overtake
	})
	require.NoError(t, err)
	type hearthEvent struct {
		ID               string          `json:"id"`
		Type             string          `json:"type"`
		AggregateID      string          `json:"aggregate_id"`
		AggregateVersion int             `json:"aggregate_version"`
		Data             json.RawMessage `json:"data"`
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	last := map[string]int{}
	var outOfOrder []string
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var e hearthEvent
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			_ = m.Term() // not an event: never redeliver it
			return
		}
		mu.Lock()
		if !seen[e.ID] { // at least once: apply each event id once
			seen[e.ID] = true
			if e.AggregateVersion != last[e.AggregateID]+1 {
				outOfOrder = append(outOfOrder, e.ID)
			}
			last[e.AggregateID] = e.AggregateVersion
		}
		mu.Unlock()
		_ = m.Ack()
	})
	require.NoError(t, err)
	defer cc.Stop()
	// --- end ---

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == want
	}, 30*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, outOfOrder, "in order per aggregate")
}
