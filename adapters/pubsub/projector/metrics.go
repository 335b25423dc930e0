package projector

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the projections' counters and handler durations. They
// outlive routers (one per leadership term): create them once, on the
// registry /metrics serves. A nil *Metrics counts nothing.
type Metrics struct {
	applied  *prometheus.CounterVec
	retries  *prometheus.CounterVec
	poisoned *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the projection metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hearth_projection_events_applied_total",
			Help: "Events a projection handled successfully (applied, or already applied on redelivery).",
		}, []string{"projection"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hearth_projection_retries_total",
			Help: "Retries of failed projection handler attempts.",
		}, []string{"projection"}),
		poisoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hearth_projection_poisoned_events_total",
			Help: "Events that exhausted their retry budget (sent to the poison topic, aggregate parked).",
		}, []string{"projection"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hearth_projection_handler_duration_seconds",
			Help:    "Duration of one projection handler attempt.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"projection", "outcome"}),
	}
	for _, c := range []prometheus.Collector{m.applied, m.retries, m.poisoned, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register projection metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) observe(projection string, d time.Duration, err error) {
	m.observeBatch(projection, d, 1, err)
}

// observeBatch counts one handler call that applied n events (a lookahead
// batch when n > 1).
func (m *Metrics) observeBatch(projection string, d time.Duration, n int, err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	} else {
		m.applied.WithLabelValues(projection).Add(float64(n))
	}
	m.duration.WithLabelValues(projection, outcome).Observe(d.Seconds())
}

func (m *Metrics) retry(projection string) {
	if m != nil {
		m.retries.WithLabelValues(projection).Inc()
	}
}

func (m *Metrics) poison(projection string) {
	if m != nil {
		m.poisoned.WithLabelValues(projection).Inc()
	}
}

// statsCollector reads, on each scrape, what only the database knows: each
// projection's lag behind its topic, in messages and in seconds (the age
// of the oldest message its consumer group has not acknowledged), and its
// parked aggregates.
type statsCollector struct {
	db          *sql.DB
	projections []Projection
	log         *slog.Logger

	lagEvents, lagSeconds, parked, parkedAge *prometheus.Desc
}

// NewStatsCollector returns a collector of projection lag and parking,
// read from the event-store database on each scrape.
func NewStatsCollector(db *sql.DB, log *slog.Logger, projections ...Projection) prometheus.Collector {
	if log == nil {
		log = slog.Default()
	}
	l := []string{"projection"}
	return &statsCollector{db: db, projections: projections, log: log.With("component", "metrics"),
		lagEvents:  prometheus.NewDesc("hearth_projection_lag_events", "Messages of the projection's topic its consumer group has not acknowledged yet.", l, nil),
		lagSeconds: prometheus.NewDesc("hearth_projection_lag_seconds", "Age of the oldest message the projection has not acknowledged (0 when caught up).", l, nil),
		parked:     prometheus.NewDesc("hearth_projection_parked_aggregates", "Aggregates parked behind an event that exhausted its retry budget.", l, nil),
		parkedAge:  prometheus.NewDesc("hearth_projection_parked_oldest_age_seconds", "Age of the oldest parked aggregate (0 when none).", l, nil),
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lagEvents
	ch <- c.lagSeconds
	ch <- c.parked
	ch <- c.parkedAge
}

// StatsTimeout bounds each of a collector's queries, each on its own: a
// query that waits (its topic's offsets table locked) leaves out only its
// own metrics, not every query after it in the loop. StatsRound bounds a
// whole round of them, below Prometheus' default scrape_timeout (10 s):
// when every query waits (a database that stops answering), the scrape
// still answers, with the rest, rather than being lost whole.
const (
	StatsTimeout = 3 * time.Second
	StatsRound   = 8 * time.Second
)

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	round, stop := context.WithTimeout(context.Background(), StatsRound)
	defer stop()
	for _, p := range c.projections {
		ctx, cancel := context.WithTimeout(round, StatsTimeout)
		events, seconds, err := lag(ctx, c.db, p)
		cancel()
		if err != nil {
			c.log.Warn("projection lag unavailable", "projection", p.Name, "error", err)
			ch <- prometheus.NewInvalidMetric(c.lagEvents, err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.lagEvents, prometheus.GaugeValue, float64(events), p.Name)
		ch <- prometheus.MustNewConstMetric(c.lagSeconds, prometheus.GaugeValue, seconds, p.Name)
	}
	ctx, cancel := context.WithTimeout(round, StatsTimeout)
	defer cancel()
	counts := map[string][2]float64{}
	rows, err := c.db.QueryContext(ctx, `SELECT projection, count(*), EXTRACT(EPOCH FROM now() - min(since))::float8
		FROM parked_aggregates GROUP BY projection`)
	if err != nil {
		c.log.Warn("parked aggregates unavailable", "error", err)
		ch <- prometheus.NewInvalidMetric(c.parked, err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n, age float64
		if err := rows.Scan(&name, &n, &age); err != nil {
			ch <- prometheus.NewInvalidMetric(c.parked, err)
			return
		}
		counts[name] = [2]float64{n, age}
	}
	for _, p := range c.projections {
		v := counts[p.Name]
		ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, v[0], p.Name)
		ch <- prometheus.MustNewConstMetric(c.parkedAge, prometheus.GaugeValue, v[1], p.Name)
	}
}

// lag counts the messages of p's topic after its consumer group's position,
// the way the subscribers order them (transaction id, then offset), and the
// age of the oldest. The position is a row comparison, so Postgres reads
// only the range of the primary key after it, not the whole topic (which
// keeps TOPIC_RETENTION of messages) on every scrape; a group without a
// position has acknowledged nothing.
func lag(ctx context.Context, db *sql.DB, p Projection) (int64, float64, error) {
	var n int64
	var age float64
	err := db.QueryRowContext(ctx, lagQuery(p), p.Name).Scan(&n, &age)
	return n, max(age, 0), err
}

func lagQuery(p Projection) string {
	offsets := strconv.Quote("watermill_offsets_" + p.Topic)
	return `SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now()::timestamp - min(m.created_at))::float8, 0)
		FROM ` + strconv.Quote("watermill_"+p.Topic) + ` m
		WHERE (m.transaction_id, m."offset") >
			(coalesce((SELECT last_processed_transaction_id FROM ` + offsets + ` WHERE consumer_group = $1), '0'),
			 coalesce((SELECT offset_acked FROM ` + offsets + ` WHERE consumer_group = $1), 0))`
}
