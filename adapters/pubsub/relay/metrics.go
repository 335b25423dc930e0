package relay

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"hearth/adapters/pubsub/projector"
	"hearth/adapters/readmodel"
)

// Metrics are the relay's counters. They outlive terms: create them once,
// on the registry /metrics serves. A nil *Metrics counts nothing.
type Metrics struct {
	sent     *prometheus.CounterVec
	failures *prometheus.CounterVec
}

// NewMetrics registers the relay's counters on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hearth_relay_published_total",
			Help: "Messages JetStream acknowledged to the relay (stored, or dropped as duplicates), by topic.",
		}, []string{"topic"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hearth_relay_failures_total",
			Help: "Failed relay operations, each retried: stream (set-up), load, read, encode, publish, save; target: a term refused, its RELAY_STREAM or RELAY_SUBJECT_PREFIX not the recorded one.",
		}, []string{"op"}),
	}
	for _, c := range []prometheus.Collector{m.sent, m.failures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register relay metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) published(topic string) {
	if m != nil {
		m.sent.WithLabelValues(topic).Inc()
	}
}

func (m *Metrics) failed(op string) {
	if m != nil {
		m.failures.WithLabelValues(op).Inc()
	}
}

// lagCollector reads, on each scrape, how far the relay is behind each
// topic: the messages after its recorded position, and the age of the
// oldest of them.
type lagCollector struct {
	es      *sql.DB
	offsets *readmodel.RelayOffsets
	topics  []string
	log     *slog.Logger

	events, seconds *prometheus.Desc
}

// NewLagCollector returns a collector of the relay's lag per topic: its
// position from offsets (the read model), the topic's messages from es
// (the event store).
func NewLagCollector(es *sql.DB, offsets *readmodel.RelayOffsets, topics []string, log *slog.Logger) prometheus.Collector {
	if log == nil {
		log = slog.Default()
	}
	l := []string{"topic"}
	return &lagCollector{es: es, offsets: offsets, topics: topics, log: log.With("component", "metrics"),
		events:  prometheus.NewDesc("hearth_relay_lag_events", "Messages of the topic the relay has not published to JetStream yet.", l, nil),
		seconds: prometheus.NewDesc("hearth_relay_lag_seconds", "Age of the oldest message of the topic the relay has not published (0 when caught up).", l, nil),
	}
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.seconds
}

func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	round, stop := context.WithTimeout(context.Background(), projector.StatsRound)
	defer stop()
	for _, topic := range c.topics {
		// Each topic's read has its own time: one that waits (its table
		// locked) leaves out only that topic's lag; the round has its own
		// too (projector.StatsRound).
		ctx, cancel := context.WithTimeout(round, projector.StatsTimeout)
		events, seconds, err := c.lag(ctx, topic)
		cancel()
		if err != nil {
			c.log.Warn("relay lag unavailable", "topic", topic, "error", err)
			ch <- prometheus.NewInvalidMetric(c.events, err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.GaugeValue, float64(events), topic)
		ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.GaugeValue, seconds, topic)
	}
}

// lag counts the topic's messages after the relay's position, in
// watermill-sql's order (transaction id, then offset: the table's primary
// key), and the age of the oldest.
func (c *lagCollector) lag(ctx context.Context, topic string) (int64, float64, error) {
	pos, err := c.offsets.Load(ctx, topic)
	if err != nil {
		return 0, 0, err
	}
	var n int64
	var age float64
	err = c.es.QueryRowContext(ctx, `
		SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now()::timestamp - min(created_at))::float8, 0)
		FROM `+strconv.Quote("watermill_"+topic)+`
		WHERE (transaction_id, "offset") > ($1::bigint::text::xid8, $2::bigint)`, pos.TransactionID, pos.Offset).Scan(&n, &age)
	return n, max(age, 0), err
}
