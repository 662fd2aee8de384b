package virtapi

import (
	"encoding/json"
	"slices"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	virtv1 "kubevirt.io/api/core/v1"
)

// The webhook answers what virt-api's mutators would: a VMI finalized and
// defaulted with a firmware UUID both runs share, a migration labelled
// with its VMI and finalized, a VM given its firmware UUID.
func TestTheWebhookMutatesAsVirtAPIDoes(t *testing.T) {
	apply := func(resource, obj string, out any) {
		t.Helper()
		patch, err := mutate(resource, []byte(obj))
		if err != nil {
			t.Fatal(err)
		}
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			t.Fatal(err)
		}
		patched, err := p.Apply([]byte(obj))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(patched, out); err != nil {
			t.Fatal(err)
		}
	}

	var vmi, again virtv1.VirtualMachineInstance
	const written = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"a"},` +
		`"spec":{"domain":{"devices":{},"resources":{"requests":{"memory":"64Mi"}}}}}`
	apply("virtualmachineinstances", written, &vmi)
	apply("virtualmachineinstances", written, &again)
	if !slices.Contains(vmi.Finalizers, virtv1.VirtualMachineInstanceFinalizer) {
		t.Errorf("VMI finalizers %v, want virt-api's", vmi.Finalizers)
	}
	if vmi.Spec.Domain.Firmware == nil || vmi.Spec.Domain.Firmware.UUID == "" || vmi.Spec.Domain.Firmware.UUID != again.Spec.Domain.Firmware.UUID {
		t.Errorf("firmware %+v and %+v, want one UUID for both runs", vmi.Spec.Domain.Firmware, again.Spec.Domain.Firmware)
	}
	if len(vmi.Spec.Networks) != 1 || vmi.Spec.Networks[0].Pod == nil {
		t.Errorf("networks %+v, want virt-api's default pod network", vmi.Spec.Networks)
	}

	var m virtv1.VirtualMachineInstanceMigration
	apply("virtualmachineinstancemigrations", `{"metadata":{"name":"m"},"spec":{"vmiName":"a"}}`, &m)
	if m.Labels[virtv1.MigrationSelectorLabel] != "a" || !slices.Contains(m.Finalizers, virtv1.VirtualMachineInstanceMigrationFinalizer) {
		t.Errorf("migration labels %v and finalizers %v, want the VMI's name and virt-api's finalizer", m.Labels, m.Finalizers)
	}

	var vm virtv1.VirtualMachine
	apply("virtualmachines", `{"metadata":{"name":"v"},"spec":{"template":{"spec":{"domain":{"devices":{}}}}}}`, &vm)
	if fw := vm.Spec.Template.Spec.Domain.Firmware; fw == nil || fw.UUID == "" {
		t.Errorf("VM firmware %+v, want a UUID", fw)
	}

}
