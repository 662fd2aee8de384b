// Package queuemetrics exposes client-go workqueue metrics (depth, adds,
// latency, work duration, retries) for every named queue as
// virtshard_workqueue_*{name}.
package queuemetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

type provider struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, duration          *prometheus.HistogramVec
}

// Register makes client-go report the metrics of named workqueues created
// from now on to reg. client-go accepts one provider per process: the first
// call wins.
func Register(reg prometheus.Registerer) {
	buckets := prometheus.ExponentialBuckets(1e-6, 10, 10)
	p := &provider{
		depth:      gauge("depth", "Current depth of the workqueue."),
		unfinished: gauge("unfinished_work_seconds", "Seconds of work in progress not yet observed by work_duration."),
		longest:    gauge("longest_running_processor_seconds", "Seconds the longest running processor has been running."),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtshard_workqueue_adds_total", Help: "Adds handled by the workqueue.",
		}, []string{"name"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtshard_workqueue_retries_total", Help: "Retries handled by the workqueue.",
		}, []string{"name"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "virtshard_workqueue_queue_duration_seconds", Help: "Seconds an item waits in the workqueue.", Buckets: buckets,
		}, []string{"name"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "virtshard_workqueue_work_duration_seconds", Help: "Seconds processing an item takes.", Buckets: buckets,
		}, []string{"name"}),
	}
	reg.MustRegister(p.depth, p.unfinished, p.longest, p.adds, p.retries, p.latency, p.duration)
	workqueue.SetProvider(p)
}

func gauge(name, help string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "virtshard_workqueue_" + name, Help: help}, []string{"name"})
}

func (p *provider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}
func (p *provider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name)
}
func (p *provider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name)
}
func (p *provider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.duration.WithLabelValues(name)
}
func (p *provider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(name)
}
func (p *provider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longest.WithLabelValues(name)
}
func (p *provider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name)
}
