package vmi

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/status"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// The status intents of the controller. Each is written against whatever
// version of the VMI the batcher patches (its informer copy, or a fresh
// read after a conflict) and returns false when it no longer applies, so a
// late intent can never move a VMI backwards, nor add a finalizer to a VMI
// being deleted (the API server refuses that).

type mutation = status.Mutation[*virtv1.VirtualMachineInstance]

// toScheduling: the launcher pod exists (created at at). The status is
// KubeVirt's by the sync after the pod event (updateStatus, Pending with a
// pod, then Scheduling): Ready=False until the guest runs, activePods, the
// launcher image, the pod's QoS class and PodScheduled=False, no
// Synchronized or Provisioning.
func toScheduling(l launcher, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if v.DeletionTimestamp != nil || rank(v.Status.Phase) >= rank(virtv1.Scheduling) {
			return false
		}
		ensureFinalizer(v)
		vmistatus.RecordPhase(v, virtv1.Pending, v.CreationTimestamp)
		vmistatus.RecordPhase(v, virtv1.Scheduling, at)
		v.Status.Phase = virtv1.Scheduling
		l.fromPod(v)
		notReady(v, virtv1.GuestNotRunningReason, msgGuestNotRunning, at)
		l.whileScheduling(v)
		vmistatus.RemoveCondition(v, virtv1.VirtualMachineInstanceSynchronized)
		return true
	}
}

// toScheduled: the launcher pod runs and is ready on its node — the handoff
// to the node agent. The status is KubeVirt's at Scheduled (updateStatus,
// Scheduling with a ready pod): the node, the volumes' claims, the pod
// interfaces, the migration transport, no PodScheduled, with one
// difference: Ready is the pod's, as KubeVirt writes it in an update of its
// own once virt-handler reports the guest Running (until then it says
// GuestNotRunning). virtshard does not write the VMI after the handoff, so
// the Running VMI ends up as KubeVirt's.
func toScheduled(l launcher, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if v.DeletionTimestamp != nil || rank(v.Status.Phase) >= rank(virtv1.Scheduled) {
			return false
		}
		pod := l.pod
		ensureFinalizer(v)
		vmistatus.RecordPhase(v, virtv1.Pending, v.CreationTimestamp)
		vmistatus.RecordPhase(v, virtv1.Scheduling, pod.CreationTimestamp)
		vmistatus.RecordPhase(v, virtv1.Scheduled, at)
		v.Status.Phase = virtv1.Scheduled
		l.fromPod(v)
		readyFromPod(v, pod, at)
		l.whileScheduling(v)
		l.updateVolumeStatus(v)
		setInterfaces(v, pod)
		v.Status.NodeName = pod.Spec.NodeName
		if v.Labels == nil {
			v.Labels = map[string]string{}
		}
		v.Labels[virtv1.NodeNameLabel] = pod.Spec.NodeName
		// Set before the VMI can migrate: without it a migration target
		// sets up a TCP proxy for a legacy launcher.
		if _, unix := pod.Annotations[virtv1.MigrationTransportUnixAnnotation]; unix {
			v.Status.MigrationTransport = virtv1.MigrationTransportUnix
		}
		vmistatus.RemoveCondition(v, virtv1.VirtualMachineInstanceSynchronized)
		return true
	}
}

// copyPodScheduled: the scheduler cannot place the launcher pod. As
// KubeVirt's AddPodCondition, the first such condition stays until the pod
// is scheduled: a changed message is not written again.
func copyPodScheduled(cond corev1.PodCondition) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		t := virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)
		if v.DeletionTimestamp != nil || rank(v.Status.Phase) >= rank(virtv1.Scheduled) || vmistatus.Condition(v, t) != nil {
			return false
		}
		v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{
			Type:               t,
			Status:             cond.Status,
			LastProbeTime:      cond.LastProbeTime,
			LastTransitionTime: cond.LastTransitionTime,
			Reason:             cond.Reason,
			Message:            cond.Message,
		})
		return true
	}
}

// notSynchronized: the VMI cannot proceed (bad spec, missing storage). As
// KubeVirt's updateStatus for a Pending VMI without a pod, Ready is False
// (PodNotExists), and a missing PVC also makes PodScheduled=False.
func notSynchronized(reason, message string, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		before, ok := pendingWithoutPod(v, at)
		if !ok {
			return false
		}
		if reason == ReasonFailedPVCNotFound {
			// KubeVirt replaces it on every sync, and sets no times.
			scheduled := virtv1.VirtualMachineInstanceCondition{
				Type:   virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled),
				Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message,
			}
			if cur := vmistatus.Condition(v, scheduled.Type); cur != nil {
				*cur = scheduled
			} else {
				v.Status.Conditions = append(v.Status.Conditions, scheduled)
			}
		}
		vmistatus.SetCondition(v, virtv1.VirtualMachineInstanceCondition{
			Type:               virtv1.VirtualMachineInstanceSynchronized,
			Status:             corev1.ConditionFalse,
			LastTransitionTime: at,
			Reason:             reason,
			Message:            message,
		})
		return !equality.Semantic.DeepEqual(before, &v.Status)
	}
}

// pendingWithoutPod is what KubeVirt's updateStatus sets on a VMI that is
// not deleted, is not past Pending and has no pod: phase Pending, Ready
// False (PodNotExists). It returns the status as it was before, to tell
// whether anything changed; ok is false when the VMI is past that point.
func pendingWithoutPod(v *virtv1.VirtualMachineInstance, at metav1.Time) (before *virtv1.VirtualMachineInstanceStatus, ok bool) {
	if v.DeletionTimestamp != nil || rank(v.Status.Phase) > rank(virtv1.Pending) {
		return nil, false
	}
	before = v.Status.DeepCopy()
	if v.Status.Phase == "" {
		v.Status.Phase = virtv1.Pending
		vmistatus.RecordPhase(v, virtv1.Pending, v.CreationTimestamp)
	}
	notReady(v, virtv1.PodNotExistsReason, msgPodNotExists, at)
	return before, true
}

// waitForDataVolumes: the VMI has no launcher pod yet because of its
// DataVolumes: one is not populated (it stays Pending), failed (it fails),
// or waits for its first consumer (Provisioning=True; temp, the temporary
// pod once it exists, lends the VMI its PodScheduled=False, and its failure
// fails the VMI). As KubeVirt's updateStatus for a VMI without a launcher
// pod: Ready is False (PodNotExists), activePods lists pods, temporary
// ones included, and DataVolumesReady sums the DataVolumes up; a failure
// sets no reason.
func waitForDataVolumes(dvs []dataVolume, pods []*corev1.Pod, temp *corev1.Pod, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		before, ok := pendingWithoutPod(v, at)
		if !ok {
			return false
		}
		setActivePods(v, pods)
		setDataVolumesReady(v, dvs)
		state := stateOf(dvs)
		failed := state.failed
		if !failed && state.firstConsumer {
			if vmistatus.Condition(v, virtv1.VirtualMachineInstanceProvisioning) == nil {
				v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{
					Type: virtv1.VirtualMachineInstanceProvisioning, Status: corev1.ConditionTrue,
				})
			}
			if temp != nil {
				syncPodScheduled(v, temp)
				failed = temp.Status.Phase == corev1.PodFailed || temp.DeletionTimestamp != nil || computeFailed(temp)
			}
		}
		if failed {
			vmistatus.RecordPhase(v, virtv1.Failed, at)
			v.Status.Phase = virtv1.Failed
		}
		return !equality.Semantic.DeepEqual(before, &v.Status)
	}
}

// computeFailed: the compute container terminated with a non-zero exit
// code (KubeVirt's isComputeContainerFailed).
func computeFailed(pod *corev1.Pod) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == template.ComputeContainer && s.State.Terminated != nil && s.State.Terminated.ExitCode != 0 {
			return true
		}
	}
	return false
}

// toFailed: the launcher pod is gone or failed after Pending.
func toFailed(reason, message string, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if !vmistatus.Fail(v, at) {
			return false
		}
		vmistatus.SetCondition(v, virtv1.VirtualMachineInstanceCondition{
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
