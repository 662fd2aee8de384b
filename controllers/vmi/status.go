package vmi

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// The status a VMI takes from its launcher pod and its claims on the way to
// Scheduled, as KubeVirt v1.8.1's VMI controller computes it in
// updateStatus (pkg/virt-controller/watch/vmi/lifecycle.go, storage.go).
// KubeVirt recomputes all of it on every sync and writes it in up to three
// updates (Scheduling, the sync after the pod event, Scheduled); here the
// intents of mutations.go apply it, so it rides in the one patch of each.

// Condition reasons and messages of KubeVirt's syncReadyConditionFromPod
// and of the PersistentVolumeClaimInfo it fills.
const (
	msgPodNotExists    = "virt-launcher pod has not yet been scheduled"
	msgGuestNotRunning = "Guest VM is not reported as running"
	msgPodReadyMissing = "virt-launcher pod is missing the Ready condition"
	reasonPVCNotReady  = "PVCNotReady"
	msgUtilityBlock    = "Utility volume PVC %s must be filesystem mode, not block mode"
	// defaultFilesystemOverhead is storagetypes.DefaultFSOverhead: what
	// KubeVirt reports without CDI, and CDI's own default.
	defaultFilesystemOverhead = virtv1.Percent("0.055")
)

// claims are the PVC caches the status reads (caches.TemplateObjects).
type claims interface {
	PVC(namespace, name string) (*corev1.PersistentVolumeClaim, bool)
	PVCs(namespace string) []*corev1.PersistentVolumeClaim
}

// launcher is what a status intent reads: the launcher pods as the sync saw
// them, and the claims, read when the intent is applied (so that a retry
// after a conflict reads them again, as KubeVirt's next sync would).
type launcher struct {
	// pod is the active launcher pod.
	pod *corev1.Pod
	// pods are the VMI's pods (activePods counts those it controls).
	pods   []*corev1.Pod
	claims claims
	// image is the launcher image virt-controller renders (--launcher-image).
	image string
	// memoryOverhead: the VmiMemoryOverheadReport feature gate is on.
	memoryOverhead bool
	// dataVolumes lists a VMI's DataVolumes, when the intent is applied;
	// nil when the cluster does not serve CDI.
	dataVolumes func(*virtv1.VirtualMachineInstance) []dataVolume
}

// launcher snapshots what the status intents for pod need.
func (c *Controller) launcher(pod *corev1.Pod, pods []*corev1.Pod) launcher {
	l := launcher{
		pod:            pod,
		pods:           pods,
		claims:         c.env.Objects,
		image:          c.env.Template.LauncherImage,
		memoryOverhead: c.env.ClusterConfig.Current().VmiMemoryOverheadReportEnabled(),
	}
	if c.env.Objects.DataVolumes != nil {
		l.dataVolumes = c.dataVolumesOf
	}
	return l
}

// fromPod is what KubeVirt's updateStatus sets on every sync of a VMI whose
// launcher pod exists, before it looks at the phase: activePods, the
// launcher image, DataVolumesReady, the backend-storage volume, the memory
// overhead.
func (l launcher) fromPod(v *virtv1.VirtualMachineInstance) {
	setActivePods(v, l.pods)
	setLauncherImage(v, l.pod, l.image)
	if l.dataVolumes != nil {
		setDataVolumesReady(v, l.dataVolumes(v))
	}
	if pvc := backendStorageClaim(v, l.claims); pvc != nil {
		setBackendStorageVolume(v, pvc)
	}
	if l.memoryOverhead {
		setMemoryOverhead(v, l.pod)
	}
}

// whileScheduling is updateStatus's Scheduling case before the pod is
// ready: no Provisioning, the pod's QoS class, its PodScheduled=False
// copied or the VMI's removed.
func (l launcher) whileScheduling(v *virtv1.VirtualMachineInstance) {
	vmistatus.RemoveCondition(v, virtv1.VirtualMachineInstanceProvisioning)
	setQOSClass(v, l.pod)
	syncPodScheduled(v, l.pod)
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
// writes it with the handoff (see mutations.go, toScheduled).
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

// backendStorageClaim is backendstorage.PVCForVMI: the PVC labelled
// persistent-state-for=<vmi>, else the legacy persistent-state-for-<vmi>.
func backendStorageClaim(v *virtv1.VirtualMachineInstance, claims claims) *corev1.PersistentVolumeClaim {
	const prefix = "persistent-state-for"
	var legacy *corev1.PersistentVolumeClaim
	for _, pvc := range claims.PVCs(v.Namespace) {
		if pvc.DeletionTimestamp != nil {
			continue
		}
		if name, ok := pvc.Labels[prefix]; ok && name == v.Name {
			return pvc
		}
		if pvc.Name == prefix+"-"+v.Name {
			legacy = pvc
		}
	}
	return legacy
}

// setBackendStorageVolume is BackendStorage.UpdateVolumeStatus: the
// backend-storage claim's name and access modes under its own name.
func setBackendStorageVolume(v *virtv1.VirtualMachineInstance, pvc *corev1.PersistentVolumeClaim) {
	for i := range v.Status.VolumeStatus {
		s := &v.Status.VolumeStatus[i]
		if s.Name == pvc.Name {
			if s.PersistentVolumeClaimInfo == nil {
				s.PersistentVolumeClaimInfo = &virtv1.PersistentVolumeClaimInfo{}
			}
			s.PersistentVolumeClaimInfo.ClaimName = pvc.Name
			s.PersistentVolumeClaimInfo.AccessModes = pvc.Spec.AccessModes
			return
		}
	}
	v.Status.VolumeStatus = append(v.Status.VolumeStatus, virtv1.VolumeStatus{
		Name:                      pvc.Name,
		PersistentVolumeClaimInfo: &virtv1.PersistentVolumeClaimInfo{ClaimName: pvc.Name, AccessModes: pvc.Spec.AccessModes},
	})
}

// updateVolumeStatus is KubeVirt's updateVolumeStatus as it runs when the
// pod is ready: a status per volume (and utility volume), sorted by name,
// kept from the VMI's where it has one; claim volumes get the claim's
// PersistentVolumeClaimInfo, so that virt-handler need not GET the claim.
// Volumes the pod lacks are hotplugged; virtshard creates no attachment
// pods, so theirs is the phase of their claim. Statuses of volumes no longer
// in the spec go with their (absent) attachment pods; the backend-storage
// volume stays.
func (l launcher) updateVolumeStatus(v *virtv1.VirtualMachineInstance) {
	old := map[string]virtv1.VolumeStatus{}
	for _, s := range v.Status.VolumeStatus {
		old[s.Name] = s
	}
	inPod := map[string]bool{}
	for _, pv := range l.pod.Spec.Volumes {
		inPod[pv.Name] = true
	}
	var statuses []virtv1.VolumeStatus
	if pvc := backendStorageClaim(v, l.claims); pvc != nil {
		if s, ok := old[pvc.Name]; ok {
			statuses = append(statuses, s)
		}
	}
	for _, vol := range v.Spec.Volumes {
		s, ok := old[vol.Name]
		if !ok {
			s = virtv1.VolumeStatus{Name: vol.Name}
		}
		delete(old, vol.Name)
		if vol.MemoryDump != nil && s.MemoryDumpVolume == nil {
			s.MemoryDumpVolume = &virtv1.DomainMemoryDumpInfo{ClaimName: vol.Name} // sic: the volume's name
		}
		claim := claimName(vol)
		hotpluggable := vol.PersistentVolumeClaim != nil || vol.DataVolume != nil || vol.MemoryDump != nil
		if hotpluggable && !inPod[vol.Name] {
			l.hotplugStatus(v.Namespace, claim, &s)
		}
		if hotpluggable {
			l.claimInfo(v.Namespace, claim, false, &s)
		}
		statuses = append(statuses, s)
	}
	for _, uv := range v.Spec.UtilityVolumes {
		s, ok := old[uv.Name]
		if !ok {
			s = virtv1.VolumeStatus{Name: uv.Name}
		}
		delete(old, uv.Name)
		l.hotplugStatus(v.Namespace, uv.ClaimName, &s)
		l.claimInfo(v.Namespace, uv.ClaimName, true, &s)
		statuses = append(statuses, s)
	}
	slices.SortStableFunc(statuses, func(a, b virtv1.VolumeStatus) int { return strings.Compare(a.Name, b.Name) })
	v.Status.VolumeStatus = statuses
}

// hotplugStatus is processHotplugVolumeStatus without an attachment pod:
// unless the volume is ready, its phase, reason and message are its
// claim's (getVolumePhaseMessageReason).
func (l launcher) hotplugStatus(namespace, claim string, s *virtv1.VolumeStatus) {
	if s.HotplugVolume == nil {
		s.HotplugVolume = &virtv1.HotplugVolumeStatus{}
	}
	if s.Phase == virtv1.VolumeReady {
		return
	}
	s.HotplugVolume.AttachPodUID = ""
	pvc, ok := l.claims.PVC(namespace, claim)
	switch {
	case !ok:
		s.Phase, s.Reason, s.Message = virtv1.VolumePending, ReasonFailedPVCNotFound, fmt.Sprintf("PVC %s not found", claim)
	case pvc.Status.Phase == corev1.ClaimPending:
		s.Phase, s.Reason, s.Message = virtv1.VolumePending, reasonPVCNotReady, "PVC is in phase ClaimPending"
	case pvc.Status.Phase == corev1.ClaimBound:
		s.Phase, s.Reason, s.Message = virtv1.VolumeBound, reasonPVCNotReady, "PVC is in phase Bound"
	default:
		s.Phase, s.Reason, s.Message = virtv1.VolumePending, reasonPVCNotReady, "PVC is in phase Lost"
	}
}

// claimInfo is processPVCInfo: what the claim says, as far as it exists.
// A Pending claim (no provisioner yet) has no capacity, and KubeVirt
// reports it so.
func (l launcher) claimInfo(namespace, claim string, utility bool, s *virtv1.VolumeStatus) {
	pvc, ok := l.claims.PVC(namespace, claim)
	if !ok {
		return
	}
	block := pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock
	if utility && block {
		s.Phase, s.Reason, s.Message = virtv1.VolumePending, reasonPVCNotReady, fmt.Sprintf(msgUtilityBlock, claim)
		return
	}
	overhead := l.filesystemOverhead(block)
	s.PersistentVolumeClaimInfo = &virtv1.PersistentVolumeClaimInfo{
		ClaimName:          pvc.Name,
		AccessModes:        pvc.Spec.AccessModes,
		VolumeMode:         pvc.Spec.VolumeMode,
		Capacity:           pvc.Status.Capacity,
		Requests:           pvc.Spec.Resources.Requests,
		Preallocated:       preallocated(pvc.Annotations),
		FilesystemOverhead: &overhead,
	}
}

// filesystemOverhead is getFilesystemOverhead: 5.5% without CDI; with CDI,
// 0 for block claims and otherwise CDIConfig's, which virtshard does not
// read: CDI's default, 5.5%, is taken (docs/controller.md).
func (l launcher) filesystemOverhead(block bool) virtv1.Percent {
	if l.dataVolumes != nil && block { // CDI is served
		return "0"
	}
	return defaultFilesystemOverhead
}

// preallocated is storagetypes.IsPreallocated.
func preallocated(annotations map[string]string) bool {
	for k, v := range annotations {
		if v == "true" && (strings.Contains(k, "/storage.preallocation") || strings.Contains(k, "/storage.thick-provisioned")) {
			return true
		}
	}
	return false
}

// claimName is storagetypes.PVCNameFromVirtVolume.
func claimName(vol virtv1.Volume) string {
	switch {
	case vol.DataVolume != nil:
		return vol.DataVolume.Name
	case vol.PersistentVolumeClaim != nil:
		return vol.PersistentVolumeClaim.ClaimName
	case vol.MemoryDump != nil:
		return vol.MemoryDump.ClaimName
	}
	return ""
}
