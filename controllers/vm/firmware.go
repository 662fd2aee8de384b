package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/sharded"
)

// ReasonFirmwareUUID is the Failure condition's reason when the VM's
// firmware UUID could not be persisted.
const ReasonFirmwareUUID = "FirmwareUUIDError"

// persistFirmwareUUID writes the name-derived firmware UUID into a VM
// template that has none, so that it stays the VM's whatever virt-api
// would default (KubeVirt v1.8.1's FirmwareController,
// pkg/virt-controller/watch/vm/firmware.go). The VM's resourceVersion in
// the patch keeps it off a template changed meanwhile.
func (c *Controller) persistFirmwareUUID(ctx context.Context, it item, o *observed) error {
	vm := o.vm
	if vm.Spec.Template == nil {
		return nil
	}
	if fw := vm.Spec.Template.Spec.Domain.Firmware; fw != nil && fw.UUID != "" {
		return nil
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": vm.ResourceVersion},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"domain": map[string]any{
			"firmware": map[string]any{"uuid": legacyFirmwareUUID(vm.Name)}}}}},
	})
	if err != nil {
		return err
	}
	updated, ok, err := sharded.SendPatch(ctx, c.rt.Writer, it.Range, body, func(ctx context.Context, body []byte) (*virtv1.VirtualMachine, error) {
		return c.env.KubeVirt.VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, body, metav1.PatchOptions{})
	})
	switch {
	case errors.Is(err, sharded.ErrNotHeld):
		return nil
	case err != nil:
		return &syncError{reason: ReasonFirmwareUUID, silent: true,
			message: fmt.Sprintf("error encountered when trying to patch VM firmware: %v", err)}
	case ok:
		o.vm = updated
		c.wrote(it.Range, updated)
	}
	return nil
}
