package vmi

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/topology"
)

// A VMI with the invtsc CPU feature gets the cluster's lowest TSC
// frequency as its topology hint in its Pending status, and no pod yet,
// as KubeVirt's VMI controller delays the pod for the hint.
func TestSyncHintsATSCFrequencyBeforeThePod(t *testing.T) {
	vmi := newVMI("a")
	vmi.Spec.Architecture = "amd64"
	vmi.Spec.Domain.CPU = &virtv1.CPU{Features: []virtv1.CPUFeature{{Name: "invtsc", Policy: "require"}}}
	node := func(name, hz string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			topology.FrequencyLabel: hz, virtv1.NodeSchedulable: "true"}}}
	}
	f := newFixture(t, vmi, node("fast", "3000000000"), node("slow", "2400000000"))
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	if got := kvfake.Writes(f.Kube.Actions()); slices.Contains(got, "create pods") {
		t.Errorf("writes %q: a pod before the hint", got)
	}
	f.WaitForKubeVirtWrites("patch virtualmachineinstances")
	patch := string(f.KubeVirt.Actions()[len(f.KubeVirt.Actions())-1].(k8stesting.PatchAction).GetPatch())
	if !strings.Contains(patch, `"topologyHints":{"tscFrequency":2400000000}`) || !strings.Contains(patch, `"phase":"Pending"`) {
		t.Errorf("status patch %s: want Pending with the lowest frequency as the hint", patch)
	}
}
