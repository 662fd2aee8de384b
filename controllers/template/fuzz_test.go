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

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/shard"
)

// FuzzRender renders arbitrary VMIs (JSON): whatever the spec, a VMI that
// passes validation renders to an error or to a launcher pod with a valid
// name, the range label, and a memory request that covers the guest's.
// The seeds are the conformance corpus as virt-api stored it.
func FuzzRender(f *testing.F) {
	inputs, err := filepath.Glob("../../test/conformance/testdata/kubevirt/*.vmi.yaml")
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
	cluster := clusterconfig.DefaultConfig("amd64")
	f.Fuzz(func(t *testing.T, data []byte, rng uint16) {
		vmi := &virtv1.VirtualMachineInstance{}
		if err := json.Unmarshal(data, vmi); err != nil {
			return
		}
		opts := DefaultOptions()
		ApplyDefaults(vmi, opts)
		if ValidateNetworks(vmi) != nil || ValidateVolumes(vmi) != nil || ValidateMemory(vmi) != nil {
			return
		}
		pod, err := Render(vmi, int(rng), opts, cluster, &StaticObjects{})
		if err != nil {
			return
		}
		if pod.Name != PodName(vmi) || len(pod.Name) > 63 {
			t.Fatalf("pod name %q (%d characters), want PodName's, at most 63", pod.Name, len(pod.Name))
		}
		if pod.Labels[shard.LabelRange] != strconv.Itoa(int(rng)) {
			t.Fatalf("range label %q, want %d", pod.Labels[shard.LabelRange], rng)
		}
		// KubeVirt requests the requested memory, else the guest's, plus
		// the overhead.
		guest, requested := vmi.Spec.Domain.Resources.Requests[corev1.ResourceMemory]
		if m := vmi.Spec.Domain.Memory; (!requested || guest.IsZero()) && m != nil && m.Guest != nil {
			guest = *m.Guest
		}
		memory := pod.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory]
		if hugepages := vmi.Spec.Domain.Memory; hugepages == nil || hugepages.Hugepages == nil {
			if memory.Sign() <= 0 || memory.Cmp(guest) < 0 {
				t.Fatalf("memory request %s for guest memory %s", memory.String(), guest.String())
			}
		}
	})
}
