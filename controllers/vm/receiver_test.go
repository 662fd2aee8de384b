package vm

import (
	"slices"
	"strings"
	"testing"

	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
)

// A WaitAsReceiver VM creates its VMI as a migration target and, while it
// waits, says WaitingForReceiver.
func TestAReceiverVMCreatesAMigrationTargetAndWaits(t *testing.T) {
	vm := newVM(virtv1.RunStrategyWaitAsReceiver)
	f := newFixture(t, vm)
	f.sync(t, vm)
	got := kvfake.Writes(f.KubeVirt.Actions())
	if len(got) == 0 || got[0] != "create virtualmachineinstances" {
		t.Fatalf("writes %q, want the VMI created first", got)
	}
	vmi := f.KubeVirt.Actions()[0].(k8stesting.CreateAction).GetObject().(*virtv1.VirtualMachineInstance)
	if !vmi.IsMigrationTarget() {
		t.Errorf("VMI annotations %v: want %s=true", vmi.Annotations, virtv1.CreateMigrationTarget)
	}

	vmi = vmiOf(t, vm, shardedtest.Ranges(t).Of(vm))
	vmi.Status.Phase = virtv1.WaitingForSync
	o := observed{vm: vm, vmi: vmi, strategy: virtv1.RunStrategyWaitAsReceiver}
	if got := printableStatus(o, nil); got != virtv1.VirtualMachineStatusWaitingForReceiver {
		t.Errorf("printable status %q, want WaitingForReceiver", got)
	}
	// KubeVirt's Starting is the phases on the way to Running: a VMI in
	// phase Unknown is neither starting nor stopped.
	vmi.Status.Phase = virtv1.Unknown
	if got := printableStatus(o, nil); got != virtv1.VirtualMachineStatusUnknown {
		t.Errorf("printable status of a VMI in phase Unknown %q, want Unknown", got)
	}
}

// A receiver VM whose VMI is not a migration target fails as KubeVirt's
// does, unless the migration completed: then it gets back the run
// strategy it had.
func TestAReceiverVMWithAnOrdinaryVMI(t *testing.T) {
	vm := newVM(virtv1.RunStrategyWaitAsReceiver)
	vmi := vmiOf(t, vm, shardedtest.Ranges(t).Of(vm))
	delete(vmi.Annotations, virtv1.CreateMigrationTarget)
	f := newFixture(t, vm, vmi)
	f.sync(t, vm)
	if got := kvfake.Writes(f.KubeVirt.Actions()); !slices.Equal(got, []string{"update virtualmachines/status"}) {
		t.Fatalf("writes %q, want only the status with the failure", got)
	}
	status := f.KubeVirt.Actions()[0].(k8stesting.UpdateAction).GetObject().(*virtv1.VirtualMachine).Status
	if !hasFailure(&virtv1.VirtualMachine{Status: status}, "FailedCreate") {
		t.Errorf("conditions %+v: want Failure FailedCreate", status.Conditions)
	}

	vm.Annotations[virtv1.RestoreRunStrategy] = string(virtv1.RunStrategyAlways)
	vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{Completed: true}
	f = newFixture(t, vm, vmi)
	f.sync(t, vm)
	got := kvfake.Writes(f.KubeVirt.Actions())
	if len(got) == 0 || got[0] != "patch virtualmachines" {
		t.Fatalf("writes %q, want the VM's run strategy restored first", got)
	}
	if p := string(f.KubeVirt.Actions()[0].(k8stesting.PatchAction).GetPatch()); !strings.Contains(p, `"runStrategy":"Always"`) ||
		!strings.Contains(p, `"resourceVersion":"5"`) {
		t.Errorf("patch %s: want runStrategy Always at the cached resourceVersion", p)
	}
}

func TestNewVMIMarksOnlyAReceiversVMI(t *testing.T) {
	for _, strategy := range []virtv1.VirtualMachineRunStrategy{virtv1.RunStrategyAlways, virtv1.RunStrategyWaitAsReceiver} {
		vmi, err := newVMI(newVM(strategy), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := vmi.IsMigrationTarget(), strategy == virtv1.RunStrategyWaitAsReceiver; got != want {
			t.Errorf("%s: migration target %v, want %v", strategy, got, want)
		}
	}
}
