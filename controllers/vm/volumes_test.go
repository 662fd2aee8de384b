package vm

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// claimVolume is a volume named data on claim.
func claimVolume(claim string) virtv1.Volume {
	return virtv1.Volume{Name: "data", VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
}

// rwo is a bound read-write-once claim.
func rwo(name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:   corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
}

// movingVM is a VM of the given volume update strategy started on claim
// old whose template now names claim new, and its running VMI.
func movingVM(t *testing.T, strategy *virtv1.UpdateVolumesStrategy) (*virtv1.VirtualMachine, *virtv1.VirtualMachineInstance, runtime.Object) {
	t.Helper()
	vm := newVM(virtv1.RunStrategyAlways)
	vm.Generation = 1
	vm.Spec.UpdateVolumesStrategy = strategy
	vm.Spec.Template.Spec.Domain.Devices.Disks = []virtv1.Disk{{Name: "data"}}
	vm.Spec.Template.Spec.Volumes = []virtv1.Volume{claimVolume("old")}
	vmi, rev := started(t, vm)
	vmi.Status.VolumeStatus = []virtv1.VolumeStatus{{Name: "data", PersistentVolumeClaimInfo: &virtv1.PersistentVolumeClaimInfo{
		ClaimName: "old", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}}
	vm.Spec.Template.Spec.Volumes = []virtv1.Volume{claimVolume("new")}
	vm.Generation = 2
	return vm, vmi, rev
}

// A running VM of the Migration strategy whose template names another
// claim: the VMI first lists the move in status.migratedVolumes, then
// takes the new claim in its spec, each patch testing what it replaces;
// the VM records the move in status.volumeUpdateState and needs no
// restart.
func TestAVolumeMigrationMovesTheVMIsClaim(t *testing.T) {
	vm, vmi, rev := movingVM(t, ptr.To(virtv1.UpdateVolumesStrategyMigration))
	f := newFixture(t, vm, vmi, rev, rwo("old"), rwo("new"))
	f.sync(t, vm)

	patches, status := f.written()
	want := []string{
		`[{"op":"test","path":"/status/migratedVolumes","value":null},{"op":"replace","path":"/status/migratedVolumes","value":[{"volumeName":"data","sourcePVCInfo":{"claimName":"old","accessModes":["ReadWriteOnce"]},"destinationPVCInfo":{"claimName":"new","accessModes":["ReadWriteOnce"]}}]}]`,
		`[{"op":"test","path":"/spec/volumes","value":[{"name":"data","persistentVolumeClaim":{"claimName":"old"}}]},{"op":"replace","path":"/spec/volumes","value":[{"name":"data","persistentVolumeClaim":{"claimName":"new"}}]}]`,
	}
	if !slices.Equal(patches, want) {
		t.Errorf("VMI patches\n%s\nwant\n%s", strings.Join(patches, "\n"), strings.Join(want, "\n"))
	}
	if status == nil {
		t.Fatal("no status update")
	}
	state := status.Status.VolumeUpdateState
	if state == nil || state.VolumeMigrationState == nil || len(state.VolumeMigrationState.MigratedVolumes) != 1 ||
		state.VolumeMigrationState.MigratedVolumes[0].DestinationPVCInfo.ClaimName != "new" {
		t.Errorf("volumeUpdateState %+v, want the move of data to new", state)
	}
	if slices.ContainsFunc(status.Status.Conditions, isRestartRequired) {
		t.Errorf("conditions %+v: a volume migration needs no restart", status.Status.Conditions)
	}
}

// Without the Migration strategy a new claim needs a restart, and the
// VMI is left alone.
func TestAVolumeChangeWithoutTheMigrationStrategyNeedsARestart(t *testing.T) {
	vm, vmi, rev := movingVM(t, nil)
	f := newFixture(t, vm, vmi, rev, rwo("old"), rwo("new"))
	f.sync(t, vm)
	patches, status := f.written()
	if len(patches) > 0 {
		t.Errorf("VMI patched: %q", patches)
	}
	if status == nil || !slices.ContainsFunc(status.Status.Conditions, isRestartRequired) {
		t.Error("no RestartRequired")
	}
}

// Another read-write-once claim of the VMI that is not moved would stay
// behind on the source node: the move is not made, and the VM needs a
// restart, with KubeVirt's message.
func TestAVolumeMigrationLeavingAReadWriteOnceClaimBehindNeedsARestart(t *testing.T) {
	vm, vmi, rev := movingVM(t, ptr.To(virtv1.UpdateVolumesStrategyMigration))
	vmi.Status.VolumeStatus = append(vmi.Status.VolumeStatus, virtv1.VolumeStatus{Name: "logs", PersistentVolumeClaimInfo: &virtv1.PersistentVolumeClaimInfo{
		ClaimName: "logs", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}})
	f := newFixture(t, vm, vmi, rev, rwo("old"), rwo("new"))
	f.sync(t, vm)
	patches, status := f.written()
	if len(patches) > 0 {
		t.Errorf("VMI patched: %q", patches)
	}
	want := "cannot migrate the VM. The volume logs is RWO and not included in the migration volumes"
	i := slices.IndexFunc(status.Status.Conditions, isRestartRequired)
	if i < 0 || status.Status.Conditions[i].Message != want {
		t.Errorf("conditions %+v, want RestartRequired: %s", status.Status.Conditions, want)
	}
}

// movedVMI is vmi in the middle of a move of data from old to new.
func movedVMI(vmi *virtv1.VirtualMachineInstance) {
	vmi.Spec.Volumes = []virtv1.Volume{claimVolume("new")}
	vmi.Status.MigratedVolumes = []virtv1.StorageMigratedVolumeInfo{{VolumeName: "data",
		SourcePVCInfo: &virtv1.PersistentVolumeClaimInfo{ClaimName: "old"}, DestinationPVCInfo: &virtv1.PersistentVolumeClaimInfo{ClaimName: "new"}}}
	vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{
		Type: virtv1.VirtualMachineInstanceVolumesChange, Status: corev1.ConditionTrue, Message: "migrate volumes"})
}

// The template back on the old claim while the VMI moves cancels the
// move: the VMI's volumes go back first, then its VolumesChange turns
// False (VolumesChangeCancellation) and its migratedVolumes go, and the
// VM drops the recorded move.
func TestPuttingTheOldClaimBackCancelsAVolumeMigration(t *testing.T) {
	vm, vmi, rev := movingVM(t, ptr.To(virtv1.UpdateVolumesStrategyMigration))
	movedVMI(vmi)
	vm.Spec.Template.Spec.Volumes = []virtv1.Volume{claimVolume("old")}
	vm.Status.VolumeUpdateState = &virtv1.VolumeUpdateState{VolumeMigrationState: &virtv1.VolumeMigrationState{MigratedVolumes: vmi.Status.MigratedVolumes}}
	f := newFixture(t, vm, vmi, rev, rwo("old"), rwo("new"))
	f.sync(t, vm)

	patches, status := f.written()
	patches = slices.DeleteFunc(patches, func(p string) bool { return !strings.HasPrefix(p, "[") }) // JSON patches only
	if len(patches) != 2 {
		t.Fatalf("VMI patches %q, want the volumes back, then the cancellation", patches)
	}
	if !strings.Contains(patches[0], `"path":"/spec/volumes","value":[{"name":"data","persistentVolumeClaim":{"claimName":"old"}}]`) {
		t.Errorf("first patch %s, want the old claim back in the spec", patches[0])
	}
	if !strings.Contains(patches[1], `{"type":"VolumesChange","status":"False",`) || !strings.Contains(patches[1], `"reason":"VolumesChangeCancellation"}]`) ||
		!strings.Contains(patches[1], `{"op":"replace","path":"/status/migratedVolumes","value":null}`) {
		t.Errorf("second patch %s, want VolumesChange False (VolumesChangeCancellation) and no migrated volumes", patches[1])
	}
	if status == nil || status.Status.VolumeUpdateState == nil || status.Status.VolumeUpdateState.VolumeMigrationState != nil {
		t.Errorf("VM status %+v, want the recorded move dropped", status)
	}
}

// A moving volume may only go back: a third claim is refused with
// KubeVirt's VolumesUpdateError, and nothing is patched.
func TestAMovingVolumeMayOnlyGoBack(t *testing.T) {
	vm, vmi, rev := movingVM(t, ptr.To(virtv1.UpdateVolumesStrategyMigration))
	movedVMI(vmi)
	vm.Spec.Template.Spec.Volumes = []virtv1.Volume{claimVolume("third")}
	f := newFixture(t, vm, vmi, rev, rwo("old"), rwo("new"), rwo("third"))
	f.sync(t, vm)
	patches, status := f.written()
	if len(patches) > 0 {
		t.Errorf("VMI patched: %q", patches)
	}
	want := "error encountered while handling volumes update requests: " + revertOnlyMessage
	if status == nil || !slices.ContainsFunc(status.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
		return c.Type == virtv1.VirtualMachineFailure && c.Reason == ReasonVolumesUpdate && c.Message == want
	}) {
		t.Errorf("VM status %+v, want Failure %s: %s", status, ReasonVolumesUpdate, want)
	}
}

// A destination DataVolume that does not exist yet: the VMI's
// VolumesChange says so (False), and nothing moves.
func TestAMissingDestinationIsToldOnTheVMI(t *testing.T) {
	vm, vmi, rev := movingVM(t, ptr.To(virtv1.UpdateVolumesStrategyMigration))
	vm.Spec.Template.Spec.Volumes = []virtv1.Volume{{Name: "data", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: "fresh"}}}}
	f := newFixture(t, vm, vmi, rev, rwo("old"))
	f.sync(t, vm)
	patches, _ := f.written()
	if len(patches) != 1 || !strings.Contains(patches[0], `{"type":"VolumesChange","status":"False",`) ||
		!strings.Contains(patches[0], `"message":"One of the destination volumes doesn't exist: the datavolume fresh doesn't exist"}]`) {
		t.Errorf("VMI patches %q, want VolumesChange False naming the missing DataVolume", patches)
	}
}

// A VM whose VMI went away while the VM showed its volumes moving needs a
// manual recovery: ManualRecoveryRequired, and a start asked for after it
// makes no VMI. (While an ended VMI is still there, KubeVirt's condition
// sync drops the condition again, as it is not the VMI's: so does this.)
func TestAVMStrandedMidVolumeMigrationIsNotStarted(t *testing.T) {
	vm, _, _ := movingVM(t, ptr.To(virtv1.UpdateVolumesStrategyMigration))
	vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyManual)
	vm.Status.VolumeUpdateState = &virtv1.VolumeUpdateState{VolumeMigrationState: &virtv1.VolumeMigrationState{MigratedVolumes: []virtv1.StorageMigratedVolumeInfo{{
		VolumeName: "data", SourcePVCInfo: &virtv1.PersistentVolumeClaimInfo{ClaimName: "old"}, DestinationPVCInfo: &virtv1.PersistentVolumeClaimInfo{ClaimName: "new"}}}}}
	vm.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineConditionType(virtv1.VirtualMachineInstanceVolumesChange), Status: corev1.ConditionTrue}}
	f := newFixture(t, vm, rwo("old"), rwo("new"))
	f.sync(t, vm)
	_, status := f.written()
	if status == nil || !needsManualRecovery(status) {
		t.Fatalf("VM status %+v, want ManualRecoveryRequired", status)
	}

	status.Status.StateChangeRequests = []virtv1.VirtualMachineStateChangeRequest{{Action: virtv1.StartRequest}}
	asked := newFixture(t, status, rwo("old"), rwo("new"))
	asked.sync(t, status)
	for _, a := range asked.KubeVirt.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "virtualmachineinstances" {
			t.Error("a VMI was created for a VM that needs a manual recovery")
		}
	}
}
