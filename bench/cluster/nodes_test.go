package cluster

import (
	"net"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestNewNodeLooksLikeAKubeVirtNode(t *testing.T) {
	node := NewNode("n", 5000)
	if node.Labels[SchedulableLabel] != "true" || node.Labels[KwokNodeTypeLabel] != KwokNodeType {
		t.Errorf("labels %v lack %s=true or %s=%s", node.Labels, SchedulableLabel, KwokNodeTypeLabel, KwokNodeType)
	}
	if len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != KwokNodeTaintKey {
		t.Errorf("taints %v, want just the kwok taint", node.Spec.Taints)
	}
	for _, name := range append([]corev1.ResourceName{corev1.ResourcePods}, kubevirtDevices...) {
		q := node.Status.Allocatable[name]
		if q.Value() != 5000 {
			t.Errorf("allocatable %s = %s, want 5000", name, q.String())
		}
	}
	// No Ready condition up front: kwok's node-initialize stage only acts on
	// nodes that have none.
	if len(node.Status.Conditions) != 0 {
		t.Errorf("conditions %v, want none", node.Status.Conditions)
	}
}

// Every node has a pod CIDR of its own, which no other node's overlaps, and
// room in it for far more pods than it runs.
func TestEveryNodeHasItsOwnPodCIDR(t *testing.T) {
	var cidrs []*net.IPNet
	for i := range MaxNodes {
		_, cidr, err := net.ParseCIDR(PodCIDR(i))
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if ones, bits := cidr.Mask.Size(); 1<<(bits-ones)-2 < DefaultPodsPerNode {
			t.Errorf("node %d: %s holds fewer addresses than %d pods", i, cidr, DefaultPodsPerNode)
		}
		for j, other := range cidrs {
			if other.Contains(cidr.IP) || cidr.Contains(other.IP) {
				t.Errorf("nodes %d and %d share pod addresses: %s, %s", j, i, other, cidr)
			}
		}
		cidrs = append(cidrs, cidr)
	}
}
