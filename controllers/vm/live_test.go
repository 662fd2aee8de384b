package vm

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// TestSyncTakesLiveChangesToTheVMI: a new node selector and tolerations in
// the template reach the running VMI in one JSON patch that tests what it
// replaces, and need no restart; while the VMI migrates, the VM reports
// AffinityChangeError instead, without an event, and nothing is patched.
func TestSyncTakesLiveChangesToTheVMI(t *testing.T) {
	for _, migrating := range []bool{false, true} {
		t.Run(map[bool]string{false: "running", true: "migrating"}[migrating], func(t *testing.T) {
			vm := newVM(virtv1.RunStrategyAlways)
			vm.Generation = 1
			vm.Spec.Template.Spec.NodeSelector = map[string]string{"zone": "a"}
			vmi, rev := started(t, vm)
			if migrating {
				vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{StartTimestamp: &metav1.Time{Time: time.Now().Add(-time.Minute)}}
			}
			vm.Spec.Template.Spec.NodeSelector = map[string]string{"zone": "b"}
			vm.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}
			vm.Generation = 2
			f := newFixture(t, vm, vmi, rev)
			f.sync(t, vm)

			patches, status := f.written()
			patch := ""
			if len(patches) > 0 {
				patch = patches[len(patches)-1]
			}
			want := `[{"op":"test","path":"/spec/nodeSelector","value":{"zone":"a"}},{"op":"replace","path":"/spec/nodeSelector","value":{"zone":"b"}},` +
				`{"op":"add","path":"/spec/tolerations","value":[{"key":"k","operator":"Exists"}]}]`
			if migrating {
				want = ""
			}
			if patch != want {
				t.Errorf("VMI patch\n%s\nwant\n%s", patch, want)
			}
			if status == nil {
				t.Fatal("no status update")
			}
			failed := slices.ContainsFunc(status.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
				return c.Type == virtv1.VirtualMachineFailure && c.Reason == ReasonAffinityChange
			})
			restart := slices.ContainsFunc(status.Status.Conditions, isRestartRequired)
			if failed != migrating || restart {
				t.Errorf("conditions %+v: want AffinityChangeError only while migrating, and no RestartRequired", status.Status.Conditions)
			}
			if events := f.Events(); len(events) > 0 {
				t.Errorf("events %q, want none", events)
			}
		})
	}
}
