package instancetype

import (
	"kubevirt.io/api/instancetype/v1beta1"
)

// Spread defaults: two cores per socket (or threads per core), spread
// across sockets and cores (pkg/instancetype/preference/apply, GetSpreadOptions).
const defaultSpreadRatio = 2

// topology spreads an instance type's vCPUs into sockets, cores and
// threads as the preference prefers (sockets when it says nothing, and for
// "any"). The divisions truncate as KubeVirt's do: virt-api refuses a VM
// whose vCPUs do not divide, so only a stored instance type changed behind
// its back gets here with a remainder.
func topology(vcpus uint32, pref *v1beta1.VirtualMachinePreferenceSpec) (sockets, cores, threads uint32) {
	if vcpus == 1 {
		return 1, 1, 1
	}
	switch preferredTopology(pref) {
	case v1beta1.Sockets, v1beta1.Any:
		return vcpus, 1, 1
	case v1beta1.Cores:
		return 1, vcpus, 1
	case v1beta1.Threads:
		return 1, 1, vcpus
	case v1beta1.Spread:
		ratio, across := spreadOptions(pref)
		if ratio == 0 {
			// KubeVirt divides by zero here; one socket is the safe answer.
			return 1, vcpus, 1
		}
		switch across {
		case v1beta1.SpreadAcrossSocketsCores:
			return vcpus / ratio, ratio, 1
		case v1beta1.SpreadAcrossCoresThreads:
			return 1, vcpus / ratio, ratio
		case v1beta1.SpreadAcrossSocketsCoresThreads:
			return vcpus / 2 / ratio, ratio, 2
		}
	}
	return 1, 1, 1
}

// preferredTopology is the preference's CPU topology under its current
// name (the deprecated prefer* names mean the same), sockets by default.
func preferredTopology(pref *v1beta1.VirtualMachinePreferenceSpec) v1beta1.PreferredCPUTopology {
	if pref == nil || pref.CPU == nil || pref.CPU.PreferredCPUTopology == nil {
		return v1beta1.Sockets
	}
	switch t := *pref.CPU.PreferredCPUTopology; t {
	case v1beta1.DeprecatedPreferSockets:
		return v1beta1.Sockets
	case v1beta1.DeprecatedPreferCores:
		return v1beta1.Cores
	case v1beta1.DeprecatedPreferThreads:
		return v1beta1.Threads
	case v1beta1.DeprecatedPreferSpread:
		return v1beta1.Spread
	case v1beta1.DeprecatedPreferAny:
		return v1beta1.Any
	default:
		return t
	}
}

// spreadOptions is the preference's spread ratio and what it spreads
// across: the ratio from spreadOptions, else preferSpreadSocketToCoreRatio,
// else 2; across from spreadOptions, else sockets and cores.
func spreadOptions(pref *v1beta1.VirtualMachinePreferenceSpec) (uint32, v1beta1.SpreadAcross) {
	ratio, across := uint32(defaultSpreadRatio), v1beta1.SpreadAcrossSocketsCores
	if pref == nil {
		return ratio, across
	}
	if pref.PreferSpreadSocketToCoreRatio != 0 {
		ratio = pref.PreferSpreadSocketToCoreRatio
	}
	if pref.CPU != nil && pref.CPU.SpreadOptions != nil {
		if o := pref.CPU.SpreadOptions; o.Ratio != nil {
			ratio = *o.Ratio
		}
		if o := pref.CPU.SpreadOptions; o.Across != nil {
			across = *o.Across
		}
	}
	return ratio, across
}
