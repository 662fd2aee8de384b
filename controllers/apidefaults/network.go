package apidefaults

import (
	"errors"
	"fmt"

	virtv1 "kubevirt.io/api/core/v1"
)

// Errors of the default network, with virt-api's messages. virt-api rejects
// the create with them.
var (
	ErrBridgeNotPermitted = errors.New("bridge interface is not enabled in kubevirt-config")
	ErrSlirpDeprecated    = errors.New("slirp interface is deprecated as of v1.3")
)

// setDefaultNetwork attaches a VMI that names no network and no interface to
// the pod network through the cluster's default binding (pkg/network/vmispec's
// SetDefaultNetworkInterface), unless it opts out with
// autoattachPodInterface: false. A default binding that is neither bridge nor
// masquerade adds the pod network without an interface, as KubeVirt does.
func setDefaultNetwork(spec *virtv1.VirtualMachineInstanceSpec, cfg configView) error {
	if auto := spec.Domain.Devices.AutoattachPodInterface; auto != nil && !*auto {
		return nil
	}
	if len(spec.Networks) != 0 || len(spec.Domain.Devices.Interfaces) != 0 {
		return nil
	}
	binding, bridgePermitted, err := cfg.defaultNetworkInterface()
	if err != nil {
		return fmt.Errorf("set default network interface: %w", err)
	}
	switch virtv1.NetworkInterfaceType(binding) {
	case virtv1.BridgeInterface:
		if !bridgePermitted {
			return fmt.Errorf("set default network interface: %w", ErrBridgeNotPermitted)
		}
		spec.Domain.Devices.Interfaces = []virtv1.Interface{*virtv1.DefaultBridgeNetworkInterface()}
	case virtv1.MasqueradeInterface:
		spec.Domain.Devices.Interfaces = []virtv1.Interface{*virtv1.DefaultMasqueradeNetworkInterface()}
	case virtv1.DeprecatedSlirpInterface:
		return fmt.Errorf("set default network interface: %w", ErrSlirpDeprecated)
	}
	spec.Networks = []virtv1.Network{*virtv1.DefaultPodNetwork()}
	return nil
}
