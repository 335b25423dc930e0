package main

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"hearth/adapters/pubsub"
	"hearth/adapters/pubsub/projector"
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
}

func newTelemetry(dbs databases, projections []projector.Projection, log *slog.Logger) (*telemetry, error) {
	t := &telemetry{reg: prometheus.NewRegistry()}
	t.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hearth_http_requests_total",
		Help: "HTTP requests by method, route pattern and status code.",
	}, []string{"method", "route", "code"})
	t.durations = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "hearth_http_request_duration_seconds",
		Help:    "HTTP request durations by method and route pattern.",
		Buckets: prometheus.DefBuckets,
	}, []string{"method", "route"})
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		t.requests, t.durations,
		projector.NewStatsCollector(dbs.es.DB, log, projections...),
		pubsub.NewTopicStats(dbs.es.DB, log, topics(projections)...),
	} {
		if err := t.reg.Register(c); err != nil {
			return nil, err
		}
	}
	var err error
	t.projections, err = projector.NewMetrics(t.reg)
	return t, err
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

func (t *telemetry) handler() http.Handler {
	return promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{Registry: t.reg})
}

func (t *telemetry) observeRequest(method, route string, status int, d time.Duration) {
	t.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	t.durations.WithLabelValues(method, route).Observe(d.Seconds())
}

// leader exposes the elector's role, term and since when, and whether its
// projections run live (liveTerm is the term they run live in, 0 when
// none).
func (t *telemetry) leader(e *leader.Elector, liveTerm *atomic.Int64) error {
	gauge := func(name, help string, f func(leader.Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return f(e.Status()) })
	}
	var errs []error
	for _, c := range []prometheus.Collector{
		gauge("hearth_leader_is_leader", "1 while this instance leads the projections, 0 while it is a standby.",
			func(s leader.Status) float64 {
				if s.Role == leader.RoleLeader {
					return 1
				}
				return 0
			}),
		gauge("hearth_leader_term", "The fencing term this instance leads under; 0 while it is a standby.",
			func(s leader.Status) float64 { return float64(s.Term) }),
		gauge("hearth_leader_since_seconds", "Unix time at which this instance entered its current role and term.",
			func(s leader.Status) float64 { return float64(s.Since.UnixNano()) / 1e9 }),
		gauge("hearth_projections_live", "1 while this instance leads and its projections run live (caught up, subscribed), else 0.",
			func(s leader.Status) float64 {
				if s.Role == leader.RoleLeader && s.Term != 0 && liveTerm.Load() == s.Term {
					return 1
				}
				return 0
			}),
	} {
		errs = append(errs, t.reg.Register(c))
	}
	return errors.Join(errs...)
}
