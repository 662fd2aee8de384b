package migration_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/cmd/virtshard-controller/app"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/test/controllertest"
)

type env struct {
	t    *testing.T
	ns   string
	kube kubernetes.Interface
	kv   *kubevirt.Clientset
}

func newEnv(t *testing.T) *env {
	ns, kube, kv := controllertest.Clients(t)
	return &env{t: t, ns: ns, kube: kube, kv: kv}
}

// runningVMIs creates n VMIs and waits until all run; it returns their
// nodes by name.
func (e *env) runningVMIs(n int) map[string]string {
	e.t.Helper()
	for i := range n {
		vmi := workload.VMI(fmt.Sprintf("vm-%02d", i))
		// Spread over the nodes (the scheduler would put them all on one),
		// so that the cluster limit binds, not only the node limit. Target
		// pods are not counted, or the spread could forbid their node.
		vmi.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{
				MatchLabels:      vmi.Labels,
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: virtv1.MigrationJobLabel, Operator: metav1.LabelSelectorOpDoesNotExist}},
			},
		}}
		if _, err := e.kv.VirtualMachineInstances(e.ns).Create(context.Background(), vmi, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	nodes := map[string]string{}
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.kv.VirtualMachineInstances(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, vmi := range list.Items {
			if vmi.Status.Phase == virtv1.Running {
				nodes[vmi.Name] = vmi.Status.NodeName
			}
		}
		return len(nodes) == n, nil
	}); err != nil {
		e.t.Fatalf("%d of %d VMIs Running after 3 minutes", len(nodes), n)
	}
	return nodes
}

func (e *env) migrate(vmi string, mutate func(*virtv1.VirtualMachineInstanceMigration)) *virtv1.VirtualMachineInstanceMigration {
	m := &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "mig-" + vmi},
		Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi},
	}
	if mutate != nil {
		mutate(m)
	}
	created, err := e.kv.Migrations(e.ns).Create(context.Background(), m, metav1.CreateOptions{})
	if err != nil {
		e.t.Errorf("create migration of %s: %v", vmi, err)
	}
	return created
}

// sampler counts migrations in flight — a target pod exists and the
// migration is not final — every 100 ms. Pods are listed before
// migrations: a migration whose pod is seen is then seen at least as late,
// so one that ended before the next one's pod was created is never counted
// with it.
type sampler struct {
	e          *env
	sourceOf   map[types.UID]string
	mu         sync.Mutex
	maxCluster int
	maxNode    int
	samples    int
}

func (s *sampler) run(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pods, err := s.e.kube.CoreV1().Pods(s.e.ns).List(ctx, metav1.ListOptions{LabelSelector: virtv1.MigrationJobLabel})
		if err != nil {
			continue
		}
		migrations, err := s.e.kv.Migrations(s.e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		final := map[types.UID]bool{}
		for _, m := range migrations.Items {
			final[m.UID] = m.IsFinal()
		}
		cluster, perNode := 0, map[string]int{}
		for _, pod := range pods.Items {
			uid := types.UID(pod.Labels[virtv1.MigrationJobLabel])
			if isFinal, known := final[uid]; known && !isFinal {
				cluster++
				perNode[s.source(uid)]++
			}
		}
		s.mu.Lock()
		s.samples++
		s.maxCluster = max(s.maxCluster, cluster)
		for _, n := range perNode {
			s.maxNode = max(s.maxNode, n)
		}
		s.mu.Unlock()
	}
}

func (s *sampler) source(uid types.UID) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sourceOf[uid]
}

// migrateAll migrates every VMI at once, sampling until all are final.
func (e *env) migrateAll(nodes map[string]string, during func(*sampler)) ([]virtv1.VirtualMachineInstanceMigration, *sampler) {
	e.t.Helper()
	s := &sampler{e: e, sourceOf: map[types.UID]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	var wg sync.WaitGroup
	for vmi, node := range nodes {
		wg.Go(func() {
			if m := e.migrate(vmi, nil); m != nil {
				s.mu.Lock()
				s.sourceOf[m.UID] = node
				s.mu.Unlock()
			}
		})
	}
	wg.Wait()
	if during != nil {
		during(s)
	}
	var list *virtv1.VirtualMachineInstanceMigrationList
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		list, err = e.kv.Migrations(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, m := range list.Items {
			if !m.IsFinal() {
				return false, nil
			}
		}
		return len(list.Items) == len(nodes), nil
	})
	cancel()
	<-done
	if err != nil {
		phases := map[virtv1.VirtualMachineInstanceMigrationPhase]int{}
		for _, m := range list.Items {
			phases[m.Status.Phase]++
		}
		e.t.Fatalf("migrations not all final after 4 minutes: %v", phases)
	}
	return list.Items, s
}

// checkOutcome checks the limits held, every migration succeeded, the
// VMIs run on their targets, and no target pod or permit is left over.
// eventsOf are the reasons and messages of the events about name, to say
// why a migration failed.
func (e *env) eventsOf(name string) string {
	events, err := e.kube.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, ev := range events.Items {
		out = append(out, ev.Reason+": "+ev.Message)
	}
	return strings.Join(out, "; ")
}

func (e *env) checkOutcome(migrations []virtv1.VirtualMachineInstanceMigration, s *sampler, nodes map[string]string) {
	e.t.Helper()
	e.t.Logf("%d samples: at most %d migrations in flight, %d out of one node", s.samples, s.maxCluster, s.maxNode)
	if s.maxCluster > migration.DefaultLimits.PerCluster || s.maxNode > migration.DefaultLimits.PerNode {
		e.t.Errorf("sampled %d in flight (limit %d) and %d out of one node (limit %d)",
			s.maxCluster, migration.DefaultLimits.PerCluster, s.maxNode, migration.DefaultLimits.PerNode)
	}
	if s.maxCluster == 0 || s.samples < 10 {
		e.t.Errorf("the sampler saw nothing in flight in %d samples: it measured nothing", s.samples)
	}
	for _, m := range migrations {
		if m.Status.Phase != virtv1.MigrationSucceeded {
			e.t.Errorf("migration %s is %s: %+v; its events: %s", m.Name, m.Status.Phase, m.Status.Conditions, e.eventsOf(m.Name))
			continue
		}
		vmi, err := e.kv.VirtualMachineInstances(e.ns).Get(context.Background(), m.Spec.VMIName, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		target := m.Status.MigrationState.TargetNode
		if vmi.Status.NodeName != target || target == nodes[vmi.Name] || target == "" {
			e.t.Errorf("VMI %s on %s after migrating from %s to %q", vmi.Name, vmi.Status.NodeName, nodes[vmi.Name], target)
		}
	}
	// Every target pod belongs to a migration that succeeded and runs the
	// VMI; failed migrations' pods are gone.
	pods, err := e.kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: virtv1.MigrationJobLabel})
	if err != nil {
		e.t.Fatal(err)
	}
	succeeded := map[string]bool{}
	for _, m := range migrations {
		succeeded[string(m.UID)] = m.Status.Phase == virtv1.MigrationSucceeded
	}
	for _, pod := range pods.Items {
		if !succeeded[pod.Labels[virtv1.MigrationJobLabel]] && pod.DeletionTimestamp == nil {
			e.t.Errorf("orphaned target pod %s (phase %s)", pod.Name, pod.Status.Phase)
		}
	}
	e.waitNoPermits()
}

func (e *env) waitNoPermits() {
	e.t.Helper()
	var data string
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Get(ctx, "virtshard-migration-permits", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		data = cm.Data["permits"]
		return data == "{}", nil
	}); err != nil {
		e.t.Errorf("permits left after every migration ended: %s", data)
	}
}

func TestThirtyMigrationsAcrossThreeReplicasStayWithinTheLimits(t *testing.T) {
	e := newEnv(t)
	controllertest.StartN(t, e.ns, 3, nil)
	nodes := e.runningVMIs(30)
	migrations, s := e.migrateAll(nodes, nil)
	e.checkOutcome(migrations, s, nodes)
}

func TestMigrationsSurviveAReplicaKilledMidway(t *testing.T) {
	e := newEnv(t)
	procs := controllertest.StartProcesses(t, e.ns, 3)
	nodes := e.runningVMIs(30)
	migrations, s := e.migrateAll(nodes, func(s *sampler) {
		// Once some are in flight, kill -9 a replica: its migrations wait
		// for its ranges' leases to expire, then go on elsewhere.
		_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.maxCluster > 0, nil
		})
		procs[1].Kill()
	})
	e.checkOutcome(migrations, s, nodes)
}

func TestTargetPodThatDoesNotRunFailsAfterItsTimeout(t *testing.T) {
	cases := []struct {
		name                 string
		unschedulable, pendg time.Duration
		deleted              string // the start of KubeVirt's message
	}{
		{"unschedulable", 3 * time.Second, time.Hour, "unschedulable pod "},
		{"pending for any reason", time.Hour, 3 * time.Second, "pending pod "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			controllertest.StartN(t, e.ns, 2, func(o *app.Options) {
				o.Migration.UnschedulableTimeout, o.Migration.PendingTimeout = tc.unschedulable, tc.pendg
			})
			e.failsWithin(tc.deleted)
		})
	}
}

// failsWithin migrates a VMI to nowhere and checks that the target pod is
// deleted with an event whose message starts with deleted (which timeout),
// that the migration then fails with an event, and that nothing is left
// behind.
func (e *env) failsWithin(deleted string) {
	t := e.t
	e.runningVMIs(1)
	m := e.migrate("vm-00", func(m *virtv1.VirtualMachineInstanceMigration) {
		m.Spec.AddedNodeSelector = map[string]string{"virtshard.io/test": "nowhere"}
	})
	var got *virtv1.VirtualMachineInstanceMigration
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = e.kv.Migrations(e.ns).Get(ctx, m.Name, metav1.GetOptions{})
		return err == nil && got.IsFinal(), nil
	}); err != nil {
		t.Fatalf("migration not final a minute later: %+v", got.Status)
	}
	if got.Status.Phase != virtv1.MigrationFailed {
		t.Errorf("migration %s, want Failed", got.Status.Phase)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: virtv1.MigrationJobLabel})
		return err == nil && len(pods.Items) == 0, nil
	}); err != nil {
		t.Error("the unschedulable target pod is still there")
	}
	vmi, err := e.kv.VirtualMachineInstances(e.ns).Get(context.Background(), "vm-00", metav1.GetOptions{})
	if err != nil || vmi.Status.Phase != virtv1.Running {
		t.Errorf("the VMI is %v (%v) after its migration failed, want still Running", vmi.Status.Phase, err)
	}
	e.waitNoPermits()
	// Events reach the server after the writes they tell of: wait for them.
	found, timedOut := false, false
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := e.kube.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + m.Name})
		if err != nil {
			return false, nil
		}
		for _, ev := range events.Items {
			found = found || (ev.Reason == "FailedMigration" && ev.Type == corev1.EventTypeWarning)
			timedOut = timedOut || (ev.Reason == "SuccessfulDelete" && strings.HasPrefix(ev.Message, deleted) && strings.HasSuffix(ev.Message, "timeout period exceeded"))
		}
		return found && timedOut, nil
	})
	if !found {
		t.Error("no FailedMigration event on the migration")
	}
	if !timedOut {
		t.Errorf("no SuccessfulDelete event %q… on the migration", deleted)
	}
}

func TestOnlyTheFiveNewestFinishedMigrationsOfAVMIAreKept(t *testing.T) {
	e := newEnv(t)
	controllertest.StartN(t, e.ns, 2, nil)
	e.runningVMIs(1)
	for i := range 7 {
		m := &virtv1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("mig-%d", i)},
			Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: "vm-00"},
		}
		if _, err := e.kv.Migrations(e.ns).Create(context.Background(), m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var got *virtv1.VirtualMachineInstanceMigration
		if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			var err error
			got, err = e.kv.Migrations(e.ns).Get(ctx, m.Name, metav1.GetOptions{})
			return err == nil && got.Status.Phase == virtv1.MigrationSucceeded, nil
		}); err != nil {
			vmi, _ := e.kv.VirtualMachineInstances(e.ns).Get(context.Background(), "vm-00", metav1.GetOptions{})
			pods, _ := e.kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{})
			for _, p := range pods.Items {
				t.Logf("pod %s on %s: %s, created %s, labels %v", p.Name, p.Spec.NodeName, p.Status.Phase, p.CreationTimestamp, p.Labels[virtv1.MigrationJobLabel])
			}
			t.Fatalf("migration %d did not succeed: %+v; VMI on %s: %s %s %+v", i, got.Status, vmi.Status.NodeName, vmi.Status.Phase, vmi.Status.Reason, vmi.Status.Conditions)
		}
		time.Sleep(time.Second) // creation timestamps have whole seconds: keep the order unambiguous
	}
	var names []string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := e.kv.Migrations(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		names = names[:0]
		for _, m := range list.Items {
			names = append(names, m.Name)
		}
		return len(names) == 5, nil
	}); err != nil {
		t.Fatalf("migrations left: %v, want the 5 newest", names)
	}
	for _, old := range []string{"mig-0", "mig-1"} {
		if slices.Contains(names, old) {
			t.Errorf("%s kept, one of the two oldest: %v", old, names)
		}
	}
}
