package differential

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// A restarted node is back once it is Ready, the node lifecycle
// controller's taints are gone and virt-handler made it schedulable.
func TestNodeBackOnlyWhenReadyUntaintedAndSchedulable(t *testing.T) {
	node := func(ready corev1.ConditionStatus, taint string, schedulable string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{virtv1.NodeSchedulable: schedulable}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
		if taint != "" {
			n.Spec.Taints = []corev1.Taint{{Key: taint, Effect: corev1.TaintEffectNoExecute}}
		}
		return n
	}
	for _, tt := range []struct {
		name string
		node *corev1.Node
		want bool
	}{
		{"back", node(corev1.ConditionTrue, "", "true"), true},
		{"a taint of its own", node(corev1.ConditionTrue, "kwok.x-k8s.io/node", "true"), true},
		{"NotReady", node(corev1.ConditionFalse, "", "true"), false},
		{"still tainted not-ready", node(corev1.ConditionTrue, corev1.TaintNodeNotReady, "true"), false},
		{"still tainted unreachable", node(corev1.ConditionTrue, corev1.TaintNodeUnreachable, "true"), false},
		{"unschedulable for VMIs", node(corev1.ConditionTrue, "", "false"), false},
	} {
		if got := nodeBack(tt.node); got != tt.want {
			t.Errorf("%s: back %v, want %v", tt.name, got, tt.want)
		}
	}
}
