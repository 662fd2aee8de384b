package clusterconfig

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the cluster configuration watcher.
type Metrics struct {
	updates *prometheus.CounterVec
	invalid prometheus.Gauge
}

// NewMetrics creates the watcher's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtshard_clusterconfig_updates_total",
			Help: "KubeVirt CR versions parsed into a cluster configuration, by result (applied, invalid).",
		}, []string{"result"}),
		invalid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virtshard_clusterconfig_invalid",
			Help: "1 while the KubeVirt CR in use has an invalid configuration and the last valid one is kept, else 0.",
		}),
	}
	reg.MustRegister(m.updates, m.invalid)
	return m
}

func (m *Metrics) observe(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.updates.WithLabelValues("invalid").Inc()
		m.invalid.Set(1)
		return
	}
	m.updates.WithLabelValues("applied").Inc()
	m.invalid.Set(0)
}

func (m *Metrics) clearInvalid() {
	if m != nil {
		m.invalid.Set(0)
	}
}
