package kinds

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	poolv1 "kubevirt.io/api/pool/v1beta1"
)

func revisionOf(t *testing.T, owner metav1.Object, gvk string, data any) *appsv1.ControllerRevision {
	t.Helper()
	raw, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: owner.GetName() + "-1", Namespace: "ns", OwnerReferences: []metav1.OwnerReference{
			{Kind: gvk, Name: owner.GetName(), UID: owner.GetUID(), Controller: ptr.To(true)}}},
		Data: runtime.RawExtension{Raw: raw},
	}
}

// The cache decodes a revision's spec once, by the kind of its
// controller; what the syncs read from it is what the revision holds, and
// a revision that does not decode, or is of the other kind, says so.
func TestACachedRevisionHoldsItsOwnersSpecDecoded(t *testing.T) {
	vmSpec := virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyAlways),
		Template: &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}}}}
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm", UID: "u1"}}
	started := revisionOf(t, vm, "VirtualMachine", map[string]any{"spec": vmSpec})

	poolSpec := poolv1.VirtualMachinePoolSpec{Replicas: ptr.To[int32](3), VirtualMachineTemplate: &poolv1.VirtualMachineTemplateSpec{Spec: vmSpec}}
	pool := &poolv1.VirtualMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "pool", UID: "u2"}}
	pooled := revisionOf(t, pool, poolv1.VirtualMachinePoolKind, poolSpec)

	for _, cr := range []*appsv1.ControllerRevision{started, pooled} {
		trimmed, _ := trimRevision(cr.DeepCopy())
		cached := trimmed.(*appsv1.ControllerRevision)
		if _, ok := cached.Data.Object.(*revisionData); !ok {
			t.Fatalf("cached revision's data object %T, want the decoded spec", cached.Data.Object)
		}
		if got, _ := Revisions.Indexers[ByControllerUID](cached); len(got) != 1 || got[0] != string(cr.OwnerReferences[0].UID) {
			t.Errorf("%s indexed under %q, want its controller's UID", cr.Name, got)
		}
	}

	trimmed, _ := trimRevision(started.DeepCopy())
	for _, cr := range []*appsv1.ControllerRevision{trimmed.(*appsv1.ControllerRevision).DeepCopy(), started} {
		got, err := StartedSpec(cr)
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(*got, vmSpec) {
			t.Errorf("started spec %+v, want %+v", got, vmSpec)
		}
	}
	trimmed, _ = trimRevision(pooled.DeepCopy())
	for _, cr := range []*appsv1.ControllerRevision{trimmed.(*appsv1.ControllerRevision).DeepCopy(), pooled} {
		got, err := PoolSpec(cr)
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(*got, poolSpec) {
			t.Errorf("pool spec %+v, want %+v", got, poolSpec)
		}
	}

	if _, err := PoolSpec(started); err == nil {
		t.Error("a VM's start revision gave a pool spec")
	}
	if _, err := StartedSpec(pooled); err == nil {
		t.Error("a pool's revision gave a VM spec")
	}
	started.Data.Raw = []byte(`{"spec":`)
	broken, _ := trimRevision(started)
	if _, err := StartedSpec(broken.(*appsv1.ControllerRevision)); err == nil {
		t.Error("a revision that does not decode gave a spec")
	}
}
