package main

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"hearth/adapters/pubsub"
	"hearth/leader"
)

// telemetry is the Prometheus registry /metrics serves (not the global
// default registry, so tests and other wiring stay independent) and the
// collectors Hearth registers on it.
type telemetry struct {
	reg         *prometheus.Registry
	projections *pubsub.Metrics
	requests    *prometheus.CounterVec
	durations   *prometheus.HistogramVec
}

func newTelemetry(dbs databases, projections []pubsub.Projection, log *slog.Logger) (*telemetry, error) {
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
		pubsub.NewStatsCollector(dbs.es.DB, log, projections...),
	} {
		if err := t.reg.Register(c); err != nil {
			return nil, err
		}
	}
	var err error
	t.projections, err = pubsub.NewMetrics(t.reg)
	return t, err
}

func (t *telemetry) handler() http.Handler {
	return promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{Registry: t.reg})
}

func (t *telemetry) observeRequest(method, route string, status int, d time.Duration) {
	t.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	t.durations.WithLabelValues(method, route).Observe(d.Seconds())
}

// leader exposes the elector's role. The fencing term is not known on this
// branch (the leadership issue adds hearth_leader_term); a collector of the
// same name registered elsewhere wins, so the two can be merged safely.
func (t *telemetry) leader(e *leader.Elector) error {
	isLeader := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hearth_leader_is_leader",
		Help: "1 while this instance holds the projections lock, 0 otherwise.",
	}, func() float64 {
		if e.Status().Role == leader.RoleLeader {
			return 1
		}
		return 0
	})
	since := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hearth_leader_since_seconds",
		Help: "Seconds since this instance entered its current leadership role.",
	}, func() float64 { return time.Since(e.Status().Since).Seconds() })
	for _, c := range []prometheus.Collector{isLeader, since} {
		if err := t.reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return err
		}
	}
	return nil
}
