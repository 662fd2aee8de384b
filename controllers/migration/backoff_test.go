package migration

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

// evacuationAt is an evacuation of the VMI created at t, in phase (failed
// at t+5 s when Failed).
func evacuationAt(name string, t time.Time, phase virtv1.VirtualMachineInstanceMigrationPhase) *virtv1.VirtualMachineInstanceMigration {
	m := &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name),
		CreationTimestamp: metav1.NewTime(t), Annotations: map[string]string{virtv1.EvacuationMigrationAnnotation: "node-1"}},
		Status: virtv1.VirtualMachineInstanceMigrationStatus{Phase: phase}}
	if phase == virtv1.MigrationFailed {
		m.Status.PhaseTransitionTimestamps = []virtv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{
			{Phase: virtv1.MigrationFailed, PhaseTransitionTimestamp: metav1.NewTime(t.Add(5 * time.Second))}}
	}
	return m
}

// As KubeVirt's handleMigrationBackoff: 20 s after one failed system
// migration since the last success, doubling with each more, counted from
// the last failure; users' migrations and the VMI's first never wait.
func TestBackoffFollowsKubeVirt(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	failed1 := evacuationAt("f1", t0, virtv1.MigrationFailed)
	failed2 := evacuationAt("f2", t0.Add(30*time.Second), virtv1.MigrationFailed)
	succeeded := evacuationAt("s", t0.Add(-time.Minute), virtv1.MigrationSucceeded)
	next := evacuationAt("next", t0.Add(40*time.Second), virtv1.MigrationPending)
	user := evacuationAt("user", t0.Add(40*time.Second), virtv1.MigrationPending)
	user.Annotations = nil
	update := evacuationAt("update", t0.Add(40*time.Second), virtv1.MigrationPending)
	update.Annotations = map[string]string{virtv1.WorkloadUpdateMigrationAnnotation: ""}
	ignoring := evacuationAt("ignoring", t0.Add(40*time.Second), virtv1.MigrationPending)
	ignoring.Annotations[virtv1.FuncTestForceIgnoreMigrationBackoffAnnotation] = ""
	now := t0.Add(40 * time.Second)
	tests := []struct {
		name string
		m    *virtv1.VirtualMachineInstanceMigration
		mine []*virtv1.VirtualMachineInstanceMigration
		want time.Duration
	}{
		{"the first", next, []*virtv1.VirtualMachineInstanceMigration{next}, 0},
		{"one failure", next, []*virtv1.VirtualMachineInstanceMigration{failed1, next}, 0},                                // failed at t0+5 s, 20 s: over at +25 s
		{"two failures", next, []*virtv1.VirtualMachineInstanceMigration{failed1, failed2, next}, 35 * time.Second},       // 40 s from +35 s
		{"a success before", next, []*virtv1.VirtualMachineInstanceMigration{succeeded, failed2, next}, 15 * time.Second}, // 20 s from +35 s
		{"a workload update", update, []*virtv1.VirtualMachineInstanceMigration{failed1, failed2, update}, 35 * time.Second},
		{"a user's", user, []*virtv1.VirtualMachineInstanceMigration{failed1, failed2, user}, 0},
		{"not the newest", failed2, []*virtv1.VirtualMachineInstanceMigration{failed1, failed2, next}, 0},
		{"asked to ignore it", ignoring, []*virtv1.VirtualMachineInstanceMigration{failed1, failed2, ignoring}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := backoff(tt.m, tt.mine, now); got != tt.want {
				t.Errorf("backoff %s, want %s", got, tt.want)
			}
		})
	}
}
