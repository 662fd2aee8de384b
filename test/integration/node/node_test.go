package node_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/cmd/virtshard-controller/app"
	"github.com/virtshard/virtshard/controllers/node"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

const gracePeriod = 2 * time.Second

// poolLabel puts a test's VMIs on the test's own nodes: nodes are shared
// by every test of the cluster, and these tests stop and drain them.
const poolLabel = "virtshard.io/test-pool"

type env struct {
	t    *testing.T
	ns   string
	kube kubernetes.Interface
	kv   *kubevirt.Clientset
}

func newEnv(t *testing.T) *env {
	ns, kube, kv := controllertest.Clients(t)
	e := &env{t: t, ns: ns, kube: kube, kv: kv}
	controllertest.StartN(t, e.ns, 3, func(o *app.Options) { o.Node.GracePeriod = gracePeriod })
	return e
}

// addNode creates a kwok node of the test's pool and waits until it is
// Ready; test cleanup deletes it.
func (e *env) addNode(suffix string) string {
	e.t.Helper()
	n := cluster.NewNode(e.ns+"-"+suffix, 110)
	n.Labels[poolLabel] = e.ns
	if _, err := e.kube.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.kube.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := e.kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		e.t.Fatalf("node %s not Ready", n.Name)
	}
	return n.Name
}

// runVMIs creates n VMIs on the test's pool and waits until they run; it
// returns them by name with their nodes.
func (e *env) runVMIs(prefix string, n int) map[string]string {
	e.t.Helper()
	for i := range n {
		vmi := workload.VMI(fmt.Sprintf("%s-%d", prefix, i))
		vmi.Spec.NodeSelector = map[string]string{poolLabel: e.ns}
		// Evacuated on a drain: the cluster's default strategy is None.
		vmi.Spec.EvictionStrategy = ptr.To(virtv1.EvictionStrategyLiveMigrate)
		if _, err := e.kv.VirtualMachineInstances(e.ns).Create(context.Background(), vmi, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	nodes := map[string]string{}
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for i := range n {
			name := fmt.Sprintf("%s-%d", prefix, i)
			vmi, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && vmi.Status.Phase == virtv1.Running {
				nodes[name] = vmi.Status.NodeName
			}
		}
		return len(nodes) == n, nil
	}); err != nil {
		e.t.Fatalf("%d of %d VMIs Running", len(nodes), n)
	}
	return nodes
}

// stop stops a kwok node's kubelet: it reports NotReady from then on
// (deploy/kwok/stages/node-stopped.yaml).
func (e *env) stop(name string) time.Time {
	e.t.Helper()
	at := time.Now()
	patch := []byte(`{"metadata":{"annotations":{"virtshard.io/node-stopped":"true"}}}`)
	if _, err := e.kube.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return at
}

// waitFailed waits until the VMIs are Failed for NodeUnresponsive and
// their launcher pods are gone or going.
func (e *env) waitFailed(vmis []string) map[string]*virtv1.VirtualMachineInstance {
	e.t.Helper()
	got := map[string]*virtv1.VirtualMachineInstance{}
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range vmis {
			vmi, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil && vmi.Status.Phase == virtv1.Failed && vmi.Status.Reason == node.ReasonNodeUnresponsive {
				got[name] = vmi
			}
		}
		return len(got) == len(vmis), nil
	}); err != nil {
		e.t.Fatalf("%d of %d VMIs Failed with %s", len(got), len(vmis), node.ReasonNodeUnresponsive)
	}
	for name, vmi := range got {
		pods, err := e.kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: virtv1.CreatedByLabel + "=" + string(vmi.UID)})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, pod := range pods.Items {
			if pod.DeletionTimestamp == nil {
				e.t.Errorf("VMI %s failed but its launcher pod %s is not deleted", name, pod.Name)
			}
		}
	}
	return got
}

func onNode(nodes map[string]string, name string) []string {
	var out []string
	for vmi, n := range nodes {
		if n == name {
			out = append(out, vmi)
		}
	}
	return out
}

func TestStoppedOrDeletedNodeFailsItsVMIs(t *testing.T) {
	e := newEnv(t)
	stopped := e.addNode("stopped")
	placed := e.runVMIs("on-stopped", 4)
	deleted := e.addNode("deleted")
	if _, err := e.kube.CoreV1().Nodes().Patch(context.Background(), stopped, types.MergePatchType,
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	placed2 := e.runVMIs("on-deleted", 3)
	for vmi, n := range placed2 {
		if n != deleted {
			t.Fatalf("VMI %s on %s, want %s", vmi, n, deleted)
		}
	}

	at := e.stop(stopped)
	failed := e.waitFailed(onNode(placed, stopped))
	for name, vmi := range failed {
		var failedAt time.Time
		for _, ts := range vmi.Status.PhaseTransitionTimestamps {
			if ts.Phase == virtv1.Failed {
				failedAt = ts.PhaseTransitionTimestamp.Time
			}
		}
		// Whole-second timestamps: allow one second of truncation.
		if failedAt.Add(time.Second).Before(at.Add(gracePeriod)) {
			t.Errorf("VMI %s failed at %s, before the grace period after NotReady at %s", name, failedAt, at)
		}
	}

	if err := e.kube.CoreV1().Nodes().Delete(context.Background(), deleted, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	e.waitFailed(onNode(placed2, deleted))
}

func TestDrainedNodeIsEvacuatedWithinTheLimits(t *testing.T) {
	e := newEnv(t)
	drained := e.addNode("drained")
	placed := e.runVMIs("evacuee", 6)
	for _, suffix := range []string{"x", "y"} {
		e.addNode(suffix)
	}
	taint := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"value":"fake","effect":"NoSchedule"},{"key":%q,"effect":"NoSchedule"}]}}`,
		cluster.KwokNodeTaintKey, node.DefaultDrainTaintKey)
	if _, err := e.kube.CoreV1().Nodes().Patch(context.Background(), drained, types.MergePatchType, []byte(taint), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	maxOutbound := 0
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		migrations, err := e.kv.Migrations(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		inFlight, final := 0, 0
		for _, m := range migrations.Items {
			if !m.IsFinal() && m.Status.Phase != virtv1.MigrationPending && m.Status.Phase != virtv1.MigrationPhaseUnset {
				inFlight++
			}
			if m.IsFinal() {
				final++
			}
		}
		maxOutbound = max(maxOutbound, inFlight)
		left := 0
		for vmi := range placed {
			got, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, vmi, metav1.GetOptions{})
			if err != nil || got.Status.NodeName == drained || got.Status.Phase != virtv1.Running {
				left++
			}
		}
		// The node side moves a VMI to its target before it reports the
		// migration completed (two writes, as virt-handler's).
		return left == 0 && final == len(migrations.Items), nil
	}); err != nil {
		t.Fatal("the drained node still has VMIs, or their migrations are not final, two minutes later")
	}
	if maxOutbound > 2 {
		t.Errorf("%d migrations in flight out of the drained node, limit 2", maxOutbound)
	}
	migrations, err := e.kv.Migrations(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	succeeded := 0
	for _, m := range migrations.Items {
		if m.Annotations[virtv1.EvacuationMigrationAnnotation] != drained {
			t.Errorf("migration %s lacks the evacuation annotation", m.Name)
		}
		if m.Status.Phase == virtv1.MigrationSucceeded {
			succeeded++
		}
	}
	if succeeded != len(placed) {
		t.Errorf("%d evacuation migrations succeeded, want %d (one per VMI)", succeeded, len(placed))
	}
}
