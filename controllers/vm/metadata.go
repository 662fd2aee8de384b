package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/template"
)

// A VMI's labels and annotations are its VM template's at the start. A
// few follow the VM for as long as the VMI lives, as KubeVirt v1.8.1's
// syncDynamicAnnotationsAndLabelsToVMI (pkg/virt-controller/watch/vm/vm.go)
// keeps them: the descheduler's eviction asks and the keys of
// --additional-launcher-{labels,annotations}-sync from the template, and
// Velero's skip-hooks annotation from the VM itself. The VMI controller
// takes them on to the launcher pod.
var (
	templateAnnotations = []string{"descheduler.alpha.kubernetes.io/evict", "descheduler.alpha.kubernetes.io/prefer-no-eviction"}
	vmAnnotations       = []string{"kubevirt.io/skip-backup-hooks"}
)

// ReasonMetadataSync is the Failure condition's reason when the VMI's
// labels and annotations could not follow the VM's.
const ReasonMetadataSync = "AnnotationsLabelsChangeError"

// metadataPatch is the merge patch that brings the VMI's followed labels
// and annotations, KubeVirt's and those opts adds, to the VM's (null
// removes one the VM lacks), or nil.
func metadataPatch(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, opts template.Options) []byte {
	labels, annotations := map[string]any{}, map[string]any{}
	follow := func(changes map[string]any, keys []string, from, to map[string]string) {
		for _, k := range keys {
			want, wanted := from[k]
			have, has := to[k]
			switch {
			case wanted && (!has || have != want):
				changes[k] = want
			case !wanted && has:
				changes[k] = nil
			}
		}
	}
	tmpl := vm.Spec.Template.ObjectMeta
	follow(labels, opts.SyncedLabels, tmpl.Labels, vmi.Labels)
	follow(annotations, append(slices.Clone(templateAnnotations), opts.SyncedAnnotations...), tmpl.Annotations, vmi.Annotations)
	follow(annotations, vmAnnotations, vm.Annotations, vmi.Annotations)
	if len(labels) == 0 && len(annotations) == 0 {
		return nil
	}
	meta := map[string]any{"uid": vmi.UID}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		panic(err) // strings only: it cannot fail
	}
	return body
}

// syncMetadata patches the VMI's followed annotations when they differ
// from the VM's.
func (c *Controller) syncMetadata(ctx context.Context, it item, o *observed) error {
	vmi := o.vmi
	if vmi == nil || vmi.DeletionTimestamp != nil || o.vm.Spec.Template == nil {
		return nil
	}
	updated, ok, err := sharded.SendPatch(ctx, c.rt.Writer, it.Range, metadataPatch(o.vm, vmi, c.env.Template), func(ctx context.Context, body []byte) (*virtv1.VirtualMachineInstance, error) {
		return c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.MergePatchType, body, metav1.PatchOptions{})
	})
	if errors.Is(err, sharded.ErrNotHeld) {
		return nil // the range's holder takes it on
	}
	if err != nil {
		return &syncError{reason: ReasonMetadataSync, silent: true,
			message: fmt.Sprintf("Error encountered while handling annotation and labels sync request: %v", err)}
	}
	if ok {
		o.vmi = updated
	}
	return nil
}
