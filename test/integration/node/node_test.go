package node_test

import (
	"context"
	"fmt"
	"os"
	"strings"
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
	controllertest.StartN(t, e.ns, 3, func(*app.Options) {})
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

// stop stops a kwok node's kubelet and its simulated virt-handler: it
// reports NotReady from then on (deploy/kwok/stages/node-stopped.yaml)
// and heartbeats no more.
func (e *env) stop(name string) {
	e.t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"virtshard.io/node-stopped":"true"}}}`)
	if _, err := e.kube.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// staleHeartbeat dates the node's virt-handler heartbeat back past the
// heartbeat timeout, as five silent minutes would, and reports whether it
// had to: a heartbeat the handler wrote as it stopped is dated back again.
func (e *env) staleHeartbeat(ctx context.Context, name string) (bool, error) {
	n, err := e.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	at, err := time.Parse(time.RFC3339, n.Annotations[virtv1.VirtHandlerHeartbeat])
	if err == nil && time.Since(at) > 2*node.DefaultHeartbeatTimeout {
		return false, nil
	}
	stale := time.Now().Add(-3 * node.DefaultHeartbeatTimeout).UTC().Format(time.RFC3339)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, virtv1.VirtHandlerHeartbeat, stale)
	_, err = e.kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return true, err
}

// phases reads the VMIs' phases and reasons.
func (e *env) phases(ctx context.Context, names []string) map[string]string {
	out := map[string]string{}
	for _, name := range names {
		vmi, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			out[name] = err.Error()
			continue
		}
		out[name] = string(vmi.Status.Phase) + "/" + vmi.Status.Reason
	}
	return out
}

// hangPod has every container of the VMI's launcher pods report
// terminated while the pod stays Running: a launcher hanging in
// termination with no virt-handler to unmount its disks, which KubeVirt's
// node controller does not count as alive.
func (e *env) hangPod(vmi string) {
	e.t.Helper()
	v, err := e.kv.VirtualMachineInstances(e.ns).Get(context.Background(), vmi, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	pods, err := e.kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: virtv1.CreatedByLabel + "=" + string(v.UID)})
	if err != nil || len(pods.Items) == 0 {
		e.t.Fatalf("launcher pods of %s: %d, %v", vmi, len(pods.Items), err)
	}
	for _, pod := range pods.Items {
		pod.Status.ContainerStatuses = nil
		for _, c := range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}})
		}
		if _, err := e.kube.CoreV1().Pods(e.ns).UpdateStatus(context.Background(), &pod, metav1.UpdateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
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

// A node whose virt-handler stopped heartbeating is labelled unschedulable
// for VMIs, and of its VMIs those whose launcher pod is no longer alive
// fail (NodeUnresponsive); those whose pod lives on are left, as KubeVirt's
// node controller leaves them. A deleted node's VMIs fail once their pods
// go.
func TestUnresponsiveOrDeletedNodeFailsItsVMIsWithoutLivePods(t *testing.T) {
	e := newEnv(t)
	stopped := e.addNode("stopped")
	placed := onNode(e.runVMIs("on-stopped", 4), stopped)
	if len(placed) != 4 {
		t.Fatalf("%d of 4 VMIs on %s", len(placed), stopped)
	}
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

	e.stop(stopped)
	// The node is labelled unschedulable once its heartbeat is stale.
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, err := e.staleHeartbeat(ctx, stopped); err != nil {
			return false, err
		}
		n, err := e.kube.CoreV1().Nodes().Get(ctx, stopped, metav1.GetOptions{})
		return err == nil && n.Labels[virtv1.NodeSchedulable] == "false", err
	}); err != nil {
		t.Fatalf("node %s not labelled %s=false: %v", stopped, virtv1.NodeSchedulable, err)
	}
	dead, living := placed[:2], placed[2:]
	for _, vmi := range dead {
		e.hangPod(vmi)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, phase := range e.phases(ctx, dead) {
			if phase != string(virtv1.Failed)+"/"+node.ReasonNodeUnresponsive {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("VMIs whose launchers hang in termination on the unresponsive node: %v, want Failed/%s", e.phases(context.Background(), dead), node.ReasonNodeUnresponsive)
	}
	// Every replica syncs the node on the same heartbeat change; give the
	// one holding a VMI whose pod lives a moment to get it wrong.
	time.Sleep(3 * time.Second)
	for name, phase := range e.phases(context.Background(), living) {
		if phase != string(virtv1.Running)+"/" {
			t.Errorf("VMI %s with a live launcher pod on the unresponsive node is %s, want left Running", name, phase)
		}
	}

	if err := e.kube.CoreV1().Nodes().Delete(context.Background(), deleted, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// kube-controller-manager deletes the pods of a node gone (pod GC);
	// then their VMIs fail.
	var names []string
	for name := range placed2 {
		names = append(names, name)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, phase := range e.phases(ctx, names) {
			if !strings.HasPrefix(phase, string(virtv1.Failed)+"/") {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("VMIs of the deleted node: %v, want Failed", e.phases(context.Background(), names))
	}
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
	if t.Failed() {
		for _, m := range migrations.Items {
			from, to := "", ""
			if ms := m.Status.MigrationState; ms != nil {
				from, to = ms.SourceNode, ms.TargetNode
			}
			t.Logf("migration %s of %s created %s: %s, %s -> %s", m.Name, m.Spec.VMIName, m.CreationTimestamp.Format(time.RFC3339), m.Status.Phase, from, to)
		}
	}
}
