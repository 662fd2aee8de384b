package apidefaults

import (
	"strings"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	virtv1 "kubevirt.io/api/core/v1"
)

// setInstanceDefaults mirrors pkg/defaults' SetDefaultVirtualMachineInstance.
// The order matters and is KubeVirt's: the generic API defaults give every
// disk a target before the architecture picks its bus, the CPU topology
// exists before hotplug sizes it, and guest memory is known before the
// status records it.
func setInstanceDefaults(vmi *virtv1.VirtualMachineInstance, cfg configView) error {
	if err := setSpecDefaults(&vmi.Spec, cfg); err != nil {
		return err
	}
	if vmi.Spec.Architecture == archS390X {
		disableACPIOnS390X(&vmi.Spec)
	}
	virtv1.SetObjectDefaults_VirtualMachineInstance(vmi)
	setHypervDependencies(&vmi.Spec)
	setArchitectureDevices(&vmi.Spec)
	setCPUModel(&vmi.Spec, cfg)
	recordGuestMemory(vmi)
	recordCPUTopology(vmi)
	// KubeVirt does not support hotplug on arm64 yet.
	if vmi.Spec.Architecture != archARM64 && cfg.liveUpdateRollout() {
		prepareCPUHotplug(&vmi.Spec, cfg)
		prepareMemoryHotplug(&vmi.Spec, cfg)
	}
	return nil
}

// setSpecDefaults mirrors pkg/defaults' SetDefaultVirtualMachineInstanceSpec.
func setSpecDefaults(spec *virtv1.VirtualMachineInstanceSpec, cfg configView) error {
	if spec.Architecture == "" {
		spec.Architecture = cfg.defaultArchitecture()
	}
	setMachineType(spec, cfg)
	setCPURequest(spec, cfg)
	setGuestMemory(spec)
	setCPUTopology(spec)
	setContainerDiskPullPolicies(spec)
	if spec.EvictionStrategy == nil {
		if s := cfg.evictionStrategy(); s != nil {
			strategy := *s
			spec.EvictionStrategy = &strategy
		}
	}
	if err := setDefaultNetwork(spec, cfg); err != nil {
		return err
	}
	addMissingVolumeDisks(spec)
	return nil
}

func setMachineType(spec *virtv1.VirtualMachineInstanceSpec, cfg configView) {
	if spec.Domain.Machine == nil {
		spec.Domain.Machine = &virtv1.Machine{}
	}
	if spec.Domain.Machine.Type == "" {
		spec.Domain.Machine.Type = cfg.machineType(spec.Architecture)
	}
}

// setCPURequest copies a CPU limit to a missing request and, when the
// cluster's CPU request is not KubeVirt's built-in one, writes it into VMIs
// that request no CPU (dedicated-CPU VMIs excepted: their request is their
// limit, set by the template).
func setCPURequest(spec *virtv1.VirtualMachineInstanceSpec, cfg configView) {
	res := &spec.Domain.Resources
	if !res.Limits.Cpu().IsZero() && res.Requests.Cpu().IsZero() {
		if res.Requests == nil {
			res.Requests = k8sv1.ResourceList{}
		}
		res.Requests[k8sv1.ResourceCPU] = res.Limits[k8sv1.ResourceCPU].DeepCopy()
	}

	// A nil request (a CR that set cpuRequest: null) counts as the built-in
	// one; KubeVirt would dereference it.
	clusterRequest := cfg.cpuRequest()
	if clusterRequest == nil || clusterRequest.Equal(builtinCPURequest) {
		return
	}
	if _, ok := res.Requests[k8sv1.ResourceCPU]; ok {
		return
	}
	if spec.Domain.CPU != nil && spec.Domain.CPU.DedicatedCPUPlacement {
		return
	}
	if res.Requests == nil {
		res.Requests = k8sv1.ResourceList{}
	}
	res.Requests[k8sv1.ResourceCPU] = clusterRequest.DeepCopy()
}

// setGuestMemory makes the guest memory explicit: the memory request, else
// the memory limit, else the size of one hugepage. spec.domain.memory is
// created even when none of these is set.
func setGuestMemory(spec *virtv1.VirtualMachineInstanceSpec) {
	if spec.Domain.Memory != nil && spec.Domain.Memory.Guest != nil {
		return
	}
	if spec.Domain.Memory == nil {
		spec.Domain.Memory = &virtv1.Memory{}
	}
	res := spec.Domain.Resources
	switch {
	case !res.Requests.Memory().IsZero():
		spec.Domain.Memory.Guest = res.Requests.Memory()
	case !res.Limits.Memory().IsZero():
		spec.Domain.Memory.Guest = res.Limits.Memory()
	case spec.Domain.Memory.Hugepages != nil:
		if size, err := resource.ParseQuantity(spec.Domain.Memory.Hugepages.PageSize); err == nil {
			spec.Domain.Memory.Guest = &size
		}
	}
}

// setCPUTopology gives a VMI without sockets, cores and threads one socket
// per CPU of its limit, else of its request (rounded up), else one: sockets
// perform best (https://bugzilla.redhat.com/show_bug.cgi?id=1653453).
func setCPUTopology(spec *virtv1.VirtualMachineInstanceSpec) {
	cpu := spec.Domain.CPU
	if cpu != nil && (cpu.Sockets != 0 || cpu.Cores != 0 || cpu.Threads != 0) {
		return
	}
	if cpu == nil {
		cpu = &virtv1.CPU{}
		spec.Domain.CPU = cpu
	}
	sockets := uint32(1)
	res := spec.Domain.Resources
	if limit, ok := res.Limits[k8sv1.ResourceCPU]; ok {
		sockets = uint32(limit.Value())
	} else if request, ok := res.Requests[k8sv1.ResourceCPU]; ok {
		sockets = uint32(request.Value())
	}
	cpu.Sockets, cpu.Cores, cpu.Threads = sockets, 1, 1
}

// setContainerDiskPullPolicies pulls floating images (":latest" or no tag
// or digest at all) always and pinned ones if not present.
func setContainerDiskPullPolicies(spec *virtv1.VirtualMachineInstanceSpec) {
	for _, volume := range spec.Volumes {
		disk := volume.ContainerDisk
		if disk == nil || disk.ImagePullPolicy != "" {
			continue
		}
		if strings.HasSuffix(disk.Image, ":latest") || !strings.ContainsAny(disk.Image, ":@") {
			disk.ImagePullPolicy = k8sv1.PullAlways
		} else {
			disk.ImagePullPolicy = k8sv1.PullIfNotPresent
		}
	}
}

// addMissingVolumeDisks gives every volume that no disk or filesystem uses a
// disk of its name (pkg/util's SetDefaultVolumeDisk).
func addMissingVolumeDisks(spec *virtv1.VirtualMachineInstanceSpec) {
	used := map[string]bool{}
	for _, disk := range spec.Domain.Devices.Disks {
		used[disk.Name] = true
	}
	for _, fs := range spec.Domain.Devices.Filesystems {
		used[fs.Name] = true
	}
	for _, volume := range spec.Volumes {
		if !used[volume.Name] {
			spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, virtv1.Disk{Name: volume.Name})
		}
	}
}

// setCPUModel fills a CPU model the architecture left empty with the
// cluster's, else host-model.
func setCPUModel(spec *virtv1.VirtualMachineInstanceSpec, cfg configView) {
	if spec.Domain.CPU == nil {
		spec.Domain.CPU = &virtv1.CPU{}
	}
	if spec.Domain.CPU.Model != "" {
		return
	}
	if model := cfg.cpuModel(); model != "" {
		spec.Domain.CPU.Model = model
	} else {
		spec.Domain.CPU.Model = virtv1.DefaultCPUModel
	}
}

// recordGuestMemory starts the memory status at the guest memory: at boot,
// current and requested are all the same on create. It replaces any memory
// status the VMI came with.
func recordGuestMemory(vmi *virtv1.VirtualMachineInstance) {
	mem := vmi.Spec.Domain.Memory
	if mem == nil || mem.Guest == nil {
		return
	}
	vmi.Status.Memory = &virtv1.MemoryStatus{
		GuestAtBoot:    mem.Guest,
		GuestCurrent:   mem.Guest,
		GuestRequested: mem.Guest,
	}
}

// recordCPUTopology starts the current CPU topology at the spec's, keeping
// one the VMI came with.
func recordCPUTopology(vmi *virtv1.VirtualMachineInstance) {
	cpu := vmi.Spec.Domain.CPU
	if cpu == nil || vmi.Status.CurrentCPUTopology != nil {
		return
	}
	vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{
		Sockets: cpu.Sockets,
		Cores:   cpu.Cores,
		Threads: cpu.Threads,
	}
}
