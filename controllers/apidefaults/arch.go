package apidefaults

import (
	virtv1 "kubevirt.io/api/core/v1"
)

// setArchitectureDevices applies pkg/defaults' per-architecture defaults
// (amd64.go, arm64.go and s390x.go there). An architecture other than arm64
// or s390x is treated as amd64, as KubeVirt does.
func setArchitectureDevices(spec *virtv1.VirtualMachineInstanceSpec) {
	switch spec.Architecture {
	case archARM64:
		// arm64 supports host-passthrough only, so the cluster's CPU model
		// does not apply.
		if spec.Domain.CPU == nil {
			spec.Domain.CPU = &virtv1.CPU{}
		}
		if spec.Domain.CPU.Model == "" {
			spec.Domain.CPU.Model = virtv1.CPUModeHostPassthrough
		}
		setARM64Bootloader(spec)
		// qemu-kvm on arm64 has no SATA.
		setDiskBus(spec, virtv1.DiskBusVirtio)
	case archS390X:
		setDiskBus(spec, virtv1.DiskBusVirtio)
		setWatchdogAction(spec, archS390X)
	default:
		// SATA works out of the box in most guests; q35, the only amd64
		// machine KubeVirt supports, has no IDE.
		setDiskBus(spec, virtv1.DiskBusSATA)
		setWatchdogAction(spec, archAMD64)
	}
}

// setDiskBus gives every disk, CD-ROM and LUN target without a bus the
// architecture's default one.
func setDiskBus(spec *virtv1.VirtualMachineInstanceSpec, bus virtv1.DiskBus) {
	for i := range spec.Domain.Devices.Disks {
		device := &spec.Domain.Devices.Disks[i].DiskDevice
		if device.Disk != nil && device.Disk.Bus == "" {
			device.Disk.Bus = bus
		}
		if device.CDRom != nil && device.CDRom.Bus == "" {
			device.CDRom.Bus = bus
		}
		if device.LUN != nil && device.LUN.Bus == "" {
			device.LUN.Bus = bus
		}
	}
}

// setWatchdogAction makes a watchdog the architecture's model (i6300esb on
// amd64, diag288 on s390x) and its action reset, unless given.
func setWatchdogAction(spec *virtv1.VirtualMachineInstanceSpec, arch string) {
	watchdog := spec.Domain.Devices.Watchdog
	if watchdog == nil {
		return
	}
	if arch == archS390X {
		if watchdog.Diag288 == nil {
			watchdog.Diag288 = &virtv1.Diag288Watchdog{}
		}
		if watchdog.Diag288.Action == "" {
			watchdog.Diag288.Action = virtv1.WatchdogActionReset
		}
		return
	}
	if watchdog.I6300ESB == nil {
		watchdog.I6300ESB = &virtv1.I6300ESBWatchdog{}
	}
	if watchdog.I6300ESB.Action == "" {
		watchdog.I6300ESB.Action = virtv1.WatchdogActionReset
	}
}

// setARM64Bootloader boots arm64 VMIs without a bootloader by UEFI without
// secure boot.
func setARM64Bootloader(spec *virtv1.VirtualMachineInstanceSpec) {
	if spec.Domain.Firmware == nil {
		spec.Domain.Firmware = &virtv1.Firmware{}
	}
	if spec.Domain.Firmware.Bootloader != nil {
		return
	}
	secureBoot := false
	spec.Domain.Firmware.Bootloader = &virtv1.Bootloader{
		EFI: &virtv1.EFI{SecureBoot: &secureBoot},
	}
}

// disableACPIOnS390X turns ACPI off unless the VMI says otherwise: s390x has
// none. It runs before the API defaults, which would otherwise enable it.
func disableACPIOnS390X(spec *virtv1.VirtualMachineInstanceSpec) {
	disabled := false
	if spec.Domain.Features == nil {
		spec.Domain.Features = &virtv1.Features{ACPI: virtv1.FeatureState{Enabled: &disabled}}
		return
	}
	if spec.Domain.Features.ACPI.Enabled == nil {
		spec.Domain.Features.ACPI.Enabled = &disabled
	}
}
