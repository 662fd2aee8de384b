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

func TestMigratingFromStartUntilEnd(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }
	for _, tt := range []struct {
		name  string
		state *virtv1.VirtualMachineInstanceMigrationState
		want  bool
	}{
		{"no migration state", nil, false},
		{"a migration not started", &virtv1.VirtualMachineInstanceMigrationState{}, false},
		{"started, not ended", &virtv1.VirtualMachineInstanceMigrationState{StartTimestamp: at(-time.Second)}, true},
		{"started in the future (another clock)", &virtv1.VirtualMachineInstanceMigrationState{StartTimestamp: at(time.Second)}, false},
		{"ended", &virtv1.VirtualMachineInstanceMigrationState{StartTimestamp: at(-2 * time.Second), EndTimestamp: at(-time.Second)}, false},
		{"ends in the future (another clock)", &virtv1.VirtualMachineInstanceMigrationState{StartTimestamp: at(-2 * time.Second), EndTimestamp: at(time.Second)}, true},
	} {
		vmi := &virtv1.VirtualMachineInstance{Status: virtv1.VirtualMachineInstanceStatus{MigrationState: tt.state}}
		if got := Migrating(vmi, now); got != tt.want {
			t.Errorf("%s: Migrating = %v, want %v", tt.name, got, tt.want)
		}
	}
}
