package main

import (
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"hearth/adapters/pubsub"
	"hearth/internal/pgtest"
)

// consumed reports whether every projection's consumer group has
// acknowledged its topic's last message.
func (a *api) consumed() bool {
	for _, p := range a.w.projections {
		var ok bool
		err := a.dbs.es.DB.QueryRow(`SELECT coalesce((SELECT (o.last_processed_transaction_id, o.offset_acked) >= (m.transaction_id, m."offset")
			FROM `+pubsub.Offsets.MessagesOffsetsTable(p.Topic)+` o,
			(SELECT "offset", transaction_id FROM `+pubsub.Schema.MessagesTable(p.Topic)+` ORDER BY transaction_id DESC, "offset" DESC LIMIT 1) m
			WHERE o.consumer_group = $1), true)`, p.Name).Scan(&ok)
		if err != nil || !ok {
			return false
		}
	}
	return true
}

// Retention as serve wires it (TOPIC_RETENTION, the projections' consumer
// groups): once the projections have acknowledged everything and it is old
// enough, the topic is emptied; new events still flow to the live
// projections, verify and rebuild (which read the events table) agree, and
// /metrics shows the topic's size and what was pruned; in both layouts.
func TestRetentionKeepsThePipelineWhole(t *testing.T) {
	t.Parallel()
	for name, newDB := range pgtest.Layouts() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := setup(t, newDB(t))
			c, ids := a.seedOrders(4)
			for _, id := range ids {
				a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+id+"/status", a.opA, map[string]any{"status": "confirmed"})
				a.awaitOrder(a.opA, id, 2)
			}
			require.Eventually(t, a.consumed, 10*time.Second, 10*time.Millisecond)
			_, err := a.dbs.es.DB.Exec(`UPDATE watermill_orders SET created_at = created_at - interval '8 days'`)
			require.NoError(t, err)

			cfg := a.cfg
			cfg.TopicRetention = 7 * 24 * time.Hour
			// With the relay on, its consumer group must have acknowledged a
			// message too: until it has a position, nothing goes.
			withRelay, w := cfg, a.w
			withRelay.RelayNATSURL = "nats://127.0.0.1:4222"
			w.telemetry = &telemetry{reg: prometheus.NewRegistry()}
			r, err := newRetention(withRelay, a.dbs, w, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			n, err := r.PruneAll(t.Context())
			require.NoError(t, err)
			require.Zero(t, n, "the relay has no position")

			r, err = newRetention(cfg, a.dbs, a.w, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			n, err = r.PruneAll(t.Context())
			require.NoError(t, err)
			require.Equal(t, 8, n)
			var left int
			require.NoError(t, a.dbs.es.DB.QueryRow(`SELECT count(*) FROM watermill_orders`).Scan(&left))
			require.Zero(t, left)

			// New events flow, to new orders and to old ones.
			fresh := a.createOrder(a.opA, c, 999)
			a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+fresh+"/status", a.opA, map[string]any{"status": "confirmed"})
			a.awaitOrder(a.opA, fresh, 2)
			a.must(http.StatusOK, http.MethodPost, "/v1/orders/"+ids[0]+"/status", a.opA, map[string]any{"status": "in_service"})
			a.awaitOrder(a.opA, ids[0], 3)
			require.Eventually(t, a.consumed, 10*time.Second, 10*time.Millisecond)

			// Verify and rebuild read the events table, which keeps everything.
			out, err := cli(t.Context(), a.urls(), "verify", "--recheck", "0")
			require.NoError(t, err, out)
			require.Contains(t, out, "verify orders: 5 streams, 11 events, 0 differences")
			out, err = cli(t.Context(), a.urls(), "rebuild", "orders")
			require.NoError(t, err, out)
			out, err = cli(t.Context(), a.urls(), "verify", "--recheck", "0")
			require.NoError(t, err, out)
			require.Contains(t, out, "verify orders: 5 streams, 11 events, 0 differences")

			res, err := a.client.Get(a.base + "/metrics")
			require.NoError(t, err)
			body, err := io.ReadAll(res.Body)
			require.NoError(t, res.Body.Close())
			require.NoError(t, err)
			require.Contains(t, string(body), `hearth_topic_pruned_messages_total{topic="orders"} 8`)
			require.Regexp(t, `hearth_topic_bytes\{topic="orders"\} \d`, string(body))
			require.Regexp(t, `hearth_topic_messages\{topic="poison"\} \d`, string(body))
		})
	}
}
