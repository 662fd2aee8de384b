package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/shard"
)

const corpus = "../../test/conformance/corpus"

// A hand-written VMI with --api-defaults renders to KubeVirt's pod for it,
// less the documented differences: the name and the range label.
func TestRenderWithAPIDefaultsMatchesKubeVirt(t *testing.T) {
	o := newOptions()
	o.APIDefaults = true
	o.Inputs = []string{filepath.Join(corpus, "01-containerdisk-minimal.yaml")}
	var out bytes.Buffer
	if err := o.Run(&out); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Pod{}
	if err := yaml.UnmarshalStrict(out.Bytes(), got); err != nil {
		t.Fatalf("output is not a pod: %v\n%s", err, out.String())
	}
	want := &corev1.Pod{}
	data, err := os.ReadFile("../../test/conformance/testdata/kubevirt/01-containerdisk-minimal.pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, want); err != nil {
		t.Fatal(err)
	}
	if got.Kind != "Pod" || got.APIVersion != "v1" {
		t.Errorf("kind %s/%s, want v1/Pod", got.APIVersion, got.Kind)
	}
	if !strings.HasPrefix(got.Name, want.GenerateName) {
		t.Errorf("pod name %q, want KubeVirt's prefix %q", got.Name, want.GenerateName)
	}
	ranges, _ := shard.NewRanges(shard.DefaultRangeCount, shard.KeyUID)
	vmiRange := ranges.OfValue("00000000-0000-4000-8000-000000000001")
	if got.Labels[shard.LabelRange] != strconv.Itoa(vmiRange) {
		t.Errorf("range label %q, want the VMI's range %d", got.Labels[shard.LabelRange], vmiRange)
	}
	// Everything KubeVirt sets is there with KubeVirt's value.
	if len(got.Spec.Volumes) != len(want.Spec.Volumes) || len(got.Spec.InitContainers) != len(want.Spec.InitContainers) {
		t.Errorf("%d volumes and %d init containers, KubeVirt has %d and %d",
			len(got.Spec.Volumes), len(got.Spec.InitContainers), len(want.Spec.Volumes), len(want.Spec.InitContainers))
	}
	gotMem := got.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory]
	wantMem := want.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory]
	if gotMem.Cmp(wantMem) != 0 {
		t.Errorf("memory request %s, KubeVirt's %s", gotMem.String(), wantMem.String())
	}
}

// A directory renders each file to --out under its own name; without
// --out the pods go to stdout as one YAML stream.
func TestRenderDirectory(t *testing.T) {
	in := t.TempDir()
	for _, name := range []string{"04-pvc-filesystem.yaml", "17-net-masquerade-ports.yaml"} {
		data, err := os.ReadFile(filepath.Join(corpus, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(in, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	o := newOptions()
	o.APIDefaults, o.Out, o.Inputs = true, out, []string{in}
	if err := o.Run(nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"04-pvc-filesystem.yaml", "17-net-masquerade-ports.yaml"} {
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("no pod for %s: %v", name, err)
		}
		pod := &corev1.Pod{}
		if err := yaml.UnmarshalStrict(data, pod); err != nil || pod.Spec.Containers[0].Name != template.ComputeContainer {
			t.Errorf("%s: not a launcher pod (%v)", name, err)
		}
	}

	o.Out = ""
	var stdout bytes.Buffer
	if err := o.Run(&stdout); err != nil {
		t.Fatal(err)
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(&stdout, 4096)
	n := 0
	for {
		pod := &corev1.Pod{}
		if err := decoder.Decode(pod); err != nil {
			break
		}
		n++
	}
	if n != 2 {
		t.Errorf("stdout held %d pods, want 2", n)
	}
}

// Bad input is refused with the file's name and the reason.
func TestRenderRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"no-vmi.yaml":  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
		"unknown.yaml": "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: a\n",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		o := newOptions()
		o.Inputs = []string{path}
		err := o.Run(&bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v, want one naming the file", name, err)
		}
	}
	if err := (&Options{}).Validate(); err == nil {
		t.Error("no input is accepted")
	}
}
