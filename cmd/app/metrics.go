package main

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
	"hearth/app/ops"
	"hearth/leader"
)

// telemetry is the Prometheus registry /metrics serves (not the global
// default registry, so tests and other wiring stay independent) and the
// collectors Hearth registers on it.
type telemetry struct {
	reg         *prometheus.Registry
	projections *projector.Metrics
	requests    *prometheus.CounterVec
	durations   *prometheus.HistogramVec
	refused     *prometheus.CounterVec
}

func newTelemetry(dbs databases, projections []projector.Projection, log *slog.Logger) (*telemetry, error) {
	t := &telemetry{reg: prometheus.NewRegistry()}
	t.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hearth_http_requests_total",
		Help: "HTTP requests by method, route pattern and status code.",
	}, []string{"method", "route", "code"})
	t.durations = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "hearth_http_request_duration_seconds",
		Help: "HTTP request durations by method and route pattern.",
		// Prometheus' defaults stop at 10 s; the event feed's long polls
		// wait EVENT_FEED_WAIT (20 s by default, at most 60 s) and a
		// read-your-writes wait up to CONSISTENCY_TIMEOUT.
		Buckets: append(slices.Clone(prometheus.DefBuckets), 20, 30, 60),
	}, []string{"method", "route"})
	t.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hearth_http_connections_refused_total",
		Help: "Connections refused because their client address held HTTP_MAX_CONNECTIONS_PER_ADDRESS open, by listener (its setting) and outcome: answered 429, or closed unanswered while many refusals were being answered.",
	}, []string{"listener", "outcome"})
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		t.requests, t.durations, t.refused,
		shared(projector.NewStatsCollector(dbs.es.DB, log, projections...)),
		shared(pubsub.NewTopicStats(dbs.es.DB, log, topics(projections)...)),
	} {
		if err := t.reg.Register(c); err != nil {
			return nil, err
		}
	}
	var err error
	t.projections, err = projector.NewMetrics(t.reg)
	return t, err
}

// scrapeEvery is how often the collectors that query the databases run:
// the scrapes of /metrics within it of the last round, and those that come
// while a round runs, share its metrics. /metrics needs no key, and without
// ADMIN_ADDR it is on the public listener: a flood of it then costs the
// databases one round of those queries per scrapeEvery, rather than one per
// request, each of which would hold connections of the event store's pool
// that the projections need.
const scrapeEvery = 250 * time.Millisecond

// sharedCollector is a collector that queries a database, run at most once
// per scrapeEvery and one round at a time (shared).
type sharedCollector struct {
	prometheus.Collector
	mu      sync.Mutex
	at      time.Time // when the last round ended
	metrics []prometheus.Metric
}

// shared makes c's rounds shared by the scrapes (scrapeEvery).
func shared(c prometheus.Collector) prometheus.Collector {
	return &sharedCollector{Collector: c}
}

func (c *sharedCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// From the round's end, not its start: the scrapes that waited for a
	// slow round share it rather than each run another.
	if c.at.IsZero() || time.Since(c.at) >= scrapeEvery {
		round := make(chan prometheus.Metric)
		go func() {
			defer close(round)
			c.Collector.Collect(round)
		}()
		var metrics []prometheus.Metric
		for m := range round {
			metrics = append(metrics, m)
		}
		c.metrics, c.at = metrics, time.Now()
	}
	for _, m := range c.metrics {
		ch <- m
	}
}

// erasureCollector reports the erasures whose second pass has not run
// (ops.Erasures.Pending), read at each scrape: until it runs, an erasure is
// not complete, and one long past due means the erasure worker is not
// running or fails.
type erasureCollector struct {
	erasures       *ops.Erasures
	log            *slog.Logger
	pending, since *prometheus.Desc
}

func newErasureCollector(erasures *ops.Erasures, log *slog.Logger) *erasureCollector {
	return &erasureCollector{erasures: erasures, log: log,
		pending: prometheus.NewDesc("hearth_erasure_second_passes_pending",
			"Erasures whose second pass (for writes sealed with the erased key still cached elsewhere) has not run yet: they are not complete.", nil, nil),
		since: prometheus.NewDesc("hearth_erasure_second_pass_overdue_seconds",
			"How long the earliest pending second pass has been due (0 when none is due); the erasure worker runs one within seconds.", nil, nil)}
}

func (c *erasureCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.pending; ch <- c.since }

func (c *erasureCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pending, err := c.erasures.Pending(ctx)
	if err != nil {
		// Left out of this scrape rather than reported as 0, and counted
		// as a failed read (promhttp_metric_handler_errors_total).
		c.log.Warn("metrics: pending erasures", "error", err)
		ch <- prometheus.NewInvalidMetric(c.pending, err)
		return
	}
	overdue := 0.0
	if len(pending) > 0 {
		overdue = max(0, time.Since(pending[0].Due).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(len(pending)))
	ch <- prometheus.MustNewConstMetric(c.since, prometheus.GaugeValue, overdue)
}

// topics are the projections' topics, each once, and the poison topic.
func topics(projections []projector.Projection) []string {
	var out []string
	for _, p := range projections {
		if !slices.Contains(out, p.Topic) {
			out = append(out, p.Topic)
		}
	}
	return append(out, pubsub.TopicPoison)
}

// handler serves the registry. A collector that cannot read its database
// (each logs why) leaves its metrics out of that scrape and counts in
// promhttp_metric_handler_errors_total{cause="gathering"}: promhttp's
// default, HTTPErrorOnError, would answer 500 for the whole scrape, and the
// HTTP counters and the leadership gauges would vanish with it during the
// very outage they describe.
func (t *telemetry) handler() http.Handler {
	return promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{Registry: t.reg, ErrorHandling: promhttp.ContinueOnError})
}

func (t *telemetry) observeRequest(method, route string, status int, d time.Duration) {
	t.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	t.durations.WithLabelValues(method, route).Observe(d.Seconds())
}

// connectionRefused counts the connections the listener of setting
// (HTTP_ADDR, ADMIN_ADDR) refuses over the per-address cap.
func (t *telemetry) connectionRefused(setting string) func(answered bool) {
	answered, closed := t.refused.WithLabelValues(setting, "answered"), t.refused.WithLabelValues(setting, "closed")
	return func(ok bool) {
		if ok {
			answered.Inc()
		} else {
			closed.Inc()
		}
	}
}

// leadership registers, read from the scheduler on each scrape, what this
// worker leads: per unit (its lock name) whether it leads it, under which
// term and since when; per projection whether it runs live here; and the
// live workers and this worker's fair share.
func (t *telemetry) leadership(s *leader.Scheduler, live map[string]*projectionLive) error {
	return t.reg.Register(&leadershipCollector{s: s, live: live,
		isLeader: prometheus.NewDesc("hearth_leader_is_leader", "1 while this instance leads the unit (a projection's lock), 0 while it is a standby for it.", []string{"unit"}, nil),
		term:     prometheus.NewDesc("hearth_leader_term", "The fencing term this instance leads the unit under; 0 while it is a standby.", []string{"unit"}, nil),
		since:    prometheus.NewDesc("hearth_leader_since_seconds", "Unix time at which this instance entered its current role and term for the unit.", []string{"unit"}, nil),
		projLive: prometheus.NewDesc("hearth_projections_live", "1 while this instance leads the projection and it runs live (caught up, subscribed), else 0.", []string{"projection"}, nil),
		workers:  prometheus.NewDesc("hearth_leader_workers", "Live workers (membership sessions) at this instance's last count; 0 before the first or while it cannot count.", nil, nil),
		share:    prometheus.NewDesc("hearth_leader_fair_share", "Units this instance may lead: the units divided by the live workers, rounded up.", nil, nil),
	})
}

type leadershipCollector struct {
	s                                               *leader.Scheduler
	live                                            map[string]*projectionLive
	isLeader, term, since, projLive, workers, share *prometheus.Desc
}

func (c *leadershipCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.isLeader, c.term, c.since, c.projLive, c.workers, c.share} {
		ch <- d
	}
}

func (c *leadershipCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	st := c.s.Status()
	gauge(c.workers, float64(st.Workers))
	gauge(c.share, float64(st.FairShare))
	for _, u := range st.Units {
		leads := u.Role == leader.RoleLeader
		gauge(c.isLeader, boolGauge(leads), u.Name)
		gauge(c.term, float64(u.Term), u.Name)
		gauge(c.since, float64(u.Since.UnixNano())/1e9, u.Name)
		if l, ok := c.live[u.Name]; ok {
			gauge(c.projLive, boolGauge(leads && u.Term != 0 && l.term.Load() == u.Term), l.projection)
		}
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
