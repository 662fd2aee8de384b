package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
)

// A VMI's kubevirt.io/vm-generation annotation is the VM generation it
// runs: the VM's status.observedGeneration, beside desiredGeneration, the
// VM's own. KubeVirt v1.8.1 (pkg/virt-controller/watch/vm/vm.go) moves it
// on when the VM changed but its template did not
// (conditionallyBumpGenerationAnnotationOnVmi), and restores it from the
// start revision's name when it is missing or not a number
// (syncGenerationInfo); so does virtshard.

// vmiGeneration is the VM generation a VMI's annotation records.
func vmiGeneration(vmi *virtv1.VirtualMachineInstance) (int64, bool) {
	gen, err := strconv.ParseInt(vmi.Annotations[virtv1.VirtualMachineGenerationAnnotation], 10, 64)
	return gen, err == nil
}

// startRevisionOf is the start revision the VMI names, nil when the
// range does not hold it.
func startRevisionOf(r *caches.Range, vmi *virtv1.VirtualMachineInstance) (*appsv1.ControllerRevision, error) {
	if vmi.Status.VirtualMachineRevisionName == "" {
		return nil, nil
	}
	cr, _, err := kinds.Revisions.In(r).Get(vmi.Namespace + "/" + vmi.Status.VirtualMachineRevisionName)
	return cr, err
}

// bumpGeneration moves the VMI's annotation to the VM's generation when
// the template the VMI was started from is the VM's current one: a change
// outside the template (the run strategy, say) is one the VMI runs
// already.
func (c *Controller) bumpGeneration(ctx context.Context, it item, r *caches.Range, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) (*virtv1.VirtualMachineInstance, error) {
	if gen, ok := vmi.Annotations[virtv1.VirtualMachineGenerationAnnotation]; ok && gen == strconv.FormatInt(vm.Generation, 10) {
		return vmi, nil
	}
	cr, err := startRevisionOf(r, vmi)
	if err != nil || cr == nil {
		return vmi, err
	}
	started, err := kinds.StartedSpec(cr)
	if err != nil {
		return vmi, err
	}
	if !equality.Semantic.DeepEqual(started.Template, vm.Spec.Template) {
		return vmi, nil
	}
	return c.annotateGeneration(ctx, it, vmi, vm.Generation)
}

// restoreGeneration gives a VMI without a readable annotation the
// generation in its start revision's name, when the range holds it.
func (c *Controller) restoreGeneration(ctx context.Context, it item, r *caches.Range, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) (*virtv1.VirtualMachineInstance, error) {
	if _, ok := vmiGeneration(vmi); ok {
		return vmi, nil
	}
	cr, err := startRevisionOf(r, vmi)
	if err != nil || cr == nil {
		return vmi, err
	}
	gen, ok := startGeneration(vm, cr.Name)
	if !ok {
		return vmi, nil
	}
	return c.annotateGeneration(ctx, it, vmi, gen)
}

// annotateGeneration sets the VMI's generation annotation; the UID in the
// patch keeps it off a VMI that replaced this one meanwhile.
func (c *Controller) annotateGeneration(ctx context.Context, it item, vmi *virtv1.VirtualMachineInstance, gen int64) (*virtv1.VirtualMachineInstance, error) {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         vmi.UID,
		"annotations": map[string]string{virtv1.VirtualMachineGenerationAnnotation: strconv.FormatInt(gen, 10)},
	}})
	if err != nil {
		return vmi, err
	}
	updated, ok, err := sharded.SendPatch(ctx, c.rt.Writer, it.Range, body, func(ctx context.Context, body []byte) (*virtv1.VirtualMachineInstance, error) {
		return c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.MergePatchType, body, metav1.PatchOptions{})
	})
	if err != nil {
		return vmi, fmt.Errorf("annotate the generation of VMI %s: %w", it.Key, err)
	}
	if !ok {
		return vmi, nil
	}
	return updated, nil
}
