package node

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
)

func TestDrainTaintKeyComesFromTheKubeVirtCRUnlessOverridden(t *testing.T) {
	kv := &virtv1.KubeVirt{Spec: virtv1.KubeVirtSpec{Configuration: virtv1.KubeVirtConfiguration{
		MigrationConfiguration: &virtv1.MigrationConfiguration{NodeDrainTaintKey: ptr.To("example.com/drain")},
	}}}
	fromCR, err := clusterconfig.FromKubeVirt(kv, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		cfg      *clusterconfig.Config
		override string
		want     string
	}{
		{"KubeVirt's default without a CR", clusterconfig.DefaultConfig("amd64"), "", DefaultDrainTaintKey},
		{"the CR's key", fromCR, "", "example.com/drain"},
		{"the flag overrides the CR", fromCR, "flag.example.com/drain", "flag.example.com/drain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Controller{opts: Options{DrainTaintKey: tc.override}, env: &sharded.Env{ClusterConfig: shardedtest.StaticConfig{Config: tc.cfg}}}
			if got := c.drainTaintKey(); got != tc.want {
				t.Errorf("drain taint key %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDrainedMatchesKeyAndNoScheduleAsKubeVirt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		taint corev1.Taint
		want  bool
	}{
		{"the key with NoSchedule", corev1.Taint{Key: DefaultDrainTaintKey, Effect: corev1.TaintEffectNoSchedule}, true},
		{"any value", corev1.Taint{Key: DefaultDrainTaintKey, Value: "draining", Effect: corev1.TaintEffectNoSchedule}, true},
		{"the key with NoExecute", corev1.Taint{Key: DefaultDrainTaintKey, Effect: corev1.TaintEffectNoExecute}, false},
		{"another key", corev1.Taint{Key: "example.com/drain", Effect: corev1.TaintEffectNoSchedule}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{tc.taint}}}
			if got := drained(node, DefaultDrainTaintKey); got != tc.want {
				t.Errorf("drained = %v, want %v", got, tc.want)
			}
		})
	}
}
