package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/shard"
)

// A VM's start revision is the ControllerRevision KubeVirt v1.8.1's VM
// controller stores each time it starts the VM (createVMRevision in
// pkg/virt-controller/watch/vm/vm.go): the VM's spec as it started, named
// revision-start-vm-<VM UID>-<generation>, controlled by the VM, its
// Revision the generation; the VMI names it in
// status.virtualMachineRevisionName, and a start at a new generation
// deletes the VM's older ones. virtshard stamps its VM's range on it, so
// that the VM's replica caches it (kinds.Revisions).

// lastStartedSpec is the spec of vm's latest start revision on the
// range, nil when there is none (KubeVirt's getLastVMRevisionSpec).
func lastStartedSpec(r *caches.Range, vm *virtv1.VirtualMachine) (*virtv1.VirtualMachineSpec, error) {
	owned, err := kinds.Revisions.In(r).ByIndex(kinds.ByControllerUID, string(vm.UID))
	if err != nil {
		return nil, err
	}
	var last *appsv1.ControllerRevision
	var lastGen int64
	for _, cr := range owned {
		if gen, ok := startGeneration(vm, cr.Name); ok && (last == nil || gen > lastGen) {
			last, lastGen = cr, gen
		}
	}
	if last == nil {
		return nil, nil
	}
	return kinds.StartedSpec(last)
}

// startGeneration is the generation in the name of one of vm's start
// revisions, and whether name is one.
func startGeneration(vm *virtv1.VirtualMachine, name string) (int64, bool) {
	suffix, ok := strings.CutPrefix(name, startRevisionPrefix(vm)+"-")
	if !ok {
		return 0, false
	}
	gen, err := strconv.ParseInt(suffix, 10, 64)
	return gen, err == nil
}

func startRevisionPrefix(vm *virtv1.VirtualMachine) string {
	return "revision-start-vm-" + string(vm.UID)
}

// startRevisionName is KubeVirt's getVMRevisionName.
func startRevisionName(vm *virtv1.VirtualMachine) string {
	return fmt.Sprintf("%s-%d", startRevisionPrefix(vm), vm.Generation)
}

// newStartRevision is the revision of vm's start: the spec, as KubeVirt
// writes it ({"spec": …}, keys sorted as a map marshals them). The
// instance type and preference are pinned in it to the revisions the
// VM's status names, as KubeVirt pins them, so that a restart is judged
// against what the VMI was started from.
func newStartRevision(vm *virtv1.VirtualMachine, rng int) (*appsv1.ControllerRevision, error) {
	spec := vm.Spec.DeepCopy()
	if ref := vm.Status.InstancetypeRef; spec.Instancetype != nil && hasRevisionRef(ref) {
		spec.Instancetype.RevisionName = ref.ControllerRevisionRef.Name
	}
	if ref := vm.Status.PreferenceRef; spec.Preference != nil && hasRevisionRef(ref) {
		spec.Preference.RevisionName = ref.ControllerRevisionRef.Name
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	data, err := json.Marshal(map[string]any{"spec": fields})
	if err != nil {
		return nil, err
	}
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            startRevisionName(vm),
			Namespace:       vm.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: vm.Generation,
	}
	shard.StampRange(cr, rng)
	return cr, nil
}

// startRevision makes sure vm's revision of this start exists, deletes
// its older ones, and returns the name the VMI records.
func (c *Controller) startRevision(ctx context.Context, it item, vm *virtv1.VirtualMachine) (string, error) {
	name := startRevisionName(vm)
	have := false
	if r := c.env.Caches.Get(it.Range); r != nil {
		owned, err := kinds.Revisions.In(r).ByIndex(kinds.ByControllerUID, string(vm.UID))
		if err != nil {
			return "", err
		}
		for _, cr := range owned {
			if !strings.HasPrefix(cr.Name, startRevisionPrefix(vm)) {
				continue
			}
			if cr.Revision == vm.Generation {
				have = true
				continue
			}
			err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
				return c.env.Kube.AppsV1().ControllerRevisions(cr.Namespace).Delete(ctx, cr.Name,
					metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cr.UID}})
			})
			if err != nil && !apierrors.IsNotFound(err) {
				return "", fmt.Errorf("delete revision %s of VM %s: %w", cr.Name, it.Key, err)
			}
		}
	}
	if have {
		return name, nil
	}
	cr, err := newStartRevision(vm, it.Range)
	if err != nil {
		return "", err
	}
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		_, err := c.env.Kube.AppsV1().ControllerRevisions(vm.Namespace).Create(ctx, cr, metav1.CreateOptions{})
		return err
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create revision %s of VM %s: %w", name, it.Key, err)
	}
	return name, nil
}
