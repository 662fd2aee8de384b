package template

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"

	"github.com/virtshard/virtshard/shard"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	virtv1 "kubevirt.io/api/core/v1"
)

// Annotations and labels of launcher pods that kubevirt.io/api does not
// name.
const (
	// MultusNetworksAnnotation lists a pod's secondary networks for Multus.
	MultusNetworksAnnotation = "k8s.v1.cni.cncf.io/networks"
	// MultusNetworkStatusAnnotation is Multus' report of the pod's networks.
	MultusNetworkStatusAnnotation = "k8s.v1.cni.cncf.io/network-status"
	// MultusDefaultNetworkAnnotation replaces the cluster's default network.
	MultusDefaultNetworkAnnotation = "v1.multus-cni.io/default-network"
	// NetworkResourceNameAnnotation on a NetworkAttachmentDefinition names
	// the device-plugin resource (SR-IOV) its pods need.
	NetworkResourceNameAnnotation = "k8s.v1.cni.cncf.io/resourceName"
	// DefaultContainerAnnotation makes kubectl exec/logs pick compute.
	DefaultContainerAnnotation = "kubectl.kubernetes.io/default-container"
	// EvictOnlyAnnotation asks the descheduler to evict, never delete.
	EvictOnlyAnnotation = "descheduler.alpha.kubernetes.io/request-evict-only"

	istioInjectSidecar  = "sidecar.istio.io/inject"
	istioKubeVirtIfaces = "traffic.sidecar.istio.io/kubevirtInterfaces"
	istioRerouteIfaces  = "istio.io/reroute-virtual-interfaces"
	istioBridgeName     = "k6t-eth0"

	veleroPreHookContainer  = "pre.hook.backup.velero.io/container"
	veleroPreHookCommand    = "pre.hook.backup.velero.io/command"
	veleroPreHookTimeout    = "pre.hook.backup.velero.io/timeout"
	veleroPostHookContainer = "post.hook.backup.velero.io/container"
	veleroPostHookCommand   = "post.hook.backup.velero.io/command"
	veleroSkipHooks         = "kubevirt.io/skip-backup-hooks"

	debugLogsLabel         = "debugLogs"
	logVerbosityLabel      = "logVerbosity"
	virtiofsDebugLogsLabel = "virtiofsdDebugLogs"
)

// podLabels are the VMI's labels plus KubeVirt's launcher labels
// (podLabels in KubeVirt's template service).
func podLabels(vmi *virtv1.VirtualMachineInstance, hostname string) map[string]string {
	labels := maps.Clone(vmi.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	// A fleet's view holds its VMIs, not their pods: a pod in it would
	// cost the fleet's replica a cached copy and a watch event for nothing.
	delete(labels, shard.LabelFleetRange)
	labels[virtv1.AppLabel] = LauncherLabelValue
	labels[virtv1.CreatedByLabel] = string(vmi.UID)
	labels[virtv1.DeprecatedVirtualMachineNameLabel] = hostname
	labels[virtv1.VirtualMachineInstanceIDLabel] = vmiID(vmi.Name)
	if v, ok := vmi.Annotations[istioInjectSidecar]; ok {
		labels[istioInjectSidecar] = v
	}
	return labels
}

// vmiID is the vmi.kubevirt.io/id label: the name, or when longer than a
// DNS-1035 label its prefix and 8 hex digits of its SHA-1.
func vmiID(name string) string {
	if len(name) <= validation.DNS1035LabelMaxLength {
		return name
	}
	const hashLength = 8
	sum := sha1.Sum([]byte(name))
	return name[:validation.DNS1035LabelMaxLength-hashLength-1] + "-" + hex.EncodeToString(sum[:])[:hashLength]
}

// hostname is the pod's hostname: spec.hostname, else the VMI name up to
// its first dot, cut to a DNS label.
func hostname(vmi *virtv1.VirtualMachineInstance) string {
	if vmi.Spec.Hostname != "" {
		return vmi.Spec.Hostname
	}
	name, _, _ := strings.Cut(vmi.Name, ".")
	if len(name) > validation.DNS1123LabelMaxLength {
		name = name[:validation.DNS1123LabelMaxLength]
	}
	return name
}

// podAnnotations are the VMI's annotations (less kubectl's and KubeVirt's
// API-version bookkeeping) plus what virt-handler, kubectl, the
// descheduler, Multus, Istio and Velero read from a launcher pod.
func podAnnotations(vmi *virtv1.VirtualMachineInstance, bindings map[string]virtv1.InterfaceBindingPlugin) (map[string]string, error) {
	annotations := map[string]string{virtv1.DomainAnnotation: vmi.Name}
	for k, v := range vmi.Annotations {
		if strings.HasPrefix(k, "kubectl.kubernetes.io") ||
			strings.HasPrefix(k, "kubevirt.io/storage-observed-api-version") ||
			strings.HasPrefix(k, "kubevirt.io/latest-observed-api-version") {
			continue
		}
		annotations[k] = v
	}
	annotations[DefaultContainerAnnotation] = ComputeContainer
	// New launchers migrate over unix sockets.
	annotations[virtv1.MigrationTransportUnixAnnotation] = "true"
	annotations[EvictOnlyAnnotation] = ""

	network, err := networkAnnotations(vmi, bindings)
	if err != nil {
		return nil, err
	}
	maps.Copy(annotations, network)
	maps.Copy(annotations, backupHookAnnotations(vmi))
	return annotations, nil
}

// networkAnnotations are Multus' and Istio's (KubeVirt's network
// annotations generator).
func networkAnnotations(vmi *virtv1.VirtualMachineInstance, bindings map[string]virtv1.InterfaceBindingPlugin) (map[string]string, error) {
	var ifaces []virtv1.Interface
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.State != virtv1.InterfaceStateAbsent {
			ifaces = append(ifaces, iface)
		}
	}
	var networks []virtv1.Network
	for _, n := range vmi.Spec.Networks {
		if lookupInterface(ifaces, n.Name) != nil {
			networks = append(networks, n)
		}
	}
	annotations := map[string]string{}
	multus, err := multusAnnotation(vmi.Namespace, ifaces, networks, hashedPodInterfaceNames(networks), bindings)
	if err != nil {
		return nil, err
	}
	if multus != "" {
		annotations[MultusNetworksAnnotation] = multus
	}
	for _, n := range vmi.Spec.Networks {
		if n.Multus != nil && n.Multus.Default {
			annotations[MultusDefaultNetworkAnnotation] = n.Multus.NetworkName
			break
		}
	}
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.Masquerade != nil {
			annotations[istioKubeVirtIfaces] = istioBridgeName
			annotations[istioRerouteIfaces] = istioBridgeName
			break
		}
	}
	return annotations, nil
}

// backupHookAnnotations make Velero freeze the guest's filesystems around
// a backup, unless the VMI opts out. virt-controller's generator has no
// cluster config, so the KubeVirt CR's annotation is not read.
func backupHookAnnotations(vmi *virtv1.VirtualMachineInstance) map[string]string {
	if skip, _ := strconv.ParseBool(vmi.Annotations[veleroSkipHooks]); skip {
		return nil
	}
	freezer := func(op string) string {
		return fmt.Sprintf("[\"/usr/bin/virt-freezer\", %q, \"--name\", %q, \"--namespace\", %q]", op, vmi.Name, vmi.Namespace)
	}
	return map[string]string{
		veleroPreHookContainer:  ComputeContainer,
		veleroPreHookCommand:    freezer("--freeze"),
		veleroPreHookTimeout:    "60s",
		veleroPostHookContainer: ComputeContainer,
		veleroPostHookCommand:   freezer("--unfreeze"),
	}
}

func lookupInterface(ifaces []virtv1.Interface, name string) *virtv1.Interface {
	for i := range ifaces {
		if ifaces[i].Name == name {
			return &ifaces[i]
		}
	}
	return nil
}

func isSecondaryMultus(n virtv1.Network) bool { return n.Multus != nil && !n.Multus.Default }

// hashedPodInterfaceNames names each secondary Multus network's pod
// interface "pod" + 11 hex digits of the SHA-256 of the network name, and
// the primary network's eth0.
func hashedPodInterfaceNames(networks []virtv1.Network) map[string]string {
	names := map[string]string{}
	primary := false
	for _, n := range networks {
		if isSecondaryMultus(n) {
			sum := sha256.Sum256([]byte(n.Name))
			names[n.Name] = "pod" + hex.EncodeToString(sum[:])[:11]
		} else if !primary {
			names[n.Name] = "eth0"
			primary = true
		}
	}
	return names
}

// ordinalPodInterfaceNames is the naming of launchers before KubeVirt
// v1.1: net1, net2, … for secondary networks, in spec order.
func ordinalPodInterfaceNames(networks []virtv1.Network) map[string]string {
	names := map[string]string{}
	i, primary := 0, false
	for _, n := range networks {
		if isSecondaryMultus(n) {
			i++
			names[n.Name] = fmt.Sprintf("net%d", i)
		} else if !primary {
			names[n.Name] = "eth0"
			primary = true
		}
	}
	return names
}

// multusElement is Multus' NetworkSelectionElement, with its JSON field
// names and order.
type multusElement struct {
	Name      string          `json:"name"`
	Namespace string          `json:"namespace,omitempty"`
	MAC       string          `json:"mac,omitempty"`
	Interface string          `json:"interface,omitempty"`
	CNIArgs   *map[string]any `json:"cni-args,omitempty"`
}

// splitNetworkName resolves "ns/name" or "name" (in namespace).
func splitNetworkName(namespace, full string) (string, string) {
	if ns, name, ok := strings.Cut(full, "/"); ok {
		return ns, name
	}
	return namespace, full
}

// multusAnnotation lists the secondary Multus networks, and the
// NetworkAttachmentDefinitions of binding plugins, as Multus reads them.
func multusAnnotation(namespace string, ifaces []virtv1.Interface, networks []virtv1.Network, podIfaceNames map[string]string, bindings map[string]virtv1.InterfaceBindingPlugin) (string, error) {
	var elements []multusElement
	for _, n := range networks {
		iface := lookupInterface(ifaces, n.Name)
		if isSecondaryMultus(n) {
			ns, name := splitNetworkName(namespace, n.Multus.NetworkName)
			e := multusElement{Name: name, Namespace: ns, Interface: podIfaceNames[n.Name]}
			if iface != nil {
				e.MAC = iface.MacAddress
			}
			elements = append(elements, e)
		}
		if iface != nil && iface.Binding != nil {
			plugin, ok := bindings[iface.Binding.Name]
			if !ok {
				return "", fmt.Errorf("unable to find the network binding plugin '%s' in Kubevirt configuration", iface.Binding.Name)
			}
			if plugin.NetworkAttachmentDefinition == "" {
				continue
			}
			ns, name := splitNetworkName(namespace, plugin.NetworkAttachmentDefinition)
			elements = append(elements, multusElement{Name: name, Namespace: ns, CNIArgs: &map[string]any{"logicNetworkName": n.Name}})
		}
	}
	if len(elements) == 0 {
		return "", nil
	}
	data, err := json.Marshal(elements)
	if err != nil {
		return "", fmt.Errorf("marshal multus networks: %w", err)
	}
	return string(data), nil
}

var ordinalIfaceName = regexp.MustCompile(`^net\d+$`)

// migrationTargetAnnotations keep a migration target on the source's
// interface naming: a source started before KubeVirt v1.1 (net1, net2, …)
// gets a target named the same way, unless the cluster upgrades naming.
func migrationTargetAnnotations(vmi *virtv1.VirtualMachineInstance, source *corev1.Pod, cluster Cluster, bindings map[string]virtv1.InterfaceBindingPlugin) (map[string]string, error) {
	if cluster.FeatureGateEnabled(gatePodSecondaryInterfaceNamingUpgrade) || !hasOrdinalInterfaces(source) {
		return nil, nil
	}
	multus, err := multusAnnotation(vmi.Namespace, vmi.Spec.Domain.Devices.Interfaces, vmi.Spec.Networks,
		ordinalPodInterfaceNames(vmi.Spec.Networks), bindings)
	if err != nil {
		return nil, err
	}
	return map[string]string{MultusNetworksAnnotation: multus}, nil
}

// PodInterfaceNames names each network's interface in the launcher pod as
// pod's Multus network status shows the pod was named
// (namescheme.CreateFromNetworkStatuses): net1, net2, … for a pod started
// before KubeVirt v1.1, hashed names otherwise; eth0 for the primary
// network either way.
func PodInterfaceNames(networks []virtv1.Network, pod *corev1.Pod) map[string]string {
	if hasOrdinalInterfaces(pod) {
		return ordinalPodInterfaceNames(networks)
	}
	return hashedPodInterfaceNames(networks)
}

// hasOrdinalInterfaces tells whether Multus' network status on the pod
// names any interface net<N>.
func hasOrdinalInterfaces(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	var statuses []struct {
		Interface string `json:"interface"`
	}
	if err := json.Unmarshal([]byte(pod.Annotations[MultusNetworkStatusAnnotation]), &statuses); err != nil {
		return false
	}
	for _, s := range statuses {
		if ordinalIfaceName.MatchString(s.Interface) {
			return true
		}
	}
	return false
}
