package instancetype

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
)

// applyPreference fills what the VMI leaves unset with the preference's
// preferred values, in KubeVirt's order (pkg/instancetype/preference/apply).
// Two preferences overwrite, because the VMI field cannot say it is unset:
// disableHotplug and ACPI. Some create an empty parent on their way (a
// bootloader, a clock, features) even when nothing in them applies; the
// VMI must carry those too to equal KubeVirt's.
func applyPreference(pref *v1beta1.VirtualMachinePreferenceSpec, spec *virtv1.VirtualMachineInstanceSpec, meta *metav1.ObjectMeta) {
	if pref == nil {
		return
	}
	d := &spec.Domain
	if pref.CPU != nil && len(pref.CPU.PreferredCPUFeatures) > 0 {
		// KubeVirt dereferences a missing CPU here (a nil pointer panic
		// when no instance type made one); virtshard makes it.
		if d.CPU == nil {
			d.CPU = &virtv1.CPU{}
		}
		have := map[string]bool{}
		for _, f := range d.CPU.Features {
			have[f.Name] = true
		}
		for _, f := range pref.CPU.PreferredCPUFeatures {
			if !have[f.Name] {
				d.CPU.Features = append(d.CPU.Features, f)
			}
		}
	}
	if pref.Devices != nil {
		applyDevicePreferences(pref.Devices, spec)
	}
	if pref.Features != nil {
		applyFeaturePreferences(pref.Features, d)
	}
	if pref.Firmware != nil {
		applyFirmwarePreferences(pref.Firmware, d)
	}
	if pref.Machine != nil && pref.Machine.PreferredMachineType != "" {
		if d.Machine == nil {
			d.Machine = &virtv1.Machine{}
		}
		if d.Machine.Type == "" {
			d.Machine.Type = pref.Machine.PreferredMachineType
		}
	}
	if pref.Clock != nil {
		if d.Clock == nil {
			d.Clock = &virtv1.Clock{}
		}
		// The offset is taken whole or not at all.
		if o := pref.Clock.PreferredClockOffset; o != nil && d.Clock.UTC == nil && d.Clock.Timezone == nil {
			d.Clock.ClockOffset = *o.DeepCopy()
		}
		fill(&d.Clock.Timer, pref.Clock.PreferredTimer)
	}
	if pref.PreferredSubdomain != nil && spec.Subdomain == "" {
		spec.Subdomain = *pref.PreferredSubdomain
	}
	fillValue(&spec.TerminationGracePeriodSeconds, pref.PreferredTerminationGracePeriodSeconds)
	if a := pref.PreferredArchitecture; a != nil && *a != "" && spec.Architecture == "" {
		spec.Architecture = *a
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	for key, value := range pref.Annotations {
		if _, ok := meta.Annotations[key]; !ok {
			meta.Annotations[key] = value
		}
	}
}

// ApplyAutoattach applies only the preference's autoattach choices. A VM
// controller applies them before it adds the default input device and pod
// interface, which they decide.
func ApplyAutoattach(pref *v1beta1.VirtualMachinePreferenceSpec, spec *virtv1.VirtualMachineInstanceSpec) {
	if pref == nil || pref.Devices == nil {
		return
	}
	p, d := pref.Devices, &spec.Domain.Devices
	fillValue(&d.AutoattachGraphicsDevice, p.PreferredAutoattachGraphicsDevice)
	fillValue(&d.AutoattachMemBalloon, p.PreferredAutoattachMemBalloon)
	fillValue(&d.AutoattachPodInterface, p.PreferredAutoattachPodInterface)
	fillValue(&d.AutoattachSerialConsole, p.PreferredAutoattachSerialConsole)
	fillValue(&d.AutoattachInputDevice, p.PreferredAutoattachInputDevice)
}

func applyDevicePreferences(p *v1beta1.DevicePreferences, spec *virtv1.VirtualMachineInstanceSpec) {
	d := &spec.Domain.Devices
	fillValue(&d.UseVirtioTransitional, p.PreferredUseVirtioTransitional)
	fillValue(&d.BlockMultiQueue, p.PreferredBlockMultiQueue)
	fillValue(&d.NetworkInterfaceMultiQueue, p.PreferredNetworkInterfaceMultiQueue)
	if p.PreferredDisableHotplug != nil {
		d.DisableHotplug = *p.PreferredDisableHotplug
	}
	// A sound device is only given a model, never made.
	if p.PreferredSoundModel != "" && d.Sound != nil && d.Sound.Model == "" {
		d.Sound.Model = p.PreferredSoundModel
	}
	fill(&d.Rng, p.PreferredRng)
	fill(&d.TPM, p.PreferredTPM)
	ApplyAutoattach(&v1beta1.VirtualMachinePreferenceSpec{Devices: p}, spec)

	for i := range d.Disks {
		applyDiskPreferences(p, &d.Disks[i])
	}
	podNetworks := map[string]bool{}
	for _, n := range spec.Networks {
		if _, seen := podNetworks[n.Name]; !seen {
			podNetworks[n.Name] = n.Pod != nil // the first of a name counts
		}
	}
	for i := range d.Interfaces {
		iface := &d.Interfaces[i]
		if p.PreferredInterfaceModel != "" && iface.Model == "" {
			iface.Model = p.PreferredInterfaceModel
		}
		if p.PreferredInterfaceMasquerade != nil && iface.InterfaceBindingMethod == (virtv1.InterfaceBindingMethod{}) &&
			iface.Binding == nil && podNetworks[iface.Name] {
			iface.Masquerade = p.PreferredInterfaceMasquerade.DeepCopy()
		}
	}
	for i := range d.Inputs {
		in := &d.Inputs[i]
		if p.PreferredInputBus != "" && in.Bus == "" {
			in.Bus = p.PreferredInputBus
		}
		if p.PreferredInputType != "" && in.Type == "" {
			in.Type = p.PreferredInputType
		}
	}
	if p.PreferredPanicDeviceModel != nil {
		for i := range d.PanicDevices {
			if d.PanicDevices[i].Model == nil {
				model := *p.PreferredPanicDeviceModel
				d.PanicDevices[i].Model = &model
			}
		}
	}
}

// applyDiskPreferences gives a disk of no kind the disk kind, then the
// preferred bus of its kind; a disk (not a CD-ROM or LUN) also gets the
// preferred block size, cache, IO mode, and a dedicated IO thread on virtio.
func applyDiskPreferences(p *v1beta1.DevicePreferences, disk *virtv1.Disk) {
	dev := &disk.DiskDevice
	if dev.Disk == nil && dev.CDRom == nil && dev.LUN == nil {
		dev.Disk = &virtv1.DiskTarget{}
	}
	switch {
	case dev.Disk != nil:
		if p.PreferredDiskBus != "" && dev.Disk.Bus == "" {
			dev.Disk.Bus = p.PreferredDiskBus
		}
		fill(&disk.BlockSize, p.PreferredDiskBlockSize)
		if p.PreferredDiskCache != "" && disk.Cache == "" {
			disk.Cache = p.PreferredDiskCache
		}
		if p.PreferredDiskIO != "" && disk.IO == "" {
			disk.IO = p.PreferredDiskIO
		}
		if dev.Disk.Bus == virtv1.DiskBusVirtio {
			fillValue(&disk.DedicatedIOThread, p.PreferredDiskDedicatedIoThread)
		}
	case dev.CDRom != nil:
		if p.PreferredCdromBus != "" && dev.CDRom.Bus == "" {
			dev.CDRom.Bus = p.PreferredCdromBus
		}
	case dev.LUN != nil:
		if p.PreferredLunBus != "" && dev.LUN.Bus == "" {
			dev.LUN.Bus = p.PreferredLunBus
		}
	}
}

func applyFeaturePreferences(p *v1beta1.FeaturePreferences, d *virtv1.DomainSpec) {
	if d.Features == nil {
		d.Features = &virtv1.Features{}
	}
	f := d.Features
	if p.PreferredAcpi != nil {
		f.ACPI = *p.PreferredAcpi.DeepCopy()
	}
	fill(&f.APIC, p.PreferredApic)
	if h := p.PreferredHyperv; h != nil {
		// Merged feature by feature, not taken whole.
		if f.Hyperv == nil {
			f.Hyperv = &virtv1.FeatureHyperv{}
		}
		v := f.Hyperv
		fill(&v.EVMCS, h.EVMCS)
		fill(&v.Frequencies, h.Frequencies)
		fill(&v.IPI, h.IPI)
		fill(&v.Reenlightenment, h.Reenlightenment)
		fill(&v.Relaxed, h.Relaxed)
		fill(&v.Reset, h.Reset)
		fill(&v.Runtime, h.Runtime)
		fill(&v.Spinlocks, h.Spinlocks)
		fill(&v.SyNIC, h.SyNIC)
		fill(&v.SyNICTimer, h.SyNICTimer)
		fill(&v.TLBFlush, h.TLBFlush)
		fill(&v.VAPIC, h.VAPIC)
		fill(&v.VPIndex, h.VPIndex)
		fill(&v.VendorID, h.VendorID)
	}
	fill(&f.KVM, p.PreferredKvm)
	fill(&f.Pvspinlock, p.PreferredPvspinlock)
	fill(&f.SMM, p.PreferredSmm)
}

// applyFirmwarePreferences picks the bootloader the VMI does not name:
// BIOS, or the preferred EFI (which stops there), or the deprecated EFI
// and secure boot choices.
func applyFirmwarePreferences(p *v1beta1.FirmwarePreferences, d *virtv1.DomainSpec) {
	if d.Firmware == nil {
		d.Firmware = &virtv1.Firmware{}
	}
	if d.Firmware.Bootloader == nil {
		d.Firmware.Bootloader = &virtv1.Bootloader{}
	}
	boot := d.Firmware.Bootloader
	if p.PreferredUseBios != nil && *p.PreferredUseBios && boot.BIOS == nil && boot.EFI == nil {
		boot.BIOS = &virtv1.BIOS{}
	}
	if boot.BIOS != nil {
		fillValue(&boot.BIOS.UseSerial, p.PreferredUseBiosSerial)
	}
	if boot.EFI == nil && boot.BIOS == nil && p.PreferredEfi != nil {
		boot.EFI = p.PreferredEfi.DeepCopy()
		return
	}
	if p.DeprecatedPreferredUseEfi != nil && *p.DeprecatedPreferredUseEfi && boot.EFI == nil && boot.BIOS == nil {
		boot.EFI = &virtv1.EFI{}
	}
	if boot.EFI != nil {
		fillValue(&boot.EFI.SecureBoot, p.DeprecatedPreferredUseSecureBoot)
	}
}

// fill sets an unset VMI field to a copy of the preferred value, if any.
func fill[T any, PT interface {
	*T
	DeepCopy() *T
}](field *PT, preferred PT) {
	if preferred != nil && *field == nil {
		*field = preferred.DeepCopy()
	}
}

// fillValue is fill for plain values (bools, numbers).
func fillValue[T any](field **T, preferred *T) {
	if preferred != nil && *field == nil {
		v := *preferred
		*field = &v
	}
}
