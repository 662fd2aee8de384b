package instancetype

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
)

// The topologies of pkg/instancetype/apply's guest CPU spreading, the
// truncating divisions included (conformance covers the common ones).
func TestTopologySpreadsTheGuestVCPUsAsKubeVirt(t *testing.T) {
	spread := func(across v1beta1.SpreadAcross, ratio uint32) *v1beta1.VirtualMachinePreferenceSpec {
		return &v1beta1.VirtualMachinePreferenceSpec{CPU: &v1beta1.CPUPreferences{
			PreferredCPUTopology: ptr.To(v1beta1.Spread),
			SpreadOptions:        &v1beta1.SpreadOptions{Across: &across, Ratio: &ratio},
		}}
	}
	named := func(t v1beta1.PreferredCPUTopology) *v1beta1.VirtualMachinePreferenceSpec {
		return &v1beta1.VirtualMachinePreferenceSpec{CPU: &v1beta1.CPUPreferences{PreferredCPUTopology: &t}}
	}
	for _, tc := range []struct {
		name  string
		vcpus uint32
		pref  *v1beta1.VirtualMachinePreferenceSpec
		want  [3]uint32
	}{
		{"no preference: sockets", 4, nil, [3]uint32{4, 1, 1}},
		{"one vCPU whatever the preference", 1, named(v1beta1.Threads), [3]uint32{1, 1, 1}},
		{"cores", 4, named(v1beta1.Cores), [3]uint32{1, 4, 1}},
		{"deprecated preferThreads", 4, named(v1beta1.DeprecatedPreferThreads), [3]uint32{1, 1, 4}},
		{"any is sockets", 6, named(v1beta1.Any), [3]uint32{6, 1, 1}},
		{"spread default ratio 2 across sockets and cores", 8, named(v1beta1.Spread), [3]uint32{4, 2, 1}},
		{"spread ratio from preferSpreadSocketToCoreRatio", 12,
			&v1beta1.VirtualMachinePreferenceSpec{PreferSpreadSocketToCoreRatio: 3, CPU: &v1beta1.CPUPreferences{PreferredCPUTopology: ptr.To(v1beta1.Spread)}},
			[3]uint32{4, 3, 1}},
		{"spread across cores and threads", 8, spread(v1beta1.SpreadAcrossCoresThreads, 2), [3]uint32{1, 4, 2}},
		{"spread across all three", 12, spread(v1beta1.SpreadAcrossSocketsCoresThreads, 2), [3]uint32{3, 2, 2}},
		{"indivisible: truncated, as KubeVirt", 2, spread(v1beta1.SpreadAcrossSocketsCores, 3), [3]uint32{0, 3, 1}},
		{"unknown topology", 4, named("diagonal"), [3]uint32{1, 1, 1}},
	} {
		s, c, th := topology(tc.vcpus, tc.pref)
		if got := [3]uint32{s, c, th}; got != tc.want {
			t.Errorf("%s: sockets/cores/threads %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Every instance type field the template already sets is named, in
// KubeVirt's order, and the preference is then not applied at all.
func TestConflictsAreListedInKubeVirtsOrderAndStopThePreference(t *testing.T) {
	it := &v1beta1.VirtualMachineInstancetypeSpec{
		CPU:           v1beta1.CPUInstancetype{Guest: 2, Model: ptr.To("host-passthrough")},
		Memory:        v1beta1.MemoryInstancetype{Guest: resource.MustParse("1Gi")},
		NodeSelector:  map[string]string{"a": "b"},
		SchedulerName: "custom",
		Annotations:   map[string]string{"x": "it"},
	}
	spec := &virtv1.VirtualMachineInstanceSpec{
		NodeSelector: map[string]string{},
		Domain: virtv1.DomainSpec{
			CPU:       &virtv1.CPU{Cores: 2, Model: "Haswell"},
			Resources: virtv1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
		},
	}
	meta := &metav1.ObjectMeta{Annotations: map[string]string{"x": "vm"}}
	pref := &v1beta1.VirtualMachinePreferenceSpec{PreferredSubdomain: ptr.To("not-applied")}
	got := Apply("spec.template.spec", it, pref, spec, meta)
	want := Conflicts{"spec.template.spec.nodeSelector", "spec.template.spec.domain.cpu.cores", "spec.template.spec.domain.cpu.model",
		"spec.template.spec.domain.resources.limits.memory", "annotations.x"}
	if !slices.Equal(got, want) {
		t.Errorf("conflicts %v, want %v", got, want)
	}
	if spec.Subdomain != "" {
		t.Errorf("the preference was applied despite conflicts (subdomain %q)", spec.Subdomain)
	}
	if msg := got.VMIError().Error(); msg != "VMI conflicts with instancetype spec in fields: [spec.template.spec.nodeSelector, "+
		"spec.template.spec.domain.cpu.cores, spec.template.spec.domain.cpu.model, spec.template.spec.domain.resources.limits.memory, annotations.x]" {
		t.Errorf("message %q", msg)
	}
}

// KubeVirt's overcommitted request is single-precision arithmetic,
// truncated: not the exact figure.
func TestOvercommittedRequestIsKubeVirtsToTheByte(t *testing.T) {
	gi := int64(1 << 30)
	for _, tc := range []struct {
		guest int64
		pct   int
		want  int64
	}{{gi, 10, 966367616}, {gi, 15, 912680576}, {gi, 50, 536870912}, {3 * gi, 10, 2899102720}, {1_000_000_000, 33, 669999936}, {gi, 100, 0}} {
		if got := overcommitted(tc.guest, tc.pct); got != tc.want {
			t.Errorf("%d bytes at %d %%: %d, want %d", tc.guest, tc.pct, got, tc.want)
		}
	}
}

// A preference without an instance type still gets its CPU features in
// where the VMI names no CPU (KubeVirt dereferences nil there).
func TestPreferredCPUFeaturesWithoutACPU(t *testing.T) {
	spec := &virtv1.VirtualMachineInstanceSpec{}
	pref := &v1beta1.VirtualMachinePreferenceSpec{CPU: &v1beta1.CPUPreferences{PreferredCPUFeatures: []virtv1.CPUFeature{{Name: "pcid"}}}}
	if c := Apply("spec", nil, pref, spec, &metav1.ObjectMeta{}); c != nil {
		t.Fatalf("conflicts %v", c)
	}
	if spec.Domain.CPU == nil || len(spec.Domain.CPU.Features) != 1 || spec.Domain.CPU.Features[0].Name != "pcid" {
		t.Errorf("cpu %+v, want the preferred feature", spec.Domain.CPU)
	}
}
