package vmi

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
)

// receiverVMI is a VMI a WaitAsReceiver VM created, owned by a VM that is
// gone.
func receiverVMI() *virtv1.VirtualMachineInstance {
	vmi := newVMI("receiver")
	vmi.Annotations = map[string]string{virtv1.CreateMigrationTarget: "true"}
	vmi.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(&virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "receiver", UID: "vm-uid"}},
		virtv1.VirtualMachineGroupVersionKind)}
	return vmi
}

// A receiver VMI waits in WaitingForSync without a pod, as KubeVirt's.
func TestSyncOfAReceiverVMIWaitsForSyncWithoutAPod(t *testing.T) {
	vmi := receiverVMI()
	f := newFixture(t, vmi)
	for range 2 {
		if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
			t.Fatal(err)
		}
	}
	f.WaitForKubeVirtWrites("patch virtualmachineinstances")
	if got := kvfake.Writes(f.Kube.Actions()); len(got) != 0 {
		t.Errorf("writes %q, want no launcher pod", got)
	}
	patch := string(f.KubeVirt.Actions()[len(f.KubeVirt.Actions())-1].(k8stesting.PatchAction).GetPatch())
	for _, want := range []string{`"phase":"WaitingForSync"`, virtv1.PodNotExistsReason} {
		if !strings.Contains(patch, want) {
			t.Errorf("status patch %s: want %s", patch, want)
		}
	}
	// Labelled with its target node, it is an ordinary migration target.
	vmi.Labels = map[string]string{virtv1.MigrationTargetNodeNameLabel: "node-1"}
	if receiving(vmi) {
		t.Error("a receiver VMI with its target node's label still waits")
	}
}

// Deleted while it waits, it lets go of every finalizer, the gone VM
// controller's too.
func TestSyncReleasesADeletedReceiverVMI(t *testing.T) {
	vmi := receiverVMI()
	vmi.Status.Phase = virtv1.WaitingForSync
	vmi.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	vmi.Finalizers = []string{virtv1.VirtualMachineInstanceFinalizer, virtv1.VirtualMachineControllerFinalizer}
	f := newFixture(t, vmi)
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	f.WaitForKubeVirtWrites("patch virtualmachineinstances")
	patch := string(f.KubeVirt.Actions()[len(f.KubeVirt.Actions())-1].(k8stesting.PatchAction).GetPatch())
	if !strings.Contains(patch, `"finalizers":null`) {
		t.Errorf("patch %s: want every finalizer gone", patch)
	}
}
