package main

import (
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"hearth/leader"
)

// metricsHandler serves GET /metrics: the Go runtime and process
// collectors, and, when this instance takes part in leadership, gauges of
// its role, term and since when.
func metricsHandler(elector *leader.Elector) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	if elector != nil {
		gauge := func(name, help string, f func(leader.Status) float64) prometheus.Collector {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
				func() float64 { return f(elector.Status()) })
		}
		cs = append(cs,
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
		)
	}
	var errs []error
	for _, c := range cs {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
