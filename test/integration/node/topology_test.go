package node_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/handler"
	"github.com/virtshard/virtshard/controllers/topology"
)

// The replicas label a node that reports a TSC frequency with the
// scheduling label of its own frequency and remove one nobody needs, as
// KubeVirt's node topology updater does; the frequencies in use are
// published in the replicas' ConfigMap.
func TestTSCNodesAreLabelledForTheirFrequency(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	stale := topology.SchedulingLabel + "-1000"
	own := topology.SchedulingLabel + "-1000000000"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-tsc",
		// No simulated virt-handler beats for it: its labels stay the test's.
		Annotations: map[string]string{handler.StoppedAnnotation: ""},
		Labels:      map[string]string{poolLabel: e.ns, topology.FrequencyLabel: "1000000000", virtv1.NodeSchedulable: "true", stale: "true"}}}
	if _, err := e.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.kube.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	var labels map[string]string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := e.kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		labels = got.Labels
		_, stays := labels[stale]
		return labels[own] == "true" && !stays, nil
	}); err != nil {
		t.Fatalf("node labels %v: want %s and not %s", labels, own, stale)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(ctx, "virtshard-tsc-frequencies", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Error("the replicas published no TSC frequencies in use")
	}
}
