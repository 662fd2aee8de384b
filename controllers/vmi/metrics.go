package vmi

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	virtv1 "kubevirt.io/api/core/v1"
)

// Metrics of the VMI controller.
type Metrics struct {
	phaseTransition *prometheus.HistogramVec
}

// Gauges is what the controller reports on each scrape.
type Gauges interface {
	// PendingExpectations counts keys with outstanding expectations.
	PendingExpectations() float64
	// LongestInPhase returns, for each phase before Running, how long the
	// VMI that entered it first has been in it.
	LongestInPhase() map[virtv1.VirtualMachineInstancePhase]time.Duration
}

// waitingPhases are the phases a VMI passes through on its way to Running:
// one that stays in them is stuck.
var waitingPhases = []virtv1.VirtualMachineInstancePhase{virtv1.Pending, virtv1.Scheduling, virtv1.Scheduled}

// phaseTransitionBuckets are KubeVirt's (PhaseTransitionTimeBuckets), so
// dashboards built for virt-controller work unchanged.
var phaseTransitionBuckets = []float64{
	0.5, 1, 2, 5, 10, 20, 30, 40, 50, 60, 90,
	(2 * time.Minute).Seconds(), (3 * time.Minute).Seconds(), (5 * time.Minute).Seconds(),
	(10 * time.Minute).Seconds(), (20 * time.Minute).Seconds(), (30 * time.Minute).Seconds(),
}

// NewMetrics creates the controller's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		phaseTransition: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kubevirt_vmi_phase_transition_time_from_creation_seconds",
			Help:    "Histogram of VM phase transitions duration from creation time in seconds.",
			Buckets: phaseTransitionBuckets,
		}, []string{"phase"}),
	}
	reg.MustRegister(m.phaseTransition)
	return m
}

// RegisterGauges registers gauges read from g on each scrape.
func RegisterGauges(reg prometheus.Registerer, g Gauges) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "virtshard_controller_expectations_pending",
		Help: "VMIs with creations or deletions sent but not yet seen by the informers.",
	}, g.PendingExpectations))
	reg.MustRegister(&longestInPhase{g: g, desc: prometheus.NewDesc("virtshard_vmi_longest_in_phase_seconds",
		"For each phase before Running, how long the held ranges' VMI that has been in it longest has been there (0 if none).",
		[]string{"phase"}, nil)})
}

// longestInPhase collects virtshard_vmi_longest_in_phase_seconds, one scan
// of the caches per scrape.
type longestInPhase struct {
	g    Gauges
	desc *prometheus.Desc
}

func (l *longestInPhase) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

func (l *longestInPhase) Collect(ch chan<- prometheus.Metric) {
	longest := l.g.LongestInPhase()
	for _, phase := range waitingPhases {
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, longest[phase].Seconds(), string(phase))
	}
}

func (m *Metrics) phase(phase string, sinceCreation time.Duration) {
	if m != nil {
		m.phaseTransition.WithLabelValues(phase).Observe(sinceCreation.Seconds())
	}
}

// longestInWaitingPhase returns, for each waiting phase, the longest time a
// VMI has been in it at now. A VMI without a phase counts as Pending since
// its creation.
func longestInWaitingPhase(vmis []*virtv1.VirtualMachineInstance, now time.Time) map[virtv1.VirtualMachineInstancePhase]time.Duration {
	out := map[virtv1.VirtualMachineInstancePhase]time.Duration{}
	for _, vmi := range vmis {
		phase, since := vmi.Status.Phase, vmi.CreationTimestamp.Time
		if phase == virtv1.VmPhaseUnset {
			phase = virtv1.Pending
		}
		if !slices.Contains(waitingPhases, phase) {
			continue
		}
		for _, t := range vmi.Status.PhaseTransitionTimestamps {
			if t.Phase == vmi.Status.Phase {
				since = t.PhaseTransitionTimestamp.Time
			}
		}
		out[phase] = max(out[phase], now.Sub(since))
	}
	return out
}
