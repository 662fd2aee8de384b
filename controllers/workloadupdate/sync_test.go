package workloadupdate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
	"github.com/virtshard/virtshard/shard"
)

// fixture is the workload updater on the test kit, its clock a fake one.
type fixture struct {
	*shardedtest.Fixture
	c     *Controller
	clock *clocktesting.FakeClock
}

// kubeVirt is a deployed KubeVirt CR whose strategy allows methods, with
// the outdated count outdated (nil: none yet).
func kubeVirt(outdated *int, methods ...virtv1.WorkloadUpdateMethod) *virtv1.KubeVirt {
	return &virtv1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubevirt", Name: "kubevirt", ResourceVersion: "1"},
		Spec:       virtv1.KubeVirtSpec{WorkloadUpdateStrategy: virtv1.KubeVirtWorkloadUpdateStrategy{WorkloadUpdateMethods: methods}},
		Status: virtv1.KubeVirtStatus{Phase: virtv1.KubeVirtPhaseDeployed, ObservedDeploymentID: "d1", TargetDeploymentID: "d1",
			OutdatedVirtualMachineInstanceWorkloads: outdated, DefaultArchitecture: "amd64"},
	}
}

func newFixture(t *testing.T, kv *virtv1.KubeVirt, objects ...runtime.Object) *fixture {
	t.Helper()
	return newFixtureHolding(t, nil, kv, objects...)
}

// newFixtureHolding is newFixture of a replica that holds only the ranges
// held (all when nil).
func newFixtureHolding(t *testing.T, held []int, kv *virtv1.KubeVirt, objects ...runtime.Object) *fixture {
	t.Helper()
	var cfg *clusterconfig.Config
	var err error
	if kv != nil {
		if cfg, err = clusterconfig.FromKubeVirt(kv, "amd64"); err != nil {
			t.Fatal(err)
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(kv)
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{Object: u}
		obj.SetAPIVersion("kubevirt.io/v1")
		obj.SetKind("KubeVirt")
		objects = append(objects, obj)
	} else {
		cfg = clusterconfig.DefaultConfig("amd64")
	}
	clk := clocktesting.NewFakeClock(time.Now())
	f, c := shardedtest.StartController(t, "workload-updater", func(env *sharded.Env, rt *sharded.Runtime) (*Controller, *sharded.Controller, error) {
		env.Template.LauncherImage = newImage
		c, err := newController(env, rt, Options{})
		if err != nil {
			return nil, nil, err
		}
		return c, c.declare(), nil
	}, shardedtest.Cluster{Objects: objects, Config: shardedtest.StaticConfig{Config: cfg}, Clock: clk, Held: held})
	return &fixture{f, c, clk}
}

func (f *fixture) sync() time.Duration {
	f.T.Helper()
	after, err := f.c.sync(context.Background(), sharded.Item{Range: sharded.Cluster, Key: itemKey})
	if err != nil {
		f.T.Fatal(err)
	}
	return after
}

// vmisWithPods are n running VMIs on the old launcher, each with its
// launcher pod, named prefix-0...
func vmisWithPods(t *testing.T, prefix string, n int, change func(*virtv1.VirtualMachineInstance)) []runtime.Object {
	ranges := shardedtest.Ranges(t)
	var out []runtime.Object
	for i := range n {
		vmi := running(fmt.Sprintf("%s-%d", prefix, i))
		if change != nil {
			change(vmi)
		}
		out = append(out, vmi, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: "virt-launcher-" + vmi.Name, UID: "pod-" + vmi.UID,
				Labels: map[string]string{virtv1.CreatedByLabel: string(vmi.UID), shard.LabelRange: strconv.Itoa(ranges.Owner(vmi))}},
			Spec: corev1.PodSpec{NodeName: "node-1"},
		})
	}
	return out
}

func (f *fixture) created() []*virtv1.VirtualMachineInstanceMigration {
	var out []*virtv1.VirtualMachineInstanceMigration
	for _, a := range f.KubeVirt.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "virtualmachineinstancemigrations" {
			out = append(out, c.GetObject().(*virtv1.VirtualMachineInstanceMigration))
		}
	}
	return out
}

func (f *fixture) evictions() int {
	n := 0
	for _, w := range f.KubeWrites() {
		if w == "create pods/eviction" {
			n++
		}
	}
	return n
}

// statusPatches are the JSON patches of the KubeVirt CR's status.
func (f *fixture) statusPatches() []string {
	var out []string
	for _, a := range f.Dynamic.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "kubevirts" && a.GetSubresource() == "status" {
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

func (f *fixture) record() record {
	f.T.Helper()
	cm, err := f.Kube.CoreV1().ConfigMaps("virtshard").Get(context.Background(), "virtshard-workload-updates", metav1.GetOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	var r record
	if err := json.Unmarshal([]byte(cm.Data[recordKey]), &r); err != nil {
		f.T.Fatal(err)
	}
	return r
}

// VMIs on the old launcher are counted into the CR's status and migrated,
// as many at once as the cluster-wide limit (5 by default) leaves room for
// beside the migration already running, each told in an event.
func TestOutdatedVMIsAreCountedAndMigratedWithinTheLimit(t *testing.T) {
	runningMigration := &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "user"},
		Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: "elsewhere"}, Status: virtv1.VirtualMachineInstanceMigrationStatus{Phase: virtv1.MigrationRunning}}
	objects := append(vmisWithPods(t, "old", 7, nil), runningMigration)
	f := newFixture(t, kubeVirt(nil, virtv1.WorkloadUpdateMethodLiveMigrate, virtv1.WorkloadUpdateMethodEvict), objects...)
	if after := f.sync(); after != throttle {
		t.Errorf("look again after %s, want %s while VMIs are left", after, throttle)
	}
	got := f.created()
	if len(got) != 4 {
		t.Fatalf("%d migrations created, want 4 (a limit of 5, one running)", len(got))
	}
	events := strings.Join(f.Events(), "\n")
	for _, m := range got {
		if _, ok := m.Annotations[virtv1.WorkloadUpdateMigrationAnnotation]; !ok || m.GenerateName != migrationPrefix ||
			!strings.HasPrefix(m.Name, migrationPrefix) || m.Spec.Priority != nil {
			t.Errorf("migration %+v, want KubeVirt's annotation and prefix, no priority without the gate", m.ObjectMeta)
		}
		if want := "Normal SuccessfulCreate Created Migration " + m.Name + " for automated workload update"; !strings.Contains(events, want) {
			t.Errorf("events %q lack %q", events, want)
		}
	}
	if n := f.evictions(); n != 0 {
		t.Errorf("%d evictions of migratable VMIs", n)
	}
	if p := f.statusPatches(); !slices.Equal(p, []string{`[{"op":"add","path":"/status/outdatedVirtualMachineInstanceWorkloads","value":7}]`}) {
		t.Errorf("CR status patches %q, want the count of 7 added", p)
	}
	if r := f.record(); r.total() != 7 {
		t.Errorf("record %+v, want 7 outdated", r)
	}
}

// A replica holding one of the fixture's four ranges creates at most its
// share of the limit (5 × 1/4, rounded up: 2), all of it while the room
// the running migrations leave (2) allows: not a share of that room.
func TestAReplicaCreatesItsShareOfTheLimitWithinTheRoom(t *testing.T) {
	held := []int{0}
	objects := vmisWithPods(t, "old", 60, nil)
	for i := range 3 {
		objects = append(objects, &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("other-%d", i)},
			Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: fmt.Sprintf("elsewhere-%d", i)}, Status: virtv1.VirtualMachineInstanceMigrationStatus{Phase: virtv1.MigrationRunning}})
	}
	f := newFixtureHolding(t, held, kubeVirt(nil, virtv1.WorkloadUpdateMethodLiveMigrate), objects...)
	f.sync()
	if got := len(f.created()); got != 2 {
		t.Errorf("%d migrations created, want 2: the replica's share of the limit, all the room left", got)
	}
}

// A VMI counted outdated but migrating already is looked at again after
// the throttle: the look that sees its migration end may see its cached
// copy before the VMI moved to the new launcher, and its move is not an
// event the updater hears of.
func TestACountedVMIIsLookedAtAgain(t *testing.T) {
	migrating := func(v *virtv1.VirtualMachineInstance) {
		v.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{StartTimestamp: &metav1.Time{Time: time.Now()}}
	}
	f := newFixture(t, kubeVirt(nil, virtv1.WorkloadUpdateMethodLiveMigrate), vmisWithPods(t, "old", 1, migrating)...)
	if after := f.sync(); after != throttle {
		t.Errorf("look again after %s, want %s while a VMI is counted", after, throttle)
	}
	if n := len(f.created()); n != 0 {
		t.Errorf("%d migrations of a migrating VMI", n)
	}
}

// The count is replaced (tested first, as KubeVirt's patch) when it
// differs, and left when it does not.
func TestTheCountIsReplacedOnlyWhenItDiffers(t *testing.T) {
	f := newFixture(t, kubeVirt(ptr.To(3)), vmisWithPods(t, "old", 2, nil)...)
	f.sync()
	if p := f.statusPatches(); !slices.Equal(p, []string{`[{"op":"test","path":"/status/outdatedVirtualMachineInstanceWorkloads","value":3},{"op":"replace","path":"/status/outdatedVirtualMachineInstanceWorkloads","value":2}]`}) {
		t.Errorf("CR status patches %q", p)
	}
	same := newFixture(t, kubeVirt(ptr.To(2)), vmisWithPods(t, "old", 2, nil)...)
	same.sync()
	if p := same.statusPatches(); len(p) != 0 {
		t.Errorf("CR status patches %q with the count right", p)
	}
	if n := len(same.created()) + same.evictions(); n != 0 {
		t.Errorf("%d actions with no method allowed", n)
	}
}

// VMIs that cannot migrate are evicted in batches: 10 a minute by
// default, the next batch only once the minute is over.
func TestVMIsThatCannotMigrateAreEvictedInBatches(t *testing.T) {
	f := newFixture(t, kubeVirt(nil, virtv1.WorkloadUpdateMethodLiveMigrate, virtv1.WorkloadUpdateMethodEvict),
		vmisWithPods(t, "fixed", 12, notMigratable)...)
	f.sync()
	if n := f.evictions(); n != 10 {
		t.Fatalf("%d evictions in the first batch, want 10", n)
	}
	if events := strings.Join(f.Events(), "\n"); strings.Count(events, "Normal SuccessfulEvict Initiated eviction of VMI as part of automated workload update: <nil>") != 10 {
		t.Errorf("events %q, want KubeVirt's SuccessfulEvict for each", events)
	}
	// The fake keeps the pods (no eviction deletes them here): the same
	// VMIs are still outdated, and the batch is spent.
	f.clock.Step(throttle)
	f.sync()
	if n := f.evictions(); n != 10 {
		t.Fatalf("%d evictions within the minute, want no more than the batch's 10", n)
	}
	f.clock.Step(DefaultBatchEvictionInterval)
	f.sync()
	if n := f.evictions(); n != 20 {
		t.Fatalf("%d evictions after the minute, want a second batch of 10", n)
	}
}

// Two replicas draw from one batch: together they evict no more than it
// holds.
func TestReplicasShareTheEvictionBatch(t *testing.T) {
	kv := kubeVirt(nil, virtv1.WorkloadUpdateMethodEvict)
	kv.Spec.WorkloadUpdateStrategy.BatchEvictionSize = ptr.To(5)
	f := newFixture(t, kv, vmisWithPods(t, "fixed", 8, notMigratable)...)
	cfg, err := clusterconfig.FromKubeVirt(kv, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	second, c := shardedtest.StartController(t, "workload-updater", func(env *sharded.Env, rt *sharded.Runtime) (*Controller, *sharded.Controller, error) {
		env.Template.LauncherImage = newImage
		c, err := newController(env, rt, Options{})
		if err != nil {
			return nil, nil, err
		}
		return c, c.declare(), nil
	}, shardedtest.Cluster{Replica: f.Fixture, Config: shardedtest.StaticConfig{Config: cfg}, Clock: f.clock})
	_ = second
	f.sync()
	if _, err := c.sync(context.Background(), sharded.Item{Range: sharded.Cluster, Key: itemKey}); err != nil {
		t.Fatal(err)
	}
	if n := f.evictions(); n != 5 {
		t.Errorf("%d evictions by two replicas over the same VMIs, want the batch's 5", n)
	}
}

// A change called off has its workload update migration deleted.
func TestACalledOffChangeHasItsMigrationDeleted(t *testing.T) {
	objects := vmisWithPods(t, "hotplug", 1, func(v *virtv1.VirtualMachineInstance) {
		v.Status.LauncherContainerImageVersion = newImage
		v.Annotations = map[string]string{virtv1.WorkloadUpdateMigrationAbortionAnnotation: ""}
	})
	update := &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubevirt-workload-update-x",
		Annotations: map[string]string{virtv1.WorkloadUpdateMigrationAnnotation: ""}},
		Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: "hotplug-0"}, Status: virtv1.VirtualMachineInstanceMigrationStatus{Phase: virtv1.MigrationScheduling}}
	f := newFixture(t, kubeVirt(ptr.To(0), virtv1.WorkloadUpdateMethodLiveMigrate), append(objects, update)...)
	f.sync()
	if got := kvfake.Writes(f.KubeVirt.Actions()); !slices.Equal(got, []string{"delete virtualmachineinstancemigrations"}) {
		t.Errorf("writes %q, want the migration deleted", got)
	}
	if events := f.Events(); !slices.Contains(events, "Normal SuccessfulChangeAbortion Aborted change for vmi: hotplug-0") {
		t.Errorf("events %q", events)
	}
}

// Nothing happens without a KubeVirt CR, nor while virt-operator deploys
// one, as in KubeVirt.
func TestNothingHappensUntilKubeVirtIsDeployed(t *testing.T) {
	for name, kv := range map[string]*virtv1.KubeVirt{
		"no CR": nil,
		"deploying": func() *virtv1.KubeVirt {
			kv := kubeVirt(nil, "LiveMigrate")
			kv.Status.Phase = virtv1.KubeVirtPhaseDeploying
			return kv
		}(),
		"updating": func() *virtv1.KubeVirt {
			kv := kubeVirt(nil, "LiveMigrate")
			kv.Status.TargetDeploymentID = "d2"
			return kv
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, kv, vmisWithPods(t, "old", 2, nil)...)
			f.sync()
			if n := len(f.created()) + f.evictions() + len(f.statusPatches()) + len(f.KubeWrites()); n != 0 {
				t.Errorf("%d writes", n)
			}
		})
	}
}

// Looks are at least the throttle apart.
func TestLooksAreThrottled(t *testing.T) {
	f := newFixture(t, kubeVirt(nil, "LiveMigrate"), vmisWithPods(t, "old", 9, nil)...)
	f.sync()
	f.clock.Step(time.Second)
	if after := f.sync(); after != throttle-time.Second {
		t.Errorf("second look asked for after %s, want %s", after, throttle-time.Second)
	}
	if n := len(f.created()); n != 5 {
		t.Errorf("%d migrations, want 5 from the first look only", n)
	}
}
