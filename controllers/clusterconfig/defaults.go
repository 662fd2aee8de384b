package clusterconfig

import (
	"runtime"
	"strings"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// KubeVirt v1.8.1's defaults (pkg/virt-config/virt-config.go), the values
// virt-controller uses for whatever spec.configuration leaves unset.
const (
	DefaultImagePullPolicy                          = k8sv1.PullIfNotPresent
	DefaultMemoryOvercommit                         = 100
	DefaultCPUAllocationRatio                       = 10
	DefaultCPURequest                               = "100m"
	DefaultLessPVCSpaceToleration                   = 10
	DefaultMinimumReservePVCBytes                   = 131072
	DefaultAllowEmulation                           = false
	DefaultDiskVerificationMemoryLimitBytes         = 2000 * 1024 * 1024
	DefaultLogVerbosity                             = 2 // every component, virt-launcher included
	DefaultNetworkInterface                         = string(virtv1.BridgeInterface)
	DefaultPermitSlirpInterface                     = false
	DefaultPermitBridgeInterfaceOnPodNetwork        = true
	DefaultSELinuxLauncherType                      = ""
	DefaultSupportedGuestAgentVersions              = "2.*,3.*,4.*,5.*"
	DefaultMemBalloonStatsPeriod             uint32 = 10
	DefaultMaxHotplugRatio                   uint32 = 4
	DefaultVMRolloutStrategy                        = virtv1.VMRolloutStrategyLiveUpdate
	DefaultEvictionStrategy                         = virtv1.EvictionStrategyNone
	DefaultNodeDrainTaintKey                        = "kubevirt.io/drain"

	DefaultParallelMigrationsPerCluster      uint32 = 5
	DefaultParallelOutboundMigrationsPerNode uint32 = 2
	DefaultBandwidthPerMigration                    = "0Mi"
	DefaultMigrationProgressTimeout          int64  = 150
	DefaultMigrationCompletionTimeoutPerGiB  int64  = 150
	DefaultMigrationUtilityVolumesTimeout    int64  = 150
	DefaultMigrationAllowAutoConverge               = false
	DefaultMigrationAllowPostCopy                   = false
	DefaultUnsafeMigrationOverride                  = false

	DefaultAMD64MachineType              = "q35"
	DefaultARM64MachineType              = "virt"
	DefaultS390XMachineType              = "s390-ccw-virtio"
	DefaultAMD64OVMFPath                 = "/usr/share/OVMF"
	DefaultARM64OVMFPath                 = "/usr/share/AAVMF"
	DefaultS390XOVMFPath                 = ""
	DefaultAMD64EmulatedMachines         = "q35*,pc-q35*"
	DefaultARM64EmulatedMachines         = "virt*"
	DefaultS390XEmulatedMachines         = "s390-ccw-virtio*"
	DefaultSMBIOSFamily                  = "KubeVirt"
	DefaultSMBIOSManufacturer            = "KubeVirt"
	DefaultSMBIOSProduct                 = "None"
	defaultRESTQPS               float32 = 200 // virt-api, virt-controller and webhook clients
	defaultRESTBurst                     = 400
	defaultHandlerQPS            float32 = 50
	defaultHandlerBurst                  = 100
)

// Defaults returns KubeVirt v1.8.1's defaultClusterConfig: the effective
// configuration of a cluster whose KubeVirt CR sets nothing, or that has no
// KubeVirt CR (yet). arch is the controller's CPU architecture ("" means
// runtime.GOARCH); it becomes ArchitectureConfiguration.DefaultArchitecture.
// (KubeVirt's defaultClusterConfig ignores its cpuArch argument and uses
// runtime.GOARCH; virt-controller passes runtime.GOARCH, so the two agree
// outside tests.) Each call returns a new value the caller may modify.
func Defaults(arch string) *virtv1.KubeVirtConfiguration {
	if arch == "" {
		arch = runtime.GOARCH
	}
	evictionStrategy := DefaultEvictionStrategy
	return &virtv1.KubeVirtConfiguration{
		ImagePullPolicy: DefaultImagePullPolicy,
		DeveloperConfiguration: &virtv1.DeveloperConfiguration{
			UseEmulation:           DefaultAllowEmulation,
			MemoryOvercommit:       DefaultMemoryOvercommit,
			LessPVCSpaceToleration: DefaultLessPVCSpaceToleration,
			MinimumReservePVCBytes: DefaultMinimumReservePVCBytes,
			// KubeVirt parses its default node selectors from "", which
			// fails and leaves nil: no default node selectors.
			NodeSelectors:      nil,
			CPUAllocationRatio: DefaultCPUAllocationRatio,
			DiskVerification: &virtv1.DiskVerification{
				MemoryLimit: resource.NewQuantity(DefaultDiskVerificationMemoryLimitBytes, resource.BinarySI),
			},
			LogVerbosity: &virtv1.LogVerbosity{
				VirtAPI:        DefaultLogVerbosity,
				VirtOperator:   DefaultLogVerbosity,
				VirtController: DefaultLogVerbosity,
				VirtHandler:    DefaultLogVerbosity,
				VirtLauncher:   DefaultLogVerbosity,
			},
		},
		EvictionStrategy: &evictionStrategy,
		MigrationConfiguration: &virtv1.MigrationConfiguration{
			ParallelMigrationsPerCluster:      ptr.To(DefaultParallelMigrationsPerCluster),
			ParallelOutboundMigrationsPerNode: ptr.To(DefaultParallelOutboundMigrationsPerNode),
			NodeDrainTaintKey:                 ptr.To(DefaultNodeDrainTaintKey),
			BandwidthPerMigration:             ptr.To(resource.MustParse(DefaultBandwidthPerMigration)),
			ProgressTimeout:                   ptr.To(DefaultMigrationProgressTimeout),
			CompletionTimeoutPerGiB:           ptr.To(DefaultMigrationCompletionTimeoutPerGiB),
			UtilityVolumesTimeout:             ptr.To(DefaultMigrationUtilityVolumesTimeout),
			UnsafeMigrationOverride:           ptr.To(DefaultUnsafeMigrationOverride),
			AllowAutoConverge:                 ptr.To(DefaultMigrationAllowAutoConverge),
			AllowPostCopy:                     ptr.To(DefaultMigrationAllowPostCopy),
		},
		CPURequest: ptr.To(resource.MustParse(DefaultCPURequest)),
		NetworkConfiguration: &virtv1.NetworkConfiguration{
			NetworkInterface:                  DefaultNetworkInterface,
			DeprecatedPermitSlirpInterface:    ptr.To(DefaultPermitSlirpInterface),
			PermitBridgeInterfaceOnPodNetwork: ptr.To(DefaultPermitBridgeInterfaceOnPodNetwork),
		},
		SMBIOSConfig: &virtv1.SMBiosConfiguration{
			Family:       DefaultSMBIOSFamily,
			Manufacturer: DefaultSMBIOSManufacturer,
			Product:      DefaultSMBIOSProduct,
		},
		SELinuxLauncherType:         DefaultSELinuxLauncherType,
		SupportedGuestAgentVersions: strings.Split(DefaultSupportedGuestAgentVersions, ","),
		MemBalloonStatsPeriod:       ptr.To(DefaultMemBalloonStatsPeriod),
		APIConfiguration:            restConfig(defaultRESTQPS, defaultRESTBurst),
		ControllerConfiguration:     restConfig(defaultRESTQPS, defaultRESTBurst),
		HandlerConfiguration:        restConfig(defaultHandlerQPS, defaultHandlerBurst),
		WebhookConfiguration:        restConfig(defaultRESTQPS, defaultRESTBurst),
		ArchitectureConfiguration: &virtv1.ArchConfiguration{
			Amd64: &virtv1.ArchSpecificConfiguration{
				OVMFPath:         DefaultAMD64OVMFPath,
				EmulatedMachines: strings.Split(DefaultAMD64EmulatedMachines, ","),
				MachineType:      DefaultAMD64MachineType,
			},
			Arm64: &virtv1.ArchSpecificConfiguration{
				OVMFPath:         DefaultARM64OVMFPath,
				EmulatedMachines: strings.Split(DefaultARM64EmulatedMachines, ","),
				MachineType:      DefaultARM64MachineType,
			},
			S390x: &virtv1.ArchSpecificConfiguration{
				OVMFPath:         DefaultS390XOVMFPath,
				EmulatedMachines: strings.Split(DefaultS390XEmulatedMachines, ","),
				MachineType:      DefaultS390XMachineType,
			},
			DefaultArchitecture: arch,
		},
		LiveUpdateConfiguration: &virtv1.LiveUpdateConfiguration{MaxHotplugRatio: DefaultMaxHotplugRatio},
		VMRolloutStrategy:       ptr.To(DefaultVMRolloutStrategy),
		Hypervisors:             []virtv1.HypervisorConfiguration{{Name: virtv1.KvmHypervisorName}},
	}
}

func restConfig(qps float32, burst int) *virtv1.ReloadableComponentConfiguration {
	return &virtv1.ReloadableComponentConfiguration{
		RestClient: &virtv1.RESTClientConfiguration{RateLimiter: &virtv1.RateLimiter{
			TokenBucketRateLimiter: &virtv1.TokenBucketRateLimiter{QPS: qps, Burst: burst},
		}},
	}
}

// defaultObsoleteCPUModels is virt-handler's node-labeller fallback
// (pkg/virt-handler/node-labeller/util.DefaultObsoleteCPUModels), used where
// spec.configuration.obsoleteCPUModels is unset. virt-config itself has no
// default for it.
var defaultObsoleteCPUModels = []string{
	"486", "486-v1", "pentium", "pentium-v1", "pentium2", "pentium2-v1",
	"pentium3", "pentium3-v1", "pentiumpro", "pentiumpro-v1", "coreduo", "coreduo-v1",
	"n270", "n270-v1", "core2duo", "core2duo-v1", "Conroe", "Conroe-v1",
	"athlon", "athlon-v1", "phenom", "phenom-v1", "qemu64", "qemu64-v1",
	"qemu32", "qemu32-v1", "kvm64", "kvm64-v1", "kvm32", "kvm32-v1",
	"Opteron_G1", "Opteron_G1-v1", "Opteron_G2", "Opteron_G2-v1",
}

// DefaultObsoleteCPUModels returns a new copy of the node labeller's default
// set of obsolete CPU models.
func DefaultObsoleteCPUModels() map[string]bool {
	m := make(map[string]bool, len(defaultObsoleteCPUModels))
	for _, model := range defaultObsoleteCPUModels {
		m[model] = true
	}
	return m
}
