package vm

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
	"github.com/virtshard/virtshard/shard"
)

// TestSyncStoresTheSpecOfEachStartInARevision: as KubeVirt's
// createVMRevision, starting a VM creates revision-start-vm-<uid>-<gen>
// holding its spec, controlled by the VM, and the VMI names it; a
// revision of another generation is deleted, one of this generation kept.
func TestSyncStoresTheSpecOfEachStartInARevision(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	vm.Generation = 3
	rng := shardedtest.Ranges(t).Of(vm)
	older, err := newStartRevision(&virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{
		Namespace: vm.Namespace, Name: vm.Name, UID: vm.UID, Generation: 2}}, rng)
	if err != nil {
		t.Fatal(err)
	}
	older.UID = "older-uid"
	f := newFixture(t, vm, older)
	f.sync(t, vm)

	want := fmt.Sprintf("revision-start-vm-%s-3", vm.UID)
	var created *appsv1.ControllerRevision
	deleted := ""
	for _, a := range f.Kube.Actions() {
		switch a := a.(type) {
		case k8stesting.CreateAction:
			if cr, ok := a.GetObject().(*appsv1.ControllerRevision); ok {
				created = cr
			}
		case k8stesting.DeleteAction:
			if a.GetResource().Resource == "controllerrevisions" {
				deleted = a.GetName()
			}
		}
	}
	if created == nil || created.Name != want || created.Revision != 3 || !metav1.IsControlledBy(created, vm) ||
		created.Labels[shard.LabelRange] == "" {
		t.Fatalf("revision %+v, want %s, revision 3, controlled by the VM, on its range", created, want)
	}
	var data struct {
		Spec virtv1.VirtualMachineSpec `json:"spec"`
	}
	if err := json.Unmarshal(created.Data.Raw, &data); err != nil || data.Spec.RunStrategy == nil || *data.Spec.RunStrategy != virtv1.RunStrategyAlways {
		t.Errorf("revision data %s (%v), want the VM's spec", created.Data.Raw, err)
	}
	if deleted != older.Name {
		t.Errorf("deleted revision %q, want the older generation's %q", deleted, older.Name)
	}
	var vmi *virtv1.VirtualMachineInstance
	for _, a := range f.KubeVirt.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok {
			if created, ok := c.GetObject().(*virtv1.VirtualMachineInstance); ok {
				vmi = created
			}
		}
	}
	if vmi == nil || vmi.Status.VirtualMachineRevisionName != want {
		t.Fatalf("VMI %+v, want status.virtualMachineRevisionName %s", vmi, want)
	}
}

// TestSyncKeepsTheRevisionOfThisGeneration: a start at a generation whose
// revision exists creates none.
func TestSyncKeepsTheRevisionOfThisGeneration(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	vm.Generation = 3
	rng := shardedtest.Ranges(t).Of(vm)
	same, err := newStartRevision(vm, rng)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, []runtime.Object{vm, same}...)
	f.sync(t, vm)
	if got := kvfake.Writes(f.Kube.Actions()); slices.Contains(got, "create controllerrevisions") || slices.Contains(got, "delete controllerrevisions") {
		t.Errorf("writes %q, want the revision of this generation kept as it is", got)
	}
	if got := kvfake.Writes(f.KubeVirt.Actions()); !slices.Contains(got, "create virtualmachineinstances") {
		t.Errorf("writes %q, want the VMI created", got)
	}
}
