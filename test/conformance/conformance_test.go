package conformance

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/shard"
)

var updateDifferences = flag.Bool("update-differences", false,
	"rewrite testdata/differences.txt with the differences found (the work left to do)")

const (
	corpusDir     = "corpus"
	kubevirtDir   = "testdata/kubevirt"
	differences   = "testdata/differences.txt"
	arch          = "amd64"
	timeoutMarker = "QEMU_TIMEOUT_WITH_JITTER"
)

// TestConformance renders every corpus VMI, as virt-api stored it, through
// virtshard's template and compares the pod field by field with the one
// KubeVirt's TemplateService rendered. It fails on a difference not listed
// in testdata/differences.txt, and on a listed one that no longer differs.
func TestConformance(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join(corpusDir, "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no corpus in %s: %v", corpusDir, err)
	}
	known, err := readDifferences(differences)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	var equal, total int
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		for _, c := range renderCase(t, in, name) {
			eq, tot := 0, 0
			for _, d := range c.compare() {
				tot++
				if d.equal {
					eq++
					continue
				}
				line := c.name + "\t" + d.path
				found[line] = true
				if !known[line] && !*updateDifferences {
					t.Errorf("%s: %s: KubeVirt %s, virtshard %s", c.name, d.path, d.want, d.got)
				}
			}
			equal, total = equal+eq, total+tot
			t.Logf("%-48s %5.1f%% of %d fields equal", c.name, 100*float64(eq)/float64(max(tot, 1)), tot)
		}
	}
	fmt.Printf("conformance: %d of %d launcher-pod fields equal KubeVirt's (%.1f%%) over %d corpus files\n",
		equal, total, 100*float64(equal)/float64(max(total, 1)), len(inputs))
	if *updateDifferences {
		if err := writeDifferences(differences, found); err != nil {
			t.Fatal(err)
		}
		return
	}
	for line := range known {
		if !found[line] {
			t.Errorf("%s is listed in %s but no longer differs: remove it (go test -update-differences)", strings.ReplaceAll(line, "\t", ": "), differences)
		}
	}
}

// deployed is kv (or an empty CR) as virt-operator leaves it, and as the
// reference module gives it to KubeVirt: phase Deployed, and
// status.defaultArchitecture from the spec, else the cluster's.
func deployed(kv *virtv1.KubeVirt) *virtv1.KubeVirt {
	if kv == nil {
		kv = &virtv1.KubeVirt{}
	}
	kv = kv.DeepCopy()
	kv.Status.Phase = virtv1.KubeVirtPhaseDeployed
	if a := kv.Spec.Configuration.ArchitectureConfiguration; a != nil && a.DefaultArchitecture != "" {
		kv.Status.DefaultArchitecture = a.DefaultArchitecture
	} else if kv.Status.DefaultArchitecture == "" {
		kv.Status.DefaultArchitecture = arch
	}
	return kv
}

// renderedCase is one pod KubeVirt rendered (or refused) and virtshard's.
type renderedCase struct {
	name                string
	want, got           *corev1.Pod
	wantErr, gotErr     string
	qemuTimeoutBaseSecs int
}

func renderCase(t *testing.T, input, name string) []renderedCase {
	t.Helper()
	f, err := os.Open(input)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bundle, err := template.DecodeBundle(f)
	if err != nil {
		t.Fatalf("%s: %v", input, err)
	}
	cluster, err := clusterconfig.FromKubeVirt(deployed(bundle.KubeVirt), arch)
	if err != nil {
		t.Fatalf("%s: cluster config: %v", input, err)
	}
	opts := template.DefaultOptions()
	base := int(opts.QEMUTimeout.Seconds())

	vmi := &virtv1.VirtualMachineInstance{}
	prefix := filepath.Join(kubevirtDir, name)
	if err := readYAML(prefix+".vmi.yaml", vmi); err != nil {
		if _, rerr := os.ReadFile(prefix + ".error.txt"); rerr == nil {
			// virt-api refused the VMI: there is nothing to render, and
			// TestAPIDefaults checks that virtshard's defaults refuse it too.
			return nil
		}
		t.Fatalf("%s: %v (run make generate)", name, err)
	}

	c := renderedCase{name: name, qemuTimeoutBaseSecs: base}
	c.got, c.gotErr = render(func() (*corev1.Pod, error) {
		return template.Render(vmi.DeepCopy(), 0, opts, cluster, bundle.Objects)
	})
	c.want, c.wantErr = readPod(t, prefix+".pod.yaml", prefix+".error.txt")
	cases := []renderedCase{c}

	if hasDataVolume(vmi) {
		// The temporary pod of a VMI whose DataVolume waits for its first
		// consumer.
		p := renderedCase{name: name + "/provisioning", qemuTimeoutBaseSecs: base}
		p.got, p.gotErr = render(func() (*corev1.Pod, error) {
			return template.RenderProvisioning(vmi.DeepCopy(), 0, opts, cluster, bundle.Objects)
		})
		p.want, p.wantErr = readPod(t, prefix+".provisioning.pod.yaml", prefix+".provisioning.error.txt")
		cases = append(cases, p)
	}

	if bundle.Migration != nil {
		source := &corev1.Pod{}
		if err := readYAML(prefix+".source.pod.yaml", source); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m := renderedCase{name: name + "/migration-target", qemuTimeoutBaseSecs: base}
		m.got, m.gotErr = render(func() (*corev1.Pod, error) {
			return template.RenderMigrationTarget(vmi.DeepCopy(), bundle.Migration, source, 0, opts, cluster, bundle.Objects)
		})
		m.want, m.wantErr = readPod(t, prefix+".target.pod.yaml", prefix+".target.error.txt")
		cases = append(cases, m)
	}
	return cases
}

func hasDataVolume(vmi *virtv1.VirtualMachineInstance) bool {
	return slices.ContainsFunc(vmi.Spec.Volumes, func(v virtv1.Volume) bool { return v.DataVolume != nil })
}

func render(f func() (*corev1.Pod, error)) (*corev1.Pod, string) {
	pod, err := f()
	if err != nil {
		return nil, err.Error()
	}
	return pod, ""
}

func readPod(t *testing.T, podFile, errFile string) (*corev1.Pod, string) {
	t.Helper()
	if msg, err := os.ReadFile(errFile); err == nil {
		return nil, strings.TrimSpace(string(msg))
	}
	pod := &corev1.Pod{}
	if err := readYAML(podFile, pod); err != nil {
		t.Fatalf("%v (run make generate)", err)
	}
	return pod, ""
}

func readYAML(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return yaml.UnmarshalStrict(data, into)
}

// field is one leaf of the compared pods.
type field struct {
	path      string
	want, got string
	equal     bool
}

// compare returns every leaf of either pod, after taking out the
// deliberate differences. A refusal on both sides is one equal field.
func (c renderedCase) compare() []field {
	if c.wantErr != "" || c.gotErr != "" {
		// Messages may differ; refusing (or not) must not.
		return []field{{path: "(refused)", want: strconv.Quote(c.wantErr), got: strconv.Quote(c.gotErr),
			equal: (c.wantErr == "") == (c.gotErr == "")}}
	}
	want, got := flatten(c.want), flatten(c.normalize(c.got))
	paths := map[string]bool{}
	for p := range want {
		paths[p] = true
	}
	for p := range got {
		paths[p] = true
	}
	sorted := slices.Sorted(func(yield func(string) bool) {
		for p := range paths {
			if !yield(p) {
				return
			}
		}
	})
	out := make([]field, 0, len(sorted))
	for _, p := range sorted {
		w, wok := want[p]
		g, gok := got[p]
		if !wok {
			w = "(absent)"
		}
		if !gok {
			g = "(absent)"
		}
		out = append(out, field{path: p, want: w, got: g, equal: wok && gok && w == g})
	}
	return out
}

// normalize takes the deliberate differences (docs/controller.md) out of
// virtshard's pod: the deterministic name (its generateName is
// KubeVirt's, and compared), the namespace (KubeVirt's pod gets it at create), the range label, and the
// QEMU timeout's jitter, which must lie where KubeVirt's random one does.
func (c renderedCase) normalize(pod *corev1.Pod) *corev1.Pod {
	pod = pod.DeepCopy()
	pod.Name = c.want.Name
	pod.Namespace = c.want.Namespace
	delete(pod.Labels, shard.LabelRange)
	for i := range pod.Spec.Containers {
		command := pod.Spec.Containers[i].Command
		for j := 0; j+1 < len(command); j++ {
			if command[j] != "--qemu-timeout" {
				continue
			}
			secs, err := strconv.Atoi(strings.TrimSuffix(command[j+1], "s"))
			if err == nil && secs >= c.qemuTimeoutBaseSecs && secs < c.qemuTimeoutBaseSecs+120 {
				command[j+1] = timeoutMarker
			}
		}
	}
	return pod
}

// flatten maps each leaf of obj's JSON form to its value. Lists of
// objects with unique names (containers, volumes, env, …) are keyed by
// name, with their order as a leaf of its own; lists of scalars are one
// leaf.
func flatten(obj any) map[string]string {
	data, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		panic(err)
	}
	out := map[string]string{}
	walk("", v, out)
	return out
}

func walk(path string, v any, out map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 0 {
			out[path] = "{}"
		}
		for k, e := range v {
			walk(join(path, k), e, out)
		}
	case []any:
		keys, ok := listKeys(v)
		if !ok {
			data, _ := json.Marshal(v)
			out[path] = string(data)
			return
		}
		out[path+"#order"] = strings.Join(keys, ",")
		for i, e := range v {
			walk(path+"["+keys[i]+"]", e, out)
		}
	default:
		data, _ := json.Marshal(v)
		out[path] = string(data)
	}
}

// listKeys names a list's elements by "name" (then by name@mountPath for
// volume mounts that share a volume), if that makes them unique.
func listKeys(list []any) ([]string, bool) {
	for _, keyOf := range []func(map[string]any) string{
		func(m map[string]any) string { return str(m["name"]) },
		func(m map[string]any) string { return str(m["name"]) + "@" + str(m["mountPath"]) },
		func(m map[string]any) string { return str(m["key"]) + str(m["operator"]) + str(m["effect"]) },
		func(m map[string]any) string { return str(m["conditionType"]) },
	} {
		keys, seen := make([]string, 0, len(list)), map[string]bool{}
		for _, e := range list {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, false
			}
			k := keyOf(m)
			if k == "" || k == "@" || seen[k] {
				break
			}
			seen[k] = true
			keys = append(keys, k)
		}
		if len(keys) == len(list) {
			return keys, true
		}
	}
	return nil, false
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func readDifferences(path string) (map[string]bool, error) {
	known := map[string]bool{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return known, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := s.Text(); line != "" && !strings.HasPrefix(line, "#") {
			known[line] = true
		}
	}
	return known, s.Err()
}

func writeDifferences(path string, found map[string]bool) error {
	if len(found) == 0 {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	lines := make([]string, 0, len(found))
	for l := range found {
		lines = append(lines, l)
	}
	sort.Strings(lines)
	header := "# Launcher-pod fields where virtshard still differs from KubeVirt v1.8.1: corpus file, then field.\n" +
		"# Written by go test ./test/conformance -update-differences; the suite fails on any difference not listed here.\n"
	return os.WriteFile(path, []byte(header+strings.Join(lines, "\n")+"\n"), 0o644)
}
