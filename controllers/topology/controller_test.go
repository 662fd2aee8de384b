package topology

import (
	"context"
	"encoding/json"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
)

// The replica publishes the frequencies its ranges' VMIs were hinted with,
// per range, beside another replica's entry, and labels its TSC nodes
// with the union and the cluster's lowest, removing a label nobody needs.
func TestSyncPublishesAndLabels(t *testing.T) {
	hinted := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-a"},
		Status: virtv1.VirtualMachineInstanceStatus{TopologyHints: &virtv1.TopologyHints{TSCFrequency: ptr.To[int64](2_400_100_000)}}}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "virtshard", Name: "virtshard-tsc-frequencies"},
		// A range of another replica (the fixture's ranges are all this
		// one's, so the entry stands for one no longer held).
		Data: map[string]string{"range-9999": "2400200000"}}
	node := tscNode("node-1", "2400000000", false, true, SchedulingLabel+"-1000")
	f, c := shardedtest.StartController(t, "topology", func(env *sharded.Env, rt *sharded.Runtime) (*Controller, *sharded.Controller, error) {
		c := &Controller{env: env, rt: rt, configMap: env.Name + "-tsc-frequencies"}
		return c, c.declare(), nil
	}, shardedtest.Cluster{Objects: []runtime.Object{hinted, other, node}})

	after, err := c.sync(context.Background(), sharded.Item{Range: sharded.Cluster, Key: itemKey})
	if err != nil || after != UpdatePeriod {
		t.Fatalf("sync: look again in %v (%v), want %v", after, err, UpdatePeriod)
	}
	cm, err := f.Kube.CoreV1().ConfigMaps("virtshard").Get(context.Background(), "virtshard-tsc-frequencies", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rng := f.Ranges.Of(hinted)
	if got := cm.Data[rangeKey(rng)]; got != "2400100000" || cm.Data["range-9999"] != "2400200000" {
		t.Errorf("published %v, want range %d's 2400100000 beside the other entry", cm.Data, rng)
	}
	var patch string
	for _, a := range f.Kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "nodes" {
			patch = string(p.GetPatch())
		}
	}
	var got struct {
		Metadata struct {
			Labels map[string]*string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(patch), &got); err != nil {
		t.Fatalf("node patch %q: %v", patch, err)
	}
	for _, hz := range []string{"2400000000", "2400100000", "2400200000"} {
		if v := got.Metadata.Labels[SchedulingLabel+"-"+hz]; v == nil || *v != "true" {
			t.Errorf("node patch %s: want the label of %s", patch, hz)
		}
	}
	if v, ok := got.Metadata.Labels[SchedulingLabel+"-1000"]; !ok || v != nil {
		t.Errorf("node patch %s: want the stale label removed", patch)
	}
}

// A heartbeat, which updates every node every minute, queues no look at
// the labels; a change of the node's frequency or schedulability does.
func TestOnlyATSCRelevantNodeChangeQueues(t *testing.T) {
	node := tscNode("n", "2400000000", false, true)
	beat := node.DeepCopy()
	beat.Annotations = map[string]string{virtv1.VirtHandlerHeartbeat: "now"}
	beat.Labels["other"] = "x"
	if !maps.Equal(tscLabels(node), tscLabels(beat)) {
		t.Error("a heartbeat changes the TSC labels")
	}
	for _, key := range []string{FrequencyLabel, ScalableLabel, virtv1.NodeSchedulable, SchedulingLabel + "-1"} {
		changed := node.DeepCopy()
		changed.Labels[key] = "changed"
		if maps.Equal(tscLabels(node), tscLabels(changed)) {
			t.Errorf("a change of %s goes unseen", key)
		}
	}
}
