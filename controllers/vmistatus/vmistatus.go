package vmistatus

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// RecordPhase appends a phase transition timestamp at at, unless v has
// one for phase already: a replayed write cannot append twice.
func RecordPhase(v *virtv1.VirtualMachineInstance, phase virtv1.VirtualMachineInstancePhase, at metav1.Time) {
	for _, t := range v.Status.PhaseTransitionTimestamps {
		if t.Phase == phase {
			return
		}
	}
	v.Status.PhaseTransitionTimestamps = append(v.Status.PhaseTransitionTimestamps,
		virtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: at})
}

// Fail moves v to Failed at at, recording the transition; it reports
// false, changing nothing, when v is final already. The caller adds why
// (a condition, a reason), as the controller that fails it does in
// KubeVirt.
func Fail(v *virtv1.VirtualMachineInstance, at metav1.Time) bool {
	if v.IsFinal() {
		return false
	}
	RecordPhase(v, virtv1.Failed, at)
	v.Status.Phase = virtv1.Failed
	return true
}

// Migrating reports whether v's migration state says a migration started
// and, as of now, has not ended (KubeVirt's migrations.IsMigrating, which
// the evacuation controller and the workload updater read).
func Migrating(v *virtv1.VirtualMachineInstance, now time.Time) bool {
	m := v.Status.MigrationState
	if m == nil || m.StartTimestamp == nil || m.StartTimestamp.After(now) {
		return false
	}
	return m.EndTimestamp == nil || m.EndTimestamp.After(now)
}
