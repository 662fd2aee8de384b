package shard

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics of one member, virtshard_shard_*.
type Metrics struct {
	ranges               prometheus.Gauge
	rangesOwned          prometheus.Gauge
	rangesActive         prometheus.Gauge
	rangeActive          *prometheus.GaugeVec
	rangesPrepared       prometheus.Gauge
	rangesAssigned       prometheus.Gauge
	assignmentGeneration prometheus.Gauge
	handoffs             *prometheus.CounterVec
	acquireLatency       prometheus.Histogram
	renewFailures        prometheus.Counter
	filterDropped        *prometheus.CounterVec
	watchRestarts        *prometheus.CounterVec
	relists              *prometheus.CounterVec
	watchReselects       *prometheus.CounterVec
	leader               prometheus.Gauge
	incompatible         prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ranges: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virtshard_shard_ranges",
			Help: "Number of hash ranges (--ranges): the sum of virtshard_shard_ranges_active over the replicas should reach it.",
		}),
		rangesOwned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virtshard_shard_ranges_owned",
			Help: "Ranges whose lease this member holds.",
		}),
		rangesActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virtshard_shard_ranges_active",
			Help: "Ranges this member holds and acts on: lease held and caches synced.",
		}),
		rangeActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "virtshard_shard_range_active",
			Help: "1 for each range this member acts on (the series is gone when it stops): sum by (range) over the replicas shows the ranges served, and a range with no series is served by nobody.",
		}, []string{"range"}),
		rangesPrepared: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virtshard_shard_ranges_prepared",
			Help: "Ranges whose caches this member is warming before it may hold them: assigned to it, or likely to be if a member that stopped heartbeating dies.",
		}),
		rangesAssigned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virtshard_shard_ranges_assigned",
			Help: "Ranges the last assignment this member has seen gives it: virtshard_shard_ranges_active reaches it once a rebalance is done.",
		}),
		assignmentGeneration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virtshard_shard_assignment_generation",
			Help: "Generation of the last assignment this member has seen.",
		}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtshard_shard_handoffs_total",
			Help: "Ranges this member stopped acting on, by reason (rebalance, release, expiry, failed).",
		}, []string{"reason"}),
		acquireLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "virtshard_shard_acquire_duration_seconds",
			Help:    "Time from an assignment giving this member a range to the range being acquired and synced.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		renewFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "virtshard_shard_lease_renew_failures_total",
			Help: "Failed renewals of the member lease, whose tenure holds the ranges.",
		}),
		filterDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtshard_shard_filter_dropped_objects_total",
			Help: "Objects outside the owned ranges that reached a sharded informer and were dropped client-side; " +
				"non-zero means the server is not filtering that resource.",
		}, []string{"resource"}),
		watchRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtshard_shard_watch_restarts_total",
			Help: "Watches a sharded informer or a shared range watch opened after its first: each one ended (the server closed it, it fell behind, an error) and was opened again.",
		}, []string{"resource"}),
		relists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtshard_shard_relists_total",
			Help: "Lists (or watch-list streams) a sharded informer made after its first: a watch that could not resume from where it ended.",
		}, []string{"resource"}),
		watchReselects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtshard_shard_watch_reselects_total",
			Help: "Times a shared range watch was reopened, from where it was, because the ranges it serves changed.",
		}, []string{"resource"}),
		incompatible: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virtshard_shard_members_incompatible",
			Help: "On the leader: live members it assigns no ranges because they share no shard protocol version with it (a rollout across an unsupported protocol gap).",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virtshard_shard_leader",
			Help: "1 while this member is the leader publishing the assignment.",
		}),
	}
	reg.MustRegister(m.ranges, m.rangesOwned, m.rangesActive, m.rangeActive, m.rangesPrepared, m.rangesAssigned, m.assignmentGeneration, m.handoffs, m.acquireLatency, m.renewFailures, m.filterDropped, m.watchRestarts, m.relists, m.watchReselects, m.incompatible, m.leader)
	return m
}

// The methods below accept a nil *Metrics, so callers need no checks.

// activeChanged records that this member started (on) or stopped acting
// on range i.
func (m *Metrics) activeChanged(i int, on bool) {
	if m == nil {
		return
	}
	if on {
		m.rangesActive.Inc()
		m.rangeActive.WithLabelValues(strconv.Itoa(i)).Set(1)
		return
	}
	m.rangesActive.Dec()
	m.rangeActive.DeleteLabelValues(strconv.Itoa(i))
}

func (m *Metrics) setRanges(n int) {
	if m != nil {
		m.ranges.Set(float64(n))
	}
}

func (m *Metrics) setOwned(n int) {
	if m != nil {
		m.rangesOwned.Set(float64(n))
	}
}

func (m *Metrics) setPrepared(prepared []bool) {
	if m == nil {
		return
	}
	n := 0
	for _, p := range prepared {
		if p {
			n++
		}
	}
	m.rangesPrepared.Set(float64(n))
}

func (m *Metrics) setAssignment(generation int64, mine int) {
	if m != nil {
		m.assignmentGeneration.Set(float64(generation))
		m.rangesAssigned.Set(float64(mine))
	}
}

func (m *Metrics) handoff(reason Reason) {
	if m != nil {
		m.handoffs.WithLabelValues(string(reason)).Inc()
	}
}

func (m *Metrics) acquired(seconds float64) {
	if m != nil {
		m.acquireLatency.Observe(seconds)
	}
}

func (m *Metrics) renewFailed() {
	if m != nil {
		m.renewFailures.Inc()
	}
}

func (m *Metrics) dropped(resource string) {
	if m != nil {
		m.filterDropped.WithLabelValues(resource).Inc()
	}
}

func (m *Metrics) watchRestarted(resource string) {
	if m != nil {
		m.watchRestarts.WithLabelValues(resource).Inc()
	}
}

func (m *Metrics) relisted(resource string) {
	if m != nil {
		m.relists.WithLabelValues(resource).Inc()
	}
}

func (m *Metrics) watchReselected(resource string) {
	if m != nil {
		m.watchReselects.WithLabelValues(resource).Inc()
	}
}

func (m *Metrics) setLeader(leading bool) {
	if m != nil {
		v := 0.0
		if leading {
			v = 1
		} else {
			m.incompatible.Set(0)
		}
		m.leader.Set(v)
	}
}

// FilterDropped is how many objects of resource the client-side guard has
// dropped: more than zero means the server did not filter that resource.
func (m *Metrics) FilterDropped(resource string) float64 {
	if m == nil {
		return 0
	}
	var out dto.Metric
	if err := m.filterDropped.WithLabelValues(resource).Write(&out); err != nil {
		return 0
	}
	return out.GetCounter().GetValue()
}

func (m *Metrics) setIncompatible(n int) {
	if m != nil {
		m.incompatible.Set(float64(n))
	}
}
