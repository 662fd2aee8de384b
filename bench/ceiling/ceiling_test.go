package ceiling

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"an empty sample has no percentile", nil, 0.5, 0},
		{"a single sample is every percentile", ms(7), 0.99, 7 * time.Millisecond},
		{"the median of four is the second (nearest rank)", ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p95 of twenty is the nineteenth", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), 0.95, 19 * time.Millisecond},
		{"p99 of ten is the largest", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.q); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.sorted, tt.q, got, tt.want)
			}
		})
	}
}

func TestTheFloorHandsOffInOneWrite(t *testing.T) {
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "v", Namespace: "ns"},
		Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Pending}}
	kv := kvfake.NewClientset(vmi)
	if err := handOff(context.Background(), kv.VirtualMachineInstances("ns"), "v", "kwok-node-3"); err != nil {
		t.Fatal(err)
	}
	if writes := kvfake.Writes(kv.Actions()); len(writes) != 1 {
		t.Errorf("writes %v, want one", writes)
	}
	got, err := kv.VirtualMachineInstances("ns").Get(context.Background(), "v", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != virtv1.Scheduled || got.Status.NodeName != "kwok-node-3" || got.Labels[virtv1.NodeNameLabel] != "kwok-node-3" {
		t.Errorf("handed-off VMI: phase %s, node %q, labels %v; want Scheduled on kwok-node-3, labelled so", got.Status.Phase, got.Status.NodeName, got.Labels)
	}
}

func TestNewPodToleratesKwokAndTargetsKwokNodes(t *testing.T) {
	pod := newPod("p")
	if pod.Spec.NodeSelector["type"] != "kwok" {
		t.Errorf("node selector %v, want type=kwok", pod.Spec.NodeSelector)
	}
	if len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Key != "kwok.x-k8s.io/node" {
		t.Errorf("tolerations %v, want the kwok node taint tolerated", pod.Spec.Tolerations)
	}
}
