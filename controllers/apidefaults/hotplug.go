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

// canHotplugMemory: virt-api only logs why memory hotplug is off.
func canHotplugMemory(spec *virtv1.VirtualMachineInstanceSpec, maxGuest *resource.Quantity) bool {
	return MemoryHotplugRefusal(spec, maxGuest) == ""
}

// MemoryHotplugRefusal says why a VMI with spec cannot hotplug memory up to
// maxGuest, in pkg/liveupdate/memory's words (ValidateLiveUpdateMemory);
// empty when it can. The VM controller puts the words in RestartRequired.
func MemoryHotplugRefusal(spec *virtv1.VirtualMachineInstanceSpec, maxGuest *resource.Quantity) string {
	domain := &spec.Domain
	if cpu := domain.CPU; cpu != nil && cpu.Realtime != nil {
		return "Memory hotplug is not compatible with realtime VMs"
	}
	if cpu := domain.CPU; cpu != nil && cpu.NUMA != nil && cpu.NUMA.GuestMappingPassthrough != nil {
		return "Memory hotplug is not compatible with guest mapping passthrough"
	}
	if domain.LaunchSecurity != nil {
		return "Memory hotplug is not compatible with encrypted VMs"
	}
	block := hotplugBlockBytes
	if domain.Memory != nil && domain.Memory.Hugepages != nil && domain.Memory.Hugepages.PageSize == "1Gi" {
		block = hotplugBlock1GiBytes
	}
	if domain.Memory == nil || domain.Memory.Guest == nil {
		return "Guest memory must be configured when memory hotplug is enabled"
	}
	if maxGuest == nil {
		return "Max guest memory must be configured when memory hotplug is enabled"
	}
	guest := domain.Memory.Guest
	switch {
	case guest.Cmp(*maxGuest) > 0:
		return "Guest memory is greater than the configured maxGuest memory"
	case guest.Value()%block != 0:
		return "Guest memory must be " + resource.NewQuantity(block, resource.BinarySI).String() + " aligned"
	case maxGuest.Value()%block != 0:
		return "MaxGuest must be " + resource.NewQuantity(block, resource.BinarySI).String() + " aligned"
	case spec.Architecture != archAMD64:
		return "Memory hotplug is only available for x86_64 VMs"
	case guest.Value() < minHotplugGuestBytes:
		return "Memory hotplug is only available for VMs with at least 1Gi of guest memory"
	}
	return ""
}
