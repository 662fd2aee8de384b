package vmistatus

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

func TestFailRecordsTheTransitionOnceAndLeavesAFinalVMI(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	for _, tt := range []struct {
		name        string
		phase       virtv1.VirtualMachineInstancePhase
		recorded    bool // a Failed timestamp is there already
		wantChanged bool
		wantStamps  int
	}{
		{"a running VMI fails, with its transition recorded", virtv1.Running, false, true, 1},
		{"a replayed failure appends no second timestamp", virtv1.Scheduled, true, true, 1},
		{"a succeeded VMI stays as it is", virtv1.Succeeded, false, false, 0},
		{"a failed VMI stays as it is", virtv1.Failed, false, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := &virtv1.VirtualMachineInstance{Status: virtv1.VirtualMachineInstanceStatus{Phase: tt.phase}}
			if tt.recorded {
				RecordPhase(v, virtv1.Failed, at)
			}
			changed := Fail(v, at)
			if changed != tt.wantChanged || len(v.Status.PhaseTransitionTimestamps) != tt.wantStamps {
				t.Fatalf("changed %v with %d timestamps, want %v with %d", changed, len(v.Status.PhaseTransitionTimestamps), tt.wantChanged, tt.wantStamps)
			}
			if changed && v.Status.Phase != virtv1.Failed {
				t.Errorf("phase %s, want Failed", v.Status.Phase)
			}
		})
	}
}
