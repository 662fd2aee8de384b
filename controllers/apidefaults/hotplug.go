package apidefaults

import (
	"k8s.io/apimachinery/pkg/api/resource"
	virtv1 "kubevirt.io/api/core/v1"
)

// maxHotplugVCPUs caps the vCPUs a hotplug ratio may reach: machine types
// differ in their maximum, KubeVirt picks 512 for all.
const maxHotplugVCPUs = 512

// Memory hotplug constraints (pkg/liveupdate/memory).
const (
	// hotplugBlockBytes is the virtio-mem block: a power of two, at least a
	// transparent hugepage (2MiB on x86_64), QEMU's recommendation.
	hotplugBlockBytes int64 = 2 << 20
	// hotplugBlock1GiBytes is the block with 1Gi hugepages.
	hotplugBlock1GiBytes int64 = 1 << 30
	// minHotplugGuestBytes leaves the guest kernel room for its structures
	// and swiotlb, and puts all of the PCI hole in the first gigabyte.
	minHotplugGuestBytes int64 = 1 << 30
)

// prepareCPUHotplug sets the sockets a VMI may grow to when it names none:
// the cluster's maxCpuSockets (raised to the VMI's sockets), else sockets
// times the hotplug ratio, capped at 512 vCPUs but never below the sockets
// the VMI has. The arithmetic is uint32 as in KubeVirt.
func prepareCPUHotplug(spec *virtv1.VirtualMachineInstanceSpec, cfg configView) {
	cpu := spec.Domain.CPU
	if cpu.MaxSockets == 0 {
		maxSockets := cfg.maxCPUSockets()
		if maxSockets != 0 && cpu.Sockets > maxSockets {
			maxSockets = cpu.Sockets
		}
		cpu.MaxSockets = maxSockets
	}
	if cpu.MaxSockets != 0 {
		return
	}
	cpu.MaxSockets = cpu.Sockets * cfg.maxHotplugRatio()
	if cpu.MaxSockets*cpu.Cores*cpu.Threads > maxHotplugVCPUs {
		cpu.MaxSockets = max(maxHotplugVCPUs/(cpu.Cores*cpu.Threads), cpu.Sockets)
	}
}

// prepareMemoryHotplug sets the guest memory a VMI may grow to when it names
// none: the cluster's maxGuest, else guest memory times the hotplug ratio —
// if the VMI can hotplug memory at all; otherwise maxGuest stays unset.
func prepareMemoryHotplug(spec *virtv1.VirtualMachineInstanceSpec, cfg configView) {
	mem := spec.Domain.Memory
	if mem.MaxGuest != nil {
		return
	}
	var maxGuest *resource.Quantity
	switch {
	case cfg.maxGuest() != nil:
		q := cfg.maxGuest().DeepCopy()
		maxGuest = &q
	case mem.Guest != nil:
		maxGuest = resource.NewQuantity(mem.Guest.Value()*int64(cfg.maxHotplugRatio()), resource.BinarySI)
	}
	if !canHotplugMemory(spec, maxGuest) {
		return
	}
	mem.MaxGuest = maxGuest
}

// canHotplugMemory is pkg/liveupdate/memory's ValidateLiveUpdateMemory as a
// predicate: virt-api only logs why memory hotplug is off.
func canHotplugMemory(spec *virtv1.VirtualMachineInstanceSpec, maxGuest *resource.Quantity) bool {
	domain := &spec.Domain
	if cpu := domain.CPU; cpu != nil && (cpu.Realtime != nil || (cpu.NUMA != nil && cpu.NUMA.GuestMappingPassthrough != nil)) {
		return false
	}
	if domain.LaunchSecurity != nil {
		return false
	}
	if domain.Memory == nil || domain.Memory.Guest == nil || maxGuest == nil {
		return false
	}
	block := hotplugBlockBytes
	if domain.Memory.Hugepages != nil && domain.Memory.Hugepages.PageSize == "1Gi" {
		block = hotplugBlock1GiBytes
	}
	guest := domain.Memory.Guest
	return guest.Cmp(*maxGuest) <= 0 &&
		guest.Value()%block == 0 &&
		maxGuest.Value()%block == 0 &&
		spec.Architecture == archAMD64 &&
		guest.Value() >= minHotplugGuestBytes
}
