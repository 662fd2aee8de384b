package node

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
	"github.com/virtshard/virtshard/shard"
)

// fixture is the node controller on the test kit; a test calls sync on
// one node.
type fixture struct {
	*shardedtest.Fixture
	c *Controller
}

func newFixture(t *testing.T, kubeObjects []runtime.Object, vmis ...runtime.Object) *fixture {
	t.Helper()
	return startFixture(t, shardedtest.Cluster{Objects: append(kubeObjects, vmis...)})
}

// startFixture starts the controller on c, with a heartbeat timeout of a
// minute.
func startFixture(t *testing.T, c shardedtest.Cluster) *fixture {
	t.Helper()
	f, ctrl := shardedtest.StartController(t, "node", func(env *sharded.Env, rt *sharded.Runtime) (*Controller, *sharded.Controller, error) {
		ctrl, err := newController(env, rt, Options{HeartbeatTimeout: time.Minute})
		if err != nil {
			return nil, nil, err
		}
		return ctrl, ctrl.declare(), nil
	}, c)
	return &fixture{f, ctrl}
}

// syncNode syncs the node named name.
func (f *fixture) syncNode(name string) (time.Duration, error) {
	return f.c.sync(context.Background(), sharded.Item{Range: sharded.Cluster, Key: name})
}

// nodeBeating is node-1, schedulable, whose virt-handler last heartbeat at.
func nodeBeating(at time.Time) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1",
		Labels:      map[string]string{virtv1.NodeSchedulable: "true"},
		Annotations: map[string]string{virtv1.VirtHandlerHeartbeat: at.UTC().Format(time.RFC3339)},
	}}
}

// runningVMI is a VMI running on node-1 that migrates on eviction and can.
func runningVMI(name string) *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: k8stypes.UID("uid-" + name), ResourceVersion: "4"},
		Spec:       virtv1.VirtualMachineInstanceSpec{EvictionStrategy: ptr.To(virtv1.EvictionStrategyLiveMigrate)},
		Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Running, NodeName: "node-1", Conditions: []virtv1.VirtualMachineInstanceCondition{
			{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue},
		}},
	}
}

func launcherPod(vmi *virtv1.VirtualMachineInstance, rng string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: "virt-launcher-" + vmi.Name, UID: "pod-" + vmi.UID,
			Labels: map[string]string{virtv1.CreatedByLabel: string(vmi.UID), shard.LabelRange: rng}},
		Spec: corev1.PodSpec{NodeName: "node-1"},
	}
}

func withPhase(pod *corev1.Pod, phase corev1.PodPhase) *corev1.Pod {
	pod.Status.Phase = phase
	return pod
}

// A stale heartbeat fails the Scheduled and Running VMIs whose launcher
// pod is dead or missing, and labels the node unschedulable; a VMI whose
// pod lives is left, as in KubeVirt.
func TestSyncFailsTheVMIsWithoutALivePodOfANodeWhoseHeartbeatIsStale(t *testing.T) {
	deadPod, livePod, scheduled, pending := runningVMI("dead-pod"), runningVMI("live-pod"), runningVMI("scheduled"), runningVMI("pending")
	scheduled.Status.Phase = virtv1.Scheduled
	pending.Status.Phase = virtv1.Pending
	ranges := shardedtest.Ranges(t)
	// A second pod of dead-pod's, hanging in termination: not alive either.
	terminated := withPhase(launcherPod(deadPod, strconv.Itoa(ranges.Owner(deadPod))), corev1.PodRunning)
	terminated.Name, terminated.UID = "virt-launcher-terminated", "pod-terminated"
	terminated.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}}
	f := newFixture(t, []runtime.Object{nodeBeating(time.Now().Add(-2 * time.Minute)),
		withPhase(launcherPod(deadPod, strconv.Itoa(ranges.Owner(deadPod))), corev1.PodFailed), terminated,
		withPhase(launcherPod(livePod, strconv.Itoa(ranges.Owner(livePod))), corev1.PodRunning),
	}, deadPod, livePod, scheduled, pending)
	after, err := f.syncNode("node-1")
	if err != nil {
		t.Fatal(err)
	}
	if after != unresponsiveRecheck {
		t.Errorf("look again after %s, want %s", after, unresponsiveRecheck)
	}
	failed := map[string]string{}
	for _, a := range f.KubeVirt.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			failed[p.GetName()] = string(p.GetPatch())
		}
	}
	if len(failed) != 2 || failed["dead-pod"] == "" || failed["scheduled"] == "" {
		t.Fatalf("VMIs patched %v, want dead-pod and scheduled", failed)
	}
	for name, patch := range failed {
		for _, want := range []string{`"phase":"Failed"`, `"reason":"` + ReasonNodeUnresponsive + `"`, `"resourceVersion":"4"`, `"phase":"Failed","phaseTransitionTimestamp"`} {
			if !strings.Contains(patch, want) {
				t.Errorf("patch of %s %s lacks %s", name, patch, want)
			}
		}
	}
	actions := f.Kube.Actions()
	if got := kvfake.Writes(actions); !slices.Equal(got, []string{"patch nodes"}) {
		t.Fatalf("kube writes %q, want the node labelled", got)
	}
	if p := string(actions[len(actions)-1].(k8stesting.PatchAction).GetPatch()); p != `{"metadata":{"labels":{"kubevirt.io/schedulable":"false"}}}` {
		t.Errorf("node patch %s", p)
	}
	events := strings.Join(f.Events(), "\n")
	for _, want := range []string{"Normal NodeUnresponsive virt-handler is not responsive, marking node as unresponsive", "Normal NodeUnresponsive virt-handler on node node-1 is not responsive, marking VMI as failed"} {
		if !strings.Contains(events, want) {
			t.Errorf("events %q lack %q", events, want)
		}
	}
}

func TestSyncLooksAgainWhenTheHeartbeatGoesStale(t *testing.T) {
	f := newFixture(t, []runtime.Object{nodeBeating(time.Now().Add(-10 * time.Second))}, runningVMI("a"))
	after, err := f.syncNode("node-1")
	if err != nil {
		t.Fatal(err)
	}
	if after < 45*time.Second || after > 52*time.Second {
		t.Errorf("look again after %s, want a second after the heartbeat goes stale (about 51 s)", after)
	}
	if got := append(kvfake.Writes(f.KubeVirt.Actions()), kvfake.Writes(f.Kube.Actions())...); len(got) != 0 {
		t.Errorf("writes %q while the heartbeat is fresh", got)
	}
}

// A node without a heartbeat never ran virt-handler, and one whose
// heartbeat does not parse is virt-handler's to mend: neither is
// unresponsive, as in KubeVirt.
func TestSyncLeavesNodesWithoutAReadableHeartbeat(t *testing.T) {
	none := nodeBeating(time.Now())
	delete(none.Annotations, virtv1.VirtHandlerHeartbeat)
	garbled := nodeBeating(time.Now())
	garbled.Annotations[virtv1.VirtHandlerHeartbeat] = "yesterday"
	for _, node := range []*corev1.Node{none, garbled} {
		f := newFixture(t, []runtime.Object{node}, runningVMI("a"))
		after, err := f.syncNode("node-1")
		if err != nil || after != 0 {
			t.Errorf("heartbeat %q: sync %s, %v; want nothing to look at again", node.Annotations[virtv1.VirtHandlerHeartbeat], after, err)
		}
		if got := append(kvfake.Writes(f.KubeVirt.Actions()), kvfake.Writes(f.Kube.Actions())...); len(got) != 0 {
			t.Errorf("heartbeat %q: writes %q", node.Annotations[virtv1.VirtHandlerHeartbeat], got)
		}
	}
}

// A deleted node fails its VMIs whose pods are gone; one whose pod is
// still there waits for the pod (the VMI controller fails a Running VMI
// whose pod is deleted).
func TestSyncFailsTheVMIsWithoutPodsOfADeletedNode(t *testing.T) {
	gone, kept := runningVMI("gone"), runningVMI("kept")
	f := newFixture(t, []runtime.Object{withPhase(launcherPod(kept, strconv.Itoa(shardedtest.Ranges(t).Owner(kept))), corev1.PodRunning)}, gone, kept)
	after, err := f.syncNode("node-1")
	if err != nil || after != 0 {
		t.Fatalf("sync %s, %v; want done", after, err)
	}
	actions := f.KubeVirt.Actions()
	if got := kvfake.Writes(actions); !slices.Equal(got, []string{"patch virtualmachineinstances"}) || actions[len(actions)-1].(k8stesting.PatchAction).GetName() != "gone" {
		t.Errorf("writes %q, want VMI gone failed", got)
	}
}

func TestSyncLeavesTheVMIsAndNodeOfRangesNotHeld(t *testing.T) {
	vmi := runningVMI("a")
	f := newFixture(t, []runtime.Object{nodeBeating(time.Now().Add(-2 * time.Minute))}, vmi)
	f.Fence.Drop(f.Ranges.Owner(vmi))
	f.Fence.Drop(f.Ranges.OfValue("node-1"))
	if _, err := f.syncNode("node-1"); err != nil {
		t.Fatal(err)
	}
	if got := append(kvfake.Writes(f.KubeVirt.Actions()), kvfake.Writes(f.Kube.Actions())...); len(got) != 0 {
		t.Errorf("writes %q for another replica's VMI and node", got)
	}
}

func TestSyncEvacuatesADrainedNode(t *testing.T) {
	vmi := runningVMI("a")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: DefaultDrainTaintKey, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	f := newFixture(t, []runtime.Object{node}, vmi)
	after, err := f.syncNode("node-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := kvfake.Writes(f.KubeVirt.Actions()); !slices.Equal(got, []string{"create virtualmachineinstancemigrations"}) || after != evacuationRecheck {
		t.Fatalf("writes %q, next look after %s: want one evacuation migration, looked at again after %s", got, after, evacuationRecheck)
	}
	m := f.KubeVirt.Actions()[0].(k8stesting.CreateAction).GetObject().(*virtv1.VirtualMachineInstanceMigration)
	if m.Spec.VMIName != "a" || m.Annotations[virtv1.EvacuationMigrationAnnotation] != "node-1" {
		t.Errorf("migration %+v: want VMI a evacuated off node-1", m)
	}
	if m.GenerateName != "kubevirt-evacuation-" || m.Name != (migration.System{Prefix: evacuationPrefix, NameParts: []string{"node-1"}}).Name(vmi, nil) {
		t.Errorf("migration named %q (generateName %q), want the name derived from the VMI and node, KubeVirt's generateName beside it", m.Name, m.GenerateName)
	}
}

func drainedNode() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: DefaultDrainTaintKey, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

// An evacuation decided by a replica just before it lost the range, and
// created after the range's next holder created it, makes no second
// migration: its name follows from the VMI, the node and the migrations
// both saw.
func TestALateEvacuationAfterAHandoffMakesNoSecondMigration(t *testing.T) {
	vmi := runningVMI("a")
	old := newFixture(t, []runtime.Object{drainedNode()}, vmi)
	asked, release := old.Fence.HoldAsk(2) // the create's, after the evacuation's own check
	done := make(chan error, 1)
	go func() {
		_, err := old.syncNode("node-1")
		done <- err
	}()
	<-asked
	old.Fence.Drop(old.Ranges.Owner(vmi))

	next := startFixture(t, shardedtest.Cluster{Replica: old.Fixture})
	if _, err := next.syncNode("node-1"); err != nil {
		t.Fatal(err)
	}
	release()
	if err := <-done; err != nil {
		t.Errorf("the old holder's sync: %v, want its late create taken as done", err)
	}
	if got := kvfake.Writes(old.KubeVirt.Actions()); !slices.Equal(got, []string{"create virtualmachineinstancemigrations", "create virtualmachineinstancemigrations"}) {
		t.Fatalf("writes %q, want both replicas' creates (the old holder's late)", got)
	}
	ms, err := old.KubeVirt.Migrations(vmi.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms.Items) != 1 {
		t.Errorf("%d evacuation migrations, want one", len(ms.Items))
	}
}

// An unresponsive node with a running VMI and no virt-handler pod, while
// the virt-handler DaemonSet has all the pods it wants, gets KubeVirt's
// warning; with a virt-handler pod there, a DaemonSet still rolling out or
// not exactly one DaemonSet, none.
func TestAnUnresponsiveNodeWithoutVirtHandlerIsReportedOrphaned(t *testing.T) {
	daemonSet := func(name string, desired, current int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: name, Labels: map[string]string{"kubevirt.io": "virt-handler"}},
			Status:     appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, CurrentNumberScheduled: current, NumberReady: current},
		}
	}
	handlerPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "virt-handler-x", Labels: map[string]string{"kubevirt.io": "virt-handler"}},
		Spec:       corev1.PodSpec{NodeName: "node-1"},
	}
	for _, tt := range []struct {
		name   string
		others []runtime.Object
		want   bool
	}{
		{"no virt-handler pod, the DaemonSet complete elsewhere", []runtime.Object{daemonSet("virt-handler", 2, 2)}, true},
		{"a virt-handler pod on the node", []runtime.Object{daemonSet("virt-handler", 3, 3), handlerPod}, false},
		{"the DaemonSet rolling out", []runtime.Object{daemonSet("virt-handler", 3, 2)}, false},
		{"two DaemonSets", []runtime.Object{daemonSet("virt-handler", 2, 2), daemonSet("virt-handler-2", 2, 2)}, false},
		{"no DaemonSet", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vmi := runningVMI("a")
			vmi.Labels = map[string]string{virtv1.NodeNameLabel: "node-1"}
			pod := withPhase(launcherPod(vmi, strconv.Itoa(shardedtest.Ranges(t).Owner(vmi))), corev1.PodRunning)
			f := newFixture(t, append([]runtime.Object{nodeBeating(time.Now().Add(-2 * time.Minute)), pod}, tt.others...), vmi)
			if _, err := f.syncNode("node-1"); err != nil {
				t.Fatal(err)
			}
			reported := slices.ContainsFunc(f.Events(), func(e string) bool {
				return e == "Warning "+ReasonNodeUnresponsive+" "+msgOrphans
			})
			if reported != tt.want {
				t.Errorf("orphaned VMIs reported: %v, want %v (events %q)", reported, tt.want, f.Events())
			}
		})
	}
}
