package node

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/shard"
)

// fixture is a node controller over fake clientsets: real informers over
// the fakes; a test calls sync on one node and reads the actions.
type fixture struct {
	kube   *kubefake.Clientset
	kv     *kvfake.Clientset
	c      *Controller
	ranges shard.Ranges
	held   map[int]bool
}

// Deadline holds the ranges in held, for an hour.
func (f *fixture) Deadline(rng int) (time.Time, bool) { return time.Now().Add(time.Hour), f.held[rng] }

func testRanges(t *testing.T) shard.Ranges {
	ranges, err := shard.NewRanges(4, shard.KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	return ranges
}

func newFixture(t *testing.T, kubeObjects []runtime.Object, vmis ...runtime.Object) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &fixture{kube: kubefake.NewClientset(kubeObjects...), kv: kvfake.NewClientset(vmis...), ranges: testRanges(t), held: map[int]bool{}}
	for i := range f.ranges.Count() {
		f.held[i] = true
	}
	cc := caches.Config{Kube: f.kube, KubeVirt: f.kv, Ranges: f.ranges}
	rangeCaches, cluster := caches.NewRanges(cc), caches.NewCluster(cc)
	var err error
	f.c, err = New(Config{Kube: f.kube, KubeVirt: f.kv, Fence: f, Ranges: f.ranges, Caches: rangeCaches, Cluster: cluster,
		GracePeriod: time.Minute, ClusterConfig: staticConfig{clusterconfig.DefaultConfig("amd64")}, Recorder: record.NewFakeRecorder(100)})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Run(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range f.ranges.Count() {
		if err := rangeCaches.Acquired(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	f.kube.ClearActions()
	f.kv.ClearActions()
	return f
}

func notReadyNode(since time.Time) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: metav1.NewTime(since),
	}}}}
}

func runningVMI(name string) *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: k8stypes.UID("uid-" + name), ResourceVersion: "4"},
		Status:     virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Running, NodeName: "node-1"},
	}
}

func launcherPod(vmi *virtv1.VirtualMachineInstance, rng string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: "virt-launcher-" + vmi.Name, UID: "pod-" + vmi.UID,
			Labels: map[string]string{virtv1.CreatedByLabel: string(vmi.UID), shard.LabelRange: rng}},
		Spec: corev1.PodSpec{NodeName: "node-1"},
	}
}

func TestSyncFailsTheVMIsOfANodeNotReadyPastItsGracePeriod(t *testing.T) {
	vmi := runningVMI("a")
	rng := testRanges(t).Owner(vmi)
	f := newFixture(t, []runtime.Object{notReadyNode(time.Now().Add(-2 * time.Minute)), launcherPod(vmi, strconv.Itoa(rng))}, vmi)
	if _, err := f.c.sync(context.Background(), "node-1"); err != nil {
		t.Fatal(err)
	}
	if got := kvfake.Writes(f.kv.Actions()); !slices.Equal(got, []string{"patch virtualmachineinstances"}) {
		t.Fatalf("KubeVirt writes %q, want the VMI patched Failed", got)
	}
	patch := string(f.kv.Actions()[0].(k8stesting.PatchAction).GetPatch())
	for _, want := range []string{`"phase":"Failed"`, `"reason":"` + ReasonNodeUnresponsive + `"`, `"resourceVersion":"4"`, `"phase":"Failed","phaseTransitionTimestamp"`} {
		if !strings.Contains(patch, want) {
			t.Errorf("patch %s lacks %s", patch, want)
		}
	}
	actions := f.kube.Actions()
	if got := kvfake.Writes(actions); !slices.Equal(got, []string{"delete pods"}) {
		t.Fatalf("kube writes %q, want the launcher pod deleted", got)
	}
	if p := actions[len(actions)-1].(k8stesting.DeleteAction).GetDeleteOptions().Preconditions; p == nil || ptr.Deref(p.UID, "") != "pod-uid-a" {
		t.Errorf("delete preconditions %+v, want the pod's UID", p)
	}
}

func TestSyncWaitsOutTheGracePeriod(t *testing.T) {
	vmi := runningVMI("a")
	f := newFixture(t, []runtime.Object{notReadyNode(time.Now().Add(-10 * time.Second))}, vmi)
	after, err := f.c.sync(context.Background(), "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if after <= 0 || after > time.Minute {
		t.Errorf("look again after %s, want within the grace period left", after)
	}
	if got := append(kvfake.Writes(f.kv.Actions()), kvfake.Writes(f.kube.Actions())...); len(got) != 0 {
		t.Errorf("writes %q during the grace period", got)
	}
}

func TestSyncLeavesTheVMIsOfRangesNotHeld(t *testing.T) {
	vmi := runningVMI("a")
	f := newFixture(t, []runtime.Object{notReadyNode(time.Now().Add(-2 * time.Minute))}, vmi)
	f.held[f.ranges.Owner(vmi)] = false
	if _, err := f.c.sync(context.Background(), "node-1"); err != nil {
		t.Fatal(err)
	}
	if got := append(kvfake.Writes(f.kv.Actions()), kvfake.Writes(f.kube.Actions())...); len(got) != 0 {
		t.Errorf("writes %q for another replica's VMI", got)
	}
}

func TestSyncEvacuatesADrainedNode(t *testing.T) {
	vmi := runningVMI("a")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec:   corev1.NodeSpec{Taints: []corev1.Taint{{Key: DefaultDrainTaintKey, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	f := newFixture(t, []runtime.Object{node}, vmi)
	after, err := f.c.sync(context.Background(), "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := kvfake.Writes(f.kv.Actions()); !slices.Equal(got, []string{"create virtualmachineinstancemigrations"}) || after != evacuationRecheck {
		t.Fatalf("writes %q, next look after %s: want one evacuation migration, looked at again after %s", got, after, evacuationRecheck)
	}
	m := f.kv.Actions()[0].(k8stesting.CreateAction).GetObject().(*virtv1.VirtualMachineInstanceMigration)
	if m.Spec.VMIName != "a" || m.Annotations[virtv1.EvacuationMigrationAnnotation] != "node-1" {
		t.Errorf("migration %+v: want VMI a evacuated off node-1", m)
	}
}
