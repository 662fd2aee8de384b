package template

// KubeVirt v1.8.1 feature gates the renderer reads (pkg/virt-config/featuregate).
const (
	gateImageVolume                        = "ImageVolume"
	gateExternalNetResourceInjection       = "ExternalNetResourceInjection"
	gateLibvirtHooksServerAndClient        = "LibvirtHooksServerAndClient"
	gatePodSecondaryInterfaceNamingUpgrade = "PodSecondaryInterfaceNamingUpgrade"
	gateVMIMemoryOverheadReport            = "VmiMemoryOverheadReport"
	gateDockerSELinuxMCSWorkaround         = "DockerSELinuxMCSWorkaround"
	gateHypervStrictCheck                  = "HypervStrictCheck"
	gateConfigurableHypervisor             = "ConfigurableHypervisor"
)
