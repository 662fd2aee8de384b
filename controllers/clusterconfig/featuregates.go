package clusterconfig

import "slices"

// GateState is the maturity of a KubeVirt feature gate, as KubeVirt's
// pkg/virt-config/featuregate registers it.
type GateState string

// The states of pkg/virt-config/featuregate. Only GA changes whether a gate
// is on: a GA gate is on whatever the CR says; every other gate, known or
// not, is on exactly when spec.configuration.developerConfiguration.
// featureGates lists it.
const (
	Alpha        GateState = "Alpha"
	Beta         GateState = "Beta"
	GA           GateState = "General Availability"
	Deprecated   GateState = "Deprecated"
	Discontinued GateState = "Discontinued"
)

// Feature gate names this package's helpers read. The strings are the ones
// users write in the KubeVirt CR.
const (
	gateAlignCPUs                          = "AlignCPUs"
	gateConfigurableHypervisor             = "ConfigurableHypervisor"
	gateContainerPathVolumes               = "ContainerPathVolumes"
	gateDeclarativeHotplugVolumes          = "DeclarativeHotplugVolumes"
	gateDisableMediatedDevicesHandling     = "DisableMDEVConfiguration"
	gateDockerSELinuxMCSWorkaround         = "DockerSELinuxMCSWorkaround"
	gateExternalNetResourceInjection       = "ExternalNetResourceInjection"
	gateGPUsWithDRA                        = "GPUsWithDRA"
	gateHostDevicesWithDRA                 = "HostDevicesWithDRA"
	gateHotplugVolumes                     = "HotplugVolumes"
	gateHypervStrictCheck                  = "HypervStrictCheck"
	gateImageVolume                        = "ImageVolume"
	gateIncrementalBackup                  = "IncrementalBackup"
	gateLibvirtHooksServerAndClient        = "LibvirtHooksServerAndClient"
	gateLiveMigration                      = "LiveMigration"
	gateLiveUpdateNADRef                   = "LiveUpdateNADRef"
	gateMigrationPriorityQueue             = "MigrationPriorityQueue"
	gatePasstBinding                       = "PasstBinding"
	gatePodSecondaryInterfaceNamingUpgrade = "PodSecondaryInterfaceNamingUpgrade"
	gateRoot                               = "Root"
	gateSnapshot                           = "Snapshot"
	gateUtilityVolumes                     = "UtilityVolumes"
	gateVMExport                           = "VMExport"
	gateVmiMemoryOverheadReport            = "VmiMemoryOverheadReport"
)

// gateStates is KubeVirt v1.8.1's registry of feature gates
// (pkg/virt-config/featuregate/active.go and inactive.go), keyed by the name
// written in the CR. A new KubeVirt release changes it: compare both files
// when moving the kubevirt.io/api pin.
var gateStates = map[string]GateState{
	// active.go
	"LibvirtHooksServerAndClient":        Alpha,
	"ImageVolume":                        Beta,
	"ExpandDisks":                        Alpha,
	"CPUManager":                         Alpha,
	"ExperimentalIgnitionSupport":        Alpha,
	"HypervStrictCheck":                  Alpha,
	"Sidecar":                            Alpha,
	"HostDevices":                        Alpha,
	"Snapshot":                           Beta,
	"VMExport":                           Beta,
	"HotplugVolumes":                     Alpha,
	"HostDisk":                           Alpha,
	"DownwardMetrics":                    Alpha,
	"Root":                               Alpha,
	"WorkloadEncryptionSEV":              Alpha,
	"WorkloadEncryptionTDX":              Alpha,
	"VSOCK":                              Alpha,
	"KubevirtSeccompProfile":             Beta,
	"PersistentReservation":              Alpha,
	"AlignCPUs":                          Alpha,
	"NodeRestriction":                    Beta,
	"EnableVirtioFsStorageVolumes":       Alpha,
	"GPUsWithDRA":                        Alpha,
	"HostDevicesWithDRA":                 Alpha,
	"PCINUMAAwareTopology":               Alpha,
	"DecentralizedLiveMigration":         Alpha,
	"DeclarativeHotplugVolumes":          Alpha,
	"SecureExecution":                    Beta,
	"VideoConfig":                        Beta,
	"PanicDevices":                       Beta,
	"UtilityVolumes":                     Alpha,
	"ConfigurableHypervisor":             Alpha,
	"PasstBinding":                       Beta,
	"IncrementalBackup":                  Alpha,
	"MigrationPriorityQueue":             Beta,
	"PodSecondaryInterfaceNamingUpgrade": Beta,
	"ExternalNetResourceInjection":       Beta,
	"RebootPolicy":                       Alpha,
	"Template":                           Alpha,
	"VmiMemoryOverheadReport":            Alpha,
	"ContainerPathVolumes":               Alpha,
	"OptOutRoleAggregation":              Alpha,
	"LiveUpdateNADRef":                   Beta,
	"ReservedOverheadMemlock":            Alpha,

	// inactive.go
	"LiveMigration":                     GA,
	"SRIOVLiveMigration":                GA,
	"NonRoot":                           GA,
	"PSA":                               GA,
	"CPUNodeDiscovery":                  GA,
	"NUMA":                              GA,
	"CommonInstancetypesDeploymentGate": GA,
	"GPU":                               GA,
	"HotplugNICs":                       GA,
	"BochsDisplayForEFIGuests":          GA,
	"VMLiveUpdateFeatures":              GA,
	"NetworkBindingPlugins":             GA,
	"DynamicPodInterfaceNaming":         GA,
	"VolumesUpdateStrategy":             GA,
	"VolumeMigration":                   GA,
	"DisableCustomSELinuxPolicy":        GA,
	"AutoResourceLimitsGate":            GA,
	"ClusterProfiler":                   GA,
	"VMPersistentState":                 GA,
	"DockerSELinuxMCSWorkaround":        Deprecated,
	"ExperimentalVirtiofsSupport":       Discontinued,
	"Passt":                             Discontinued,
	"Macvtap":                           Discontinued,
	"PasstIPStackMigration":             Discontinued,
	"InstancetypeReferencePolicy":       GA,
	"MultiArchitecture":                 Deprecated,
	"EnableVirtioFsConfigVolumes":       GA,
	"DisableMDEVConfiguration":          Deprecated,
}

// FeatureGateState returns the state KubeVirt v1.8.1 registers for the gate
// name, and false for a name KubeVirt does not know.
func FeatureGateState(name string) (GateState, bool) {
	s, ok := gateStates[name]
	return s, ok
}

// FeatureGateEnabled reports whether the named gate is on, with KubeVirt's
// semantics (ClusterConfig.isFeatureGateEnabled): GA gates are always on;
// any other name is on exactly when developerConfiguration.featureGates
// lists it, which holds for Deprecated and Discontinued gates and for names
// KubeVirt does not know too (KubeVirt's webhook warns about those, the
// controller does not refuse them). disabledFeatureGates never turns a gate
// off: it only matters for gates a later KubeVirt enables by default.
func (c *Config) FeatureGateEnabled(name string) bool {
	if gateStates[name] == GA {
		return true
	}
	return slices.Contains(c.spec.DeveloperConfiguration.FeatureGates, name)
}

// The gate helpers virt-controller's template service, its controllers and
// the defaulting code it shares with virt-api call on ClusterConfig.

func (c *Config) AlignCPUsEnabled() bool { return c.FeatureGateEnabled(gateAlignCPUs) }
func (c *Config) ConfigurableHypervisorEnabled() bool {
	return c.FeatureGateEnabled(gateConfigurableHypervisor)
}
func (c *Config) ContainerPathVolumesEnabled() bool {
	return c.FeatureGateEnabled(gateContainerPathVolumes)
}
func (c *Config) DeclarativeHotplugVolumesEnabled() bool {
	return c.FeatureGateEnabled(gateDeclarativeHotplugVolumes)
}
func (c *Config) DockerSELinuxMCSWorkaroundEnabled() bool {
	return c.FeatureGateEnabled(gateDockerSELinuxMCSWorkaround)
}
func (c *Config) ExternalNetResourceInjectionEnabled() bool {
	return c.FeatureGateEnabled(gateExternalNetResourceInjection)
}
func (c *Config) GPUsWithDRAGateEnabled() bool { return c.FeatureGateEnabled(gateGPUsWithDRA) }
func (c *Config) HostDevicesWithDRAEnabled() bool {
	return c.FeatureGateEnabled(gateHostDevicesWithDRA)
}
func (c *Config) HotplugVolumesEnabled() bool    { return c.FeatureGateEnabled(gateHotplugVolumes) }
func (c *Config) HypervStrictCheckEnabled() bool { return c.FeatureGateEnabled(gateHypervStrictCheck) }
func (c *Config) ImageVolumeEnabled() bool       { return c.FeatureGateEnabled(gateImageVolume) }
func (c *Config) IncrementalBackupEnabled() bool { return c.FeatureGateEnabled(gateIncrementalBackup) }
func (c *Config) LiveMigrationEnabled() bool     { return c.FeatureGateEnabled(gateLiveMigration) }
func (c *Config) LiveUpdateNADRefEnabled() bool  { return c.FeatureGateEnabled(gateLiveUpdateNADRef) }
func (c *Config) PasstBindingEnabled() bool      { return c.FeatureGateEnabled(gatePasstBinding) }
func (c *Config) RootEnabled() bool              { return c.FeatureGateEnabled(gateRoot) }
func (c *Config) SnapshotEnabled() bool          { return c.FeatureGateEnabled(gateSnapshot) }
func (c *Config) UtilityVolumesEnabled() bool    { return c.FeatureGateEnabled(gateUtilityVolumes) }
func (c *Config) VMExportEnabled() bool          { return c.FeatureGateEnabled(gateVMExport) }
func (c *Config) LibvirtHooksServerAndClientEnabled() bool {
	return c.FeatureGateEnabled(gateLibvirtHooksServerAndClient)
}
func (c *Config) MigrationPriorityQueueEnabled() bool {
	return c.FeatureGateEnabled(gateMigrationPriorityQueue)
}
func (c *Config) PodSecondaryInterfaceNamingUpgradeEnabled() bool {
	return c.FeatureGateEnabled(gatePodSecondaryInterfaceNamingUpgrade)
}
func (c *Config) VmiMemoryOverheadReportEnabled() bool {
	return c.FeatureGateEnabled(gateVmiMemoryOverheadReport)
}
