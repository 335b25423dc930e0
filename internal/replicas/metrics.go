package replicas

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the replicas' Prometheus metrics, shared by the Sets and the
// Router of a process.
type Metrics struct {
	lagBytes, lagSeconds, usable, primary *prometheus.GaugeVec
	reads                                 *prometheus.CounterVec
	waits                                 *prometheus.CounterVec
}

// Primary labels the reads the primary answered.
const Primary = "primary"

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		lagBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hearth_replica_lag_bytes",
			Help: "WAL the read replica has not replayed yet, in bytes, at its last check.",
		}, []string{"replica"}),
		lagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hearth_replica_lag_seconds",
			Help: "How far the read replica is behind the primary, in seconds, at its last check (0 when it has replayed everything).",
		}, []string{"replica"}),
		usable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hearth_replica_usable",
			Help: "1 while reads go to the read replica; 0 while it is skipped (down, of another cluster, another primary, or further behind than READ_REPLICA_MAX_LAG).",
		}, []string{"replica"}),
		primary: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hearth_replica_is_primary",
			Help: "1 when the server a replica setting names is not in recovery (a primary): it serves reads with no lag.",
		}, []string{"replica"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hearth_read_queries_total",
			Help: "Read-model and reference-data queries of the API's GETs, by the server that answered: primary or a read replica.",
		}, []string{"server"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hearth_replica_consistency_waits_total",
			Help: "GETs that named a position and were sent to a read replica, by where they were answered: replica (it showed the write in time) or primary (it did not, or failed).",
		}, []string{"answered"}),
	}
	for _, c := range []prometheus.Collector{m.lagBytes, m.lagSeconds, m.usable, m.primary, m.reads, m.waits} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
