package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/instancetype"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/shard"
)

// A VM that names an instance type or a preference is run from them as
// KubeVirt v1.8.1's VM controller runs it (pkg/instancetype/controller/vm,
// the "reference" policy): each sync finds them, first stores each as a
// ControllerRevision the VM controls (named
// <vm>-<object>-v1beta1-<object UID>-<object generation>, the object
// whole) and names it in status.instancetypeRef / preferenceRef, and from
// then on reads the revision, not the object, so that changing or deleting
// the object does not change the VM. The VMI is the template with both
// applied (package instancetype). virtshard stamps the VM's range on the
// revisions, so that the VM's replica caches them.

// instancetypeRetry is when a VM whose instance type or preference could
// not be found or stored looks again: KubeVirt requeues it with backoff,
// and no event announces the object's creation.
const instancetypeRetry = 10 * time.Second

// matcher is what an instance type or a preference matcher says.
type matcher struct {
	Name, Kind, RevisionName, InferFromVolume string
	FailurePolicy                             *virtv1.InferFromVolumeFailurePolicy
}

// objectKind is one of the four kinds a matcher may name.
type objectKind struct {
	gvr  schema.GroupVersionResource
	kind string
}

func (k objectKind) namespaced() bool {
	return k.gvr == caches.InstancetypeGVR || k.gvr == caches.PreferenceGVR
}

// matcherSide is the instance type's or the preference's side of a VM: the
// same rules over different fields.
type matcherSide struct {
	what       string // KubeVirt's name of the matcher, for errors
	findReason string // the Failure reason when it cannot be found
	statusPath string
	namespaced objectKind
	cluster    objectKind
	get        func(*virtv1.VirtualMachine) *matcher
	ref        func(*virtv1.VirtualMachineStatus) **virtv1.InstancetypeStatusRef
}

var (
	instancetypeSide = matcherSide{
		what: "InstancetypeMatcher", findReason: "FailedFindInstancetype", statusPath: "/status/instancetypeRef",
		namespaced: objectKind{caches.InstancetypeGVR, "VirtualMachineInstancetype"},
		cluster:    objectKind{caches.ClusterInstancetypeGVR, "VirtualMachineClusterInstancetype"},
		get: func(vm *virtv1.VirtualMachine) *matcher {
			if m := vm.Spec.Instancetype; m != nil {
				return &matcher{m.Name, m.Kind, m.RevisionName, m.InferFromVolume, m.InferFromVolumeFailurePolicy}
			}
			return nil
		},
		ref: func(s *virtv1.VirtualMachineStatus) **virtv1.InstancetypeStatusRef { return &s.InstancetypeRef },
	}
	preferenceSide = matcherSide{
		what: "PreferenceMatcher", findReason: "FailedFindPreference", statusPath: "/status/preferenceRef",
		namespaced: objectKind{caches.PreferenceGVR, "VirtualMachinePreference"},
		cluster:    objectKind{caches.ClusterPreferenceGVR, "VirtualMachineClusterPreference"},
		get: func(vm *virtv1.VirtualMachine) *matcher {
			if m := vm.Spec.Preference; m != nil {
				return &matcher{m.Name, m.Kind, m.RevisionName, m.InferFromVolume, m.InferFromVolumeFailurePolicy}
			}
			return nil
		},
		ref: func(s *virtv1.VirtualMachineStatus) **virtv1.InstancetypeStatusRef { return &s.PreferenceRef },
	}
)

// Labels of an instance type's or preference's revision.
const (
	revisionObjectGeneration = "instancetype.kubevirt.io/object-generation"
	revisionObjectKind       = "instancetype.kubevirt.io/object-kind"
	revisionObjectName       = "instancetype.kubevirt.io/object-name"
	revisionObjectUID        = "instancetype.kubevirt.io/object-uid"
	revisionObjectVersion    = "instancetype.kubevirt.io/object-version"
)

// kindOf is the object kind a matcher's kind names: any case, singular or
// plural, the cluster-wide kind when empty.
func (s matcherSide) kindOf(m *matcher) (objectKind, error) {
	switch strings.ToLower(m.Kind) {
	case "", strings.ToLower(s.cluster.kind), s.cluster.gvr.Resource:
		return s.cluster, nil
	case strings.ToLower(s.namespaced.kind), s.namespaced.gvr.Resource:
		return s.namespaced, nil
	}
	return objectKind{}, fmt.Errorf("got unexpected kind in %s: %s", s.what, m.Kind)
}

// resolved are the instance type and preference a VM runs from (nil for
// those it does not name).
type resolved struct {
	instancetype *v1beta1.VirtualMachineInstancetypeSpec
	preference   *v1beta1.VirtualMachinePreferenceSpec
}

func (r resolved) none() bool { return r.instancetype == nil && r.preference == nil }

// syncInstancetypes finds what vm names and, by the KubeVirt CR's
// instancetype.referencePolicy, either stores the revisions it has not
// yet and names them in its status, then brings old revisions to the
// latest version (reference), or writes what they hold into the VM
// itself (expand, expandAll), as KubeVirt's Sync does before the VM's
// DataVolumes and VMI. It updates o.vm from its writes and o.resolved.
func (c *Controller) syncInstancetypes(ctx context.Context, it item, r *caches.Range, o *observed) error {
	vm := o.vm
	if vm.Spec.Instancetype == nil && vm.Spec.Preference == nil {
		return nil
	}
	var err error
	if o.resolved, err = c.resolve(ctx, r, vm, &vm.Status); err != nil {
		return err
	}
	switch policy := c.env.ClusterConfig.Current().InstancetypeReferencePolicy(); policy {
	case virtv1.Expand, virtv1.ExpandAll:
		return c.expandInstancetypes(ctx, it, o, policy)
	case virtv1.Reference:
		if err := c.storeRevisions(ctx, it, o); err != nil {
			return err
		}
	}
	return c.upgradeRevisions(ctx, it, r, o)
}

// storeRevisions stores a revision of each object the VM names that its
// status does not name one of yet, and names them in its status.
func (c *Controller) storeRevisions(ctx context.Context, it item, o *observed) error {
	vm := o.vm
	status := vm.Status.DeepCopy()
	var ops []map[string]any
	for _, side := range []matcherSide{instancetypeSide, preferenceSide} {
		ref, err := c.storeRevision(ctx, it, side, vm, status)
		if err != nil {
			return &syncError{reason: "FailedCreate", message: "error encountered while storing instancetype.kubevirt.io controllerRevisions: " + err.Error()}
		}
		if ref != nil {
			ops = append(ops, map[string]any{"op": "add", "path": side.statusPath, "value": ref})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if err := c.patchVMStatus(ctx, it, o, ops); err != nil {
		return &syncError{reason: "FailedCreate", message: "error encountered while storing instancetype.kubevirt.io controllerRevisions: " + err.Error()}
	}
	return nil
}

// patchVMStatus sends a JSON patch of the VM's status and, as KubeVirt's
// patchVM, takes metadata and status from the answer, the spec as the
// sync has it.
func (c *Controller) patchVMStatus(ctx context.Context, it item, o *observed, ops []map[string]any) error {
	body, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	var patched *virtv1.VirtualMachine
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		patched, err = c.env.KubeVirt.VirtualMachines(o.vm.Namespace).Patch(ctx, o.vm.Name, types.JSONPatchType, body, metav1.PatchOptions{}, "status")
		return err
	})
	if err != nil {
		return err
	}
	c.wrote(it.Range, patched)
	o.vm.ObjectMeta, o.vm.Status = patched.ObjectMeta, patched.Status
	return nil
}

// resolve finds the instance type and preference vm runs from, with the
// status refs of status: KubeVirt's checkResourcesExist, whose failure is
// the VM's Failure (no event).
func (c *Controller) resolve(ctx context.Context, r *caches.Range, vm *virtv1.VirtualMachine, status *virtv1.VirtualMachineStatus) (resolved, error) {
	var out resolved
	if m := instancetypeSide.get(vm); m != nil {
		cr, obj, err := c.find(ctx, r, instancetypeSide, vm, m, status)
		if err == nil {
			out.instancetype, err = instancetypeOf(cr, obj)
		}
		if err != nil {
			return out, &syncError{reason: instancetypeSide.findReason, message: err.Error(), silent: true}
		}
	}
	if m := preferenceSide.get(vm); m != nil {
		cr, obj, err := c.find(ctx, r, preferenceSide, vm, m, status)
		if err == nil {
			out.preference, err = preferenceOf(cr, obj)
		}
		if err != nil {
			return out, &syncError{reason: preferenceSide.findReason, message: err.Error(), silent: true}
		}
	}
	return out, nil
}

// find returns the revision a matcher is pinned to (its revisionName, or
// the status's revision while it is of the object the matcher names), or
// else the object itself.
func (c *Controller) find(ctx context.Context, r *caches.Range, side matcherSide, vm *virtv1.VirtualMachine, m *matcher,
	status *virtv1.VirtualMachineStatus) (*appsv1.ControllerRevision, *unstructured.Unstructured, error) {
	if m.RevisionName != "" {
		cr, err := c.revisionNamed(ctx, r, vm.Namespace, m.RevisionName)
		return cr, nil, err
	}
	if ref := *side.ref(status); hasRevisionRef(ref) {
		cr, err := c.revisionNamed(ctx, r, vm.Namespace, ref.ControllerRevisionRef.Name)
		if err != nil {
			return nil, nil, err
		}
		if name, ok := cr.Labels[revisionObjectName]; ok && name == m.Name {
			return cr, nil, nil
		}
	}
	kind, err := side.kindOf(m)
	if err != nil {
		return nil, nil, err
	}
	obj, err := c.object(ctx, kind, vm.Namespace, m.Name)
	return nil, obj, err
}

// revisionNamed reads a revision from the range cache, else from the API
// (one made before the VM was on this range, or just now).
func (c *Controller) revisionNamed(ctx context.Context, r *caches.Range, namespace, name string) (*appsv1.ControllerRevision, error) {
	if cr, ok, err := kinds.Revisions.In(r).Get(namespace + "/" + name); err == nil && ok {
		return cr, nil
	}
	return c.env.Kube.AppsV1().ControllerRevisions(namespace).Get(ctx, name, metav1.GetOptions{})
}

// object reads an instance type or preference from the cache, else from
// the API.
func (c *Controller) object(ctx context.Context, kind objectKind, namespace, name string) (*unstructured.Unstructured, error) {
	key, ns := name, ""
	if kind.namespaced() {
		key, ns = namespace+"/"+name, namespace
	}
	if inf := c.env.Objects.Instancetypes[kind.gvr]; inf != nil {
		if obj, ok, err := inf.GetStore().GetByKey(key); err == nil && ok {
			return obj.(*unstructured.Unstructured), nil
		}
	}
	return c.env.Dynamic.Resource(kind.gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

func instancetypeOf(cr *appsv1.ControllerRevision, obj *unstructured.Unstructured) (*v1beta1.VirtualMachineInstancetypeSpec, error) {
	if cr != nil {
		return kinds.InstancetypeSpec(cr)
	}
	var it v1beta1.VirtualMachineInstancetype
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &it); err != nil {
		return nil, err
	}
	return &it.Spec, nil
}

func preferenceOf(cr *appsv1.ControllerRevision, obj *unstructured.Unstructured) (*v1beta1.VirtualMachinePreferenceSpec, error) {
	if cr != nil {
		return kinds.PreferenceSpec(cr)
	}
	var pref v1beta1.VirtualMachinePreference
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &pref); err != nil {
		return nil, err
	}
	return &pref.Spec, nil
}

// storeRevision brings the status ref of one side in line with its
// matcher, storing a revision of the object when the ref names none yet,
// and returns the ref to write (nil when unchanged). status is updated.
// KubeVirt's syncStatusWithMatcher: only what the matcher sets is copied,
// and a new name, kind or volume to infer from unpins the revision.
func (c *Controller) storeRevision(ctx context.Context, it item, side matcherSide, vm *virtv1.VirtualMachine, status *virtv1.VirtualMachineStatus) (*virtv1.InstancetypeStatusRef, error) {
	m := side.get(vm)
	if m == nil {
		return nil, nil
	}
	field := side.ref(status)
	ref := &virtv1.InstancetypeStatusRef{}
	if *field != nil {
		ref = (*field).DeepCopy()
	}
	unpin := false
	if m.Name != "" && m.Name != ref.Name {
		ref.Name, unpin = m.Name, true
	}
	if m.Kind != "" && m.Kind != ref.Kind {
		ref.Kind, unpin = m.Kind, true
	}
	if m.InferFromVolume != "" && m.InferFromVolume != ref.InferFromVolume {
		ref.InferFromVolume, unpin = m.InferFromVolume, true
	}
	if unpin {
		ref.ControllerRevisionRef = nil
	}
	if m.FailurePolicy != nil && (ref.InferFromVolumeFailurePolicy == nil || *ref.InferFromVolumeFailurePolicy != *m.FailurePolicy) {
		policy := *m.FailurePolicy
		ref.InferFromVolumeFailurePolicy = &policy
	}
	if m.RevisionName != "" && (ref.ControllerRevisionRef == nil || ref.ControllerRevisionRef.Name != m.RevisionName) {
		ref.ControllerRevisionRef = &virtv1.ControllerRevisionRef{Name: m.RevisionName}
	}
	if ref.ControllerRevisionRef == nil {
		name, err := c.createRevision(ctx, it, side, vm, m)
		if err != nil {
			return nil, err
		}
		ref.ControllerRevisionRef = &virtv1.ControllerRevisionRef{Name: name}
	}
	if equality.Semantic.DeepEqual(ref, *field) {
		return nil, nil
	}
	*field = ref
	return ref, nil
}

// createRevision stores the object m names as a revision the VM controls,
// and returns its name. An instance type whose fields the VM's template
// already sets is refused first.
func (c *Controller) createRevision(ctx context.Context, it item, side matcherSide, vm *virtv1.VirtualMachine, m *matcher) (string, error) {
	kind, err := side.kindOf(m)
	if err != nil {
		return "", err
	}
	obj, err := c.object(ctx, kind, vm.Namespace, m.Name)
	if err != nil {
		return "", err
	}
	if side.what == instancetypeSide.what && vm.Spec.Template != nil {
		spec, err := instancetypeOf(nil, obj)
		if err != nil {
			return "", err
		}
		// Checked on a copy of the template's spec, but, as KubeVirt's
		// checkForInstancetypeConflicts, with the instance type's
		// annotations merged into the sync's own VM: a start in the same
		// sync stores them in its start revision, which then differs from
		// the template (the VMI's generation is not moved on after a spec
		// change outside the template).
		template := vm.Spec.Template.Spec.DeepCopy()
		if conflicts := instancetype.Apply("spec.template.spec", spec, nil, template, &vm.Spec.Template.ObjectMeta); len(conflicts) > 0 {
			return "", conflicts.VMError()
		}
	}
	cr, err := newInstancetypeRevision(vm, kind, obj, it.Range)
	if err != nil {
		return "", err
	}
	return c.storeOrReuse(ctx, it, cr)
}

// storeOrReuse creates the revision cr and returns its name. A revision
// of the name that holds the same spec is the VM's already; one that
// holds another is an error.
func (c *Controller) storeOrReuse(ctx context.Context, it item, cr *appsv1.ControllerRevision) (string, error) {
	err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		_, err := c.env.Kube.AppsV1().ControllerRevisions(cr.Namespace).Create(ctx, cr, metav1.CreateOptions{})
		return err
	})
	switch {
	case err == nil:
		return cr.Name, nil
	case !apierrors.IsAlreadyExists(err):
		return "", fmt.Errorf("failed to create ControllerRevision: %w", err)
	}
	existing, err := c.env.Kube.AppsV1().ControllerRevisions(cr.Namespace).Get(ctx, cr.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("failed to get ControllerRevision: %w", err)
	}
	same, err := sameRevisionSpec(cr, existing)
	if err != nil {
		return "", err
	}
	if !same {
		return "", fmt.Errorf("found existing ControllerRevision with unexpected data: %s", cr.Name)
	}
	return existing.Name, nil
}

// newInstancetypeRevision is KubeVirt's revision of obj for vm: the object
// with its kind, without labels, annotations, finalizers, owners and
// managed fields; labelled with what it holds; controlled by the VM.
func newInstancetypeRevision(vm *virtv1.VirtualMachine, kind objectKind, obj *unstructured.Unstructured, rng int) (*appsv1.ControllerRevision, error) {
	held := obj.DeepCopy()
	held.SetAPIVersion(v1beta1.SchemeGroupVersion.String())
	held.SetKind(kind.kind)
	held.SetLabels(nil)
	held.SetAnnotations(nil)
	held.SetFinalizers(nil)
	held.SetOwnerReferences(nil)
	held.SetManagedFields(nil)
	data, err := held.MarshalJSON()
	if err != nil {
		return nil, err
	}
	generation := strconv.FormatInt(obj.GetGeneration(), 10)
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Name:            fmt.Sprintf("%s-%s-%s-%s-%s", vm.Name, obj.GetName(), v1beta1.SchemeGroupVersion.Version, obj.GetUID(), generation),
			Namespace:       vm.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)},
			Labels: map[string]string{
				revisionObjectGeneration: generation,
				revisionObjectKind:       kind.kind,
				revisionObjectName:       obj.GetName(),
				revisionObjectUID:        string(obj.GetUID()),
				revisionObjectVersion:    v1beta1.SchemeGroupVersion.Version,
			},
		},
		Data: runtime.RawExtension{Raw: data},
	}
	shard.StampRange(cr, rng)
	return cr, nil
}

// sameRevisionSpec compares the specs two revisions hold, as KubeVirt's
// revision.Compare: nothing else counts.
func sameRevisionSpec(a, b *appsv1.ControllerRevision) (bool, error) {
	if ai, err := kinds.InstancetypeSpec(a); err == nil {
		bi, err := kinds.InstancetypeSpec(b)
		return err == nil && equality.Semantic.DeepEqual(ai, bi), err
	}
	ap, err := kinds.PreferenceSpec(a)
	if err != nil {
		return false, err
	}
	bp, err := kinds.PreferenceSpec(b)
	return err == nil && equality.Semantic.DeepEqual(ap, bp), err
}
