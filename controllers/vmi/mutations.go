package vmi

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/status"
)

// The status intents of the controller. Each is written against whatever
// version of the VMI the batcher patches (its informer copy, or a fresh
// read after a conflict) and returns false when it no longer applies, so a
// late intent can never move a VMI backwards, nor add a finalizer to a VMI
// being deleted (the API server refuses that).

type mutation = status.Mutation[*virtv1.VirtualMachineInstance]

// toScheduling: the launcher pod exists (created at at).
func toScheduling(pod *corev1.Pod, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if v.DeletionTimestamp != nil || rank(v.Status.Phase) >= rank(virtv1.Scheduling) {
			return false
		}
		ensureFinalizer(v)
		recordPhase(v, virtv1.Pending, v.CreationTimestamp)
		recordPhase(v, virtv1.Scheduling, at)
		v.Status.Phase = virtv1.Scheduling
		setActivePod(v, pod)
		removeCondition(v, virtv1.VirtualMachineInstanceSynchronized)
		return true
	}
}

// toScheduled: the launcher pod runs and is ready on its node — the handoff
// to the node agent.
func toScheduled(pod *corev1.Pod, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if v.DeletionTimestamp != nil || rank(v.Status.Phase) >= rank(virtv1.Scheduled) {
			return false
		}
		ensureFinalizer(v)
		recordPhase(v, virtv1.Pending, v.CreationTimestamp)
		recordPhase(v, virtv1.Scheduling, pod.CreationTimestamp)
		recordPhase(v, virtv1.Scheduled, at)
		v.Status.Phase = virtv1.Scheduled
		v.Status.NodeName = pod.Spec.NodeName
		if v.Labels == nil {
			v.Labels = map[string]string{}
		}
		v.Labels[virtv1.NodeNameLabel] = pod.Spec.NodeName
		setActivePod(v, pod)
		removeCondition(v, virtv1.VirtualMachineInstanceSynchronized)
		removeCondition(v, virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
		if ready := podCondition(pod, corev1.PodReady); ready != nil {
			setCondition(v, virtv1.VirtualMachineInstanceCondition{
				Type:               virtv1.VirtualMachineInstanceReady,
				Status:             ready.Status,
				LastTransitionTime: ready.LastTransitionTime,
				Reason:             ready.Reason,
				Message:            ready.Message,
			})
		}
		return true
	}
}

// copyPodScheduled: the scheduler cannot place the launcher pod.
func copyPodScheduled(cond corev1.PodCondition) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if v.DeletionTimestamp != nil || rank(v.Status.Phase) >= rank(virtv1.Scheduled) {
			return false
		}
		return setCondition(v, virtv1.VirtualMachineInstanceCondition{
			Type:               virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled),
			Status:             cond.Status,
			LastTransitionTime: cond.LastTransitionTime,
			Reason:             cond.Reason,
			Message:            cond.Message,
		})
	}
}

// notSynchronized: the VMI cannot proceed (bad spec, missing storage).
func notSynchronized(reason, message string, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if v.DeletionTimestamp != nil || rank(v.Status.Phase) > rank(virtv1.Pending) {
			return false
		}
		changed := false
		if v.Status.Phase == "" {
			v.Status.Phase = virtv1.Pending
			recordPhase(v, virtv1.Pending, v.CreationTimestamp)
			changed = true
		}
		return setCondition(v, virtv1.VirtualMachineInstanceCondition{
			Type:               virtv1.VirtualMachineInstanceSynchronized,
			Status:             corev1.ConditionFalse,
			LastTransitionTime: at,
			Reason:             reason,
			Message:            message,
		}) || changed
	}
}

// toFailed: the launcher pod is gone or failed after Pending.
func toFailed(reason, message string, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if v.IsFinal() {
			return false
		}
		recordPhase(v, virtv1.Failed, at)
		v.Status.Phase = virtv1.Failed
		setCondition(v, virtv1.VirtualMachineInstanceCondition{
			Type:               virtv1.VirtualMachineInstanceSynchronized,
			Status:             corev1.ConditionFalse,
			LastTransitionTime: at,
			Reason:             reason,
			Message:            message,
		})
		return true
	}
}

// finalize removes virtshard's finalizer: the VMI's pods are gone.
func finalize(v *virtv1.VirtualMachineInstance) bool {
	i := slices.Index(v.Finalizers, virtv1.VirtualMachineInstanceFinalizer)
	if i < 0 {
		return false
	}
	v.Finalizers = slices.Delete(v.Finalizers, i, i+1)
	return true
}

func ensureFinalizer(v *virtv1.VirtualMachineInstance) {
	if !slices.Contains(v.Finalizers, virtv1.VirtualMachineInstanceFinalizer) {
		v.Finalizers = append(v.Finalizers, virtv1.VirtualMachineInstanceFinalizer)
	}
}

// recordPhase appends a phase transition timestamp unless phase has one.
func recordPhase(v *virtv1.VirtualMachineInstance, phase virtv1.VirtualMachineInstancePhase, at metav1.Time) {
	for _, t := range v.Status.PhaseTransitionTimestamps {
		if t.Phase == phase {
			return
		}
	}
	v.Status.PhaseTransitionTimestamps = append(v.Status.PhaseTransitionTimestamps,
		virtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: at})
}

func setActivePod(v *virtv1.VirtualMachineInstance, pod *corev1.Pod) {
	if v.Status.ActivePods == nil {
		v.Status.ActivePods = map[types.UID]string{}
	}
	v.Status.ActivePods[pod.UID] = pod.Spec.NodeName
}

func condition(v *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstanceCondition {
	for i := range v.Status.Conditions {
		if v.Status.Conditions[i].Type == t {
			return &v.Status.Conditions[i]
		}
	}
	return nil
}

// setCondition sets c, keeping the transition time when the status does
// not change; it reports whether anything changed.
func setCondition(v *virtv1.VirtualMachineInstance, c virtv1.VirtualMachineInstanceCondition) bool {
	if cur := condition(v, c.Type); cur != nil {
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

func removeCondition(v *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) {
	v.Status.Conditions = slices.DeleteFunc(v.Status.Conditions, func(c virtv1.VirtualMachineInstanceCondition) bool { return c.Type == t })
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
