package vm

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/apidefaults"
	"github.com/virtshard/virtshard/controllers/instancetype"
)

// Under the expand and expandAll reference policies a VM does not keep
// naming its instance type and preference: the VM controller writes what
// they hold into the VM's template, defaulted as virt-api defaults a VMI,
// and removes the matchers and the status refs (KubeVirt v1.8.1's
// handleExpand in pkg/instancetype/controller/vm and Expand in
// pkg/instancetype/expand). expand leaves a VM alone that runs from stored
// revisions already; expandAll expands it too and deletes the revisions.
// The sync ends with the expansion, as KubeVirt's does: the next one, of
// the updated VM, starts it.

// expandInstancetypes expands the VM in o by policy. It sets o.expanded
// when it updated the VM.
func (c *Controller) expandInstancetypes(ctx context.Context, it item, o *observed, policy virtv1.InstancetypeReferencePolicy) error {
	vm := o.vm
	if policy == virtv1.Expand && (hasRevisionRef(vm.Status.InstancetypeRef) || hasRevisionRef(vm.Status.PreferenceRef)) {
		return nil
	}
	// KubeVirt's errors here are not sync errors of their own: the VM's
	// Failure condition reads them as unsupported, and no event is sent.
	unsupported := func(format string, err error) error {
		return &syncError{reason: "UnsupportedSyncError", silent: true,
			message: "unsupported error: " + fmt.Sprintf(format, err)}
	}
	expanded, err := c.expansion(vm, o.resolved)
	if err != nil {
		return unsupported("error encountered while expanding into VirtualMachine: %v", err)
	}
	vms := c.env.KubeVirt.VirtualMachines(vm.Namespace)
	var updated *virtv1.VirtualMachine
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		updated, err = vms.Update(ctx, expanded, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return unsupported("error encountered when trying to update expanded VirtualMachine: %v", err)
	}
	c.wrote(it.Range, updated)
	updated.Status = expanded.Status
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		updated, err = vms.UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return unsupported("error encountered when trying to update expanded VirtualMachine Status: %v", err)
	}
	c.wrote(it.Range, updated)
	o.vm, o.expanded = updated, true
	// The revisions the VM ran from are of no use now.
	for _, ref := range []*virtv1.InstancetypeStatusRef{vm.Status.InstancetypeRef, vm.Status.PreferenceRef} {
		if !hasRevisionRef(ref) {
			continue
		}
		name := ref.ControllerRevisionRef.Name
		if err := c.deleteRevision(ctx, it, vm.Namespace, name); err != nil {
			return &syncError{reason: "FailedCreate", silent: true,
				message: fmt.Sprintf("error encountered cleaning controllerRevision %s after successfully expanding VirtualMachine %s: %v", name, vm.Name, err)}
		}
	}
	return nil
}

// expansion is vm with its instance type and preference written into its
// template: the template's default disks and pod network first (which a
// preference tunes), then both applied, then virt-api's spec defaults; the
// matchers and status refs removed.
func (c *Controller) expansion(vm *virtv1.VirtualMachine, res resolved) (*virtv1.VirtualMachine, error) {
	out := vm.DeepCopy()
	tmpl := out.Spec.Template
	if tmpl == nil {
		// KubeVirt's expansion dereferences the template; virt-api refuses
		// a VM without one.
		return nil, errors.New("the VirtualMachine has no template")
	}
	cluster := c.env.ClusterConfig.Current()
	if err := apidefaults.SetVMDefaults(&tmpl.Spec, cluster); err != nil {
		return nil, err
	}
	if conflicts := instancetype.Apply("spec.template.spec", res.instancetype, res.preference, &tmpl.Spec, &tmpl.ObjectMeta); len(conflicts) > 0 {
		return nil, conflicts.VMError()
	}
	if err := apidefaults.SetSpecDefaults(&tmpl.Spec, cluster); err != nil {
		return nil, err
	}
	out.Spec.Instancetype, out.Spec.Preference = nil, nil
	out.Status.InstancetypeRef, out.Status.PreferenceRef = nil, nil
	return out, nil
}

// deleteRevision deletes the named ControllerRevision as a write of its
// range.
func (c *Controller) deleteRevision(ctx context.Context, it item, namespace, name string) error {
	return c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		return c.env.Kube.AppsV1().ControllerRevisions(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	})
}

// hasRevisionRef: a status ref names a stored revision.
func hasRevisionRef(ref *virtv1.InstancetypeStatusRef) bool {
	return ref != nil && ref.ControllerRevisionRef != nil && ref.ControllerRevisionRef.Name != ""
}
