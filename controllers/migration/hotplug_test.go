package migration

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"
)

// A migration that carries a memory hotplug hands the target pod's memory
// request over in the VMI's labels, read from the pod itself (the cache
// keeps no resources), as KubeVirt's handleTargetPodHandoff labels it.
func TestSyncHandsTheTargetsMemoryToAMemoryHotplug(t *testing.T) {
	m, vmi := newMigration(), runningVMI()
	vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceMemoryChange, Status: corev1.ConditionTrue})
	f := newFixture(t, []runtime.Object{sourcePod(t, vmi)}, m, vmi)
	handOff := f.handOff(t, m, vmi)
	if !strings.Contains(handOff, `"`+virtv1.VirtualMachinePodMemoryRequestsLabel+`":"`) {
		t.Errorf("hand-off patch %q lacks the target pod's memory request", handOff)
	}
	if strings.Contains(handOff, virtv1.VirtualMachinePodCPULimitsLabel) {
		t.Errorf("hand-off patch %q labels a CPU limit: no CPU hotplug of dedicated CPUs", handOff)
	}
}

// A migration the nodes report completed has not succeeded while the VMI
// still waits for the target to plug in its CPUs or memory.
func TestSyncHoldsSuccessUntilTheHotplugIsDone(t *testing.T) {
	for _, pending := range []bool{true, false} {
		m, vmi := inPhase(newMigration(), virtv1.MigrationRunning), runningVMI()
		source := sourcePod(t, vmi)
		vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: m.UID, SourceNode: "node-1",
			SourcePod: source.Name, TargetNode: "node-2", Completed: true}
		if pending {
			vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: corev1.ConditionTrue})
		}
		f := newFixture(t, []runtime.Object{source}, m, vmi)
		f.addTargetPod(t, m, vmi, source, func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })
		if err := f.sync(t, m, vmi); err != nil {
			t.Fatal(err)
		}
		succeeded := false
		for _, a := range f.KubeVirt.Actions() {
			if a.GetResource().Resource == "virtualmachineinstancemigrations" && a.GetSubresource() == "status" {
				succeeded = succeeded || statusOf(t, f.KubeVirt.Actions()).Phase == virtv1.MigrationSucceeded
			}
		}
		if succeeded == pending {
			t.Errorf("hotplug pending %v: succeeded %v", pending, succeeded)
		}
	}
}
