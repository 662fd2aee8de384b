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

// ReasonFailedUpdate is the Failure condition's reason when the VM's spec
// could not be updated from its VMI.
const ReasonFailedUpdate = "FailedUpdateError"

// persistPCITopology copies the VMI's PCI topology version (and its frozen
// interface slot count) into a VM template that has none, so that the
// VM's next VMI keeps the guest's PCI layout, as KubeVirt v1.8.1's
// syncPCITopologyAnnotationsToVM (pkg/virt-controller/watch/vm/vm.go)
// does. virt-api sets the version on a VM it admits; a template rewritten
// without it (a pool's update) gets it back here. The VM's
// resourceVersion in the patch keeps it off a template changed meanwhile.
func (c *Controller) persistPCITopology(ctx context.Context, it item, o *observed) error {
	vm, vmi := o.vm, o.vmi
	if vmi == nil || vm.Spec.Template == nil || vm.Spec.Template.ObjectMeta.Annotations[virtv1.PciTopologyVersionAnnotation] != "" {
		return nil
	}
	version := vmi.Annotations[virtv1.PciTopologyVersionAnnotation]
	if version == "" {
		return nil
	}
	annotations := map[string]string{virtv1.PciTopologyVersionAnnotation: version}
	if count, ok := vmi.Annotations[virtv1.PciInterfaceSlotCountAnnotation]; ok {
		annotations[virtv1.PciInterfaceSlotCountAnnotation] = count
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": vm.ResourceVersion},
		"spec":     map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": annotations}}},
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
		return &syncError{reason: ReasonFailedUpdate, silent: true,
			message: fmt.Sprintf("Error encountered when trying to update vm according to add volume and/or memory dump requests: %v", err)}
	case ok:
		o.vm = updated
		c.wrote(it.Range, updated)
	}
	return nil
}
