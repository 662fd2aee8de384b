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
	"kubevirt.io/api/instancetype/v1beta1"
	poolv1 "kubevirt.io/api/pool/v1beta1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/shard"
)

// ByControllerUID indexes revisions by the UID of the object that
// controls them.
const ByControllerUID = "controllerUID"

// Revisions are the ControllerRevisions KubeVirt's controllers keep: a
// VM's start revisions (the VM's spec as it started, {"spec": …}), the
// instance types and preferences a VM uses, as they were when it first
// named them (the whole object), and a pool's revisions (the pool's spec
// at a generation). Each is on its
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
	vm           *virtv1.VirtualMachineSpec
	pool         *poolv1.VirtualMachinePoolSpec
	instancetype *v1beta1.VirtualMachineInstancetypeSpec
	preference   *v1beta1.VirtualMachinePreferenceSpec
	// stored is the Go type of the object an instance type's or
	// preference's revision holds, for KubeVirt's error when it is not the
	// kind asked for.
	stored string
	err    error
}

func (d *revisionData) DeepCopyObject() runtime.Object {
	out := &revisionData{TypeMeta: d.TypeMeta, stored: d.stored, err: d.err}
	if d.instancetype != nil {
		out.instancetype = d.instancetype.DeepCopy()
	}
	if d.preference != nil {
		out.preference = d.preference.DeepCopy()
	}
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
	var held metav1.TypeMeta
	if json.Unmarshal(cr.Data.Raw, &held) == nil && held.GroupVersionKind().Group == v1beta1.SchemeGroupVersion.Group {
		d.decodeInstancetype(held, cr.Data.Raw)
		return d
	}
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

// decodeInstancetype decodes an instance type's or preference's revision:
// the object, of a v1beta1 kind (KubeVirt v1.8.1 knows no other).
func (d *revisionData) decodeInstancetype(held metav1.TypeMeta, raw []byte) {
	if held.APIVersion != v1beta1.SchemeGroupVersion.String() {
		d.err = fmt.Errorf("failed to decode object in ControllerRevision: no kind %q is registered for version %q", held.Kind, held.APIVersion)
		return
	}
	var object struct {
		Spec json.RawMessage `json:"spec"`
	}
	if d.err = json.Unmarshal(raw, &object); d.err != nil {
		return
	}
	switch held.Kind {
	case "VirtualMachineInstancetype", "VirtualMachineClusterInstancetype":
		d.stored = "*v1beta1." + held.Kind
		d.instancetype = &v1beta1.VirtualMachineInstancetypeSpec{}
		d.err = json.Unmarshal(object.Spec, d.instancetype)
	case "VirtualMachinePreference", "VirtualMachineClusterPreference":
		d.stored = "*v1beta1." + held.Kind
		d.preference = &v1beta1.VirtualMachinePreferenceSpec{}
		d.err = json.Unmarshal(object.Spec, d.preference)
	default:
		d.err = fmt.Errorf("failed to decode object in ControllerRevision: no kind %q is registered for version %q", held.Kind, held.APIVersion)
	}
}

// InstancetypeSpec is the instance type a VM's revision of it holds (read
// only), with KubeVirt's error for a revision of anything else.
func InstancetypeSpec(cr *appsv1.ControllerRevision) (*v1beta1.VirtualMachineInstancetypeSpec, error) {
	d, err := dataOf(cr)
	if err != nil {
		return nil, err
	}
	if d.instancetype == nil {
		return nil, fmt.Errorf("unexpected type in ControllerRevision: %s", d.storedType())
	}
	return d.instancetype, nil
}

// PreferenceSpec is the preference a VM's revision of it holds (read
// only), with KubeVirt's error for a revision of anything else.
func PreferenceSpec(cr *appsv1.ControllerRevision) (*v1beta1.VirtualMachinePreferenceSpec, error) {
	d, err := dataOf(cr)
	if err != nil {
		return nil, err
	}
	if d.preference == nil {
		return nil, fmt.Errorf("unexpected type in ControllerRevision: %s", d.storedType())
	}
	return d.preference, nil
}

func (d *revisionData) storedType() string {
	if d.stored == "" {
		return "<nil>"
	}
	return d.stored
}

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
