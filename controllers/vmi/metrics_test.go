package vmi

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

func vmiIn(phase virtv1.VirtualMachineInstancePhase, created, entered time.Time) *virtv1.VirtualMachineInstance {
	v := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	v.Status.Phase = phase
	if phase != virtv1.VmPhaseUnset {
		v.Status.PhaseTransitionTimestamps = []virtv1.VirtualMachineInstancePhaseTransitionTimestamp{
			{Phase: virtv1.Pending, PhaseTransitionTimestamp: metav1.NewTime(created)},
			{Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(entered)},
		}
	}
	return v
}

func TestLongestInWaitingPhase(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	got := longestInWaitingPhase([]*virtv1.VirtualMachineInstance{
		vmiIn(virtv1.VmPhaseUnset, ago(3*time.Minute), time.Time{}),
		vmiIn(virtv1.Pending, ago(time.Minute), ago(time.Minute)),
		vmiIn(virtv1.Scheduled, ago(time.Hour), ago(10*time.Second)),
		vmiIn(virtv1.Scheduled, ago(time.Hour), ago(20*time.Second)),
		vmiIn(virtv1.Running, ago(2*time.Hour), ago(2*time.Hour)),
		vmiIn(virtv1.Failed, ago(2*time.Hour), ago(2*time.Hour)),
	}, now)
	want := map[virtv1.VirtualMachineInstancePhase]time.Duration{virtv1.Pending: 3 * time.Minute, virtv1.Scheduled: 20 * time.Second}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for phase, d := range want {
		if got[phase] != d {
			t.Errorf("%s: %s, want %s", phase, got[phase], d)
		}
	}
}

type fixedGauges map[virtv1.VirtualMachineInstancePhase]time.Duration

func (fixedGauges) PendingExpectations() float64                                           { return 0 }
func (g fixedGauges) LongestInPhase() map[virtv1.VirtualMachineInstancePhase]time.Duration { return g }

func TestLongestInPhaseGaugeHasEveryWaitingPhase(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	RegisterGauges(reg, fixedGauges{virtv1.Scheduled: 90 * time.Second})
	n, err := testutil.GatherAndCount(reg, "virtshard_vmi_longest_in_phase_seconds")
	if err != nil || n != len(waitingPhases) {
		t.Fatalf("%d series (%v), want one per waiting phase (%d)", n, err, len(waitingPhases))
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "virtshard_vmi_longest_in_phase_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			want := 0.0
			if m.GetLabel()[0].GetValue() == string(virtv1.Scheduled) {
				want = 90
			}
			if m.GetGauge().GetValue() != want {
				t.Errorf("%s: %v, want %v", m.GetLabel()[0].GetValue(), m.GetGauge().GetValue(), want)
			}
		}
	}
}
