package webhooks

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the delivery counters and lag. They outlive leadership terms:
// create them once, on the registry /metrics serves. A nil *Metrics counts
// nothing.
type Metrics struct {
	deliveries *prometheus.CounterVec
	lag        prometheus.Histogram
	disabled   prometheus.Counter
}

// NewMetrics registers the delivery metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hearth_webhook_deliveries_total",
			Help: "Webhook delivery attempts by outcome: succeeded, retrying (failed, tried again later) or failed (given up: retries exhausted, 410, a failed test ping).",
		}, []string{"outcome"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hearth_webhook_delivery_lag_seconds",
			Help: "From an event (or the queueing of a ping or redelivery) to its successful delivery.",
			// 5: the runbook's alert threshold (docs/operations.md) must be a
			// bucket's bound, or histogram_quantile interpolates across it.
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 60, 600, 3600, 21600, 86400},
		}),
		disabled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hearth_webhook_endpoints_disabled_total",
			Help: "Webhook endpoints Hearth disabled: their retries ran out, or their receiver answered 410.",
		}),
	}
	for _, o := range []string{"succeeded", "retrying", "failed"} {
		m.deliveries.WithLabelValues(o) // present at 0 from the start
	}
	for _, c := range []prometheus.Collector{m.deliveries, m.lag, m.disabled} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register webhook metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) outcome(o string) {
	if m != nil {
		m.deliveries.WithLabelValues(o).Inc()
	}
}

func (m *Metrics) delivered(lag time.Duration) {
	if m != nil {
		m.deliveries.WithLabelValues("succeeded").Inc()
		m.lag.Observe(max(lag, 0).Seconds())
	}
}

func (m *Metrics) disabledEndpoint() {
	if m != nil {
		m.disabled.Inc()
	}
}

// statsCollector reads, on each scrape, what only the database knows: the
// pending deliveries, the age of the oldest, and the endpoints Hearth has
// disabled.
type statsCollector struct {
	db                          *sql.DB
	log                         *slog.Logger
	pending, oldest, disabledBy *prometheus.Desc
}

// NewStatsCollector returns a collector of the delivery backlog and the
// disabled endpoints, read from the event-store database on each scrape.
func NewStatsCollector(db *sql.DB, log *slog.Logger) prometheus.Collector {
	if log == nil {
		log = slog.Default()
	}
	return &statsCollector{db: db, log: log.With("component", "metrics"),
		pending:    prometheus.NewDesc("hearth_webhook_deliveries_pending", "Webhook deliveries not yet delivered nor given up.", nil, nil),
		oldest:     prometheus.NewDesc("hearth_webhook_oldest_pending_seconds", "Age of the oldest pending webhook delivery (0 when none).", nil, nil),
		disabledBy: prometheus.NewDesc("hearth_webhook_endpoints_disabled", "Webhook endpoints that Hearth disabled and no operator has enabled again.", nil, nil),
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.oldest
	ch <- c.disabledBy
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var pending, disabled int64
	var oldest float64
	// A deleted endpoint's pending deliveries wait for the pruning
	// (migration 033), never to be sent: they are not pending for anyone.
	err := c.db.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'
			AND endpoint_id NOT IN (SELECT endpoint_id FROM webhook_endpoints_deleted)),
		(SELECT coalesce(EXTRACT(EPOCH FROM now() - min(created_at))::float8, 0) FROM webhook_deliveries WHERE status = 'pending'
			AND endpoint_id NOT IN (SELECT endpoint_id FROM webhook_endpoints_deleted)),
		(SELECT count(*) FROM webhook_endpoints WHERE NOT enabled AND disabled_reason <> '')`).Scan(&pending, &oldest, &disabled)
	if err != nil {
		c.log.Warn("webhook metrics unavailable", "error", err)
		ch <- prometheus.NewInvalidMetric(c.pending, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, max(oldest, 0))
	ch <- prometheus.MustNewConstMetric(c.disabledBy, prometheus.GaugeValue, float64(disabled))
}
