package vm

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"github.com/virtshard/virtshard/controllers/caches"
)

// upgradeMessage is the message of KubeVirt's Failure condition and event
// when a revision could not be upgraded.
const upgradeMessage = "error encountered while upgrading instancetype.kubevirt.io controllerRevisions: "

// upgradeRevisions brings each revision the VM's status names to the
// latest version, as KubeVirt v1.8.1's upgrader
// (pkg/instancetype/upgrade): a revision not labelled with the latest
// object version (one an older KubeVirt stored) is stored again under the
// name and labels of today, the status ref moved to it by a JSON patch
// that first tests the old name, and the old revision deleted (a failure
// to delete is only logged). A revision the VM's status names is decoded
// already when the VM's instance type is found: one KubeVirt v1.8.1 cannot
// decode fails the VM there.
func (c *Controller) upgradeRevisions(ctx context.Context, it item, r *caches.Range, o *observed) error {
	vm := o.vm
	type upgrade struct{ old, new, path string }
	var done []upgrade
	for _, side := range []matcherSide{instancetypeSide, preferenceSide} {
		ref := *side.ref(&vm.Status)
		if side.get(vm) == nil || !hasRevisionRef(ref) {
			continue
		}
		old := ref.ControllerRevisionRef.Name
		name, err := c.upgradeRevision(ctx, it, r, vm, old)
		if err != nil {
			return &syncError{reason: "FailedCreate", message: upgradeMessage + err.Error()}
		}
		if name != "" {
			done = append(done, upgrade{old, name, side.statusPath + "/controllerRevisionRef/name"})
		}
	}
	if len(done) == 0 {
		return nil
	}
	var ops []map[string]any
	for _, u := range done {
		ops = append(ops, map[string]any{"op": "test", "path": u.path, "value": u.old},
			map[string]any{"op": "replace", "path": u.path, "value": u.new})
	}
	if err := c.patchVMStatus(ctx, it, o, ops); err != nil {
		return &syncError{reason: "FailedCreate", message: upgradeMessage + err.Error()}
	}
	for _, u := range done {
		if err := c.deleteRevision(ctx, it, vm.Namespace, u.old); err != nil {
			klog.FromContext(ctx).Error(err, "Ignoring failure to delete an upgraded instance type revision", "vm", klog.KObj(vm), "revision", u.old)
		}
	}
	return nil
}

// upgradeRevision stores the object the revision name holds again as a
// revision of the latest version, and returns its name; "" when the
// revision is of the latest version already.
func (c *Controller) upgradeRevision(ctx context.Context, it item, r *caches.Range, vm *virtv1.VirtualMachine, name string) (string, error) {
	cr, err := c.revisionNamed(ctx, r, vm.Namespace, name)
	if err != nil {
		return "", err
	}
	if cr.Labels[revisionObjectVersion] == v1beta1.SchemeGroupVersion.Version {
		return "", nil
	}
	held := &unstructured.Unstructured{}
	if err := held.UnmarshalJSON(cr.Data.Raw); err != nil {
		return "", fmt.Errorf("failed to decode object in ControllerRevision: %w", err)
	}
	kind, ok := heldKind(held)
	if !ok {
		return "", fmt.Errorf("failed to decode object in ControllerRevision: no kind %q is registered for version %q", held.GetKind(), held.GetAPIVersion())
	}
	upgraded, err := newInstancetypeRevision(vm, kind, held, it.Range)
	if err != nil {
		return "", err
	}
	// Where KubeVirt fails on a revision of the new name that exists (an
	// upgrade whose status patch failed leaves one, and fails the VM for
	// good), one holding the same object is taken.
	return c.storeOrReuse(ctx, it, upgraded)
}

// heldKind is which of the four kinds a revision holds; only v1beta1's are
// known to KubeVirt v1.8.1.
func heldKind(held *unstructured.Unstructured) (objectKind, bool) {
	if held.GetAPIVersion() != v1beta1.SchemeGroupVersion.String() {
		return objectKind{}, false
	}
	for _, side := range []matcherSide{instancetypeSide, preferenceSide} {
		for _, k := range []objectKind{side.namespaced, side.cluster} {
			if held.GetKind() == k.kind {
				return k, true
			}
		}
	}
	return objectKind{}, false
}
