package topology

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

func tscNode(name, hz string, scalable, schedulable bool, labels ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if hz != "" {
		n.Labels[FrequencyLabel] = hz
	}
	if scalable {
		n.Labels[ScalableLabel] = "true"
	}
	if schedulable {
		n.Labels[virtv1.NodeSchedulable] = "true"
	}
	for _, l := range labels {
		n.Labels[l] = "true"
	}
	return n
}

func TestNeedOfFollowsKubeVirt(t *testing.T) {
	vmi := func(arch string, edit func(*virtv1.VirtualMachineInstanceSpec)) *virtv1.VirtualMachineInstance {
		v := &virtv1.VirtualMachineInstance{Spec: virtv1.VirtualMachineInstanceSpec{Architecture: arch}}
		edit(&v.Spec)
		return v
	}
	invtsc := func(policy string) func(*virtv1.VirtualMachineInstanceSpec) {
		return func(s *virtv1.VirtualMachineInstanceSpec) {
			s.Domain.CPU = &virtv1.CPU{Features: []virtv1.CPUFeature{{Name: "invtsc", Policy: policy}}}
		}
	}
	reenlightenment := func(s *virtv1.VirtualMachineInstanceSpec) {
		s.Domain.Features = &virtv1.Features{Hyperv: &virtv1.FeatureHyperv{Reenlightenment: &virtv1.FeatureState{Enabled: ptr.To(true)}}}
	}
	for _, tc := range []struct {
		name string
		vmi  *virtv1.VirtualMachineInstance
		want Need
	}{
		{"invtsc required", vmi("amd64", invtsc("require")), ForBoot},
		{"invtsc forced", vmi("amd64", invtsc("force")), ForBoot},
		{"invtsc optional", vmi("amd64", invtsc("optional")), NotNeeded},
		{"reenlightenment", vmi("amd64", reenlightenment), ForMigration},
		{"arm64", vmi("arm64", invtsc("require")), NotNeeded},
		{"plain", vmi("amd64", func(*virtv1.VirtualMachineInstanceSpec) {}), NotNeeded},
	} {
		if got := NeedOf(tc.vmi); got != tc.want {
			t.Errorf("%s: need %d, want %d", tc.name, got, tc.want)
		}
	}
}

// The lowest frequency counts schedulable nodes and those running VMIs,
// skips invalid labels, and yields to a configured minimum.
func TestLowestFrequency(t *testing.T) {
	nodes := []*corev1.Node{
		tscNode("fast", "3000000000", false, true),
		tscNode("slow-down", "1000000000", false, false), // not schedulable, no VMIs
		tscNode("slow-hosting", "2000000000", false, false),
		tscNode("broken", "-5", false, true),
		tscNode("none", "", false, true),
	}
	hosting := func(node string) bool { return node == "slow-hosting" }
	if got, err := Lowest(nodes, nil, hosting); err != nil || got != 2_000_000_000 {
		t.Errorf("lowest %d (%v), want the hosting node's 2000000000", got, err)
	}
	if got, err := Lowest(nil, nil, hosting); err != nil || got != 0 {
		t.Errorf("lowest of no nodes %d (%v), want 0", got, err)
	}
	if got, err := Lowest(nodes, ptr.To[int64](1234), hosting); err != nil || got != 1234 {
		t.Errorf("lowest with a configured minimum %d (%v), want it", got, err)
	}
	if _, err := Lowest(nodes, ptr.To[int64](0), hosting); err == nil {
		t.Error("a configured minimum of 0 is accepted")
	}
}

// A non-scalable node gets the labels of the frequencies within 250 ppm of
// its own and loses the others; a scalable one also gets lower ones.
func TestSchedulingLabels(t *testing.T) {
	label := func(hz string) string { return SchedulingLabel + "-" + hz }
	// 250 ppm of 2.4 GHz is 600 kHz.
	required := []int64{2_400_500_000, 2_401_000_000, 2_000_000_000}
	node := tscNode("n", "2400000000", false, true, label("2400000000"), label("1000"))
	add, remove, err := SchedulingLabels(node, required)
	slices.Sort(add)
	if err != nil || !slices.Equal(add, []string{label("2400000000"), label("2400500000")}) || !slices.Equal(remove, []string{label("1000")}) {
		t.Errorf("non-scalable: add %v remove %v (%v); want the one within tolerance added and the stale one removed", add, remove, err)
	}
	scalable := tscNode("s", "2400000000", true, true)
	add, remove, err = SchedulingLabels(scalable, required)
	slices.Sort(add)
	want := []string{label("2000000000"), label("2400000000"), label("2400500000")}
	if err != nil || !slices.Equal(add, want) || len(remove) != 0 {
		t.Errorf("scalable: add %v remove %v (%v); want %v", add, remove, err, want)
	}
	if _, _, err := SchedulingLabels(tscNode("x", "", false, true), required); err != ErrNoFrequency {
		t.Errorf("a node without a frequency: %v, want ErrNoFrequency", err)
	}
}
