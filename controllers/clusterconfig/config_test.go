package clusterconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

func TestDefaults(t *testing.T) {
	d := Defaults("amd64")
	mig := d.MigrationConfiguration
	arch := d.ArchitectureConfiguration
	tests := []struct {
		name      string
		got, want any
	}{
		{"image pull policy is IfNotPresent", d.ImagePullPolicy, k8sv1.PullIfNotPresent},
		{"memory overcommit is 100", d.DeveloperConfiguration.MemoryOvercommit, 100},
		{"cpu allocation ratio is 10", d.DeveloperConfiguration.CPUAllocationRatio, 10},
		{"emulation is not allowed", d.DeveloperConfiguration.UseEmulation, false},
		{"less PVC space toleration is 10 percent", d.DeveloperConfiguration.LessPVCSpaceToleration, 10},
		{"minimum PVC reserve is 128KiB", d.DeveloperConfiguration.MinimumReservePVCBytes, uint64(131072)},
		{"there are no default node selectors", d.DeveloperConfiguration.NodeSelectors == nil, true},
		{"no feature gates are listed", d.DeveloperConfiguration.FeatureGates == nil, true},
		{"disk verification memory limit is 2000Mi", d.DeveloperConfiguration.DiskVerification.MemoryLimit.String(), "2000Mi"},
		{"every component logs at verbosity 2", *d.DeveloperConfiguration.LogVerbosity,
			virtv1.LogVerbosity{VirtAPI: 2, VirtOperator: 2, VirtController: 2, VirtHandler: 2, VirtLauncher: 2}},
		{"eviction strategy is None", *d.EvictionStrategy, virtv1.EvictionStrategyNone},
		{"5 migrations run per cluster", *mig.ParallelMigrationsPerCluster, uint32(5)},
		{"2 outbound migrations run per node", *mig.ParallelOutboundMigrationsPerNode, uint32(2)},
		{"migration bandwidth is unlimited", mig.BandwidthPerMigration.String(), "0"},
		{"migration completion timeout is 150s per GiB", *mig.CompletionTimeoutPerGiB, int64(150)},
		{"migration progress timeout is 150s", *mig.ProgressTimeout, int64(150)},
		{"utility volumes timeout is 150s", *mig.UtilityVolumesTimeout, int64(150)},
		{"unsafe migrations are not overridden", *mig.UnsafeMigrationOverride, false},
		{"auto-converge is off", *mig.AllowAutoConverge, false},
		{"post-copy is off", *mig.AllowPostCopy, false},
		{"allowWorkloadDisruption is left unset", mig.AllowWorkloadDisruption == nil, true},
		{"the drain taint is kubevirt.io/drain", *mig.NodeDrainTaintKey, "kubevirt.io/drain"},
		{"the CPU request is 100m", d.CPURequest.String(), "100m"},
		{"the default pod network binding is bridge", d.NetworkConfiguration.NetworkInterface, "bridge"},
		{"bridge on the pod network is permitted", *d.NetworkConfiguration.PermitBridgeInterfaceOnPodNetwork, true},
		{"slirp is not permitted", *d.NetworkConfiguration.DeprecatedPermitSlirpInterface, false},
		{"SMBIOS says KubeVirt", *d.SMBIOSConfig, virtv1.SMBiosConfiguration{Family: "KubeVirt", Manufacturer: "KubeVirt", Product: "None"}},
		{"the SELinux launcher type is empty", d.SELinuxLauncherType, ""},
		{"guest agents 2 to 5 are supported", d.SupportedGuestAgentVersions, []string{"2.*", "3.*", "4.*", "5.*"}},
		{"the balloon stats period is 10s", *d.MemBalloonStatsPeriod, uint32(10)},
		{"the amd64 machine type is q35", arch.Amd64.MachineType, "q35"},
		{"the arm64 machine type is virt", arch.Arm64.MachineType, "virt"},
		{"the s390x machine type is s390-ccw-virtio", arch.S390x.MachineType, "s390-ccw-virtio"},
		{"amd64 uses OVMF", arch.Amd64.OVMFPath, "/usr/share/OVMF"},
		{"arm64 uses AAVMF", arch.Arm64.OVMFPath, "/usr/share/AAVMF"},
		{"s390x has no OVMF path", arch.S390x.OVMFPath, ""},
		{"amd64 emulates q35 machines", arch.Amd64.EmulatedMachines, []string{"q35*", "pc-q35*"}},
		{"arm64 emulates virt machines", arch.Arm64.EmulatedMachines, []string{"virt*"}},
		{"s390x emulates s390-ccw-virtio machines", arch.S390x.EmulatedMachines, []string{"s390-ccw-virtio*"}},
		{"the default architecture is the one given", arch.DefaultArchitecture, "amd64"},
		{"the hotplug ratio is 4", d.LiveUpdateConfiguration.MaxHotplugRatio, uint32(4)},
		{"the rollout strategy is LiveUpdate", *d.VMRolloutStrategy, virtv1.VMRolloutStrategyLiveUpdate},
		{"the hypervisor is kvm", d.Hypervisors, []virtv1.HypervisorConfiguration{{Name: "kvm"}}},
		{"virt-controller's client allows 200 QPS", d.ControllerConfiguration.RestClient.RateLimiter.TokenBucketRateLimiter.QPS, float32(200)},
		{"virt-controller's client bursts to 400", d.ControllerConfiguration.RestClient.RateLimiter.TokenBucketRateLimiter.Burst, 400},
		{"virt-handler's client allows 50 QPS", d.HandlerConfiguration.RestClient.RateLimiter.TokenBucketRateLimiter.QPS, float32(50)},
		{"virt-handler's client bursts to 100", d.HandlerConfiguration.RestClient.RateLimiter.TokenBucketRateLimiter.Burst, 100},
		{"virt-api's client allows 200 QPS", d.APIConfiguration.RestClient.RateLimiter.TokenBucketRateLimiter.QPS, float32(200)},
		{"webhook clients allow 200 QPS", d.WebhookConfiguration.RestClient.RateLimiter.TokenBucketRateLimiter.QPS, float32(200)},
		{"there is no VM state storage class", d.VMStateStorageClass, ""},
		{"there is no instancetype configuration", d.Instancetype == nil, true},
		{"there are no obsolete CPU models", d.ObsoleteCPUModels == nil, true},
		{"there are no support container resources", d.SupportContainerResources == nil, true},
		{"there is no default runtime class", d.DefaultRuntimeClass, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaultsReturnsAFreshValueEachCall(t *testing.T) {
	a := Defaults("amd64")
	a.DeveloperConfiguration.MemoryOvercommit = 1
	a.ArchitectureConfiguration.Amd64.EmulatedMachines[0] = "x"
	if b := Defaults("amd64"); b.DeveloperConfiguration.MemoryOvercommit != 100 || b.ArchitectureConfiguration.Amd64.EmulatedMachines[0] != "q35*" {
		t.Fatalf("Defaults shares state between calls")
	}
}

func TestDefaultObsoleteCPUModels(t *testing.T) {
	m := DefaultObsoleteCPUModels()
	if len(m) != 34 || !m["qemu64"] || !m["Opteron_G2-v1"] || m["Haswell"] {
		t.Fatalf("unexpected default obsolete CPU models: %v", m)
	}
}

// kubeVirt is a CR virt-operator has deployed, with configuration cfg.
func kubeVirt(cfg virtv1.KubeVirtConfiguration) *virtv1.KubeVirt {
	return &virtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "kubevirt", ResourceVersion: "7"},
		Spec:       virtv1.KubeVirtSpec{Configuration: cfg},
		Status:     virtv1.KubeVirtStatus{Phase: virtv1.KubeVirtPhaseDeployed, DefaultArchitecture: "amd64"},
	}
}

func dev(d virtv1.DeveloperConfiguration) virtv1.KubeVirtConfiguration {
	return virtv1.KubeVirtConfiguration{DeveloperConfiguration: &d}
}

func TestFromKubeVirt(t *testing.T) {
	tests := []struct {
		name    string
		kv      *virtv1.KubeVirt
		wantErr string
		check   func(t *testing.T, c *Config)
	}{
		{
			name: "a nil CR gives the defaults",
			check: func(t *testing.T, c *Config) {
				expect(t, c.Configuration(), Defaults("amd64"))
				expect(t, c.KubeVirt(), "")
				expect(t, c.ResourceVersion(), "")
			},
		},
		{
			name: "an empty configuration gives the defaults and records the CR",
			kv:   kubeVirt(virtv1.KubeVirtConfiguration{}),
			check: func(t *testing.T, c *Config) {
				expect(t, c.Configuration(), Defaults("amd64"))
				expect(t, c.KubeVirt(), "kubevirt/kubevirt")
				expect(t, c.ResourceVersion(), "7")
			},
		},
		{
			name: "the status's default architecture wins over the spec's and the controller's",
			kv: func() *virtv1.KubeVirt {
				kv := kubeVirt(virtv1.KubeVirtConfiguration{ArchitectureConfiguration: &virtv1.ArchConfiguration{DefaultArchitecture: "s390x"}})
				kv.Status.DefaultArchitecture = "arm64"
				return kv
			}(),
			check: func(t *testing.T, c *Config) {
				expect(t, c.DefaultArchitecture(), "arm64")
				expect(t, c.ClusterCPUArch(), "amd64")
			},
		},
		{
			name: "a CR without status.defaultArchitecture clears the default architecture",
			kv: func() *virtv1.KubeVirt {
				kv := kubeVirt(virtv1.KubeVirtConfiguration{})
				kv.Status.DefaultArchitecture = ""
				return kv
			}(),
			check: func(t *testing.T, c *Config) { expect(t, c.DefaultArchitecture(), "") },
		},
		{
			name:  "an unset memoryOvercommit keeps the default",
			kv:    kubeVirt(dev(virtv1.DeveloperConfiguration{MemoryOvercommit: 0})),
			check: func(t *testing.T, c *Config) { expect(t, c.MemoryOvercommit(), 100) },
		},
		{
			name: "a set memoryOvercommit and cpuAllocationRatio are used",
			kv:   kubeVirt(dev(virtv1.DeveloperConfiguration{MemoryOvercommit: 150, CPUAllocationRatio: 20})),
			check: func(t *testing.T, c *Config) {
				expect(t, c.MemoryOvercommit(), 150)
				expect(t, c.CPUAllocationRatio(), 20)
			},
		},
		{
			name:    "a negative memoryOvercommit is rejected",
			kv:      kubeVirt(dev(virtv1.DeveloperConfiguration{MemoryOvercommit: -150})),
			wantErr: "memoryOvercommit",
		},
		{
			name:    "a negative cpuAllocationRatio is rejected",
			kv:      kubeVirt(dev(virtv1.DeveloperConfiguration{CPUAllocationRatio: -1})),
			wantErr: "cpuAllocationRatio",
		},
		{
			name:    "a PVC space toleration above 100 percent is rejected",
			kv:      kubeVirt(dev(virtv1.DeveloperConfiguration{LessPVCSpaceToleration: 101})),
			wantErr: "pvcTolerateLessSpaceUpToPercent",
		},
		{
			name:    "an unknown image pull policy is rejected",
			kv:      kubeVirt(virtv1.KubeVirtConfiguration{ImagePullPolicy: "invalid"}),
			wantErr: "imagePullPolicy",
		},
		{
			name:  "a known image pull policy is used",
			kv:    kubeVirt(virtv1.KubeVirtConfiguration{ImagePullPolicy: k8sv1.PullAlways}),
			check: func(t *testing.T, c *Config) { expect(t, c.ImagePullPolicy(), k8sv1.PullAlways) },
		},
		{
			name:    "an unknown default network interface is rejected",
			kv:      kubeVirt(virtv1.KubeVirtConfiguration{NetworkConfiguration: &virtv1.NetworkConfiguration{NetworkInterface: "invalid"}}),
			wantErr: "defaultNetworkInterface",
		},
		{
			name: "a network block without an interface keeps bridge and permits bridge on the pod network",
			kv: kubeVirt(virtv1.KubeVirtConfiguration{NetworkConfiguration: &virtv1.NetworkConfiguration{
				Binding: map[string]virtv1.InterfaceBindingPlugin{"passt": {SidecarImage: "passt:1"}},
			}}),
			check: func(t *testing.T, c *Config) {
				expect(t, c.DefaultNetworkInterface(), "bridge")
				expect(t, c.IsBridgeInterfaceOnPodNetworkEnabled(), true)
				expect(t, c.NetworkBindings(), map[string]virtv1.InterfaceBindingPlugin{"passt": {SidecarImage: "passt:1"}})
			},
		},
		{
			name: "a partial migrations block keeps the other migration defaults",
			kv: kubeVirt(virtv1.KubeVirtConfiguration{MigrationConfiguration: &virtv1.MigrationConfiguration{
				ParallelOutboundMigrationsPerNode: ptr.To[uint32](10),
				AllowPostCopy:                     ptr.To(true),
			}}),
			check: func(t *testing.T, c *Config) {
				m := c.Migrations()
				expect(t, *m.ParallelOutboundMigrationsPerNode, uint32(10))
				expect(t, *m.ParallelMigrationsPerCluster, uint32(5))
				expect(t, m.BandwidthPerMigration.String(), "0")
				expect(t, *m.ProgressTimeout, int64(150))
				expect(t, *m.AllowWorkloadDisruption, true) // follows allowPostCopy
				expect(t, c.Configuration().MigrationConfiguration.AllowWorkloadDisruption == nil, true)
			},
		},
		{
			name: "an explicit allowWorkloadDisruption does not follow allowPostCopy",
			kv: kubeVirt(virtv1.KubeVirtConfiguration{MigrationConfiguration: &virtv1.MigrationConfiguration{
				AllowPostCopy: ptr.To(true), AllowWorkloadDisruption: ptr.To(false),
			}}),
			check: func(t *testing.T, c *Config) { expect(t, *c.Migrations().AllowWorkloadDisruption, false) },
		},
		{
			name:  "an empty nodeSelectors map keeps the default of none",
			kv:    kubeVirt(dev(virtv1.DeveloperConfiguration{NodeSelectors: map[string]string{}})),
			check: func(t *testing.T, c *Config) { expect(t, c.NodeSelectors() == nil, true) },
		},
		{
			name: "listing feature gates keeps the other developer defaults",
			kv:   kubeVirt(dev(virtv1.DeveloperConfiguration{FeatureGates: []string{"Root"}})),
			check: func(t *testing.T, c *Config) {
				expect(t, c.RootEnabled(), true)
				expect(t, c.MemoryOvercommit(), 100)
				expect(t, c.DiskVerificationMemoryLimit().String(), "2000Mi")
				expect(t, c.VirtLauncherVerbosity(), uint(2))
			},
		},
		{
			name: "a launcher verbosity changes only the launcher's",
			kv:   kubeVirt(dev(virtv1.DeveloperConfiguration{LogVerbosity: &virtv1.LogVerbosity{VirtLauncher: 4, NodeVerbosity: map[string]uint{"n1": 6}}})),
			check: func(t *testing.T, c *Config) {
				expect(t, c.VirtLauncherVerbosity(), uint(4))
				expect(t, c.VirtControllerVerbosity(""), uint(2))
				expect(t, c.VirtControllerVerbosity("n1"), uint(6))
			},
		},
		{
			name:  "a diskVerification block without memoryLimit clears the default limit",
			kv:    kubeVirt(dev(virtv1.DeveloperConfiguration{DiskVerification: &virtv1.DiskVerification{}})),
			check: func(t *testing.T, c *Config) { expect(t, c.DiskVerificationMemoryLimit() == nil, true) },
		},
		{
			name: "an empty emulatedMachines list keeps the per-architecture defaults",
			kv: kubeVirt(virtv1.KubeVirtConfiguration{EmulatedMachines: []string{}, ArchitectureConfiguration: &virtv1.ArchConfiguration{
				Amd64: &virtv1.ArchSpecificConfiguration{EmulatedMachines: []string{}},
			}}),
			check: func(t *testing.T, c *Config) {
				expect(t, c.EmulatedMachines("amd64"), []string{"q35*", "pc-q35*"})
				expect(t, c.EmulatedMachines("arm64"), []string{"virt*"})
			},
		},
		{
			name: "a per-architecture machine type changes only that architecture",
			kv: kubeVirt(virtv1.KubeVirtConfiguration{ArchitectureConfiguration: &virtv1.ArchConfiguration{
				Arm64: &virtv1.ArchSpecificConfiguration{MachineType: "virt-rhel"},
			}}),
			check: func(t *testing.T, c *Config) {
				expect(t, c.MachineType("arm64"), "virt-rhel")
				expect(t, c.OVMFPath("arm64"), "/usr/share/AAVMF")
				expect(t, c.MachineType("amd64"), "q35")
				expect(t, c.MachineType(""), "q35")
				expect(t, c.MachineType("s390x"), "s390-ccw-virtio")
			},
		},
		{
			name: "the deprecated top-level machine type and OVMF path win over the per-architecture ones",
			kv: kubeVirt(virtv1.KubeVirtConfiguration{MachineType: "pc-q35-3.0", OVMFPath: "/ovmf", EmulatedMachines: []string{"pc*"},
				ArchitectureConfiguration: &virtv1.ArchConfiguration{Amd64: &virtv1.ArchSpecificConfiguration{MachineType: "q35-x"}}}),
			check: func(t *testing.T, c *Config) {
				expect(t, c.MachineType("amd64"), "pc-q35-3.0")
				expect(t, c.MachineType("arm64"), "pc-q35-3.0")
				expect(t, c.OVMFPath("s390x"), "/ovmf")
				expect(t, c.EmulatedMachines("arm64"), []string{"pc*"})
			},
		},
		{
			name: "a partial SMBIOS block merges field by field",
			kv:   kubeVirt(virtv1.KubeVirtConfiguration{SMBIOSConfig: &virtv1.SMBiosConfiguration{Product: "Acme"}}),
			check: func(t *testing.T, c *Config) {
				expect(t, *c.SMBIOS(), virtv1.SMBiosConfiguration{Family: "KubeVirt", Manufacturer: "KubeVirt", Product: "Acme"})
			},
		},
		{
			name: "hypervisors are ignored without the ConfigurableHypervisor gate",
			kv:   kubeVirt(virtv1.KubeVirtConfiguration{Hypervisors: []virtv1.HypervisorConfiguration{{Name: virtv1.HyperVDirectHypervisorName}}}),
			check: func(t *testing.T, c *Config) {
				expect(t, c.HypervisorName(), "kvm")
			},
		},
		{
			name: "the first hypervisor is used with the ConfigurableHypervisor gate",
			kv: func() *virtv1.KubeVirt {
				cfg := dev(virtv1.DeveloperConfiguration{FeatureGates: []string{"ConfigurableHypervisor"}})
				cfg.Hypervisors = []virtv1.HypervisorConfiguration{{Name: virtv1.HyperVDirectHypervisorName}}
				return kubeVirt(cfg)
			}(),
			check: func(t *testing.T, c *Config) { expect(t, c.HypervisorName(), "hyperv-direct") },
		},
		{
			name: "a hypervisor without a name decodes over the default and stays kvm",
			kv: func() *virtv1.KubeVirt {
				cfg := dev(virtv1.DeveloperConfiguration{FeatureGates: []string{"ConfigurableHypervisor"}})
				cfg.Hypervisors = []virtv1.HypervisorConfiguration{{}}
				return kubeVirt(cfg)
			}(),
			check: func(t *testing.T, c *Config) { expect(t, c.HypervisorName(), "kvm") },
		},
		{
			name: "support container resources come from the first non-zero entry of the type",
			kv: kubeVirt(virtv1.KubeVirtConfiguration{SupportContainerResources: []virtv1.SupportContainerResources{
				{Type: virtv1.HotplugAttachment, Resources: virtv1.ResourceRequirementsWithoutClaims{
					Requests: k8sv1.ResourceList{k8sv1.ResourceCPU: resource.MustParse("0")},
					Limits:   k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("80M")},
				}},
				{Type: virtv1.HotplugAttachment, Resources: virtv1.ResourceRequirementsWithoutClaims{
					Requests: k8sv1.ResourceList{k8sv1.ResourceCPU: resource.MustParse("20m")},
					Limits:   k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("90M")},
				}},
				{Type: virtv1.SideCar, Resources: virtv1.ResourceRequirementsWithoutClaims{
					Requests: k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("1Gi")},
				}},
			}}),
			check: func(t *testing.T, c *Config) {
				expect(t, c.SupportContainerRequest(virtv1.HotplugAttachment, k8sv1.ResourceCPU).String(), "20m")
				expect(t, c.SupportContainerLimit(virtv1.HotplugAttachment, k8sv1.ResourceMemory).String(), "80M")
				expect(t, c.SupportContainerRequest(virtv1.HotplugAttachment, k8sv1.ResourceMemory) == nil, true)
				expect(t, c.SupportContainerRequest(virtv1.ContainerDisk, k8sv1.ResourceCPU) == nil, true)
				r := c.SupportContainerResources(virtv1.HotplugAttachment)
				expect(t, r.Requests.Cpu().String(), "20m")
				expect(t, r.Limits.Memory().String(), "80M")
				sidecar := c.SupportContainerResources(virtv1.SideCar)
				expect(t, sidecar.Requests.Memory().String(), "1Gi")
			},
		},
		{
			name: "the CR's annotations are exposed",
			kv: func() *virtv1.KubeVirt {
				kv := kubeVirt(virtv1.KubeVirtConfiguration{})
				kv.Annotations = map[string]string{virtv1.EmulatorThreadCompleteToEvenParity: "", "a": "b"}
				return kv
			}(),
			check: func(t *testing.T, c *Config) {
				expect(t, c.EmulatorThreadCompleteToEvenParity(), true)
				expect(t, c.VGADisplayForEFIGuestsEnabled(), false)
				v, ok := c.Annotation("a")
				expect(t, v+"/"+boolString(ok), "b/true")
			},
		},
		{
			name: "virtual machine options disable by presence",
			kv: kubeVirt(virtv1.KubeVirtConfiguration{VirtualMachineOptions: &virtv1.VirtualMachineOptions{
				DisableSerialConsoleLog: &virtv1.DisableSerialConsoleLog{},
			}}),
			check: func(t *testing.T, c *Config) {
				expect(t, c.IsSerialConsoleLogDisabled(), true)
				expect(t, c.IsFreePageReportingDisabled(), false)
			},
		},
		{
			name: "live update limits and the Stage rollout strategy are read",
			kv: kubeVirt(virtv1.KubeVirtConfiguration{
				LiveUpdateConfiguration: &virtv1.LiveUpdateConfiguration{MaxCpuSockets: ptr.To[uint32](8)},
				VMRolloutStrategy:       ptr.To(virtv1.VMRolloutStrategyStage),
			}),
			check: func(t *testing.T, c *Config) {
				expect(t, c.MaximumCpuSockets(), uint32(8))
				expect(t, c.MaxHotplugRatio(), uint32(4))
				expect(t, c.MaximumGuestMemory() == nil, true)
				expect(t, c.IsVMRolloutStrategyLiveUpdate(), false)
			},
		},
		{
			name: "scalar settings without defaults are passed through",
			kv: kubeVirt(virtv1.KubeVirtConfiguration{
				DefaultRuntimeClass: "kata", SELinuxLauncherType: "spc_t", VMStateStorageClass: "rwx",
				AdditionalGuestMemoryOverheadRatio: ptr.To("1.5"), CPUModel: "Haswell",
				EvictionStrategy:  ptr.To(virtv1.EvictionStrategyLiveMigrate),
				ObsoleteCPUModels: map[string]bool{"486": true},
				Instancetype:      &virtv1.InstancetypeConfiguration{ReferencePolicy: ptr.To(virtv1.Expand)},
			}),
			check: func(t *testing.T, c *Config) {
				expect(t, c.DefaultRuntimeClass(), "kata")
				expect(t, c.SELinuxLauncherType(), "spc_t")
				expect(t, c.VMStateStorageClass(), "rwx")
				expect(t, *c.AdditionalGuestMemoryOverheadRatio(), "1.5")
				expect(t, c.CPUModel(), "Haswell")
				expect(t, *c.EvictionStrategy(), virtv1.EvictionStrategyLiveMigrate)
				expect(t, c.ObsoleteCPUModels(), map[string]bool{"486": true})
				expect(t, c.InstancetypeReferencePolicy(), virtv1.Expand)
			},
		},
		{
			name: "unset instancetype and mediated devices fall back to Reference and the deprecated gate",
			kv:   kubeVirt(dev(virtv1.DeveloperConfiguration{FeatureGates: []string{"DisableMDEVConfiguration"}})),
			check: func(t *testing.T, c *Config) {
				expect(t, c.InstancetypeReferencePolicy(), virtv1.Reference)
				expect(t, c.MediatedDevicesHandlingDisabled(), true)
				expect(t, c.EvictionStrategy() != nil && *c.EvictionStrategy() == virtv1.EvictionStrategyNone, true)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := FromKubeVirt(tt.kv, "amd64")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromKubeVirt: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestFromKubeVirtDoesNotModifyTheCR(t *testing.T) {
	kv := kubeVirt(dev(virtv1.DeveloperConfiguration{FeatureGates: []string{"Root"}}))
	before := kv.DeepCopy()
	if _, err := FromKubeVirt(kv, "amd64"); err != nil {
		t.Fatal(err)
	}
	expect(t, kv, before)
}

func expect(t *testing.T, got, want any) {
	t.Helper()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
