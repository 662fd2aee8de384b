package vmistatus

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// Condition is v's condition of type t, or nil.
func Condition(v *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstanceCondition {
	for i := range v.Status.Conditions {
		if v.Status.Conditions[i].Type == t {
			return &v.Status.Conditions[i]
		}
	}
	return nil
}

// SetCondition sets c, keeping the transition time when the status does
// not change; it reports whether anything changed.
func SetCondition(v *virtv1.VirtualMachineInstance, c virtv1.VirtualMachineInstanceCondition) bool {
	if cur := Condition(v, c.Type); cur != nil {
		if cur.Status == c.Status && cur.Reason == c.Reason && cur.Message == c.Message {
			return false
		}
		if cur.Status == c.Status {
			c.LastTransitionTime = cur.LastTransitionTime
		}
		*cur = c
		return true
	}
	v.Status.Conditions = append(v.Status.Conditions, c)
	return true
}

// UpdateCondition is KubeVirt's VirtualMachineInstanceConditionManager
// UpdateCondition: c replaces the condition of its type unless that has
// the same status and reason already (then it stays as it is, times and
// message included).
func UpdateCondition(v *virtv1.VirtualMachineInstance, c virtv1.VirtualMachineInstanceCondition) {
	if cur := Condition(v, c.Type); cur != nil {
		if cur.Status != c.Status || cur.Reason != c.Reason {
			*cur = c
		}
		return
	}
	v.Status.Conditions = append(v.Status.Conditions, c)
}

// RemoveCondition removes v's condition of type t.
func RemoveCondition(v *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) {
	v.Status.Conditions = slices.DeleteFunc(v.Status.Conditions, func(c virtv1.VirtualMachineInstanceCondition) bool { return c.Type == t })
}

// PodCondition is pod's condition of type t, or nil.
func PodCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// ConditionIs reports whether v has condition t with status (any status
// when status is "").
func ConditionIs(v *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus) bool {
	c := Condition(v, t)
	return c != nil && (status == "" || c.Status == status)
}

// Migratable reports whether the node agent says v can live-migrate now
// (its LiveMigratable condition is true).
func Migratable(v *virtv1.VirtualMachineInstance) bool {
	return ConditionIs(v, virtv1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue)
}

// HotplugPending: the VMI waits for a migration to take a change to its
// node — a CPU hotplug (the condition, whatever its status), a memory
// hotplug, or another change that needs one. The workload updater
// migrates such a VMI, and its migration succeeds only once the target has
// taken the change (KubeVirt's isHotplugInProgress and the migration
// controller's Succeeded check).
func HotplugPending(v *virtv1.VirtualMachineInstance) bool {
	return ConditionIs(v, virtv1.VirtualMachineInstanceVCPUChange, "") ||
		ConditionIs(v, virtv1.VirtualMachineInstanceMemoryChange, corev1.ConditionTrue) ||
		ConditionIs(v, virtv1.VirtualMachineInstanceMigrationRequired, corev1.ConditionTrue)
}
