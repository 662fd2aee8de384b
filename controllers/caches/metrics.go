package caches

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics registers virtshard_informer_cached_objects: for each
// sharded kind served, the objects in the held ranges' caches, counted on
// each scrape.
func (c *Ranges) RegisterMetrics(reg prometheus.Registerer) {
	reg.MustRegister(&cachedObjects{c: c, desc: prometheus.NewDesc("virtshard_informer_cached_objects",
		"Objects in the caches of the ranges this replica holds.", []string{"resource"}, nil)})
}

type cachedObjects struct {
	c    *Ranges
	desc *prometheus.Desc
}

func (m *cachedObjects) Describe(ch chan<- *prometheus.Desc) { ch <- m.desc }

func (m *cachedObjects) Collect(ch chan<- prometheus.Metric) {
	for _, s := range m.c.kinds {
		if s.cluster == nil {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, m.c.Cached(s.kind.resource), s.kind.resource)
		}
	}
}
