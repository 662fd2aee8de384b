package vmi

import (
	"fmt"
	"slices"
	"strings"

	"github.com/virtshard/virtshard/controllers/template"
	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// The volume statuses of a VMI at Scheduled, and its backend-storage
// volume, as KubeVirt v1.8.1 fills them from the claims
// (pkg/virt-controller/watch/vmi/storage.go, pkg/storage/backend-storage).

// The reason and messages of the PersistentVolumeClaimInfo KubeVirt fills.
const (
	reasonPVCNotReady = "PVCNotReady"
	msgUtilityBlock   = "Utility volume PVC %s must be filesystem mode, not block mode"
	// defaultFilesystemOverhead is storagetypes.DefaultFSOverhead: what
	// KubeVirt reports without CDI, and CDI's own default.
	defaultFilesystemOverhead = virtv1.Percent("0.055")
)

// claims are the PVC caches the status reads (caches.TemplateObjects).
type claims interface {
	PVC(namespace, name string) (*corev1.PersistentVolumeClaim, bool)
	PVCs(namespace string) []*corev1.PersistentVolumeClaim
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
func (o observed) updateVolumeStatus(v *virtv1.VirtualMachineInstance) {
	old := map[string]virtv1.VolumeStatus{}
	for _, s := range v.Status.VolumeStatus {
		old[s.Name] = s
	}
	inPod := map[string]bool{}
	for _, pv := range o.pod.Spec.Volumes {
		inPod[pv.Name] = true
	}
	var statuses []virtv1.VolumeStatus
	if pvc := backendStorageClaim(v, o.claims); pvc != nil {
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
		claim := template.VolumeClaim(vol)
		hotpluggable := vol.PersistentVolumeClaim != nil || vol.DataVolume != nil || vol.MemoryDump != nil
		if hotpluggable && !inPod[vol.Name] {
			o.hotplugStatus(v.Namespace, claim, &s)
		}
		if hotpluggable {
			o.claimInfo(v.Namespace, claim, false, &s)
		}
		statuses = append(statuses, s)
	}
	for _, uv := range v.Spec.UtilityVolumes {
		s, ok := old[uv.Name]
		if !ok {
			s = virtv1.VolumeStatus{Name: uv.Name}
		}
		delete(old, uv.Name)
		o.hotplugStatus(v.Namespace, uv.ClaimName, &s)
		o.claimInfo(v.Namespace, uv.ClaimName, true, &s)
		statuses = append(statuses, s)
	}
	slices.SortStableFunc(statuses, func(a, b virtv1.VolumeStatus) int { return strings.Compare(a.Name, b.Name) })
	v.Status.VolumeStatus = statuses
}

// hotplugStatus is processHotplugVolumeStatus without an attachment pod:
// unless the volume is ready, its phase, reason and message are its
// claim's (getVolumePhaseMessageReason).
func (o observed) hotplugStatus(namespace, claim string, s *virtv1.VolumeStatus) {
	if s.HotplugVolume == nil {
		s.HotplugVolume = &virtv1.HotplugVolumeStatus{}
	}
	if s.Phase == virtv1.VolumeReady {
		return
	}
	s.HotplugVolume.AttachPodUID = ""
	pvc, ok := o.claims.PVC(namespace, claim)
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
func (o observed) claimInfo(namespace, claim string, utility bool, s *virtv1.VolumeStatus) {
	pvc, ok := o.claims.PVC(namespace, claim)
	if !ok {
		return
	}
	block := pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock
	if utility && block {
		s.Phase, s.Reason, s.Message = virtv1.VolumePending, reasonPVCNotReady, fmt.Sprintf(msgUtilityBlock, claim)
		return
	}
	overhead := o.filesystemOverhead(pvc.Spec.StorageClassName, block)
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

// filesystemOverhead is getFilesystemOverhead: 5.5% unless exactly one
// CDI is installed; with it, 0 for block claims and otherwise CDIConfig's
// for the claim's class. While CDI has written no config yet KubeVirt
// fails the VMI's sync and tries again; virtshard reports 5.5% until the
// config is there (docs/controller.md).
func (o observed) filesystemOverhead(class *string, block bool) virtv1.Percent {
	if o.cdi == nil {
		return defaultFilesystemOverhead
	}
	overhead, installed := o.cdi.FilesystemOverhead(class)
	switch {
	case !installed:
		return defaultFilesystemOverhead
	case block:
		return "0"
	case overhead == "":
		return defaultFilesystemOverhead
	}
	return virtv1.Percent(overhead)
}

// cdiConfig is CDI's config as the VMI controller reads it
// (caches.TemplateObjects).
type cdiConfig interface {
	FilesystemOverhead(class *string) (overhead string, installed bool)
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
