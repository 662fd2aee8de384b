package vmi

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/patch"
	"github.com/virtshard/virtshard/controllers/status"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// The status a VMI takes on its way to Scheduled, as KubeVirt v1.8.1's VMI
// controller computes it in updateStatus
// (pkg/virt-controller/watch/vmi/lifecycle.go, storage.go). KubeVirt
// recomputes all of it on every sync and writes it in up to three updates
// (Scheduling, the sync after the pod event, Scheduled); here each step is
// one intent, a pure function of the VMI and what the sync observed (its
// pods, claims, DataVolumes and the config), so it rides in the one patch
// of its step.
//
// Each intent is written against whatever version of the VMI the batcher
// patches (its informer copy, or a fresh read after a conflict) and returns
// false when it no longer applies, so a late intent can never move a VMI
// backwards, nor add a finalizer to a VMI being deleted (the API server
// refuses that). The file follows a VMI's path: Pending without a pod,
// Scheduling, Scheduled, Failed, gone; then the pieces the steps share.

// Condition messages of KubeVirt's syncReadyConditionFromPod.
const (
	msgPodNotExists    = "virt-launcher pod has not yet been scheduled"
	msgPodTerminating  = "virt-launcher pod is terminating"
	msgGuestNotRunning = "Guest VM is not reported as running"
	msgPodReadyMissing = "virt-launcher pod is missing the Ready condition"
)

// observed is what an intent reads besides the VMI: the launcher pods as
// the sync saw them, the claims and DataVolumes, read when the intent is
// applied (so that a retry after a conflict reads them again, as KubeVirt's
// next sync would), and the config.
type observed struct {
	// pod is the active launcher pod.
	pod *corev1.Pod
	// pods are the VMI's pods (activePods counts those it controls).
	pods   []*corev1.Pod
	claims claims
	// dataVolumes and cdi are nil when the cluster does not serve CDI.
	dataVolumes dataVolumes
	cdi         cdiConfig
	// launcherImage is the image virt-controller renders (--launcher-image).
	launcherImage string
	// memoryOverhead: the VmiMemoryOverheadReport feature gate is on.
	memoryOverhead bool
	// vsockCID is the CID the VMI gets at the handoff, if it asks for
	// VSOCK (cidAllocator).
	vsockCID *uint32
}

// observe snapshots what the intents for pod read.
func (c *Controller) observe(pod *corev1.Pod, pods []*corev1.Pod) observed {
	return observed{
		pod:            pod,
		pods:           pods,
		claims:         c.env.Objects,
		dataVolumes:    c.dataVolumes(),
		cdi:            c.cdiConfig(),
		launcherImage:  c.env.Template.LauncherImage,
		memoryOverhead: c.env.ClusterConfig.Current().VmiMemoryOverheadReportEnabled(),
	}
}

var phaseOrder = []virtv1.VirtualMachineInstancePhase{"", virtv1.Pending, virtv1.Scheduling, virtv1.Scheduled, virtv1.Running}

// rank orders phases along the way to Running; final phases rank last.
func rank(p virtv1.VirtualMachineInstancePhase) int {
	if i := slices.Index(phaseOrder, p); i >= 0 {
		return i
	}
	return len(phaseOrder)
}

type mutation = status.Mutation[*virtv1.VirtualMachineInstance]

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
		return observedIfChanged(v, before)
	}
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
		return observedIfChanged(v, before)
	}
}

// observedIfChanged reports whether v's status differs from before, and
// then records the API version on v, as KubeVirt's first write of a VMI
// does (patch.ObserveAPIVersion).
func observedIfChanged(v *virtv1.VirtualMachineInstance, before *virtv1.VirtualMachineInstanceStatus) bool {
	if equality.Semantic.DeepEqual(before, &v.Status) {
		return false
	}
	patch.ObserveAPIVersion(v)
	return true
}

// toScheduling: the launcher pod exists (created at at). The status is
// KubeVirt's by the sync after the pod event (updateStatus, Pending with a
// pod, then Scheduling): Ready=False until the guest runs, activePods, the
// launcher image, the pod's QoS class and PodScheduled=False, no
// Synchronized or Provisioning.
func toScheduling(o observed, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if v.DeletionTimestamp != nil || rank(v.Status.Phase) >= rank(virtv1.Scheduling) {
			return false
		}
		ensureFinalizer(v)
		patch.ObserveAPIVersion(v)
		vmistatus.RecordPhase(v, virtv1.Pending, v.CreationTimestamp)
		vmistatus.RecordPhase(v, virtv1.Scheduling, at)
		v.Status.Phase = virtv1.Scheduling
		o.fromPod(v)
		notReady(v, virtv1.GuestNotRunningReason, msgGuestNotRunning, at)
		o.whileScheduling(v)
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

// toScheduled: the launcher pod runs and is ready on its node — the handoff
// to the node agent. The status is KubeVirt's at Scheduled (updateStatus,
// Scheduling with a ready pod): the node, the volumes' claims, the pod
// interfaces, the migration transport, no PodScheduled, with one
// difference: Ready is the pod's, as KubeVirt writes it in an update of its
// own once virt-handler reports the guest Running (until then it says
// GuestNotRunning). virtshard does not write the VMI after the handoff, so
// the Running VMI ends up as KubeVirt's.
func toScheduled(o observed, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if v.DeletionTimestamp != nil || rank(v.Status.Phase) >= rank(virtv1.Scheduled) {
			return false
		}
		pod := o.pod
		ensureFinalizer(v)
		patch.ObserveAPIVersion(v)
		vmistatus.RecordPhase(v, virtv1.Pending, v.CreationTimestamp)
		vmistatus.RecordPhase(v, virtv1.Scheduling, pod.CreationTimestamp)
		vmistatus.RecordPhase(v, virtv1.Scheduled, at)
		v.Status.Phase = virtv1.Scheduled
		o.fromPod(v)
		readyFromPod(v, pod, at)
		o.whileScheduling(v)
		o.updateVolumeStatus(v)
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
		if o.vsockCID != nil {
			v.Status.VSOCKCID = ptr.To(*o.vsockCID)
		}
		vmistatus.RemoveCondition(v, virtv1.VirtualMachineInstanceSynchronized)
		return true
	}
}

// followingPod: a Scheduled or Running VMI keeps what KubeVirt's
// updateStatus sets from its pods on every sync: activePods (a migration's
// target pod joins it) and the launcher image (virt-handler clears it when
// a migration hands the VMI to the target pod, whose image then counts).
// It writes nothing when that is what the VMI already says.
func followingPod(o observed) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if v.DeletionTimestamp != nil || (v.Status.Phase != virtv1.Scheduled && v.Status.Phase != virtv1.Running) {
			return false
		}
		before := v.DeepCopy()
		o.fromPod(v)
		return !equality.Semantic.DeepEqual(before.Status, v.Status) || !equality.Semantic.DeepEqual(before.Labels, v.Labels)
	}
}

// podStale tells, without a copy of the VMI, whether followingPod would
// change it: the pods it controls or the launcher image moved on.
func podStale(v *virtv1.VirtualMachineInstance, pod *corev1.Pod, pods []*corev1.Pod) bool {
	n := 0
	for _, p := range pods {
		if !metav1.IsControlledBy(p, v) {
			continue
		}
		n++
		if node, ok := v.Status.ActivePods[p.UID]; !ok || node != p.Spec.NodeName {
			return true
		}
	}
	if n != len(v.Status.ActivePods) {
		return true
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == template.ComputeContainer {
			return c.Image != v.Status.LauncherContainerImageVersion
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
		patch.ObserveAPIVersion(v)
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

// podGone: the launcher pod of a VMI past Pending is gone. As KubeVirt's
// updateStatus, the VMI fails and nothing else is said: no condition, no
// event (settle then says why it is not Ready). Unlike KubeVirt's patch of
// a Scheduled or Running VMI, the Failed transition is recorded
// (bench/differential/differences.go).
func podGone(at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if !vmistatus.Fail(v, at) {
			return false
		}
		patch.ObserveAPIVersion(v)
		return true
	}
}

// settle: the VMI is final. As KubeVirt's updateStatus for a final VMI
// (lifecycle.go, syncReadyConditionFromPod and the IsFinal case): Ready is
// False because its pod is gone (PodNotExists), going (PodTerminating) or
// runs no guest (GuestNotRunning), activePods follows its pods, and once
// every pod is gone its finalizer goes, and with it the launcher image
// and the outdated-launcher label.
func settle(pod *corev1.Pod, pods []*corev1.Pod, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if !v.IsFinal() || v.DeletionTimestamp != nil {
			return false
		}
		before := v.DeepCopy()
		switch {
		case pod == nil:
			notReady(v, virtv1.PodNotExistsReason, msgPodNotExists, at)
		case podDownOrGoingDown(pod):
			notReady(v, virtv1.PodTerminatingReason, msgPodTerminating, at)
		default:
			notReady(v, virtv1.GuestNotRunningReason, msgGuestNotRunning, at)
		}
		setActivePods(v, pods)
		if len(pods) == 0 {
			finalize(v)
			delete(v.Labels, virtv1.OutdatedLauncherImageLabel)
			v.Status.LauncherContainerImageVersion = ""
		}
		return !equality.Semantic.DeepEqual(before, v)
	}
}

// podDownOrGoingDown is KubeVirt's IsPodDownOrGoingDown: the pod ended,
// its compute container did, or it is being deleted.
func podDownOrGoingDown(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || kinds.PodFinished(pod) {
		return true
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == template.ComputeContainer {
			return s.State.Terminated != nil
		}
	}
	return false
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

// fromPod is what KubeVirt's updateStatus sets on every sync of a VMI whose
// launcher pod exists, before it looks at the phase: activePods, the
// launcher image, DataVolumesReady, the backend-storage volume, the memory
// overhead.
func (o observed) fromPod(v *virtv1.VirtualMachineInstance) {
	setActivePods(v, o.pods)
	setLauncherImage(v, o.pod, o.launcherImage)
	setDataVolumesReady(v, dataVolumesOf(v, o.claims, o.dataVolumes))
	if pvc := backendStorageClaim(v, o.claims); pvc != nil {
		setBackendStorageVolume(v, pvc)
	}
	if o.memoryOverhead {
		setMemoryOverhead(v, o.pod)
	}
}

// whileScheduling is updateStatus's Scheduling case before the pod is
// ready: no Provisioning, the pod's QoS class, its PodScheduled=False
// copied or the VMI's removed.
func (o observed) whileScheduling(v *virtv1.VirtualMachineInstance) {
	vmistatus.RemoveCondition(v, virtv1.VirtualMachineInstanceProvisioning)
	setQOSClass(v, o.pod)
	syncPodScheduled(v, o.pod)
}

// setActivePods is KubeVirt's setActivePods: every pod the VMI controls, by
// UID, with its node; left alone while there is none and never was.
func setActivePods(v *virtv1.VirtualMachineInstance, pods []*corev1.Pod) {
	active := map[types.UID]string{}
	for _, pod := range pods {
		if metav1.IsControlledBy(pod, v) {
			active[pod.UID] = pod.Spec.NodeName
		}
	}
	if len(active) == 0 && v.Status.ActivePods == nil {
		return
	}
	v.Status.ActivePods = active
}

// setLauncherImage is setLauncherContainerInfo: the compute container's
// image, and the outdated-launcher label while it is not the one
// virt-controller renders now.
func setLauncherImage(v *virtv1.VirtualMachineInstance, pod *corev1.Pod, current string) {
	image := ""
	for _, c := range pod.Spec.Containers {
		if c.Name == template.ComputeContainer {
			image = c.Image
			break
		}
	}
	if image != "" && image != current {
		if v.Labels == nil {
			v.Labels = map[string]string{}
		}
		v.Labels[virtv1.OutdatedLauncherImageLabel] = ""
	} else {
		delete(v.Labels, virtv1.OutdatedLauncherImageLabel)
	}
	v.Status.LauncherContainerImageVersion = image
}

// setQOSClass: "ensure that the QOS class on the VMI matches to Pods QOS
// class" (updateStatus, Scheduling).
func setQOSClass(v *virtv1.VirtualMachineInstance, pod *corev1.Pod) {
	if pod.Status.QOSClass == "" {
		v.Status.QOSClass = nil
		return
	}
	qos := pod.Status.QOSClass
	v.Status.QOSClass = &qos
}

// setMemoryOverhead is updateMemoryOverheadStatusFromPod: the pod's
// kubevirt.io/memory-overhead-bytes, left alone when missing or unparsable.
func setMemoryOverhead(v *virtv1.VirtualMachineInstance, pod *corev1.Pod) {
	raw, ok := pod.Annotations[virtv1.MemoryOverheadAnnotationBytes]
	if !ok {
		return
	}
	bytes, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return // KubeVirt logs a warning and goes on
	}
	if v.Status.Memory == nil {
		v.Status.Memory = &virtv1.MemoryStatus{}
	}
	v.Status.Memory.MemoryOverhead = resource.NewQuantity(bytes, resource.BinarySI)
}

// syncPodScheduled copies the pod's PodScheduled=False to the VMI, once
// (AddPodCondition adds a condition the VMI lacks and updates none), or
// removes the VMI's when the pod has none that is False.
func syncPodScheduled(v *virtv1.VirtualMachineInstance, pod *corev1.Pod) {
	t := virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)
	cond := vmistatus.PodCondition(pod, corev1.PodScheduled)
	if cond == nil || cond.Status != corev1.ConditionFalse {
		vmistatus.RemoveCondition(v, t)
		return
	}
	if vmistatus.Condition(v, t) == nil {
		v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{
			Type:               t,
			Status:             cond.Status,
			LastProbeTime:      cond.LastProbeTime,
			LastTransitionTime: cond.LastTransitionTime,
			Reason:             cond.Reason,
			Message:            cond.Message,
		})
	}
}

// readyFromPod is syncReadyConditionFromPod for a running guest: the pod's
// Ready condition, probe time included, or False when the pod has none.
// KubeVirt writes it once virt-handler reports the VMI Running; virtshard
// writes it with the handoff (toScheduled).
func readyFromPod(v *virtv1.VirtualMachineInstance, pod *corev1.Pod, now metav1.Time) {
	if ready := vmistatus.PodCondition(pod, corev1.PodReady); ready != nil {
		vmistatus.UpdateCondition(v, virtv1.VirtualMachineInstanceCondition{
			Type:               virtv1.VirtualMachineInstanceReady,
			Status:             ready.Status,
			Reason:             ready.Reason,
			Message:            ready.Message,
			LastProbeTime:      ready.LastProbeTime,
			LastTransitionTime: ready.LastTransitionTime,
		})
		return
	}
	notReady(v, virtv1.PodConditionMissingReason, msgPodReadyMissing, now)
}

// notReady sets Ready=False as syncReadyConditionFromPod does before the
// guest runs.
func notReady(v *virtv1.VirtualMachineInstance, reason, message string, now metav1.Time) {
	vmistatus.UpdateCondition(v, virtv1.VirtualMachineInstanceCondition{
		Type:               virtv1.VirtualMachineInstanceReady,
		Status:             corev1.ConditionFalse,
		Reason:             reason,
		Message:            message,
		LastProbeTime:      now,
		LastTransitionTime: now,
	})
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

// waitForSync: a receiver VMI waits, without a pod, for the decentralized
// migration that brings its VM, as KubeVirt's updateStatus sets an
// unprocessed migration target: phase WaitingForSync, Ready False
// (PodNotExists), DataVolumesReady, the API version observed.
func (o observed) waitForSync(at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if v.DeletionTimestamp != nil || rank(v.Status.Phase) > rank(virtv1.Pending) {
			return false
		}
		patch.ObserveAPIVersion(v)
		setDataVolumesReady(v, dataVolumesOf(v, o.claims, o.dataVolumes))
		v.Status.Phase = virtv1.WaitingForSync
		vmistatus.RecordPhase(v, virtv1.WaitingForSync, at)
		notReady(v, virtv1.PodNotExistsReason, msgPodNotExists, at)
		return true
	}
}

// releaseReceiver: a receiver VMI deleted while it waits lets go at once,
// as KubeVirt's updateStatus for a deleted WaitingForSync VMI: its own
// finalizers, and the VM controller's once no VM owns it.
func releaseReceiver(ownerGone bool) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		n := len(v.Finalizers)
		v.Finalizers = slices.DeleteFunc(v.Finalizers, func(f string) bool {
			return f == virtv1.VirtualMachineInstanceFinalizer || f == virtv1.DeprecatedVirtualMachineInstanceFinalizer ||
				(ownerGone && f == virtv1.VirtualMachineControllerFinalizer)
		})
		return len(v.Finalizers) != n
	}
}

func ensureFinalizer(v *virtv1.VirtualMachineInstance) {
	if !slices.Contains(v.Finalizers, virtv1.VirtualMachineInstanceFinalizer) {
		v.Finalizers = append(v.Finalizers, virtv1.VirtualMachineInstanceFinalizer)
	}
}
