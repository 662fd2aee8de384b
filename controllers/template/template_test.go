package template

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/shard"
)

func TestValidateNetworks(t *testing.T) {
	pod := virtv1.Network{Name: "default", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}
	multus := func(name, net string) virtv1.Network {
		return virtv1.Network{Name: name, NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{NetworkName: net}}}
	}
	iface := func(name string) virtv1.Interface { return virtv1.Interface{Name: name} }
	tests := []struct {
		name       string
		networks   []virtv1.Network
		interfaces []virtv1.Interface
		valid      bool
	}{
		{"matching interfaces and networks are valid", []virtv1.Network{pod, multus("b", "ns/b")}, []virtv1.Interface{iface("default"), iface("b")}, true},
		{"no networks at all is valid", nil, nil, true},
		{"an interface without a network is invalid", []virtv1.Network{pod}, []virtv1.Interface{iface("default"), iface("x")}, false},
		{"a network without an interface is invalid", []virtv1.Network{pod, multus("b", "b")}, []virtv1.Interface{iface("default")}, false},
		{"two pod networks are invalid", []virtv1.Network{pod, {Name: "p2", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}},
			[]virtv1.Interface{iface("default"), iface("p2")}, false},
		{"a multus network without a name is invalid", []virtv1.Network{multus("b", "")}, []virtv1.Interface{iface("b")}, false},
		{"a network defined twice is invalid", []virtv1.Network{pod, pod}, []virtv1.Interface{iface("default")}, false},
		{"an interface defined twice is invalid", []virtv1.Network{pod}, []virtv1.Interface{iface("default"), iface("default")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := &virtv1.VirtualMachineInstance{}
			vmi.Spec.Networks = tt.networks
			vmi.Spec.Domain.Devices.Interfaces = tt.interfaces
			err := ValidateNetworks(vmi)
			if (err == nil) != tt.valid {
				t.Fatalf("ValidateNetworks = %v, want valid=%v", err, tt.valid)
			}
			if err != nil && !errors.Is(err, ErrInvalidNetwork) {
				t.Errorf("error %v does not wrap ErrInvalidNetwork", err)
			}
		})
	}
}

func TestPodNameIsDeterministicAndShort(t *testing.T) {
	vmi := &virtv1.VirtualMachineInstance{}
	vmi.Name = strings.Repeat("x", 200)
	vmi.UID = "uid-1"
	a, b := PodName(vmi), PodName(vmi)
	if a != b {
		t.Errorf("PodName not deterministic: %q vs %q", a, b)
	}
	if len(a) > 63 {
		t.Errorf("PodName %q is %d characters, want at most 63", a, len(a))
	}
	vmi.UID = "uid-2"
	if PodName(vmi) == a {
		t.Error("a recreated VMI (new UID) got its predecessor's pod name")
	}
}

// The launcher pod keeps KubeVirt's generateName beside its derived name,
// except where the API server would refuse it (a VMI name past 238
// characters): the derived name still creates the pod.
func TestTheGenerateNameIsKubeVirtsWhereTheServerTakesIt(t *testing.T) {
	for _, c := range []struct {
		length int
		want   string
	}{{5, "virt-launcher-xxxxx-"}, {238, "virt-launcher-" + strings.Repeat("x", 238) + "-"}, {239, ""}, {253, ""}} {
		vmi := &virtv1.VirtualMachineInstance{}
		vmi.Name = strings.Repeat("x", c.length)
		if got := launcherGenerateName(vmi); got != c.want {
			t.Errorf("a %d-character name: generateName %q, want %q", c.length, got, c.want)
		}
	}
}

// Memory the guest cannot have is refused with a reason, as virt-api's
// validation refuses it, instead of rendered.
func TestValidateMemoryRefusesImpossibleMemory(t *testing.T) {
	for _, q := range []string{"-1Mi", "0", "512k", "1E300000", "999999999999999999999999999999Ei", "8Ei"} {
		vmi := &virtv1.VirtualMachineInstance{}
		vmi.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(q)}
		err := ValidateMemory(vmi)
		if err == nil {
			t.Errorf("memory %s is accepted", q)
		} else if len(err.Error()) > 200 {
			t.Errorf("memory %s: error of %d characters", q, len(err.Error()))
		}
	}
	vmi := &virtv1.VirtualMachineInstance{}
	if err := ValidateMemory(vmi); err == nil {
		t.Error("a VMI without any memory is accepted")
	}
	vmi.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1M")}
	if err := ValidateMemory(vmi); err != nil {
		t.Errorf("the minimum, 1M, is refused: %v", err)
	}
}

func TestValidateVolumes(t *testing.T) {
	claim := virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{}}
	tests := []struct {
		name    string
		volumes []virtv1.Volume
		valid   bool
	}{
		{"volumes with sources are valid", []virtv1.Volume{{Name: "a", VolumeSource: claim}, {Name: "b", VolumeSource: virtv1.VolumeSource{EmptyDisk: &virtv1.EmptyDiskSource{}}}}, true},
		{"no volumes are valid", nil, true},
		{"a volume without a source is invalid", []virtv1.Volume{{Name: "a"}}, false},
		{"a volume defined twice is invalid", []virtv1.Volume{{Name: "a", VolumeSource: claim}, {Name: "a", VolumeSource: claim}}, false},
	}
	for _, tt := range tests {
		vmi := &virtv1.VirtualMachineInstance{}
		vmi.Spec.Volumes = tt.volumes
		if err := ValidateVolumes(vmi); (err == nil) != tt.valid {
			t.Errorf("%s: ValidateVolumes = %v", tt.name, err)
		}
	}
}

// A launcher pod carries its VMI's labels but the fleet's range: the
// fleet's view selects VMIs, not pods.
func TestPodLabelsLeaveTheFleetsRangeOut(t *testing.T) {
	vmi := &virtv1.VirtualMachineInstance{}
	vmi.Name, vmi.UID = "web-0", "uid"
	vmi.Labels = map[string]string{"app": "web", shard.LabelFleetRange: "4"}
	labels := podLabels(vmi, "web-0")
	if _, has := labels[shard.LabelFleetRange]; has || labels["app"] != "web" || labels[virtv1.CreatedByLabel] != "uid" {
		t.Errorf("pod labels %v, want the VMI's without its fleet's range", labels)
	}
	if vmi.Labels[shard.LabelFleetRange] != "4" {
		t.Error("the VMI's labels were modified")
	}
}
