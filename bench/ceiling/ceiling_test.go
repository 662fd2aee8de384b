package ceiling

import (
	"testing"
	"time"
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

func TestScheduledVMIIsHandedOff(t *testing.T) {
	vmi := scheduledVMI("v", "kwok-node-3")
	if vmi.Status.Phase != "Scheduled" || vmi.Status.NodeName != "kwok-node-3" {
		t.Errorf("status %+v, want Scheduled on kwok-node-3", vmi.Status)
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
