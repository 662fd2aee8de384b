package cluster

import (
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
