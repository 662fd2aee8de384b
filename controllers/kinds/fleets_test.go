package kinds

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
)

// A fleet's view of a VMI keeps what a fleet reads (labels, owners,
// deletion, phase, conditions) and drops the rest.
func TestAFleetsViewOfAVMIKeepsWhatTheFleetReads(t *testing.T) {
	now := metav1.Now()
	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-abcde", UID: "uid", ResourceVersion: "7", CreationTimestamp: now,
			DeletionTimestamp: &now, Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"big": "x"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "VirtualMachineInstanceReplicaSet", Name: "web", UID: "rs"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: virtv1.VirtualMachineInstanceSpec{Hostname: "web"},
		Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Running, NodeName: "node-1",
			Conditions: []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}}},
	}
	out, err := trimFleetVMI(vmi)
	if err != nil {
		t.Fatal(err)
	}
	kept := out.(*virtv1.VirtualMachineInstance)
	switch {
	case kept.Name != vmi.Name || kept.UID != vmi.UID || kept.ResourceVersion != "7" || kept.Labels["app"] != "web" ||
		kept.DeletionTimestamp == nil || len(kept.OwnerReferences) != 1 || !kept.CreationTimestamp.Equal(&now):
		t.Errorf("metadata %+v: want the VMI's", kept.ObjectMeta)
	case kept.Annotations != nil || kept.ManagedFields != nil:
		t.Errorf("annotations %v, managed fields %v: want none", kept.Annotations, kept.ManagedFields)
	case kept.Spec.Hostname != "" || kept.Status.NodeName != "":
		t.Errorf("spec %+v, node %q: want neither", kept.Spec, kept.Status.NodeName)
	case kept.Status.Phase != virtv1.Running || len(kept.Status.Conditions) != 1:
		t.Errorf("status %+v: want the phase and conditions", kept.Status)
	}
	if vmi.Annotations == nil || vmi.ManagedFields == nil {
		t.Error("the VMI itself was trimmed")
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "ns/x"}
	if out, err := trimFleetVMI(tombstone); err != nil || out != tombstone {
		t.Errorf("a tombstone came out as %v, %v", out, err)
	}
}
