package kinds

import (
	"encoding/json"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
	poolv1 "kubevirt.io/api/pool/v1beta1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/shard"
)

// ByControllerUID indexes revisions by the UID of the object that
// controls them.
const ByControllerUID = "controllerUID"

// Revisions are the ControllerRevisions KubeVirt's controllers keep: a
// VM's start revisions (the VM's spec as it started, {"spec": …}) and a
// pool's revisions (the pool's spec at a generation). Each is on its
// owner's range, which the owner stamps on it. The cache decodes the spec
// a revision holds once, as it takes it in: a running VM is judged
// against its start revision on every sync, a pool's VMs against their
// revisions.
var Revisions = caches.Kind[*appsv1.ControllerRevision]{
	Resource:  "controllerrevisions",
	Placement: shard.OwnersRange,
	ListWatch: func(c caches.Clients, ns string) cache.ListerWatcher {
		crs := c.Kube.AppsV1().ControllerRevisions(ns)
		return caches.ListWatchOf(crs.List, crs.Watch)
	},
	Trim: trimRevision,
	Indexers: cache.Indexers{ByControllerUID: func(obj any) ([]string, error) {
		if ref := metav1.GetControllerOf(obj.(*appsv1.ControllerRevision)); ref != nil {
			return []string{string(ref.UID)}, nil
		}
		return nil, nil
	}},
}

func trimRevision(obj any) (any, error) {
	if cr, ok := obj.(*appsv1.ControllerRevision); ok {
		cr.ManagedFields = nil
		if cr.Data.Object == nil {
			cr.Data.Object = decodeRevision(cr)
		}
	}
	return obj, nil
}

// revisionData is a revision's spec decoded, kept in the cached revision's
// Data.Object beside its raw bytes: a VM's or a pool's, by its controller.
type revisionData struct {
	metav1.TypeMeta
	vm   *virtv1.VirtualMachineSpec
	pool *poolv1.VirtualMachinePoolSpec
	err  error
}

func (d *revisionData) DeepCopyObject() runtime.Object {
	out := &revisionData{TypeMeta: d.TypeMeta, err: d.err}
	if d.vm != nil {
		out.vm = d.vm.DeepCopy()
	}
	if d.pool != nil {
		out.pool = d.pool.DeepCopy()
	}
	return out
}

func decodeRevision(cr *appsv1.ControllerRevision) *revisionData {
	d := &revisionData{}
	if ref := metav1.GetControllerOf(cr); ref != nil && ref.Kind == poolv1.VirtualMachinePoolKind {
		d.pool = &poolv1.VirtualMachinePoolSpec{}
		d.err = json.Unmarshal(cr.Data.Raw, d.pool)
		return d
	}
	var started struct {
		Spec virtv1.VirtualMachineSpec `json:"spec"`
	}
	d.err = json.Unmarshal(cr.Data.Raw, &started)
	d.vm = &started.Spec
	return d
}

// dataOf is what cr holds: the cache's decoding (read only), or, for a
// revision that did not come through the cache, its own.
func dataOf(cr *appsv1.ControllerRevision) (*revisionData, error) {
	d, ok := cr.Data.Object.(*revisionData)
	if !ok {
		d = decodeRevision(cr)
	}
	if d.err != nil {
		return nil, fmt.Errorf("revision %s/%s: %w", cr.Namespace, cr.Name, d.err)
	}
	return d, nil
}

var errNotOfKind = errors.New("not a revision of this kind")

// StartedSpec is the VM spec a VM's start revision holds (read only).
func StartedSpec(cr *appsv1.ControllerRevision) (*virtv1.VirtualMachineSpec, error) {
	d, err := dataOf(cr)
	if err != nil {
		return nil, err
	}
	if d.vm == nil {
		return nil, fmt.Errorf("revision %s/%s: %w", cr.Namespace, cr.Name, errNotOfKind)
	}
	return d.vm, nil
}

// PoolSpec is the pool spec a pool's revision holds (read only).
func PoolSpec(cr *appsv1.ControllerRevision) (*poolv1.VirtualMachinePoolSpec, error) {
	d, err := dataOf(cr)
	if err != nil {
		return nil, err
	}
	if d.pool == nil {
		return nil, fmt.Errorf("revision %s/%s: %w", cr.Namespace, cr.Name, errNotOfKind)
	}
	return d.pool, nil
}
