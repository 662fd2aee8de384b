package template

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	virtv1 "kubevirt.io/api/core/v1"
)

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
	return launcherPodName(vmi, string(vmi.UID))
}

// ProvisioningPodName is the deterministic name of vmi's temporary
// WaitForFirstConsumer pod (RenderProvisioning): as the launcher pod's,
// with a suffix of its own, so the two never collide.
func ProvisioningPodName(vmi *virtv1.VirtualMachineInstance) string {
	return launcherPodName(vmi, string(vmi.UID)+"/provisioning")
}

// launcherGenerateName is the generateName KubeVirt gives a launcher pod,
// kept beside its derived name; none where it would be longer than the
// API server takes (a VMI name past 238 characters), on which KubeVirt's
// pod is refused and virtshard's, its name derived, is not.
func launcherGenerateName(vmi *virtv1.VirtualMachineInstance) string {
	g := "virt-launcher-" + vmi.Name + "-"
	if len(g) > validation.DNS1123SubdomainMaxLength {
		return ""
	}
	return g
}

func launcherPodName(vmi *virtv1.VirtualMachineInstance, seed string) string {
	sum := sha256.Sum256([]byte(seed))
	suffix := hex.EncodeToString(sum[:])[:5]
	name := vmi.Name
	const maxName = 63 - len("virt-launcher-") - 1 - 5
	if len(name) > maxName {
		name = strings.TrimRight(name[:maxName], "-.")
	}
	return "virt-launcher-" + name + "-" + suffix
}

// VolumeClaim is the claim a volume uses, "" for none: a DataVolume's
// (of the same name), a PVC's, a memory dump's (KubeVirt's
// storagetypes.PVCNameFromVirtVolume).
func VolumeClaim(v virtv1.Volume) string {
	switch {
	case v.DataVolume != nil:
		return v.DataVolume.Name
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName
	case v.MemoryDump != nil:
		return v.MemoryDump.ClaimName
	}
	return ""
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

// minGuestMemory is KubeVirt's minimum (virt-api refuses less).
var minGuestMemory = resource.MustParse("1M")

// ValidateMemory refuses what virt-api's validation refuses of a VMI's
// memory, and what no node has: no guest memory at all, less than 1M, or
// more than 64 bits of bytes (with the launcher's overhead on top).
func ValidateMemory(vmi *virtv1.VirtualMachineInstance) error {
	guest, ok := vmi.Spec.Domain.Resources.Requests[corev1.ResourceMemory]
	if m := vmi.Spec.Domain.Memory; m != nil && m.Guest != nil {
		guest, ok = *m.Guest, true
	}
	if !ok {
		return errors.New("no guest memory: set spec.domain.memory.guest or resources.requests.memory")
	}
	if guest.Cmp(minGuestMemory) < 0 {
		return fmt.Errorf("guest memory %.32s is below the minimum of %s", guest.String(), minGuestMemory.String())
	}
	// Half of int64: room for the overhead the launcher adds.
	if v, ok := guest.AsInt64(); !ok || v > math.MaxInt64/2 {
		return fmt.Errorf("guest memory %.32s does not fit in 64 bits of bytes", guest.String())
	}
	return nil
}
