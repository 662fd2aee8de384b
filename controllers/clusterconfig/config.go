package clusterconfig

import (
	"encoding/json"
	"fmt"
	"maps"
	"runtime"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// Config is one immutable view of the cluster configuration: the effective
// KubeVirtConfiguration (defaults with the CR's spec.configuration merged
// over them) and the metadata of the KubeVirt CR it came from. It is shared
// by every reader: values the accessors return (pointers, maps, slices) must
// not be modified.
type Config struct {
	spec *virtv1.KubeVirtConfiguration
	arch string

	// resourceVersion is the KubeVirt CR version spec came from; "" for
	// the defaults.
	resourceVersion string
	// kubeVirt names the CR KubeVirt would read now ("" with no CR), and
	// annotations are that CR's. KubeVirt reads annotations from the
	// current CR even while it keeps an older valid configuration, and so
	// do these.
	kubeVirt    string
	annotations map[string]string
	// workloads is what the workload updater reads from the current CR,
	// beside its configuration.
	workloads Workloads
}

// Workloads is what KubeVirt's workload updater reads from the KubeVirt CR
// itself: spec.workloadUpdateStrategy and the CR's deployment state, taken
// from the current CR even while an older valid configuration is kept.
type Workloads struct {
	// Strategy is spec.workloadUpdateStrategy.
	Strategy virtv1.KubeVirtWorkloadUpdateStrategy
	// Deployed: virt-operator has deployed the install and is not
	// updating it (phase Deployed, observedDeploymentID equal to
	// targetDeploymentID), which KubeVirt's updater waits for.
	Deployed bool
	// Outdated is status.outdatedVirtualMachineInstanceWorkloads (nil:
	// not set).
	Outdated *int
}

// DefaultConfig is the configuration of a cluster with no KubeVirt CR.
func DefaultConfig(arch string) *Config {
	if arch == "" {
		arch = runtime.GOARCH
	}
	return &Config{spec: Defaults(arch), arch: arch}
}

// FromKubeVirt returns the configuration virt-controller derives from the
// KubeVirt CR kv (setConfigFromKubeVirt): kv's spec.configuration
// JSON-merged over Defaults(arch), with
// ArchitectureConfiguration.DefaultArchitecture taken from kv's status. It
// returns an error for a configuration KubeVirt rejects (validateConfig);
// KubeVirt then keeps its last valid configuration, and so should the
// caller. A nil kv gives DefaultConfig.
//
// Which CR counts, when several exist, is not decided here; see Watcher.
func FromKubeVirt(kv *virtv1.KubeVirt, arch string) (*Config, error) {
	if kv == nil {
		return DefaultConfig(arch), nil
	}
	c := DefaultConfig(arch)
	if err := merge(c.spec, kv); err != nil {
		return nil, fmt.Errorf("merge configuration of KubeVirt %s/%s: %w", kv.Namespace, kv.Name, err)
	}
	if err := validate(c.spec); err != nil {
		return nil, fmt.Errorf("validate configuration of KubeVirt %s/%s: %w", kv.Namespace, kv.Name, err)
	}
	c.resourceVersion = kv.ResourceVersion
	return c.withKubeVirt(kv), nil
}

// merge overlays kv's spec.configuration on spec as KubeVirt does: encode
// it with encoding/json and decode that over the defaults. The merge rules
// are encoding/json's, and fidelity depends on keeping them: omitempty
// fields left unset (zero numbers, empty strings, empty slices and maps)
// keep the default; a set pointer field is decoded into the default it
// points to, so nested structs merge field by field; maps merge key by key;
// a set slice replaces the default, but its elements are decoded into the
// default's elements (Hypervisors [{}] keeps "kvm"); a non-omitempty field
// decodes as null and clears the default (diskVerification: {} clears
// MemoryLimit).
func merge(spec *virtv1.KubeVirtConfiguration, kv *virtv1.KubeVirt) error {
	overrides, err := json.Marshal(&kv.Spec.Configuration)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(overrides, spec); err != nil {
		return err
	}
	if spec.ArchitectureConfiguration == nil {
		spec.ArchitectureConfiguration = &virtv1.ArchConfiguration{}
	}
	// virt-operator records the default architecture in the status; it
	// wins over the spec and over the controller's own architecture.
	spec.ArchitectureConfiguration.DefaultArchitecture = kv.Status.DefaultArchitecture
	return nil
}

// validate is KubeVirt's validateConfig. The merge keeps
// DeveloperConfiguration and NetworkConfiguration non-nil: both are
// omitempty pointers set in the defaults.
func validate(spec *virtv1.KubeVirtConfiguration) error {
	switch spec.ImagePullPolicy {
	case "", k8sv1.PullAlways, k8sv1.PullNever, k8sv1.PullIfNotPresent:
	default:
		return fmt.Errorf("invalid imagePullPolicy %q", spec.ImagePullPolicy)
	}
	dev := spec.DeveloperConfiguration
	if dev.MemoryOvercommit <= 0 {
		return fmt.Errorf("invalid memoryOvercommit %d", dev.MemoryOvercommit)
	}
	if dev.CPUAllocationRatio <= 0 {
		return fmt.Errorf("invalid cpuAllocationRatio %d", dev.CPUAllocationRatio)
	}
	if t := dev.LessPVCSpaceToleration; t < 0 || t > 100 {
		return fmt.Errorf("invalid pvcTolerateLessSpaceUpToPercent %d", t)
	}
	switch spec.NetworkConfiguration.NetworkInterface {
	case "", string(virtv1.BridgeInterface), string(virtv1.DeprecatedSlirpInterface), string(virtv1.MasqueradeInterface):
	default:
		return fmt.Errorf("invalid defaultNetworkInterface %q", spec.NetworkConfiguration.NetworkInterface)
	}
	return nil
}

// withKubeVirt returns a copy of c that reads annotations from kv, the CR
// KubeVirt currently selects (nil: none).
func (c *Config) withKubeVirt(kv *virtv1.KubeVirt) *Config {
	out := *c
	out.kubeVirt, out.annotations = "", nil
	if kv != nil {
		out.kubeVirt = kv.Namespace + "/" + kv.Name
		out.annotations = maps.Clone(kv.Annotations)
		out.workloads = workloadsOf(kv)
	} else {
		out.workloads = Workloads{}
	}
	return &out
}

func workloadsOf(kv *virtv1.KubeVirt) Workloads {
	st := kv.Status
	w := Workloads{Strategy: *kv.Spec.WorkloadUpdateStrategy.DeepCopy(),
		Deployed: st.Phase == virtv1.KubeVirtPhaseDeployed && st.ObservedDeploymentID == st.TargetDeploymentID}
	if n := st.OutdatedVirtualMachineInstanceWorkloads; n != nil {
		w.Outdated = ptr.To(*n)
	}
	return w
}

// Workloads is the current KubeVirt CR's workload update strategy and
// deployment state (zero with no CR).
func (c *Config) Workloads() Workloads { return c.workloads }

// Configuration is the effective configuration (ClusterConfig.GetConfig), for the
// fields without an accessor (SeccompConfiguration,
// AutoCPULimitNamespaceLabelSelector, ChangedBlockTrackingLabelSelectors,
// the sidecar creators' input). Do not modify it.
func (c *Config) Configuration() *virtv1.KubeVirtConfiguration { return c.spec }

// ClusterCPUArch is the controller's CPU architecture
// (ClusterConfig.GetClusterCPUArch), used for VMIs without
// spec.architecture.
func (c *Config) ClusterCPUArch() string { return c.arch }

// ResourceVersion is the version of the KubeVirt CR the effective
// configuration came from ("" for the defaults); after an invalid update it
// stays at the last valid version (ClusterConfig.GetResourceVersion).
func (c *Config) ResourceVersion() string { return c.resourceVersion }

// KubeVirt is the namespace/name of the KubeVirt CR in use, "" when there is
// none (ClusterConfig.GetConfigFromKubeVirtCR() == nil).
func (c *Config) KubeVirt() string { return c.kubeVirt }

// Annotation returns the KubeVirt CR's annotation key; false with no CR.
func (c *Config) Annotation(key string) (string, bool) {
	v, ok := c.annotations[key]
	return v, ok
}

// KubeVirtAnnotations are the KubeVirt CR's annotations (nil with no CR).
// Do not modify them.
func (c *Config) KubeVirtAnnotations() map[string]string { return c.annotations }

// EmulatorThreadCompleteToEvenParity reports whether the KubeVirt CR carries
// the virtv1.EmulatorThreadCompleteToEvenParity annotation, which the VMI
// mutating webhook applies only when AlignCPUs is enabled as well.
func (c *Config) EmulatorThreadCompleteToEvenParity() bool {
	_, ok := c.annotations[virtv1.EmulatorThreadCompleteToEvenParity]
	return ok
}

// VGADisplayForEFIGuestsEnabled reports whether the KubeVirt CR carries the
// virtv1.VGADisplayForEFIGuestsX86Annotation annotation.
func (c *Config) VGADisplayForEFIGuestsEnabled() bool {
	_, ok := c.annotations[virtv1.VGADisplayForEFIGuestsX86Annotation]
	return ok
}

func (c *Config) ImagePullPolicy() k8sv1.PullPolicy { return c.spec.ImagePullPolicy }
func (c *Config) MemoryOvercommit() int {
	return c.spec.DeveloperConfiguration.MemoryOvercommit
}
func (c *Config) CPUAllocationRatio() int {
	return c.spec.DeveloperConfiguration.CPUAllocationRatio
}

// AdditionalGuestMemoryOverheadRatio is the configured ratio string, nil when
// unset; callers parse it as KubeVirt's memory overhead code does.
func (c *Config) AdditionalGuestMemoryOverheadRatio() *string {
	return c.spec.AdditionalGuestMemoryOverheadRatio
}
func (c *Config) CPURequest() *resource.Quantity { return c.spec.CPURequest }
func (c *Config) CPUModel() string               { return c.spec.CPUModel }
func (c *Config) DefaultRuntimeClass() string    { return c.spec.DefaultRuntimeClass }
func (c *Config) SELinuxLauncherType() string    { return c.spec.SELinuxLauncherType }
func (c *Config) VMStateStorageClass() string    { return c.spec.VMStateStorageClass }
func (c *Config) AllowEmulation() bool           { return c.spec.DeveloperConfiguration.UseEmulation }
func (c *Config) NodeSelectors() map[string]string {
	return c.spec.DeveloperConfiguration.NodeSelectors
}
func (c *Config) MinimumClusterTSCFrequency() *int64 {
	return c.spec.DeveloperConfiguration.MinimumClusterTSCFrequency
}
func (c *Config) LessPVCSpaceToleration() int {
	return c.spec.DeveloperConfiguration.LessPVCSpaceToleration
}
func (c *Config) MinimumReservePVCBytes() uint64 {
	return c.spec.DeveloperConfiguration.MinimumReservePVCBytes
}
func (c *Config) ClusterProfilerEnabled() bool {
	return c.spec.DeveloperConfiguration.ClusterProfiler
}
func (c *Config) PermittedHostDevices() *virtv1.PermittedHostDevices {
	return c.spec.PermittedHostDevices
}
func (c *Config) EvictionStrategy() *virtv1.EvictionStrategy { return c.spec.EvictionStrategy }
func (c *Config) SMBIOS() *virtv1.SMBiosConfiguration        { return c.spec.SMBIOSConfig }
func (c *Config) SupportedGuestAgentVersions() []string      { return c.spec.SupportedGuestAgentVersions }
func (c *Config) DefaultArchitecture() string {
	return c.spec.ArchitectureConfiguration.DefaultArchitecture
}

// MemBalloonStatsPeriod is KubeVirt's GetMemBalloonStatsPeriod; 0 if a CR
// could clear it, which the merge does not allow.
func (c *Config) MemBalloonStatsPeriod() uint32 {
	if p := c.spec.MemBalloonStatsPeriod; p != nil {
		return *p
	}
	return 0
}

// ObsoleteCPUModels is spec.configuration.obsoleteCPUModels, nil when unset
// (ClusterConfig.GetObsoleteCPUModels); the node labeller then uses
// DefaultObsoleteCPUModels.
func (c *Config) ObsoleteCPUModels() map[string]bool { return c.spec.ObsoleteCPUModels }

// NetworkBindings are the network binding plugins by name.
func (c *Config) NetworkBindings() map[string]virtv1.InterfaceBindingPlugin {
	if n := c.spec.NetworkConfiguration; n != nil {
		return n.Binding
	}
	return nil
}

// DefaultNetworkInterface is the pod network's default binding ("bridge").
func (c *Config) DefaultNetworkInterface() string {
	return c.spec.NetworkConfiguration.NetworkInterface
}

// IsBridgeInterfaceOnPodNetworkEnabled is permitBridgeInterfaceOnPodNetwork.
func (c *Config) IsBridgeInterfaceOnPodNetworkEnabled() bool {
	p := c.spec.NetworkConfiguration.PermitBridgeInterfaceOnPodNetwork
	return p != nil && *p
}

// DiskVerification is developerConfiguration.diskVerification.
func (c *Config) DiskVerification() *virtv1.DiskVerification {
	return c.spec.DeveloperConfiguration.DiskVerification
}

// DiskVerificationMemoryLimit is the --disk-memory-limit the template passes
// to virt-launcher. It is nil when a CR sets diskVerification without a
// memoryLimit (its JSON null clears the default); KubeVirt would dereference
// it and panic, callers here must decide.
func (c *Config) DiskVerificationMemoryLimit() *resource.Quantity {
	if d := c.spec.DeveloperConfiguration.DiskVerification; d != nil {
		return d.MemoryLimit
	}
	return nil
}

// Migrations is the migration configuration (GetMigrationConfiguration),
// with AllowWorkloadDisruption following AllowPostCopy when unset. It is a
// copy: KubeVirt fills the field into its shared configuration instead.
func (c *Config) Migrations() *virtv1.MigrationConfiguration {
	m := c.spec.MigrationConfiguration.DeepCopy()
	if m.AllowWorkloadDisruption == nil {
		allow := m.AllowPostCopy != nil && *m.AllowPostCopy
		m.AllowWorkloadDisruption = &allow
	}
	return m
}

func (c *Config) archConfig(arch string) *virtv1.ArchSpecificConfiguration {
	a := ArchConfiguration(c.spec, arch)
	return &a
}

// ArchConfiguration is spec's configuration for arch, where anything not
// arm64 or s390x counts as amd64 (KubeVirt's per-architecture getters);
// empty when spec has none.
func ArchConfiguration(spec *virtv1.KubeVirtConfiguration, arch string) virtv1.ArchSpecificConfiguration {
	a := spec.ArchitectureConfiguration
	if a == nil {
		return virtv1.ArchSpecificConfiguration{}
	}
	var s *virtv1.ArchSpecificConfiguration
	switch arch {
	case "arm64":
		s = a.Arm64
	case "s390x":
		s = a.S390x
	default:
		s = a.Amd64
	}
	if s == nil {
		return virtv1.ArchSpecificConfiguration{}
	}
	return *s
}

// MachineType is the default machine type for arch; the deprecated
// top-level machineType wins when set (GetMachineType).
func (c *Config) MachineType(arch string) string {
	if c.spec.MachineType != "" {
		return c.spec.MachineType
	}
	return c.archConfig(arch).MachineType
}

// OVMFPath is the OVMF/AAVMF directory for arch; the deprecated top-level
// ovmfPath wins when set (GetOVMFPath).
func (c *Config) OVMFPath(arch string) string {
	if c.spec.OVMFPath != "" {
		return c.spec.OVMFPath
	}
	return c.archConfig(arch).OVMFPath
}

// EmulatedMachines are the machine types allowed for arch; the deprecated
// top-level emulatedMachines wins when set (GetEmulatedMachines).
func (c *Config) EmulatedMachines(arch string) []string {
	if c.spec.EmulatedMachines != nil {
		return c.spec.EmulatedMachines
	}
	return c.archConfig(arch).EmulatedMachines
}

// SupportContainerRequest is the request of resource for the support
// container type: the first supportContainerResources entry of the type with
// a non-zero value, nil when none (GetSupportContainerRequest).
func (c *Config) SupportContainerRequest(t virtv1.SupportContainerType, name k8sv1.ResourceName) *resource.Quantity {
	for _, r := range c.spec.SupportContainerResources {
		if r.Type == t {
			if q := r.Resources.Requests[name]; !q.IsZero() {
				return &q
			}
		}
	}
	return nil
}

// SupportContainerLimit is SupportContainerRequest for limits.
func (c *Config) SupportContainerLimit(t virtv1.SupportContainerType, name k8sv1.ResourceName) *resource.Quantity {
	for _, r := range c.spec.SupportContainerResources {
		if r.Type == t {
			if q := r.Resources.Limits[name]; !q.IsZero() {
				return &q
			}
		}
	}
	return nil
}

// SupportContainerResources gathers, for the support container type, every
// resource SupportContainerRequest and SupportContainerLimit would return.
func (c *Config) SupportContainerResources(t virtv1.SupportContainerType) k8sv1.ResourceRequirements {
	var out k8sv1.ResourceRequirements
	for _, r := range c.spec.SupportContainerResources {
		if r.Type != t {
			continue
		}
		out.Requests = addFirstNonZero(out.Requests, r.Resources.Requests)
		out.Limits = addFirstNonZero(out.Limits, r.Resources.Limits)
	}
	return out
}

func addFirstNonZero(dst, src k8sv1.ResourceList) k8sv1.ResourceList {
	for name, q := range src {
		if _, set := dst[name]; set || q.IsZero() {
			continue
		}
		if dst == nil {
			dst = k8sv1.ResourceList{}
		}
		dst[name] = q.DeepCopy()
	}
	return dst
}

// Hypervisor is the hypervisor in use (GetHypervisor): the first entry of
// spec.configuration.hypervisors when ConfigurableHypervisor is enabled,
// otherwise KVM.
func (c *Config) Hypervisor() *virtv1.HypervisorConfiguration {
	if c.ConfigurableHypervisorEnabled() && len(c.spec.Hypervisors) > 0 {
		return &c.spec.Hypervisors[0]
	}
	return &virtv1.HypervisorConfiguration{Name: virtv1.KvmHypervisorName}
}

// HypervisorName is Hypervisor().Name, the template's --hypervisor.
func (c *Config) HypervisorName() string { return c.Hypervisor().Name }

// VirtLauncherVerbosity is logVerbosity.virtLauncher; the template adds a
// verbosity variable only when it differs from DefaultLogVerbosity.
func (c *Config) VirtLauncherVerbosity() uint {
	return c.spec.DeveloperConfiguration.LogVerbosity.VirtLauncher
}

// VirtControllerVerbosity is logVerbosity.virtController, or the node's
// entry in logVerbosity.nodeVerbosity when nodeName has a non-zero one.
func (c *Config) VirtControllerVerbosity(nodeName string) uint {
	l := c.spec.DeveloperConfiguration.LogVerbosity
	if nodeName != "" {
		if v := l.NodeVerbosity[nodeName]; v != 0 {
			return v
		}
	}
	return l.VirtController
}

// IsSerialConsoleLogDisabled reports whether
// virtualMachineOptions.disableSerialConsoleLog is present (its presence,
// not its content, disables it).
func (c *Config) IsSerialConsoleLogDisabled() bool {
	o := c.spec.VirtualMachineOptions
	return o != nil && o.DisableSerialConsoleLog != nil
}

// IsFreePageReportingDisabled is IsSerialConsoleLogDisabled for
// virtualMachineOptions.disableFreePageReporting.
func (c *Config) IsFreePageReportingDisabled() bool {
	o := c.spec.VirtualMachineOptions
	return o != nil && o.DisableFreePageReporting != nil
}

// MaximumCpuSockets is liveUpdateConfiguration.maxCpuSockets, 0 when unset.
func (c *Config) MaximumCpuSockets() uint32 {
	if l := c.spec.LiveUpdateConfiguration; l != nil && l.MaxCpuSockets != nil {
		return *l.MaxCpuSockets
	}
	return 0
}

// MaximumGuestMemory is liveUpdateConfiguration.maxGuest, nil when unset.
func (c *Config) MaximumGuestMemory() *resource.Quantity {
	if l := c.spec.LiveUpdateConfiguration; l != nil {
		return l.MaxGuest
	}
	return nil
}

// MaxHotplugRatio is liveUpdateConfiguration.maxHotplugRatio (default 4).
func (c *Config) MaxHotplugRatio() uint32 {
	if l := c.spec.LiveUpdateConfiguration; l != nil {
		return l.MaxHotplugRatio
	}
	return 1
}

// IsVMRolloutStrategyLiveUpdate reports whether vmRolloutStrategy is
// LiveUpdate (the default) rather than Stage.
func (c *Config) IsVMRolloutStrategyLiveUpdate() bool {
	s := c.spec.VMRolloutStrategy
	return s == nil || *s == virtv1.VMRolloutStrategyLiveUpdate
}

// InstancetypeReferencePolicy is instancetype.referencePolicy, Reference
// when unset.
func (c *Config) InstancetypeReferencePolicy() virtv1.InstancetypeReferencePolicy {
	if i := c.spec.Instancetype; i != nil && i.ReferencePolicy != nil {
		return *i.ReferencePolicy
	}
	return virtv1.Reference
}

// MediatedDevicesHandlingDisabled is mediatedDevicesConfiguration.enabled
// negated when set, otherwise the deprecated DisableMDEVConfiguration gate.
func (c *Config) MediatedDevicesHandlingDisabled() bool {
	if m := c.spec.MediatedDevicesConfiguration; m != nil && m.Enabled != nil {
		return !*m.Enabled
	}
	return c.FeatureGateEnabled(gateDisableMediatedDevicesHandling)
}
