package migration

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"
)

// A target pod goes to nodes like the source node, as KubeVirt's
// createTargetPod sends it: of the source's CPU vendor, and for a
// host-model VMI, supporting the source's model and required features, or
// what the source pod asked for when the VMI migrated before.
func TestTargetPodGoesToNodesLikeTheSource(t *testing.T) {
	nodeLabels := map[string]string{
		virtv1.HostModelCPULabel + "Skylake-Client-IBRS": "true",
		virtv1.HostModelRequiredFeaturesLabel + "vmx":    "true",
		virtv1.CPUModelVendorLabel + "Intel":             "true",
		"kubernetes.io/hostname":                         "node-1",
	}
	for _, tt := range []struct {
		name      string
		hostModel bool
		migrated  map[string]string // the source pod's node selector from an earlier migration
		want      map[string]string
	}{
		{"any VMI keeps to the vendor", false, nil, map[string]string{virtv1.CPUModelVendorLabel + "Intel": "true"}},
		{"a host-model VMI to the model and its features", true, nil, map[string]string{
			virtv1.SupportedHostModelMigrationCPU + "Skylake-Client-IBRS": "true",
			virtv1.CPUFeatureLabel + "vmx":                                "true",
			virtv1.CPUModelVendorLabel + "Intel":                          "true",
		}},
		{"a host-model VMI migrated before keeps what it asked for", true,
			map[string]string{virtv1.SupportedHostModelMigrationCPU + "Haswell": "true"}, map[string]string{
				virtv1.SupportedHostModelMigrationCPU + "Haswell": "true",
				virtv1.CPUModelVendorLabel + "Intel":              "true",
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, vmi := newMigration(), runningVMI()
			if tt.hostModel {
				vmi.Spec.Domain.CPU = &virtv1.CPU{Model: virtv1.CPUModeHostModel}
			}
			source := sourcePod(t, vmi)
			for k, v := range tt.migrated {
				source.Spec.NodeSelector[k] = v
			}
			f := newFixture(t, []runtime.Object{source, sourceNode(nodeLabels)}, m, vmi)
			pod, err := f.c.renderTargetPod(f.Ranges.Owner(vmi), m, vmi, source)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for k, v := range pod.Spec.NodeSelector {
				if strings.HasSuffix(strings.SplitN(k, "/", 2)[0], "node.kubevirt.io") {
					got[k] = v
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("target node selector on the nodes' CPU labels (-want +got):\n%s", diff)
			}
		})
	}
}

// A host-model VMI on a node that does not say its model asks for no
// model: KubeVirt v1.8.1 drops that error (createTargetPod shadows it).
func TestHostModelTargetOfANodeWithoutAModelAsksForNone(t *testing.T) {
	m, vmi := newMigration(), runningVMI()
	vmi.Spec.Domain.CPU = &virtv1.CPU{Model: virtv1.CPUModeHostModel}
	source := sourcePod(t, vmi)
	f := newFixture(t, []runtime.Object{source}, m, vmi)
	pod, err := f.c.renderTargetPod(f.Ranges.Owner(vmi), m, vmi, source)
	if err != nil {
		t.Fatal(err)
	}
	for k := range pod.Spec.NodeSelector {
		if strings.HasPrefix(k, virtv1.SupportedHostModelMigrationCPU) || strings.HasPrefix(k, virtv1.CPUFeatureLabel) {
			t.Errorf("node selector %v asks for a CPU model the source node does not have", pod.Spec.NodeSelector)
		}
	}
}

// A source node missing from the cache is an error, retried, as in
// KubeVirt (getNodeForVMI).
func TestTargetPodNeedsItsSourceNode(t *testing.T) {
	m, vmi := newMigration(), runningVMI()
	vmi.Status.NodeName = "gone"
	source := sourcePod(t, vmi)
	f := newFixture(t, []runtime.Object{source}, m, vmi)
	if _, err := f.c.renderTargetPod(f.Ranges.Owner(vmi), m, vmi, source); err == nil || !strings.Contains(err.Error(), `node "gone"`) {
		t.Errorf("error %v, want the source node missing", err)
	}
}

// The migration's added node selector goes under the pod's own: a key both
// name keeps the pod's value, as KubeVirt merges them.
func TestAddedNodeSelectorYieldsToThePods(t *testing.T) {
	m, vmi := newMigration(), runningVMI()
	source := sourcePod(t, vmi)
	m.Spec.AddedNodeSelector = map[string]string{"zone": "a", virtv1.NodeSchedulable: "false"}
	f := newFixture(t, []runtime.Object{source}, m, vmi)
	pod, err := f.c.renderTargetPod(f.Ranges.Owner(vmi), m, vmi, source)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeSelector["zone"] != "a" || pod.Spec.NodeSelector[virtv1.NodeSchedulable] != "true" {
		t.Errorf("node selector %v: want zone=a added and the pod's own schedulable=true kept", pod.Spec.NodeSelector)
	}
}

// The target pod shares the source's MCS categories (KubeVirt's
// setTargetPodSELinuxLevel).
func TestTargetPodTakesTheSourceSELinuxLevel(t *testing.T) {
	for _, tt := range []struct {
		context, level string
		err            error
	}{
		{"system_u:system_r:container_t:s0:c1,c2", "s0:c1,c2", nil},
		{"none", "", nil},
		{"system_u:system_r:container_t", "", nil},
		{"", "", errNoSELinuxContext},
	} {
		pod := &corev1.Pod{}
		err := matchSELinuxLevel(pod, tt.context)
		if !errors.Is(err, tt.err) {
			t.Errorf("%q: error %v, want %v", tt.context, err, tt.err)
		}
		level := ""
		if sc := pod.Spec.SecurityContext; sc != nil && sc.SELinuxOptions != nil {
			level = sc.SELinuxOptions.Level
		}
		if level != tt.level {
			t.Errorf("%q: level %q, want %q", tt.context, level, tt.level)
		}
	}
	if err := matchSELinuxLevel(&corev1.Pod{}, "container_t"); err == nil {
		t.Error("a context of one part parsed")
	}
}

// A host-model VMI whose target pod finds no node is told so when no node
// but its source supports the CPU model the pod asks for.
func TestNoNodeForAHostModelTargetIsReported(t *testing.T) {
	required := map[string]string{virtv1.SupportedHostModelMigrationCPU + "Skylake": "true"}
	for _, tt := range []struct {
		name  string
		other map[string]string // node-2's labels
		want  bool
	}{
		{"only the source supports the model", map[string]string{"other": "label"}, true},
		{"another node supports it", required, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, vmi := newMigration(), runningVMI()
			vmi.Spec.Domain.CPU = &virtv1.CPU{Model: virtv1.CPUModeHostModel}
			other := sourceNode(tt.other)
			other.Name = "node-2"
			f := newFixture(t, []runtime.Object{sourceNode(required), other}, m, vmi)
			f.c.warnNoHostModelNode(vmi, &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: required}})
			events := f.Events()
			reported := len(events) == 1 && strings.HasPrefix(events[0], "Warning NoSuitableNodesForHostModelMigration Migration cannot proceed")
			if reported != tt.want {
				t.Errorf("events %q, want the warning: %v", events, tt.want)
			}
		})
	}
}
