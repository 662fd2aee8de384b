package handler

import (
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"math"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// What a simulated domain reports where a real one reports its host's
// facts (virt-handler v1.8.1 reads them from libvirt and the launcher).
const (
	// MachineType is what libvirt in KubeVirt v1.8.1's launcher expands
	// the q35 alias to. The node labeller labels nodes with every machine
	// type they run (bench/cluster's nodes carry this one), and
	// virt-controller selects a migration target by status.machine.type.
	MachineType = "pc-q35-rhel9.6.0"
	// infoSourceDomain says an interface's figures come from the domain
	// (KubeVirt's netvmispec.InfoSourceDomain).
	infoSourceDomain = "domain"
	// selinuxNone is what virt-handler writes on a host without SELinux.
	selinuxNone = "none"
	// isoSize is the size of a generated ISO disk (cloud-init, config
	// map, …), which virt-handler reports once the VMI runs.
	isoSize = 1 << 20
	// Ports the target's migration proxy listens on (the keys of
	// targetDirectMigrationNodePorts; 0 is libvirt's, 49152 and 49153 the
	// launcher's direct and block-migration ports).
	proxyPortLibvirt, proxyPortDirect, proxyPortBlock = "37261", "41387", "44223"
)

// Event reasons and messages virt-handler v1.8.1 records.
const (
	reasonCreated   = "Created"
	reasonStarted   = "Started"
	reasonStopped   = "Stopped"
	reasonMigrating = "Migrating"
	reasonPreparing = "PreparingTarget"
	reasonMigrated  = "Migrated"
)

// defined is the status virt-handler writes once it defined the domain
// of a Scheduled VMI: its SELinux context, whether it can migrate, how,
// and its container disks' checksums. The phase stays Scheduled.
func defined(vmi *virtv1.VirtualMachineInstance) {
	s := &vmi.Status
	s.SelinuxContext = selinuxNone
	setCondition(s, migratability(vmi))
	setCondition(s, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceIsStorageLiveMigratable, Status: corev1.ConditionTrue})
	s.MigrationMethod = migrationMethod(vmi)
	images := map[string]string{}
	for _, v := range vmi.Spec.Volumes {
		if v.ContainerDisk != nil {
			images[v.Name] = v.ContainerDisk.Image
		}
	}
	for i := range s.VolumeStatus {
		if image, ok := images[s.VolumeStatus[i].Name]; ok {
			// KubeVirt's CRD declares the checksum, a CRC32, as an int32: a
			// value past 2^31 is refused, so keep the simulated one below.
			s.VolumeStatus[i].ContainerDiskVolume = &virtv1.ContainerDiskInfo{Checksum: crc32.ChecksumIEEE([]byte(image)) & math.MaxInt32}
		}
	}
}

// isDefined tells whether virt-handler has defined vmi's domain.
func isDefined(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi.Status.SelinuxContext != ""
}

// migrationMethod is BlockMigration when a volume's data lives on the
// node (a container disk, a generated ISO…), LiveMigration when all of it
// is shared storage.
func migrationMethod(vmi *virtv1.VirtualMachineInstance) virtv1.VirtualMachineInstanceMigrationMethod {
	for _, v := range vmi.Spec.Volumes {
		if v.PersistentVolumeClaim == nil && v.DataVolume == nil && v.HostDisk == nil {
			return virtv1.BlockMigration
		}
	}
	return virtv1.LiveMigration
}

// running is the status virt-handler writes when the domain runs: the
// phase, the machine type, the guest memory, the interfaces as the domain
// and the pod report them, and each disk's target device.
func running(vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod, now metav1.Time) {
	s := &vmi.Status
	s.Phase = virtv1.Running
	setPhaseTransition(s, now)
	s.Machine = &virtv1.Machine{Type: machineType(vmi)}
	if s.Memory != nil && s.Memory.GuestAtBoot != nil {
		s.Memory.GuestCurrent = s.Memory.GuestAtBoot
	}
	s.Interfaces = interfaces(vmi, pod)
	targets := diskTargets(vmi)
	for i := range s.VolumeStatus {
		if t, ok := targets[s.VolumeStatus[i].Name]; ok {
			s.VolumeStatus[i].Target = t
		}
	}
}

// sized sets the size of the running VMI's generated ISO disks, which
// virt-handler reports on the sync after the start; it tells whether
// anything was missing.
func sized(vmi *virtv1.VirtualMachineInstance) bool {
	iso := map[string]bool{}
	for _, v := range vmi.Spec.Volumes {
		src := v.VolumeSource
		if src.CloudInitNoCloud != nil || src.CloudInitConfigDrive != nil || src.ConfigMap != nil || src.Secret != nil ||
			src.DownwardAPI != nil || src.ServiceAccount != nil || src.Sysprep != nil {
			iso[v.Name] = true
		}
	}
	changed := false
	for i := range vmi.Status.VolumeStatus {
		s := &vmi.Status.VolumeStatus[i]
		if iso[s.Name] && s.Size == 0 {
			s.Size = isoSize
			changed = true
		}
	}
	return changed
}

// stopped is the status virt-handler writes when a deleted VMI's domain
// is gone: a domain shut down, or destroyed with no grace period, ends
// Succeeded.
func stopped(vmi *virtv1.VirtualMachineInstance, now metav1.Time) {
	vmi.Status.Phase = virtv1.Succeeded
	setPhaseTransition(&vmi.Status, now)
}

func machineType(vmi *virtv1.VirtualMachineInstance) string {
	if m := vmi.Spec.Domain.Machine; m != nil && m.Type != "" && m.Type != "q35" {
		return m.Type
	}
	return MachineType
}

// interfaces are the VMI's interfaces as the domain reports them: each
// with its MAC, the pod's IPs on the pod network, one queue and the link
// up, the pod network first. virt-controller's fields (the pod interface
// name, Multus' info source) are kept.
func interfaces(vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod) []virtv1.VirtualMachineInstanceNetworkInterface {
	old := map[string]virtv1.VirtualMachineInstanceNetworkInterface{}
	for _, i := range vmi.Status.Interfaces {
		old[i.Name] = i
	}
	podNetwork := ""
	for _, n := range vmi.Spec.Networks {
		if n.Pod != nil {
			podNetwork = n.Name
		}
	}
	var out []virtv1.VirtualMachineInstanceNetworkInterface
	for n, spec := range vmi.Spec.Domain.Devices.Interfaces {
		i := old[spec.Name]
		i.Name = spec.Name
		i.MAC = spec.MacAddress
		if i.MAC == "" {
			i.MAC = mac(vmi, n)
		}
		i.InfoSource = infoSourceDomain
		if source := old[spec.Name].InfoSource; source != "" && source != infoSourceDomain {
			i.InfoSource = infoSourceDomain + ", " + source
		}
		i.QueueCount = 1
		i.LinkState = "up"
		if spec.Name == podNetwork && pod != nil {
			i.IP = pod.Status.PodIP
			i.IPs = nil
			for _, ip := range pod.Status.PodIPs {
				i.IPs = append(i.IPs, ip.IP)
			}
			if i.PodInterfaceName == "" {
				i.PodInterfaceName = "eth0"
			}
			out = append([]virtv1.VirtualMachineInstanceNetworkInterface{i}, out...)
			continue
		}
		out = append(out, i)
	}
	return out
}

// mac is the MAC address libvirt would give the VMI's n-th interface: in
// QEMU's 52:54:00 prefix, stable for the VMI.
func mac(vmi *virtv1.VirtualMachineInstance, n int) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(string(vmi.UID) + "/" + strconv.Itoa(n)))
	sum := h.Sum32()
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", byte(sum>>16), byte(sum>>8), byte(sum))
}

// diskTargets are the domain's device names of the VMI's disks, by
// volume name: vda, vdb… on virtio, sda, sdb… on SATA and SCSI, in the
// order of the disks.
func diskTargets(vmi *virtv1.VirtualMachineInstance) map[string]string {
	out := map[string]string{}
	next := map[string]int{}
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		var bus virtv1.DiskBus
		switch {
		case d.Disk != nil:
			bus = d.Disk.Bus
		case d.CDRom != nil:
			bus = d.CDRom.Bus
		case d.LUN != nil:
			bus = d.LUN.Bus
		}
		prefix := "sd"
		if bus == virtv1.DiskBusVirtio || bus == "" {
			prefix = "vd"
		}
		out[d.Name] = prefix + string(rune('a'+next[prefix]))
		next[prefix]++
	}
	return out
}

// setCondition sets c in s, keeping the times of a condition of its type
// and status that is already there.
// migratability is virt-handler's LiveMigratable condition for the two
// causes the simulation knows (calculateLiveMigrationCondition): Hyper-V
// passthrough, and a claim not shared between nodes (no ReadWriteMany or
// ReadOnlyMany in the VMI's volume status). Everything else migrates.
func migratability(vmi *virtv1.VirtualMachineInstance) virtv1.VirtualMachineInstanceCondition {
	notMigratable := func(reason, message string) virtv1.VirtualMachineInstanceCondition {
		return virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionFalse,
			Reason: reason, Message: message}
	}
	if f := vmi.Spec.Domain.Features; f != nil && f.HypervPassthrough != nil && f.HypervPassthrough.Enabled != nil && *f.HypervPassthrough.Enabled {
		return notMigratable(virtv1.VirtualMachineInstanceReasonHypervPassthroughNotMigratable, "VMI uses hyperv passthrough")
	}
	claims := map[string]*virtv1.PersistentVolumeClaimInfo{}
	for _, v := range vmi.Status.VolumeStatus {
		claims[v.Name] = v.PersistentVolumeClaimInfo
	}
	for _, v := range vmi.Spec.Volumes {
		name := ""
		switch {
		case v.PersistentVolumeClaim != nil:
			name = v.PersistentVolumeClaim.ClaimName
		case v.DataVolume != nil:
			name = v.DataVolume.Name
		default:
			continue
		}
		info := claims[v.Name]
		if slices.ContainsFunc(vmi.Status.MigratedVolumes, func(m virtv1.StorageMigratedVolumeInfo) bool { return m.VolumeName == v.Name }) {
			continue // copied along (checkVolumesForMigration)
		}
		if info == nil {
			return notMigratable(virtv1.VirtualMachineInstanceReasonDisksNotMigratable, fmt.Sprintf("cannot migrate VMI: Unable to determine if PVC %v is shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)", name))
		}
		if !slices.ContainsFunc(info.AccessModes, func(m corev1.PersistentVolumeAccessMode) bool {
			return m == corev1.ReadWriteMany || m == corev1.ReadOnlyMany
		}) {
			return notMigratable(virtv1.VirtualMachineInstanceReasonDisksNotMigratable, fmt.Sprintf("cannot migrate VMI: PVC %v is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)", name))
		}
	}
	return virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue}
}

func setCondition(s *virtv1.VirtualMachineInstanceStatus, c virtv1.VirtualMachineInstanceCondition) {
	for i := range s.Conditions {
		if s.Conditions[i].Type == c.Type {
			if s.Conditions[i].Status != c.Status || s.Conditions[i].Reason != c.Reason {
				s.Conditions[i] = c
			}
			return
		}
	}
	s.Conditions = append(s.Conditions, c)
}

// setPhaseTransition records the current phase's transition at now, once.
func setPhaseTransition(s *virtv1.VirtualMachineInstanceStatus, now metav1.Time) {
	for _, t := range s.PhaseTransitionTimestamps {
		if t.Phase == s.Phase {
			return
		}
	}
	s.PhaseTransitionTimestamps = append(s.PhaseTransitionTimestamps,
		virtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: s.Phase, PhaseTransitionTimestamp: now})
}

// hotplugged is what the target's virt-handler reports once it plugged in
// the vCPUs and guest memory a VMI marked VCPUChange or MemoryChange asks
// for (hotplugCPU, hotplugMemory in virt-handler's migration-target.go):
// the new topology and memory, the marks and the labels the migration
// controller left for it gone. Memory the launcher pod was not given
// enough for is refused, as virt-handler refuses it.
func hotplugged(vmi *virtv1.VirtualMachineInstance) {
	if vmistatus.Condition(vmi, virtv1.VirtualMachineInstanceVCPUChange) != nil {
		cpu := vmi.Spec.Domain.CPU
		vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: cpu.Sockets, Cores: cpu.Cores, Threads: cpu.Threads}
		vmistatus.RemoveCondition(vmi, virtv1.VirtualMachineInstanceVCPUChange)
	}
	delete(vmi.Labels, virtv1.VirtualMachinePodCPULimitsLabel)
	if vmistatus.Condition(vmi, virtv1.VirtualMachineInstanceMemoryChange) != nil {
		vmistatus.RemoveCondition(vmi, virtv1.VirtualMachineInstanceMemoryChange)
		if memoryFits(vmi) {
			guest := vmi.Spec.Domain.Memory.Guest.DeepCopy()
			vmi.Status.Memory.GuestRequested, vmi.Status.Memory.GuestCurrent = &guest, &guest
		}
	}
	delete(vmi.Labels, virtv1.VirtualMachinePodMemoryRequestsLabel)
	delete(vmi.Labels, virtv1.MemoryHotplugOverheadRatioLabel)
}

// volumesMoved is what the target's virt-handler reports once a volume
// migration copied the VMI's volumes to their new claims
// (replaceMigratedVolumesStatus, removeMigratedVolumes in virt-handler's
// migration-target.go): each moved claim's status describes its
// destination, and the VolumesChange mark and the list of moves are gone.
func volumesMoved(vmi *virtv1.VirtualMachineInstance) {
	if len(vmi.Status.MigratedVolumes) == 0 {
		return
	}
	to := map[string]*virtv1.PersistentVolumeClaimInfo{}
	for _, m := range vmi.Status.MigratedVolumes {
		if m.SourcePVCInfo != nil {
			to[m.SourcePVCInfo.ClaimName] = m.DestinationPVCInfo
		}
	}
	for i, s := range vmi.Status.VolumeStatus {
		if s.PersistentVolumeClaimInfo == nil {
			continue
		}
		if dest, ok := to[s.PersistentVolumeClaimInfo.ClaimName]; ok {
			vmi.Status.VolumeStatus[i].PersistentVolumeClaimInfo = dest
		}
	}
	vmistatus.RemoveCondition(vmi, virtv1.VirtualMachineInstanceVolumesChange)
	vmi.Status.MigratedVolumes = nil
}

// memoryFits: the target pod's memory request, which the migration
// controller labelled the VMI with, holds the VMI's request and the
// target's overhead.
func memoryFits(vmi *virtv1.VirtualMachineInstance) bool {
	given, err := resource.ParseQuantity(vmi.Labels[virtv1.VirtualMachinePodMemoryRequestsLabel])
	if err != nil || vmi.Status.Memory == nil || vmi.Spec.Domain.Memory == nil || vmi.Spec.Domain.Memory.Guest == nil {
		return false
	}
	needed := vmi.Spec.Domain.Resources.Requests.Memory().DeepCopy()
	if ms := vmi.Status.MigrationState; ms != nil && ms.TargetMemoryOverhead != nil {
		needed.Add(*ms.TargetMemoryOverhead)
	}
	return given.Cmp(needed) >= 0
}
