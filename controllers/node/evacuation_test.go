package node

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
)

func readyNode() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

// evicted is vmi as virt-api's eviction admitter leaves it when a drain
// evicts its launcher pod.
func evicted(vmi *virtv1.VirtualMachineInstance) *virtv1.VirtualMachineInstance {
	vmi.Status.EvacuationNodeName = vmi.Status.NodeName
	return vmi
}

// createdMigrations are the migrations the controller created, by VMI.
func createdMigrations(f *fixture) map[string]*virtv1.VirtualMachineInstanceMigration {
	out := map[string]*virtv1.VirtualMachineInstanceMigration{}
	for _, a := range f.KubeVirt.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok {
			if m, ok := c.GetObject().(*virtv1.VirtualMachineInstanceMigration); ok {
				out[m.Spec.VMIName] = m
			}
		}
	}
	return out
}

// withGates is a fixture over a KubeVirt CR whose developer configuration
// enables gates.
func withGates(t *testing.T, gates []string, objects ...runtime.Object) *fixture {
	t.Helper()
	kv := &virtv1.KubeVirt{Spec: virtv1.KubeVirtSpec{Configuration: virtv1.KubeVirtConfiguration{
		DeveloperConfiguration: &virtv1.DeveloperConfiguration{FeatureGates: gates},
	}}}
	cfg, err := clusterconfig.FromKubeVirt(kv, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	return startFixture(t, shardedtest.Cluster{Config: shardedtest.StaticConfig{Config: cfg}, Objects: objects})
}

// A drain evicts two VMIs' launcher pods; only those VMIs leave the
// (untainted) node. With the MigrationPriorityQueue gate their migrations
// have the system-critical priority, or system-maintenance when the
// descheduler evicted the VMI.
func TestAnEvictedVMIIsMigratedOffItsNode(t *testing.T) {
	descheduled := evicted(runningVMI("b"))
	descheduled.Annotations = map[string]string{virtv1.EvictionSourceAnnotation: "descheduler"}
	f := withGates(t, []string{"MigrationPriorityQueue"}, readyNode(), evicted(runningVMI("a")), descheduled, runningVMI("stays"))
	if _, err := f.syncNode("node-1"); err != nil {
		t.Fatal(err)
	}
	got := createdMigrations(f)
	if len(got) != 2 || got["a"] == nil || got["b"] == nil {
		t.Fatalf("migrations of %v, want of a and b", slices.Collect(func(yield func(string) bool) {
			for k := range got {
				if !yield(k) {
					return
				}
			}
		}))
	}
	for vmi, want := range map[string]virtv1.MigrationPriority{"a": virtv1.PrioritySystemCritical, "b": virtv1.PrioritySystemMaintenance} {
		m := got[vmi]
		if ptr.Deref(m.Spec.Priority, "") != want || m.Annotations[virtv1.EvacuationMigrationAnnotation] != "node-1" || m.GenerateName != evacuationPrefix {
			t.Errorf("migration of %s: priority %v, annotations %v, generateName %q; want %s, evacuated off node-1", vmi, m.Spec.Priority, m.Annotations, m.GenerateName, want)
		}
	}
	if events := f.Events(); !slices.Contains(events, "Normal SuccessfulCreate Created Migration "+got["a"].Name) {
		t.Errorf("events %q, want KubeVirt's SuccessfulCreate", events)
	}
}

// VMIs that do not migrate on eviction, cannot, left the node already
// (in the cache, or by a migration the cache shows succeeded) or are
// migrating get nothing.
func TestEvacuationLeavesVMIsThatShouldNotMigrate(t *testing.T) {
	none := evicted(runningVMI("none"))
	none.Spec.EvictionStrategy = nil // the cluster's, None by default
	ifPossible := evicted(runningVMI("if-possible"))
	ifPossible.Spec.EvictionStrategy = ptr.To(virtv1.EvictionStrategyLiveMigrateIfPossible)
	ifPossible.Status.Conditions[0].Status = corev1.ConditionFalse
	cannot := evicted(runningVMI("cannot"))
	cannot.Status.Conditions = nil
	moved := evicted(runningVMI("moved"))
	moved.Status.NodeName = "node-2"
	inFlight := evicted(runningVMI("in-flight"))
	inFlight.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{StartTimestamp: ptr.To(metav1.NewTime(time.Now().Add(-time.Minute)))}
	external := evicted(runningVMI("external"))
	external.Spec.EvictionStrategy = ptr.To(virtv1.EvictionStrategyExternal)
	// Its migration succeeded, which the cached VMI does not show yet:
	// the VMI has left already.
	behind := evicted(runningVMI("behind"))
	behind.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-behind", TargetNode: "node-2"}
	done := &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-evacuation-behind", Namespace: behind.Namespace, UID: "m-behind",
		Annotations: map[string]string{virtv1.EvacuationMigrationAnnotation: "node-1"}},
		Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: "behind"}, Status: virtv1.VirtualMachineInstanceMigrationStatus{Phase: virtv1.MigrationSucceeded}}
	f := newFixture(t, []runtime.Object{readyNode()}, none, ifPossible, cannot, moved, inFlight, external, behind, done)
	if _, err := f.syncNode("node-1"); err != nil {
		t.Fatal(err)
	}
	if got := kvfake.Writes(f.KubeVirt.Actions()); len(got) != 0 {
		t.Errorf("writes %q, want none", got)
	}
}

// Without the MigrationPriorityQueue gate (KubeVirt's default) only as
// many migrations are created as the limits leave room for (two out of a
// node by default); a VMI that cannot migrate is told so while room is
// left.
func TestEvacuationsKeepToTheMigrationLimits(t *testing.T) {
	gateOff := func(objects ...runtime.Object) *fixture { return withGates(t, nil, objects...) }
	cannot := evicted(runningVMI("cannot"))
	cannot.Status.Conditions = nil

	f := gateOff(drainedNode(), runningVMI("a"), runningVMI("b"), runningVMI("c"), cannot)
	after, err := f.syncNode("node-1")
	if err != nil {
		t.Fatal(err)
	}
	got := createdMigrations(f)
	if len(got) != 2 || after != evacuationRecheck {
		t.Fatalf("%d migrations, next look after %s; want 2 (the node's limit), again after %s", len(got), after, evacuationRecheck)
	}
	for _, m := range got {
		if m.Spec.Priority != nil {
			t.Errorf("migration of %s has priority %s without the gate", m.Spec.VMIName, *m.Spec.Priority)
		}
	}
	if events := f.Events(); slices.Contains(events, "Normal FailedCreate "+notMigratableMessage) {
		t.Errorf("events %q: no room was left to tell the VMI that cannot migrate", events)
	}

	// Two evacuations run off the node already: no room until one ends.
	running := func(name string) *virtv1.VirtualMachineInstanceMigration {
		return &virtv1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: name, Annotations: map[string]string{virtv1.EvacuationMigrationAnnotation: "node-1"}},
			Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: name},
			Status:     virtv1.VirtualMachineInstanceMigrationStatus{Phase: virtv1.MigrationRunning},
		}
	}
	f = gateOff(drainedNode(), runningVMI("a"), running("x"), running("y"))
	if after, err := f.syncNode("node-1"); err != nil || after != evacuationNoRoomRecheck || len(createdMigrations(f)) != 0 {
		t.Errorf("with the node's limit reached: %d created, next look after %s (%v); want none, again after %s", len(createdMigrations(f)), after, err, evacuationNoRoomRecheck)
	}

	// With room and only a VMI that cannot migrate, it is told so, and
	// again a minute later.
	f = gateOff(readyNode(), cannot)
	if after, err := f.syncNode("node-1"); err != nil || after != evacuationNotMigratableTell {
		t.Errorf("next look after %s (%v), want %s", after, err, evacuationNotMigratableTell)
	}
	if events := f.Events(); !slices.Contains(events, "Normal FailedCreate "+notMigratableMessage) {
		t.Errorf("events %q, want the VMI told it cannot migrate", events)
	}
}

// A look at the node decided on a VMI before its own evacuation, made a
// moment earlier, reached the cache, which holds it by the time the
// migration is named: the name is the first one's and the API server
// refuses it, so the VMI is not migrated twice.
func TestAnEvacuationTheDecisionDidNotSeeIsNotMadeTwice(t *testing.T) {
	f := newFixture(t, []runtime.Object{readyNode()}, evicted(runningVMI("a")))
	if _, err := f.syncNode("node-1"); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(kinds.MigrationsOf(f.c.env.Caches, "default/a")) == 1, nil
	}); err != nil {
		t.Fatal("the first evacuation never reached the cache")
	}
	vmis := f.c.vmisOn("node-1")
	if len(vmis) != 1 {
		t.Fatalf("%d VMIs on the node, want 1", len(vmis))
	}
	cfg := f.c.env.ClusterConfig.Current()
	if err := f.c.createEvacuation(context.Background(), cfg, "node-1", migration.Decided{Found: vmis[0]}); err != nil {
		t.Fatal(err)
	}
	list, err := f.KubeVirt.Migrations("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d migrations of the VMI, want its one evacuation", len(list.Items))
	}
}

// A marked VMI whose evacuation failed a moment ago, with the target pod
// not ended yet, gets no second evacuation, and its node is looked at
// again within a second rather than at the usual recheck: KubeVirt looks
// again on the VMI's next update. A second pod with no migration just
// ended is no reason to look that often. Once the target pod ended, the
// evacuation is made.
func TestAVMIWaitingForItsTargetPodToEndIsLookedAtSoon(t *testing.T) {
	vmi := evicted(runningVMI("again"))
	rng := strconv.Itoa(shardedtest.Ranges(t).Owner(vmi))
	source := withPhase(launcherPod(vmi, rng), corev1.PodRunning)
	target := withPhase(launcherPod(vmi, rng), corev1.PodRunning)
	target.Name, target.UID, target.Spec.NodeName = "virt-launcher-again-target", "pod-target", "node-2"
	failedAt := func(at time.Time) *virtv1.VirtualMachineInstanceMigration {
		return &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-evacuation-again", Namespace: vmi.Namespace,
			Annotations: map[string]string{virtv1.EvacuationMigrationAnnotation: "node-1"}},
			Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
			Status: virtv1.VirtualMachineInstanceMigrationStatus{Phase: virtv1.MigrationFailed, PhaseTransitionTimestamps: []virtv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{
				{Phase: virtv1.MigrationFailed, PhaseTransitionTimestamp: metav1.NewTime(at)}}}}
	}
	for _, tc := range []struct {
		name  string
		ended time.Time
		want  time.Duration
	}{{"failed a moment ago", time.Now(), evacuationPodRecheck}, {"failed a minute ago", time.Now().Add(-time.Minute), evacuationRecheck}} {
		f := newFixture(t, []runtime.Object{readyNode(), source, target}, vmi, failedAt(tc.ended))
		after, err := f.syncNode("node-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(createdMigrations(f)) != 0 || after != tc.want {
			t.Errorf("%s: %d migrations, looked at again after %s; want none, after %s", tc.name, len(createdMigrations(f)), after, tc.want)
		}
	}

	ended := withPhase(target.DeepCopy(), corev1.PodSucceeded)
	f := newFixture(t, []runtime.Object{readyNode(), source, ended}, vmi, failedAt(time.Now()))
	if _, err := f.syncNode("node-1"); err != nil {
		t.Fatal(err)
	}
	if len(createdMigrations(f)) != 1 {
		t.Errorf("%d migrations once the target pod ended, want 1", len(createdMigrations(f)))
	}
}
