// Package instancetype applies instance types and preferences
// (instancetype.kubevirt.io/v1beta1) to the VMI a VirtualMachine starts, as
// KubeVirt v1.8.1's VM controller does (pkg/instancetype/apply and
// pkg/instancetype/preference/apply): the instance type's fields first,
// refused where the VM's template already sets them (a conflict), then the
// preference's, which only fill what is unset.
//
// It is pure: finding the objects and storing their ControllerRevisions is
// the VM controller's. The conformance tests hold it against KubeVirt's own
// applier on the corpus's VMs.
package instancetype
