package apidefaults

import (
	virtv1 "kubevirt.io/api/core/v1"
)

// vmxFeature is the CPU feature eVMCS needs (node-labeller's VmxFeature
// with RequirePolicy).
var vmxFeature = virtv1.CPUFeature{Name: "vmx", Policy: "require"}

// setHypervDependencies enables the Hyper-V enlightenments that enabled ones
// depend on and the user left unset (pkg/defaults' hyperv.go), and requires
// vmx for eVMCS. It is best effort as in KubeVirt: at the first dependency
// the user disabled it stops, keeping what it changed so far (each change is
// valid on its own) and leaving the rejection to validation.
//
// Dependencies are resolved leaves first, so that SyNIC enabled for the
// SyNIC timer then brings VP index along.
func setHypervDependencies(spec *virtv1.VirtualMachineInstanceSpec) {
	features := spec.Domain.Features
	if features == nil || features.Hyperv == nil {
		return
	}
	hv := features.Hyperv

	dependencies := []struct {
		enabled  func() bool
		requires **virtv1.FeatureState
	}{
		{func() bool { return stateEnabled(hv.EVMCS) }, &hv.VAPIC},
		{func() bool { return stateEnabled(hv.IPI) }, &hv.VPIndex},
		{func() bool { return hv.TLBFlush != nil && stateEnabled(&hv.TLBFlush.FeatureState) }, &hv.VPIndex},
		{func() bool { return hv.SyNICTimer != nil && stateEnabled(&hv.SyNICTimer.FeatureState) }, &hv.SyNIC},
		{func() bool { return stateEnabled(hv.SyNIC) }, &hv.VPIndex},
	}
	for _, dep := range dependencies {
		if !dep.enabled() {
			continue
		}
		required := *dep.requires
		switch {
		case required == nil:
			enabled := true
			*dep.requires = &virtv1.FeatureState{Enabled: &enabled}
		case required.Enabled == nil:
			enabled := true
			required.Enabled = &enabled
		case !*required.Enabled:
			return
		}
	}

	// An eVMCS whose enabled is unset counts as enabled here.
	if hv.EVMCS != nil && (hv.EVMCS.Enabled == nil || *hv.EVMCS.Enabled) {
		requireVMX(spec)
	}
}

func stateEnabled(state *virtv1.FeatureState) bool {
	return state != nil && state.Enabled != nil && *state.Enabled
}

// requireVMX adds vmx to the CPU features with policy require, or sets that
// policy on a vmx feature already listed.
func requireVMX(spec *virtv1.VirtualMachineInstanceSpec) {
	if spec.Domain.CPU == nil {
		spec.Domain.CPU = &virtv1.CPU{}
	}
	cpu := spec.Domain.CPU
	for i := range cpu.Features {
		if cpu.Features[i].Name == vmxFeature.Name {
			cpu.Features[i].Policy = vmxFeature.Policy
			return
		}
	}
	cpu.Features = append(cpu.Features, vmxFeature)
}
