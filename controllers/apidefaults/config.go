package apidefaults

import (
	"errors"

	"k8s.io/apimachinery/pkg/api/resource"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
)

// Architecture names as the VMI spec carries them.
const (
	archAMD64 = "amd64"
	archARM64 = "arm64"
	archS390X = "s390x"
)

// builtinCPURequest is KubeVirt's default CPU request (virt-config's
// DefaultCPURequest). virt-api writes the cluster's CPU request into a VMI
// only when it differs from this; otherwise the launcher template applies it.
var builtinCPURequest = resource.MustParse("100m")

// errNoNetworkConfiguration is returned instead of the nil dereference
// KubeVirt would hit with a configuration whose networkConfiguration was set
// to null.
var errNoNetworkConfiguration = errors.New("cluster configuration has no networkConfiguration")

// configView reads the effective configuration the way virt-config's
// ClusterConfig getters do. Values it returns point into the configuration:
// callers copy before storing them in a VMI.
type configView struct {
	c *virtv1.KubeVirtConfiguration
}

func (v configView) defaultArchitecture() string {
	if v.c.ArchitectureConfiguration == nil {
		return ""
	}
	return v.c.ArchitectureConfiguration.DefaultArchitecture
}

// machineType is the deprecated top-level machineType when set, else the
// one configured for arch, where anything not arm64 or s390x counts as
// amd64.
func (v configView) machineType(arch string) string {
	if v.c.MachineType != "" {
		return v.c.MachineType
	}
	return clusterconfig.ArchConfiguration(v.c, arch).MachineType
}

func (v configView) cpuModel() string { return v.c.CPUModel }

func (v configView) cpuRequest() *resource.Quantity { return v.c.CPURequest }

func (v configView) evictionStrategy() *virtv1.EvictionStrategy { return v.c.EvictionStrategy }

// defaultNetworkInterface is the binding of the default pod interface and
// whether bridge may be used on the pod network (an unset permission counts
// as no, where KubeVirt would dereference nil).
func (v configView) defaultNetworkInterface() (iface string, bridgePermitted bool, err error) {
	net := v.c.NetworkConfiguration
	if net == nil {
		return "", false, errNoNetworkConfiguration
	}
	return net.NetworkInterface, net.PermitBridgeInterfaceOnPodNetwork != nil && *net.PermitBridgeInterfaceOnPodNetwork, nil
}

// liveUpdateRollout reports whether VM changes roll out live, KubeVirt's
// default; only then does virt-api prepare CPU and memory hotplug.
func (v configView) liveUpdateRollout() bool {
	return v.c.VMRolloutStrategy == nil || *v.c.VMRolloutStrategy == virtv1.VMRolloutStrategyLiveUpdate
}

func (v configView) maxCPUSockets() uint32 {
	if live := v.c.LiveUpdateConfiguration; live != nil && live.MaxCpuSockets != nil {
		return *live.MaxCpuSockets
	}
	return 0
}

func (v configView) maxGuest() *resource.Quantity {
	if live := v.c.LiveUpdateConfiguration; live != nil {
		return live.MaxGuest
	}
	return nil
}

func (v configView) maxHotplugRatio() uint32 {
	if live := v.c.LiveUpdateConfiguration; live != nil {
		return live.MaxHotplugRatio
	}
	return 1
}
