package vmi

import (
	"encoding/json"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/template"
)

// The interface status a VMI takes from its launcher pod at Scheduled, as
// KubeVirt v1.8.1's VMI controller writes it (pkg/network/controllers
// UpdateVMIStatus): which pod interface serves each network, as Multus
// reports the pod's networks. virt-handler then adds the addresses.

// infoSourceMultus marks an interface status Multus' network status backs
// (vmispec.InfoSourceMultusStatus); sources are joined with ", ".
const (
	infoSourceMultus    = "multus-status"
	infoSourceSeparator = ", "
	primaryPodInterface = "eth0"
)

// podNetworkStatus is what KubeVirt reads of an entry of Multus' network
// status annotation.
type podNetworkStatus struct {
	Interface string `json:"interface,omitempty"`
	Default   bool   `json:"default,omitempty"`
}

// podNetworkStatuses are the entries of pod's network status annotation;
// none when it is missing or not JSON, as KubeVirt reads it.
func podNetworkStatuses(pod *corev1.Pod) []podNetworkStatus {
	var statuses []podNetworkStatus
	if raw := pod.Annotations[template.MultusNetworkStatusAnnotation]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &statuses); err != nil {
			return nil
		}
	}
	return statuses
}

// setInterfaces sets status.interfaces: the primary network's, the
// secondary Multus networks' that Multus reports or virt-handler reported
// before, and, kept as they are, those virt-handler found that no network
// of the spec names.
func setInterfaces(v *virtv1.VirtualMachineInstance, pod *corev1.Pod) {
	statuses := podNetworkStatuses(pod)
	var out []virtv1.VirtualMachineInstanceNetworkInterface

	if primary := primaryNetwork(v.Spec.Networks); primary != nil {
		podIface := primaryPodInterface
		for _, s := range statuses {
			if s.Default && s.Interface != "" {
				podIface = s.Interface
				break
			}
		}
		iface := virtv1.VirtualMachineInstanceNetworkInterface{Name: primary.Name}
		if known := interfaceStatus(v.Status.Interfaces, primary.Name); known != nil {
			iface = *known
		}
		iface.PodInterfaceName = podIface
		out = append(out, iface)
	}

	reported := map[string]bool{}
	for _, s := range statuses {
		reported[s.Interface] = true
	}
	podIfaces := template.PodInterfaceNames(v.Spec.Networks, pod)
	for _, n := range v.Spec.Networks {
		if n.Multus == nil || n.Multus.Default {
			continue
		}
		podIface := podIfaces[n.Name]
		known := interfaceStatus(v.Status.Interfaces, n.Name)
		switch {
		case reported[podIface] && known == nil:
			out = append(out, virtv1.VirtualMachineInstanceNetworkInterface{Name: n.Name, InfoSource: infoSourceMultus, PodInterfaceName: podIface})
		case known != nil:
			iface := *known
			if reported[podIface] {
				iface.InfoSource = addInfoSource(iface.InfoSource, infoSourceMultus)
			} else {
				iface.InfoSource = removeInfoSource(iface.InfoSource, infoSourceMultus)
			}
			iface.PodInterfaceName = podIface
			out = append(out, iface)
		}
	}

	for _, iface := range v.Status.Interfaces {
		if !slices.ContainsFunc(v.Spec.Networks, func(n virtv1.Network) bool { return n.Name == iface.Name }) {
			out = append(out, iface)
		}
	}
	v.Status.Interfaces = out
}

// primaryNetwork is the first network that is not a secondary Multus one
// (vmispec.LookUpDefaultNetwork).
func primaryNetwork(networks []virtv1.Network) *virtv1.Network {
	for i, n := range networks {
		if n.Multus == nil || n.Multus.Default {
			return &networks[i]
		}
	}
	return nil
}

func interfaceStatus(ifaces []virtv1.VirtualMachineInstanceNetworkInterface, name string) *virtv1.VirtualMachineInstanceNetworkInterface {
	for i := range ifaces {
		if ifaces[i].Name == name {
			return &ifaces[i]
		}
	}
	return nil
}

func addInfoSource(sources, source string) string {
	var list []string
	if sources != "" {
		list = strings.Split(sources, infoSourceSeparator)
	}
	if slices.Contains(list, source) {
		return sources
	}
	return strings.Join(append(list, source), infoSourceSeparator)
}

// removeInfoSource drops source from sources.
func removeInfoSource(sources, source string) string {
	list := slices.DeleteFunc(strings.Split(sources, infoSourceSeparator), func(s string) bool { return s == source })
	return strings.Join(list, infoSourceSeparator)
}
