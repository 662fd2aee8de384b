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
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/shard"
)

// A VM's start revision is the ControllerRevision KubeVirt v1.8.1's VM
// controller stores each time it starts the VM (createVMRevision in
// pkg/virt-controller/watch/vm/vm.go): the VM's spec as it started, named
// revision-start-vm-<VM UID>-<generation>, controlled by the VM, its
// Revision the generation; the VMI names it in
// status.virtualMachineRevisionName, and a start at a new generation
// deletes the VM's older ones. virtshard stamps its VM's range on it, so
// that the VM's replica caches it.

// byOwner indexes revisions by the UID of the VM that controls them.
const byOwner = "ownerUID"

// revisions are the start revisions of VMs, on their VM's range.
var revisions = caches.Kind[*appsv1.ControllerRevision]{
	Resource:  "controllerrevisions",
	Placement: shard.OwnersRange,
	ListWatch: func(c caches.Clients, ns string) cache.ListerWatcher {
		crs := c.Kube.AppsV1().ControllerRevisions(ns)
		return caches.ListWatchOf(crs.List, crs.Watch)
	},
	Trim: trimRevision,
	Indexers: cache.Indexers{byOwner: func(obj any) ([]string, error) {
		if ref := metav1.GetControllerOf(obj.(*appsv1.ControllerRevision)); ref != nil {
			return []string{string(ref.UID)}, nil
		}
		return nil, nil
	}},
}

// trimRevision drops a revision's managed fields and decodes the spec it
// holds once, as the cache takes it in (startedRevision): the spec the VM
// started from is what a running VMI's generation and the RestartRequired
// condition are judged against, on every sync of a running VM, as KubeVirt
// judges them from its own revision cache.
func trimRevision(obj any) (any, error) {
	if cr, ok := obj.(*appsv1.ControllerRevision); ok {
		cr.ManagedFields = nil
		if cr.Data.Object == nil {
			decoded := &startedRevision{}
			decoded.err = json.Unmarshal(cr.Data.Raw, decoded)
			cr.Data.Object = decoded
		}
	}
	return obj, nil
}

// startedRevision is a start revision's data decoded, kept in the cached
// revision's Data.Object beside its raw bytes.
type startedRevision struct {
	metav1.TypeMeta `json:",inline"`
	Spec            virtv1.VirtualMachineSpec `json:"spec"`
	err             error
}

func (s *startedRevision) DeepCopyObject() runtime.Object {
	out := &startedRevision{TypeMeta: s.TypeMeta, err: s.err}
	s.Spec.DeepCopyInto(&out.Spec)
	return out
}

// startedSpec is the spec a start revision holds: the cache's decoding
// (read only), or, for a revision that did not come through the cache,
// its own.
func startedSpec(cr *appsv1.ControllerRevision) (*virtv1.VirtualMachineSpec, error) {
	decoded, ok := cr.Data.Object.(*startedRevision)
	if !ok {
		decoded = &startedRevision{}
		decoded.err = json.Unmarshal(cr.Data.Raw, decoded)
	}
	if decoded.err != nil {
		return nil, fmt.Errorf("revision %s/%s: %w", cr.Namespace, cr.Name, decoded.err)
	}
	return &decoded.Spec, nil
}

// lastStartedSpec is the spec of vm's latest start revision on the
// range, nil when there is none (KubeVirt's getLastVMRevisionSpec).
func lastStartedSpec(r *caches.Range, vm *virtv1.VirtualMachine) (*virtv1.VirtualMachineSpec, error) {
	owned, err := revisions.In(r).ByIndex(byOwner, string(vm.UID))
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
	return startedSpec(last)
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
// writes it ({"spec": …}, keys sorted as a map marshals them).
func newStartRevision(vm *virtv1.VirtualMachine, rng int) (*appsv1.ControllerRevision, error) {
	raw, err := json.Marshal(vm.Spec)
	if err != nil {
		return nil, err
	}
	var spec map[string]any
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, err
	}
	data, err := json.Marshal(map[string]any{"spec": spec})
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
		owned, err := revisions.In(r).ByIndex(byOwner, string(vm.UID))
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
