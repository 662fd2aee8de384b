package template

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// FuzzRender renders arbitrary VMIs (JSON): whatever the spec, Render
// returns an error or a launcher pod with a valid name, the range label,
// and a positive memory request that covers the guest's memory.
func FuzzRender(f *testing.F) {
	inputs, err := filepath.Glob("testdata/*.vmi.yaml")
	if err != nil || len(inputs) == 0 {
		f.Fatalf("no seed VMIs: %v", err)
	}
	for _, in := range inputs {
		data, err := os.ReadFile(in)
		if err != nil {
			f.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(data)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(js, uint16(5))
	}
	f.Fuzz(func(t *testing.T, data []byte, rng uint16) {
		vmi := &virtv1.VirtualMachineInstance{}
		if err := json.Unmarshal(data, vmi); err != nil {
			return
		}
		opts := DefaultOptions()
		ApplyDefaults(vmi, opts)
		if err := ValidateNetworks(vmi); err != nil {
			return
		}
		pod, err := Render(vmi, int(rng), opts)
		if err != nil {
			return
		}
		if pod.Name != PodName(vmi) || len(pod.Name) > 63 {
			t.Fatalf("pod name %q (%d characters), want PodName's, at most 63", pod.Name, len(pod.Name))
		}
		if pod.Labels[opts.RangeLabel] != strconv.Itoa(int(rng)) {
			t.Fatalf("range label %q, want %d", pod.Labels[opts.RangeLabel], rng)
		}
		guest, err := GuestMemory(vmi)
		if err != nil {
			t.Fatalf("Render succeeded but GuestMemory fails: %v", err)
		}
		memory := pod.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory]
		if memory.Sign() <= 0 || memory.Cmp(guest) < 0 {
			t.Fatalf("memory request %s for guest memory %s", memory.String(), guest.String())
		}
	})
}
