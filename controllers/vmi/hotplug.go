package vmi

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// A running VMI whose spec asks for more (or fewer) vCPUs or guest memory
// than it runs with — the VM controller's hotplug — is marked for the
// workload updater, which migrates it, and for the target's virt-handler,
// which plugs the difference in and removes the mark: KubeVirt v1.8.1's
// updateStatus adds VCPUChange or MemoryChange (True, no time) and, for
// memory, labels the VMI with the cluster's additional guest memory
// overhead ratio, which the target reads (requireCPUHotplug,
// requireMemoryHotplug, syncMemoryHotplug in watch/vmi/lifecycle.go).

// cpuHotplugAsked: the VMI may grow its sockets and its spec's vCPUs
// differ from the topology it reports.
func cpuHotplugAsked(v *virtv1.VirtualMachineInstance) bool {
	cpu, now := v.Spec.Domain.CPU, v.Status.CurrentCPUTopology
	if now == nil || cpu == nil || cpu.MaxSockets == 0 {
		return false
	}
	return template.VCPUs(cpu) != template.VCPUs(&virtv1.CPU{Sockets: now.Sockets, Cores: now.Cores, Threads: now.Threads})
}

// memoryHotplugAsked: the VMI may grow its memory and its spec's guest
// memory differs from what it last asked its guest for.
func memoryHotplugAsked(v *virtv1.VirtualMachineInstance) bool {
	mem, now := v.Spec.Domain.Memory, v.Status.Memory
	if now == nil || mem == nil || mem.Guest == nil || mem.MaxGuest == nil {
		return false
	}
	return now.GuestRequested == nil || mem.Guest.Value() != now.GuestRequested.Value()
}

// hotplugUnmarked reports whether markHotplug would change v.
func hotplugUnmarked(v *virtv1.VirtualMachineInstance, overheadRatio *string) bool {
	if v.Status.Phase != virtv1.Running {
		return false
	}
	if cpuHotplugAsked(v) && vmistatus.Condition(v, virtv1.VirtualMachineInstanceVCPUChange) == nil {
		return true
	}
	if !memoryHotplugAsked(v) {
		return false
	}
	if vmistatus.Condition(v, virtv1.VirtualMachineInstanceMemoryChange) == nil {
		return true
	}
	ratio, ok := v.Labels[virtv1.MemoryHotplugOverheadRatioLabel]
	return overheadRatio != nil && (!ok || ratio != *overheadRatio)
}

// markHotplug adds the marks a running VMI's asked-for hotplug lacks. A
// condition already there, even a failed one, stays as it is.
func markHotplug(overheadRatio *string) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if !hotplugUnmarked(v, overheadRatio) {
			return false
		}
		mark := func(t virtv1.VirtualMachineInstanceConditionType) {
			if vmistatus.Condition(v, t) == nil {
				v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: t, Status: corev1.ConditionTrue})
			}
		}
		if cpuHotplugAsked(v) {
			mark(virtv1.VirtualMachineInstanceVCPUChange)
		}
		if memoryHotplugAsked(v) {
			mark(virtv1.VirtualMachineInstanceMemoryChange)
			if overheadRatio != nil {
				if v.Labels == nil {
					v.Labels = map[string]string{}
				}
				v.Labels[virtv1.MemoryHotplugOverheadRatioLabel] = *overheadRatio
			}
		}
		return true
	}
}

// A running VMI whose volumes the VM controller moved to new claims for a
// volume migration (status.migratedVolumes names them) is marked for the
// workload updater, which migrates it, and for the target's virt-handler,
// which removes the mark once the volumes were copied: KubeVirt v1.8.1's
// VolumesChange condition ("migrate volumes", True), added by
// syncVolumesUpdate when requireVolumesUpdate holds (watch/vmi/storage.go).

// volumesMoveUnmarked: the VMI lists migrated volumes, has no
// VolumesChange condition of any status, and names a claim that is none
// of the migrated volumes' sources — its spec took the destinations.
// (Like KubeVirt's, any other claim of the VMI's counts too.)
func volumesMoveUnmarked(v *virtv1.VirtualMachineInstance) bool {
	if v.Status.Phase != virtv1.Running || len(v.Status.MigratedVolumes) == 0 ||
		vmistatus.Condition(v, virtv1.VirtualMachineInstanceVolumesChange) != nil {
		return false
	}
	sources := map[string]bool{}
	for _, m := range v.Status.MigratedVolumes {
		if m.SourcePVCInfo != nil {
			sources[m.SourcePVCInfo.ClaimName] = true
		}
	}
	for _, vol := range v.Spec.Volumes {
		if claim := template.VolumeClaim(vol); claim != "" && !sources[claim] {
			return true
		}
	}
	return false
}

// claimsMoved: a volume of the running VMI's spec names another claim than
// its volume status describes (a volume migration put the destination in
// the spec). KubeVirt's updateVolumeStatus, which runs on every sync of a
// running VMI, then describes the new claim; virtshard, which writes a
// running VMI's volume status only on such a change, does it here.
func claimsMoved(v *virtv1.VirtualMachineInstance) bool {
	if v.Status.Phase != virtv1.Running {
		return false
	}
	described := map[string]string{}
	for _, s := range v.Status.VolumeStatus {
		if s.PersistentVolumeClaimInfo != nil {
			described[s.Name] = s.PersistentVolumeClaimInfo.ClaimName
		}
	}
	for _, vol := range v.Spec.Volumes {
		if claim, ok := described[vol.Name]; ok && claim != template.VolumeClaim(vol) {
			return true
		}
	}
	return false
}

// followVolumeMove describes the running VMI's moved claims in its volume
// status and adds the VolumesChange condition volumesMoveUnmarked asks
// for.
func followVolumeMove(o observed, now metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		changed := false
		if claimsMoved(v) {
			before := slices.Clone(v.Status.VolumeStatus)
			o.updateVolumeStatus(v)
			changed = !equality.Semantic.DeepEqual(before, v.Status.VolumeStatus)
		}
		if volumesMoveUnmarked(v) {
			v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{
				Type: virtv1.VirtualMachineInstanceVolumesChange, Status: corev1.ConditionTrue,
				Message: "migrate volumes", LastTransitionTime: now,
			})
			changed = true
		}
		return changed
	}
}
