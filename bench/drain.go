package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/bench/workload"
	kvclient "github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// The drain scenario (ScenarioDrain) drains nodes as kubectl drain does,
// first under KubeVirt's own virt-controller, then under the replicas, with
// the same VMIs: --vmis VMIs that migrate on eviction run spread over the
// nodes, then drainedNodes of the nodes are cordoned (all, before any
// eviction) and every pod of the run on them is evicted through the
// Eviction API, again every
// evictionRetry while virt-api's admitter (played by bench/virtapi) refuses
// with 429, until none is left on them. The migrations in flight are
// sampled against the limits throughout.

// drainedNodes is how many nodes a drain run drains at once.
const drainedNodes = 3

// evictionRetry is how long kubectl drain waits before it evicts a pod
// again after a 429.
const evictionRetry = 5 * time.Second

// DrainRun is one controller's run of the drain scenario.
type DrainRun struct {
	Controller string `json:"controller"`
	// VMIs ran before the drain; Nodes are the drained nodes.
	VMIs  int           `json:"vmis"`
	Nodes []DrainedNode `json:"nodes"`
	// Seconds from the first cordon until no pod of the run was left on
	// any drained node.
	Seconds float64 `json:"seconds"`
	// Migrations are the evacuation migrations the controller created;
	// Succeeded and Failed of them. Evictions are the eviction calls the
	// drain sent, refused or not.
	Migrations int `json:"migrations"`
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
	Evictions  int `json:"evictions"`
	// Repeated are evacuations beyond one per VMI: a VMI migrated again;
	// RepeatedOff describes each such VMI's evacuations: the node each
	// was made off, when it was created, its phase, and the source and
	// target its migration state recorded.
	Repeated    int                 `json:"repeated"`
	RepeatedOff map[string][]string `json:"repeatedOff,omitempty"`
	// Migrations in flight (target pod created, not final), sampled every
	// 250 ms: the most in the cluster and out of one node, and the limits.
	MaxInFlightCluster int `json:"maxInFlightCluster"`
	MaxOutboundPerNode int `json:"maxOutboundPerNode"`
	LimitPerCluster    int `json:"limitPerCluster"`
	LimitPerNode       int `json:"limitPerNode"`
	Samples            int `json:"samples"`
	// Lost are the VMIs not Running off the drained nodes at the end.
	Lost int `json:"lost"`
	// WritesPerMigration are the controller's writes during the drain by
	// verb and resource, events and Leases apart, per migration;
	// Processes its CPU during the drain.
	WritesPerMigration WritesPerVMI `json:"writesPerMigration"`
	Processes          []FleetLoad  `json:"processes"`
}

// DrainedNode is one drained node: the run's VMIs on it when the drain
// began, the seconds from the drain's start until none of the run's pods
// on it ran (its VMIs had migrated away), and until none was left on it
// (kubectl drain returns; a pod evicted only on its next try, up to
// evictionRetry later).
type DrainedNode struct {
	Name         string  `json:"name"`
	VMIs         int     `json:"vmis"`
	MovedSeconds float64 `json:"movedSeconds"`
	Seconds      float64 `json:"seconds"`
}

// drains runs the scenario: KubeVirt's virt-controller first, alone (it
// acts on every namespace), its namespace deleted after, then the replicas
// on theirs.
func (r *vmiRun) drains(ctx context.Context, ropts replicas.Options, ranges int) (*Report, error) {
	runs, stats, err := kubevirtThenReplicas(ctx, r, ropts, ranges, "virtshard-bench-drain", true, r.drainRun)
	if err != nil {
		return nil, err
	}
	return &Report{Scenario: r.scenario, VMIs: r.vmis, Replicas: r.replicas, Machine: r.machine(), Drains: runs, ReplicaStats: stats}, nil
}

// drainRun runs the VMIs in ns under ctrl, then drains the nodes most of
// them run on.
func (r *vmiRun) drainRun(ctx context.Context, ns, name string, ctrl underTest) (*DrainRun, error) {
	run := &DrainRun{Controller: name, LimitPerCluster: migration.DefaultLimits.PerCluster, LimitPerNode: migration.DefaultLimits.PerNode}
	timeout := r.o.Timeout
	if timeout == 0 {
		timeout = 5*time.Minute + time.Duration(r.vmis)*500*time.Millisecond
	}
	r.logf("%s: %s: %d VMIs to Running", r.scenario, name, r.vmis)
	onNode, err := r.runDrainVMIs(ctx, ns, timeout)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	run.VMIs = r.vmis
	nodes := slices.SortedFunc(maps.Keys(onNode), func(a, b string) int {
		return cmp.Or(cmp.Compare(len(onNode[b]), len(onNode[a])), cmp.Compare(a, b))
	})
	nodes = nodes[:min(drainedNodes, len(nodes))]

	before, writesBefore, err := ctrl.stats(ctx)
	if err != nil {
		return nil, err
	}
	r.logf("%s: %s: draining %s", r.scenario, name, strings.Join(nodes, ", "))
	start := time.Now()
	// As kubectl drain of several nodes: all are cordoned before the first
	// eviction, or a VMI could move onto a node about to be drained.
	defer r.uncordon(context.WithoutCancel(ctx), nodes)
	for _, node := range nodes {
		cordon := []byte(`{"spec":{"unschedulable":true}}`)
		if _, err := r.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, cordon, metav1.PatchOptions{}); err != nil {
			return nil, fmt.Errorf("cordon %s: %w", node, err)
		}
	}
	if err := r.waitCordoned(ctx, nodes); err != nil {
		return nil, err
	}
	sampler := &inFlightSampler{kube: r.kube, kv: r.kv, ns: ns}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { sampler.run(sampleCtx); close(sampled) }()
	drainCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	run.Nodes = make([]DrainedNode, len(nodes))
	for i, node := range nodes {
		run.Nodes[i] = DrainedNode{Name: node, VMIs: len(onNode[node])}
		wg.Go(func() {
			evictions, err := r.drainNode(drainCtx, ns, node, func() { run.Nodes[i].MovedSeconds = time.Since(start).Seconds() })
			sampler.addEvictions(evictions)
			run.Nodes[i].Seconds = time.Since(start).Seconds()
			errs[i] = err
		})
	}
	wg.Wait()
	run.Seconds = time.Since(start).Seconds()
	stopSampling()
	<-sampled
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s: drain: %w", name, err)
	}

	after, writesAfter, err := ctrl.stats(ctx)
	if err != nil {
		return nil, err
	}
	migrations, err := r.kv.Migrations(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	off := map[string][]string{}
	for _, m := range migrations.Items {
		node := m.Annotations[virtv1.EvacuationMigrationAnnotation]
		if node == "" {
			continue
		}
		run.Migrations++
		what := fmt.Sprintf("off %s, created %s, %s", node, m.CreationTimestamp.Format(time.TimeOnly), m.Status.Phase)
		if ms := m.Status.MigrationState; ms != nil {
			what += fmt.Sprintf(", %s → %s", ms.SourceNode, ms.TargetNode)
		}
		if off[m.Spec.VMIName] = append(off[m.Spec.VMIName], what); len(off[m.Spec.VMIName]) > 1 {
			run.Repeated++
			if run.RepeatedOff == nil {
				run.RepeatedOff = map[string][]string{}
			}
			run.RepeatedOff[m.Spec.VMIName] = off[m.Spec.VMIName]
		}
		switch m.Status.Phase {
		case virtv1.MigrationSucceeded:
			run.Succeeded++
		case virtv1.MigrationFailed:
			run.Failed++
		}
	}
	run.MaxInFlightCluster, run.MaxOutboundPerNode, run.Samples, run.Evictions = sampler.maxCluster, sampler.maxNode, sampler.samples, sampler.evictions
	vmis, err := r.kv.VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	running := 0
	for _, v := range vmis.Items {
		if v.Status.Phase == virtv1.Running && !slices.Contains(nodes, v.Status.NodeName) {
			running++
		}
	}
	run.Lost = r.vmis - running
	run.WritesPerMigration = perMigration(deltas(writesBefore, writesAfter), run.Migrations)
	cpuBefore := map[string]float64{}
	for _, s := range before {
		cpuBefore[s.Name] = s.CPUSeconds
	}
	for _, s := range after {
		run.Processes = append(run.Processes, FleetLoad{Name: s.Name, CPUSeconds: s.CPUSeconds - cpuBefore[s.Name], CachedVMIs: s.CachedVMIs})
	}
	return run, nil
}

// runDrainVMIs creates the VMIs and waits until all run; it returns them
// by node.
func (r *vmiRun) runDrainVMIs(ctx context.Context, ns string, timeout time.Duration) (map[string][]string, error) {
	if err := r.createMigratableVMIs(ctx, ns, "drain", 0, r.vmis, 0); err != nil {
		return nil, err
	}
	return r.waitMigratableRunning(ctx, ns, r.vmis, timeout)
}

// createMigratableVMIs creates VMIs prefix-from to prefix-(to-1), each
// migrating on eviction and spread over the schedulable nodes: a cordoned
// node is left out of the spread (nodeTaintsPolicy Honor), or its emptying
// would forbid the other nodes every target. With a pace, one VMI is
// created per pace; without, --creators create them at once.
func (r *vmiRun) createMigratableVMIs(ctx context.Context, ns, prefix string, from, to int, pace time.Duration) error {
	create := func(i int) error {
		vmi := workload.VMI(fmt.Sprintf("%s-%05d", prefix, i))
		vmi.Spec.EvictionStrategy = ptr.To(virtv1.EvictionStrategyLiveMigrate)
		workload.Spread(vmi)
		for j := range vmi.Spec.TopologySpreadConstraints {
			vmi.Spec.TopologySpreadConstraints[j].NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyHonor)
		}
		_, err := r.kv.VirtualMachineInstances(ns).Create(ctx, vmi, metav1.CreateOptions{})
		return err
	}
	if pace > 0 {
		tick := time.NewTicker(pace)
		defer tick.Stop()
		for i := from; i < to; i++ {
			if err := create(i); err != nil {
				return fmt.Errorf("create VMIs: %w", err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
		return nil
	}
	work := make(chan int)
	errs := make([]error, max(r.o.Creators, 1))
	var wg sync.WaitGroup
	for c := range errs {
		wg.Go(func() {
			for i := range work {
				if err := create(i); err != nil && errs[c] == nil {
					errs[c] = err
				}
			}
		})
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("create VMIs: %w", err)
	}
	return nil
}

// waitMigratableRunning waits until want VMIs of ns are Running and
// migratable; it returns them by node.
func (r *vmiRun) waitMigratableRunning(ctx context.Context, ns string, want int, timeout time.Duration) (map[string][]string, error) {
	var onNode map[string][]string
	running := 0
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := r.kv.VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		onNode, running = map[string][]string{}, 0
		for _, v := range list.Items {
			if v.Status.Phase == virtv1.Running && vmistatus.Migratable(&v) {
				onNode[v.Status.NodeName] = append(onNode[v.Status.NodeName], v.Name)
				running++
			}
		}
		return running == want, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%d of %d VMIs Running and migratable within %s", running, want, timeout)
	}
	return onNode, nil
}

// waitCordoned waits until the scheduler's view of the nodes, the node
// taint the node lifecycle controller adds for a cordon, shows each of
// them unschedulable.
func (r *vmiRun) waitCordoned(ctx context.Context, nodes []string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range nodes {
			n, err := r.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeUnschedulable }) {
				return false, nil
			}
		}
		return true, nil
	})
}

// drainNode does what kubectl drain does to a cordoned node for the run's
// pods: it evicts each pod, again evictionRetry after a refusal, and
// returns once none is left. moved is called once no pod of the run runs
// on the node. It returns the eviction calls sent.
func (r *vmiRun) drainNode(ctx context.Context, ns, node string, moved func()) (int, error) {
	evicted := map[string]time.Time{}
	calls := 0
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := r.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, pod := range pods.Items {
			if pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodPending {
				running++
			}
		}
		if running == 0 && moved != nil {
			moved()
			moved = nil
		}
		if len(pods.Items) == 0 {
			return true, nil
		}
		for _, pod := range pods.Items {
			if last, ok := evicted[pod.Name]; (ok && time.Since(last) < evictionRetry) || pod.DeletionTimestamp != nil {
				continue
			}
			evicted[pod.Name] = time.Now()
			calls++
			err := r.kube.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: ns}})
			if err != nil && !apierrors.IsTooManyRequests(err) && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("evict %s: %w", pod.Name, err)
			}
		}
		return false, nil
	})
	if err != nil {
		return calls, fmt.Errorf("node %s not drained: %w", node, err)
	}
	return calls, nil
}

// uncordon makes the drained nodes schedulable again for the next run.
func (r *vmiRun) uncordon(ctx context.Context, nodes []string) {
	for _, node := range nodes {
		_, _ = r.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"unschedulable":null}}`), metav1.PatchOptions{})
	}
}

// inFlightSampler counts the migrations in flight every 250 ms: a target
// pod exists and its migration is not final; out of a node by the
// migration's evacuation annotation, or else by its VMI, read for each
// such migration in flight: the source node its migration state records
// for that migration, or before it records one the node it runs on. Pods are listed before migrations, as
// the migrations scenario's sampler does: a migration whose pod is seen is
// then seen at least as late.
type inFlightSampler struct {
	kube kubernetes.Interface
	kv   *kvclient.Clientset
	ns   string

	mu         sync.Mutex
	maxCluster int
	maxNode    int
	samples    int
	evictions  int
}

func (s *inFlightSampler) addEvictions(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evictions += n
}

func (s *inFlightSampler) run(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := s.kube.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: virtv1.MigrationJobLabel})
		if err != nil {
			return false, nil
		}
		migrations, err := s.kv.Migrations(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		live := map[types.UID]*virtv1.VirtualMachineInstanceMigration{} // not final, by UID
		for i, m := range migrations.Items {
			if !m.IsFinal() {
				live[m.UID] = &migrations.Items[i]
			}
		}
		cluster, perNode := 0, map[string]int{}
		for _, pod := range pods.Items {
			m, ok := live[types.UID(pod.Labels[virtv1.MigrationJobLabel])]
			if !ok {
				continue
			}
			cluster++
			node := m.Annotations[virtv1.EvacuationMigrationAnnotation]
			if node == "" {
				node = s.sourceOf(ctx, m)
			}
			if node != "" {
				perNode[node]++
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.samples++
		s.maxCluster = max(s.maxCluster, cluster)
		for _, n := range perNode {
			s.maxNode = max(s.maxNode, n)
		}
		return false, nil
	})
}

// sourceOf is the node migration m moves its VMI off, "" if unknown.
func (s *inFlightSampler) sourceOf(ctx context.Context, m *virtv1.VirtualMachineInstanceMigration) string {
	vmi, err := s.kv.VirtualMachineInstances(s.ns).Get(ctx, m.Spec.VMIName, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	if ms := vmi.Status.MigrationState; ms != nil && ms.MigrationUID == m.UID && ms.SourceNode != "" {
		return ms.SourceNode
	}
	return vmi.Status.NodeName
}

// writeDrainMarkdown is a drain report as a table, a row per controller.
func writeDrainMarkdown(w io.Writer, r *Report) {
	fmt.Fprintln(w, "| controller | VMIs | drained nodes (VMIs on each: s until they had moved, s until the node was empty) | all empty, s | evacuations (succeeded, failed, repeated) | evictions sent | in flight max (limit) | out of a node max (limit) | samples | lost | writes/migration | CPU s per process |")
	fmt.Fprintln(w, "|---|---:|---|---:|---|---:|---|---|---:|---:|---:|---|")
	for _, d := range r.Drains {
		var nodes, cpu []string
		for _, n := range d.Nodes {
			nodes = append(nodes, fmt.Sprintf("%d: %.1f, %.1f", n.VMIs, n.MovedSeconds, n.Seconds))
		}
		for _, p := range d.Processes {
			cpu = append(cpu, fmt.Sprintf("%.1f", p.CPUSeconds))
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.1f | %d (%d, %d, %d) | %d | %d (%d) | %d (%d) | %d | %d | %.2f | %s |\n", d.Controller, d.VMIs,
			strings.Join(nodes, "; "), d.Seconds, d.Migrations, d.Succeeded, d.Failed, d.Repeated, d.Evictions, d.MaxInFlightCluster, d.LimitPerCluster,
			d.MaxOutboundPerNode, d.LimitPerNode, d.Samples, d.Lost, d.WritesPerMigration.Total, strings.Join(cpu, ", "))
	}
}

// drainGoal judges the replicas' drain against KubeVirt's: every VMI
// migrated away, within the limits, none lost; and the time beside
// KubeVirt's.
func drainGoal(kubevirt, virtshard DrainRun) goal {
	ok := func(d DrainRun) bool {
		return d.Lost == 0 && d.Failed == 0 && d.Repeated == 0 && d.MaxInFlightCluster <= d.LimitPerCluster && d.MaxOutboundPerNode <= d.LimitPerNode && d.Samples > 0
	}
	return goal{fmt.Sprintf("drain: %d nodes of %d VMIs' cluster, %s", len(virtshard.Nodes), virtshard.VMIs, virtshard.Controller),
		"every VMI migrated off once, limits held, 0 lost",
		fmt.Sprintf("%d evacuations, %d failed, %d repeated, %d lost; in flight at most %d (limit %d), %d out of a node (limit %d); drained in %.1f s, KubeVirt's virt-controller %.1f s (%.2f×; its run: %d lost, limits %v)",
			virtshard.Migrations, virtshard.Failed, virtshard.Repeated, virtshard.Lost, virtshard.MaxInFlightCluster, virtshard.LimitPerCluster,
			virtshard.MaxOutboundPerNode, virtshard.LimitPerNode, virtshard.Seconds, kubevirt.Seconds, kubevirt.Seconds/max(virtshard.Seconds, 0.001),
			kubevirt.Lost, kubevirt.MaxInFlightCluster <= kubevirt.LimitPerCluster && kubevirt.MaxOutboundPerNode <= kubevirt.LimitPerNode),
		ok(virtshard)}
}

// writeReportOut writes the report's raw data and the profiles to dir.
func (r *vmiRun) writeReportOut(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "report.json"), func(f *os.File) error { return writeJSON(f, rep) }); err != nil {
		return err
	}
	if r.profiles != nil {
		return r.profiles.write(dir)
	}
	return nil
}
