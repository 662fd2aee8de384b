package vm

import (
	"slices"
	"strings"
	"testing"

	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
)

// TestSyncRestoresAMissingGenerationFromTheStartRevision: a VMI whose
// generation annotation is gone gets the generation its start revision's
// name holds, as KubeVirt's syncGenerationInfo restores it, and the VM's
// status reports it.
func TestSyncRestoresAMissingGenerationFromTheStartRevision(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	vm.Generation = 4
	rng := shardedtest.Ranges(t).Of(vm)
	started := vm.DeepCopy()
	started.Generation = 3
	rev, err := newStartRevision(started, rng)
	if err != nil {
		t.Fatal(err)
	}
	vmi := vmiOf(t, vm, rng)
	vmi.Status.VirtualMachineRevisionName = rev.Name
	vm.Spec.Template.Spec.Hostname = "changed" // the template moved on: no bump to 4
	delete(vmi.Annotations, virtv1.VirtualMachineGenerationAnnotation)
	f := newFixture(t, vm, vmi, rev)
	f.sync(t, vm)

	patches, status := f.written()
	restored := slices.Contains(patches, `{"metadata":{"annotations":{"kubevirt.io/vm-generation":"3"},"uid":"vmi-uid"}}`)
	if !restored {
		t.Errorf("writes %v, want the VMI annotated with generation 3", f.KubeVirt.Actions())
	}
	if status == nil || status.Status.ObservedGeneration != 3 || status.Status.DesiredGeneration != 4 {
		t.Errorf("status %+v, want observed generation 3 of 4", status)
	}
}

// TestSyncPersistsTheFirmwareUUID: a VM template without a firmware UUID
// gets the one KubeVirt derives from the VM's name, with the VM's
// resourceVersion as precondition, and its VMI the same.
func TestSyncPersistsTheFirmwareUUID(t *testing.T) {
	vm := newVM(virtv1.RunStrategyHalted)
	vm.Spec.Template.Spec.Domain.Firmware = nil
	f := newFixture(t, vm)
	f.sync(t, vm)
	want := `{"metadata":{"resourceVersion":"5"},"spec":{"template":{"spec":{"domain":{"firmware":{"uuid":"` + string(legacyFirmwareUUID("vm")) + `"}}}}}}`
	var got string
	for _, a := range f.KubeVirt.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetResource().Resource == "virtualmachines" {
			got = string(p.GetPatch())
		}
	}
	if got != want {
		t.Errorf("VM patch %s, want %s", got, want)
	}
	vmi, err := newVMI(vm, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// KubeVirt's CalculateLegacyUUID("vm").
	if vmi.Spec.Domain.Firmware.UUID != legacyFirmwareUUID("vm") || legacyFirmwareUUID("vm") == "" {
		t.Errorf("VMI firmware UUID %q, want %q", vmi.Spec.Domain.Firmware.UUID, legacyFirmwareUUID("vm"))
	}
}

// A VM template without a PCI topology version (a pool rewrote it) takes
// its running VMI's, with the frozen interface slot count; one that has a
// version keeps it.
func TestSyncPersistsTheVMIsPCITopologyInTheTemplate(t *testing.T) {
	for _, have := range []string{"", virtv1.PciTopologyVersionV2} {
		vm := newVM(virtv1.RunStrategyAlways)
		if have != "" {
			vm.Spec.Template.ObjectMeta.Annotations = map[string]string{virtv1.PciTopologyVersionAnnotation: have}
		}
		vmi := vmiOf(t, vm, shardedtest.Ranges(t).Of(vm))
		vmi.Annotations = map[string]string{virtv1.PciTopologyVersionAnnotation: virtv1.PciTopologyVersionV3, virtv1.PciInterfaceSlotCountAnnotation: "4"}
		f := newFixture(t, vm, vmi)
		f.sync(t, vm)
		var got string
		for _, a := range f.KubeVirt.Actions() {
			if p, ok := a.(k8stesting.PatchAction); ok && p.GetResource().Resource == "virtualmachines" && strings.Contains(string(p.GetPatch()), "pci") {
				got = string(p.GetPatch())
			}
		}
		want := `{"metadata":{"resourceVersion":"5"},"spec":{"template":{"metadata":{"annotations":{"` + virtv1.PciInterfaceSlotCountAnnotation +
			`":"4","` + virtv1.PciTopologyVersionAnnotation + `":"v3"}}}}}`
		if have != "" {
			want = ""
		}
		if got != want {
			t.Errorf("template with version %q: VM patch %s, want %s", have, got, want)
		}
	}
}
