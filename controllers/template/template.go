package template

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// Labels and annotations of launcher pods.
const (
	// LauncherLabelValue is the value of kubevirt.io on launcher pods.
	LauncherLabelValue = "virt-launcher"
	// SchedulableLabel is on nodes whose virt-handler is ready.
	SchedulableLabel = "kubevirt.io/schedulable"
	// MultusNetworksAnnotation lists a pod's secondary networks for Multus.
	MultusNetworksAnnotation = "k8s.v1.cni.cncf.io/networks"
	// ComputeContainer is the launcher pod's first container.
	ComputeContainer = "compute"
)

// KubeVirt's device-plugin resources.
const (
	KVMDevice        corev1.ResourceName = "devices.kubevirt.io/kvm"
	TunDevice        corev1.ResourceName = "devices.kubevirt.io/tun"
	VhostNetDevice   corev1.ResourceName = "devices.kubevirt.io/vhost-net"
	VhostVsockDevice corev1.ResourceName = "devices.kubevirt.io/vhost-vsock"
)

// Options of the renderer: cluster configuration, in KubeVirt's terms.
type Options struct {
	// LauncherImage is the virt-launcher image.
	LauncherImage string
	// RangeLabel is the label carrying the owning shard range.
	RangeLabel string
	// DefaultArchitecture is set on VMIs without one.
	DefaultArchitecture string
	// DefaultCPURequest is the compute container's CPU request when the VMI
	// asks for none (KubeVirt's default is 100m).
	DefaultCPURequest resource.Quantity
	// BaseMemoryOverhead is virt-launcher's, libvirt's and QEMU's own memory.
	BaseMemoryOverhead resource.Quantity
}

// DefaultOptions are KubeVirt's defaults.
func DefaultOptions() Options {
	return Options{
		LauncherImage:       "quay.io/kubevirt/virt-launcher:v1.8.1",
		RangeLabel:          "virtshard.io/range",
		DefaultArchitecture: "amd64",
		DefaultCPURequest:   resource.MustParse("100m"),
		BaseMemoryOverhead:  resource.MustParse("200Mi"),
	}
}

// ApplyDefaults sets what virt-api's webhook would have: the architecture
// and, unless the VMI opts out, the default pod network with a masquerade
// interface. It changes vmi in place (callers pass a copy).
func ApplyDefaults(vmi *virtv1.VirtualMachineInstance, opts Options) {
	if vmi.Spec.Architecture == "" {
		vmi.Spec.Architecture = opts.DefaultArchitecture
	}
	autoattach := vmi.Spec.Domain.Devices.AutoattachPodInterface
	if len(vmi.Spec.Networks) == 0 && len(vmi.Spec.Domain.Devices.Interfaces) == 0 && (autoattach == nil || *autoattach) {
		vmi.Spec.Networks = []virtv1.Network{*virtv1.DefaultPodNetwork()}
		vmi.Spec.Domain.Devices.Interfaces = []virtv1.Interface{*virtv1.DefaultMasqueradeNetworkInterface()}
	}
}

// ErrInvalidNetwork wraps network spec errors: the VMI cannot run as written.
var ErrInvalidNetwork = errors.New("invalid network spec")

// ValidateNetworks checks that names are unique, every interface has a
// network of the same name and every network an interface, and that at most
// one network is the pod network.
func ValidateNetworks(vmi *virtv1.VirtualMachineInstance) error {
	networks := map[string]bool{}
	pods := 0
	for _, n := range vmi.Spec.Networks {
		if networks[n.Name] {
			return fmt.Errorf("%w: network %q defined twice", ErrInvalidNetwork, n.Name)
		}
		networks[n.Name] = true
		switch {
		case n.Pod != nil:
			pods++
		case n.Multus != nil:
			if n.Multus.NetworkName == "" {
				return fmt.Errorf("%w: multus network %q has no networkName", ErrInvalidNetwork, n.Name)
			}
		default:
			return fmt.Errorf("%w: network %q is neither pod nor multus", ErrInvalidNetwork, n.Name)
		}
	}
	if pods > 1 {
		return fmt.Errorf("%w: %d pod networks, at most one allowed", ErrInvalidNetwork, pods)
	}
	interfaces := map[string]bool{}
	for _, i := range vmi.Spec.Domain.Devices.Interfaces {
		if interfaces[i.Name] {
			return fmt.Errorf("%w: interface %q defined twice", ErrInvalidNetwork, i.Name)
		}
		if !networks[i.Name] {
			return fmt.Errorf("%w: interface %q has no network of that name", ErrInvalidNetwork, i.Name)
		}
		interfaces[i.Name] = true
	}
	for _, n := range vmi.Spec.Networks {
		if !interfaces[n.Name] {
			return fmt.Errorf("%w: network %q has no interface of that name", ErrInvalidNetwork, n.Name)
		}
	}
	return nil
}

// ValidateVolumes checks that volume names are unique and each volume has a
// source: one of a type this API version does not know arrives with none,
// as the API server prunes unknown fields.
func ValidateVolumes(vmi *virtv1.VirtualMachineInstance) error {
	seen := map[string]bool{}
	for _, v := range vmi.Spec.Volumes {
		if seen[v.Name] {
			return fmt.Errorf("volume %q defined twice", v.Name)
		}
		seen[v.Name] = true
		if reflect.ValueOf(v.VolumeSource).IsZero() {
			return fmt.Errorf("volume %q has no source of a known type", v.Name)
		}
	}
	return nil
}

// PodName is the launcher pod's deterministic name: the API server then
// refuses a second launcher pod for one VMI, even from two replicas in
// split brain. The UID suffix keeps a recreated VMI of the same name from
// colliding with its predecessor's terminating pod.
func PodName(vmi *virtv1.VirtualMachineInstance) string {
	sum := sha256.Sum256([]byte(vmi.UID))
	suffix := hex.EncodeToString(sum[:])[:5]
	name := vmi.Name
	const maxName = 63 - len("virt-launcher-") - 1 - 5
	if len(name) > maxName {
		name = strings.TrimRight(name[:maxName], "-.")
	}
	return "virt-launcher-" + name + "-" + suffix
}

// Render returns vmi's launcher pod, for shard range rng. vmi must have been
// defaulted (ApplyDefaults) and validated (ValidateNetworks).
func Render(vmi *virtv1.VirtualMachineInstance, rng int, opts Options) (*corev1.Pod, error) {
	resources, err := computeResources(vmi, opts)
	if err != nil {
		return nil, err
	}
	labels := maps.Clone(vmi.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[virtv1.AppLabel] = LauncherLabelValue
	labels[virtv1.CreatedByLabel] = string(vmi.UID)
	labels[opts.RangeLabel] = strconv.Itoa(rng)

	annotations := map[string]string{virtv1.DomainAnnotation: vmi.Name}
	if multus, err := multusAnnotation(vmi); err != nil {
		return nil, err
	} else if multus != "" {
		annotations[MultusNetworksAnnotation] = multus
	}

	nodeSelector := maps.Clone(vmi.Spec.NodeSelector)
	if nodeSelector == nil {
		nodeSelector = map[string]string{}
	}
	nodeSelector[SchedulableLabel] = "true"

	hostname := vmi.Spec.Hostname
	if hostname == "" {
		hostname = vmi.Name
	}
	if len(hostname) > 63 { // a DNS label
		hostname = strings.TrimRight(hostname[:63], "-.")
	}
	volumes, mounts := storage(vmi)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        PodName(vmi),
			Namespace:   vmi.Namespace,
			Labels:      labels,
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi,
				virtv1.VirtualMachineInstanceGroupVersionKind)},
		},
		Spec: corev1.PodSpec{
			Hostname:                      hostname,
			Subdomain:                     vmi.Spec.Subdomain,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(ptr.Deref(vmi.Spec.TerminationGracePeriodSeconds, 30) + 15),
			NodeSelector:                  nodeSelector,
			Tolerations:                   vmi.Spec.Tolerations,
			Affinity:                      vmi.Spec.Affinity,
			TopologySpreadConstraints:     vmi.Spec.TopologySpreadConstraints,
			SchedulerName:                 vmi.Spec.SchedulerName,
			PriorityClassName:             vmi.Spec.PriorityClassName,
			AutomountServiceAccountToken:  ptr.To(false),
			Containers: []corev1.Container{{
				Name:         ComputeContainer,
				Image:        opts.LauncherImage,
				Command:      []string{"/usr/bin/virt-launcher-monitor", "--qemu-timeout", "240s", "--name", vmi.Name, "--uid", string(vmi.UID), "--namespace", vmi.Namespace},
				Resources:    resources,
				VolumeMounts: mounts,
			}},
			Volumes: volumes,
		},
	}
	return pod, nil
}

// GuestMemory is the memory the guest sees: spec.domain.memory.guest, else
// the memory request.
func GuestMemory(vmi *virtv1.VirtualMachineInstance) (resource.Quantity, error) {
	if m := vmi.Spec.Domain.Memory; m != nil && m.Guest != nil {
		return *m.Guest, nil
	}
	if q, ok := vmi.Spec.Domain.Resources.Requests[corev1.ResourceMemory]; ok {
		return q, nil
	}
	return resource.Quantity{}, errors.New("no guest memory: set spec.domain.memory.guest or resources.requests.memory")
}

// VCPUs is sockets × cores × threads (1 each when unset).
func VCPUs(vmi *virtv1.VirtualMachineInstance) int64 {
	cpu := vmi.Spec.Domain.CPU
	if cpu == nil {
		return 1
	}
	n := int64(1)
	for _, v := range []uint32{cpu.Sockets, cpu.Cores, cpu.Threads} {
		if v > 0 {
			n *= int64(v)
		}
	}
	return n
}

// MemoryOverhead estimates what the launcher needs beyond the guest's
// memory. Simplified from KubeVirt's GetMemoryOverhead: a base for
// virt-launcher, libvirt and QEMU, 8 MiB per vCPU, and the guest's page
// tables (1/512 of its memory).
func MemoryOverhead(vmi *virtv1.VirtualMachineInstance, guest resource.Quantity, opts Options) resource.Quantity {
	overhead := opts.BaseMemoryOverhead.DeepCopy()
	overhead.Add(*resource.NewQuantity(VCPUs(vmi)*8<<20, resource.BinarySI))
	overhead.Add(*resource.NewQuantity(guest.Value()/512, resource.BinarySI))
	return overhead
}

// minGuestMemory is KubeVirt's minimum (virt-api refuses less).
var minGuestMemory = resource.MustParse("1M")

func computeResources(vmi *virtv1.VirtualMachineInstance, opts Options) (corev1.ResourceRequirements, error) {
	guest, err := GuestMemory(vmi)
	if err != nil {
		return corev1.ResourceRequirements{}, err
	}
	// KubeVirt's webhook refuses less than 1M; more than an int64 of bytes
	// no node has, and the API server refuses such a pod.
	if guest.Cmp(minGuestMemory) < 0 {
		return corev1.ResourceRequirements{}, fmt.Errorf("guest memory %s is below the minimum of %s", guest.String(), minGuestMemory.String())
	}
	if _, ok := guest.AsInt64(); !ok {
		return corev1.ResourceRequirements{}, fmt.Errorf("guest memory %.32s does not fit in 64 bits of bytes", guest.String())
	}
	memory := guest.DeepCopy()
	memory.Add(MemoryOverhead(vmi, guest, opts))
	if _, ok := memory.AsInt64(); !ok {
		return corev1.ResourceRequirements{}, fmt.Errorf("guest memory %s with its overhead does not fit in 64 bits of bytes", guest.String())
	}

	requests := corev1.ResourceList{corev1.ResourceMemory: memory}
	limits := corev1.ResourceList{}
	cpu, ok := vmi.Spec.Domain.Resources.Requests[corev1.ResourceCPU]
	if !ok {
		cpu = opts.DefaultCPURequest
	}
	requests[corev1.ResourceCPU] = cpu
	if l, ok := vmi.Spec.Domain.Resources.Limits[corev1.ResourceCPU]; ok {
		limits[corev1.ResourceCPU] = l
	}
	if l, ok := vmi.Spec.Domain.Resources.Limits[corev1.ResourceMemory]; ok {
		limit := l.DeepCopy()
		limit.Add(MemoryOverhead(vmi, guest, opts))
		limits[corev1.ResourceMemory] = limit
	}
	if vmi.IsCPUDedicated() {
		// Dedicated CPUs need the Guaranteed QoS class: whole CPUs, requests = limits.
		dedicated := *resource.NewQuantity(VCPUs(vmi), resource.DecimalSI)
		requests[corev1.ResourceCPU], limits[corev1.ResourceCPU] = dedicated, dedicated
		limits[corev1.ResourceMemory] = memory
	}

	one := *resource.NewQuantity(1, resource.DecimalSI)
	devices := []corev1.ResourceName{KVMDevice}
	if len(vmi.Spec.Domain.Devices.Interfaces) > 0 {
		devices = append(devices, TunDevice, VhostNetDevice)
	}
	if ptr.Deref(vmi.Spec.Domain.Devices.AutoattachVSOCK, false) {
		devices = append(devices, VhostVsockDevice)
	}
	for _, d := range devices {
		requests[d], limits[d] = one, one
	}
	return corev1.ResourceRequirements{Requests: requests, Limits: limits}, nil
}

// ClaimNames returns the PVCs vmi's volumes use (DataVolumes have a PVC of
// the same name), sorted.
func ClaimNames(vmi *virtv1.VirtualMachineInstance) []string {
	var out []string
	for _, v := range vmi.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		case v.DataVolume != nil:
			out = append(out, v.DataVolume.Name)
		}
	}
	sort.Strings(out)
	return out
}

// DataVolumeNames returns the DataVolumes vmi's volumes use, sorted.
func DataVolumeNames(vmi *virtv1.VirtualMachineInstance) []string {
	var out []string
	for _, v := range vmi.Spec.Volumes {
		if v.DataVolume != nil {
			out = append(out, v.DataVolume.Name)
		}
	}
	sort.Strings(out)
	return out
}

// storage mounts the VMI's claims into the compute container; other
// volume kinds (container disks, cloud-init, …) are not rendered.
func storage(vmi *virtv1.VirtualMachineInstance) ([]corev1.Volume, []corev1.VolumeMount) {
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, v := range vmi.Spec.Volumes {
		claim := ""
		readOnly := false
		switch {
		case v.PersistentVolumeClaim != nil:
			claim, readOnly = v.PersistentVolumeClaim.ClaimName, v.PersistentVolumeClaim.ReadOnly
		case v.DataVolume != nil:
			claim = v.DataVolume.Name
		case v.EmptyDisk != nil:
			volumes = append(volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			mounts = append(mounts, corev1.VolumeMount{Name: v.Name, MountPath: "/var/run/kubevirt-private/vmi-disks/" + v.Name})
			continue
		default:
			continue
		}
		volumes = append(volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: v.Name, MountPath: "/var/run/kubevirt-private/vmi-disks/" + v.Name})
	}
	return volumes, mounts
}

// multusAnnotation lists the VMI's Multus networks in the form Multus
// reads, with KubeVirt's pod interface names ("pod" + a hash of the
// network name).
func multusAnnotation(vmi *virtv1.VirtualMachineInstance) (string, error) {
	type element struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		Interface string `json:"interface"`
	}
	var elements []element
	for _, n := range vmi.Spec.Networks {
		if n.Multus == nil || n.Multus.Default {
			continue
		}
		namespace, name := vmi.Namespace, n.Multus.NetworkName
		if ns, nm, ok := strings.Cut(name, "/"); ok {
			namespace, name = ns, nm
		}
		sum := sha256.Sum256([]byte(n.Name))
		elements = append(elements, element{Name: name, Namespace: namespace, Interface: "pod" + hex.EncodeToString(sum[:])[:11]})
	}
	if len(elements) == 0 {
		return "", nil
	}
	data, err := json.Marshal(elements)
	return string(data), err
}
