package differential

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/virtshard/virtshard/bench/virtapi"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/bench/handler"
	"github.com/virtshard/virtshard/bench/kubevirt"
	"github.com/virtshard/virtshard/bench/replicas"
)

// Side is which controller a run was under.
type Side string

const (
	KubeVirt  Side = "kubevirt"
	Virtshard Side = "virtshard"
)

// Options of a differential run.
type Options struct {
	// Cluster is the local cluster, which must be up.
	Cluster cluster.Options
	// Controller is the virtshard-controller binary.
	Controller string
	// Replicas is how many virtshard replicas run; 3 when zero.
	Replicas int
	// ReplicaArgs are extra flags of every replica (-v=4 to see why one
	// did not act).
	ReplicaArgs []string
	// Parallel is how many scenarios run at once under one controller; 8
	// when zero.
	Parallel int
	// LogDir receives both controllers' logs.
	LogDir string
	// Known are the listed differences; the package's Known when nil.
	Known []Difference
	// Logf reports progress; silent when nil.
	Logf func(format string, args ...any)
}

func (o *Options) complete() {
	if o.Replicas == 0 {
		o.Replicas = 3
	}
	if o.Parallel == 0 {
		o.Parallel = 8
	}
	if o.Known == nil {
		o.Known = Known
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.LogDir == "" {
		o.LogDir = filepath.Join(o.Cluster.Workdir(), "logs", "differential")
	}
}

// Result is one scenario under both controllers.
type Result struct {
	Scenario *Scenario
	// Errors are the runs that did not reach their end, by side: a wait
	// that timed out, an object a step could not create. The checkpoints
	// both runs reached are compared all the same.
	Errors map[Side]error
	// Checkpoints are compared in the scenario's order.
	Checkpoints []CheckpointResult
	// Writes are what each controller sent, by side; nil when the
	// cluster keeps no audit log.
	Writes map[Side]Writes
}

// CheckpointResult is one checkpoint of both runs compared.
type CheckpointResult struct {
	Name string
	Comparison
	// KubeVirt and Ours are the normalized objects compared.
	KubeVirt, Ours []Object
}

// sideRun is one scenario's run under one controller.
type sideRun struct {
	namespace string
	captures  []Capture
	writes    Writes
	err       error
}

// Run runs every scenario under KubeVirt's virt-controller, then under
// virtshard, each in a namespace of its own and opts.Parallel at a time
// under one controller process, and compares their checkpoints.
func Run(ctx context.Context, scenarios []*Scenario, opts Options) ([]Result, error) {
	opts.complete()
	cfg, err := opts.Cluster.RESTConfig()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	h := &harness{opts: opts, kube: kube, dyn: dyn,
		runner: &Runner{Dynamic: dyn, Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))}}

	if err := h.audit(); err != nil {
		opts.Logf("writes will not be counted: %v", err)
	}

	hook, err := virtapi.Start(ctx, cfg, "virtshard-differential")
	if err != nil {
		return nil, err
	}
	defer func() { _ = hook.Stop(context.WithoutCancel(ctx)) }()
	h.webhook = hook
	if err := h.waitGarbageCollector(ctx); err != nil {
		return nil, err
	}

	kv, err := h.under(ctx, KubeVirt, scenarios, h.startKubeVirt)
	if err != nil {
		return nil, err
	}
	ours, err := h.under(ctx, Virtshard, scenarios, h.startVirtshard)
	if err != nil {
		return nil, err
	}

	results := make([]Result, len(scenarios))
	for i, s := range scenarios {
		results[i] = compareRuns(s, kv[i], ours[i], opts.Known)
		if kv[i].writes != nil && ours[i].writes != nil {
			results[i].Writes = map[Side]Writes{KubeVirt: kv[i].writes, Virtshard: ours[i].writes}
		}
	}
	return results, nil
}

type harness struct {
	opts Options
	// kubeconfig is what both controllers connect with: the audited
	// user's when the cluster keeps an audit log, so that their writes
	// are counted.
	kubeconfig string
	audited    bool
	webhook    *virtapi.Webhook
	kube       kubernetes.Interface
	dyn        dynamic.Interface
	runner     *Runner
}

// under starts a controller, runs every scenario under it, stops it, and
// deletes what the scenarios left, so that the next controller finds none
// of it.
func (h *harness) under(ctx context.Context, side Side, scenarios []*Scenario, start func(context.Context) (func(), error)) ([]sideRun, error) {
	begin := time.Now()
	var logFrom int64
	if h.audited {
		var err error
		if logFrom, err = h.opts.Cluster.AuditLogEnd(); err != nil {
			return nil, err
		}
	}
	h.opts.Logf("%s: starting the controller", side)
	stop, err := start(ctx)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", side, err)
	}
	runs := make([]sideRun, len(scenarios))
	for i, s := range scenarios {
		runs[i].namespace = Namespace(side, s)
	}
	run := func(i int) {
		r := &runs[i]
		if r.err = h.freshNamespace(ctx, r.namespace); r.err != nil {
			return
		}
		r.captures, r.err = h.runner.Run(ctx, scenarios[i], r.namespace)
		if r.err != nil {
			h.opts.Logf("%s: %v", side, r.err)
		}
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, h.opts.Parallel)
	for i, s := range scenarios {
		if s.Exclusive {
			continue
		}
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			run(i)
		})
	}
	wg.Wait()
	for i, s := range scenarios {
		if s.Exclusive {
			run(i)
		}
	}
	stop()
	h.opts.Logf("%s: %d scenarios ran in %s", side, len(scenarios), time.Since(begin).Round(time.Second))
	if h.audited {
		if err := h.countWrites(runs, logFrom); err != nil {
			return nil, fmt.Errorf("count the writes of %s: %w", side, err)
		}
	}

	var errs []error
	for _, r := range runs {
		errs = append(errs, h.release(ctx, r.namespace))
	}
	if err := h.restoreNodes(ctx); err != nil {
		errs = append(errs, err)
	}
	return runs, errors.Join(errs...)
}

// audit makes both controllers connect as the user whose writes the
// cluster's API server audits, when it keeps an audit log.
func (h *harness) audit() error {
	h.kubeconfig = h.opts.Cluster.KubeconfigPath()
	if _, err := h.opts.Cluster.AuditLogEnd(); err != nil {
		return err
	}
	if err := os.MkdirAll(h.opts.LogDir, 0o755); err != nil {
		return err
	}
	audited := filepath.Join(h.opts.LogDir, "kubeconfig-audited")
	if err := h.opts.Cluster.WriteAuditedKubeconfig(audited); err != nil {
		return err
	}
	h.kubeconfig, h.audited = audited, true
	return nil
}

// countWrites counts the writes in each run's namespace that the audit
// log recorded after from.
func (h *harness) countWrites(runs []sideRun, from int64) error {
	log, err := h.opts.Cluster.OpenAuditLog(from)
	if err != nil {
		return err
	}
	defer log.Close()
	namespaces := make([]string, len(runs))
	for i, r := range runs {
		namespaces[i] = r.namespace
	}
	counts, err := countWrites(log, namespaces)
	if err != nil {
		return err
	}
	for i := range runs {
		runs[i].writes = counts[runs[i].namespace]
	}
	return nil
}

// Namespace is the namespace of a scenario's run under side.
func Namespace(side Side, s *Scenario) string {
	short := "kv"
	if side == Virtshard {
		short = "vs"
	}
	return "diff-" + short + "-" + s.Name
}

func (h *harness) startKubeVirt(ctx context.Context) (func(), error) {
	c, err := kubevirt.Start(ctx, h.opts.Cluster, kubevirt.Options{LogDir: h.opts.LogDir, Kubeconfig: h.kubeconfig})
	if err != nil {
		return nil, err
	}
	h.opts.Logf("kubevirt: virt-controller's log is %s", c.LogPath())
	return func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = c.Stop(stopCtx)
	}, nil
}

// checkpointArgs keep a busy replica from holding a lazy status write
// past a checkpoint: a checkpoint is taken once the scenario's objects have
// been quiet for a few seconds, and a replica with 20 VMIs pending
// (--busy-depth, reached when many scenarios run at once) may hold a lazy
// write up to --busy-status-wait, a minute by default, while KubeVirt's
// controller writes at once. The harness compares what is written, not
// when; the busy wait's own behaviour is the status batcher's unit tests'
// and the bench's to show. A lazy write still waits --lazy-status-wait
// (2 s) to share a patch.
var checkpointArgs = []string{"--busy-status-wait=2s"}

// leaseNamespace holds the virtshard replicas' Leases.
const leaseNamespace = "virtshard-differential"

func (h *harness) startVirtshard(ctx context.Context) (func(), error) {
	if err := h.ensureNamespace(ctx, leaseNamespace); err != nil {
		return nil, err
	}
	ropts := replicas.Options{Binary: h.opts.Controller, Kubeconfig: h.kubeconfig,
		Namespace: leaseNamespace, LogDir: h.opts.LogDir, Args: append(slices.Clone(checkpointArgs), h.opts.ReplicaArgs...)}
	var running []*replicas.Replica
	stop := func() {
		var wg sync.WaitGroup
		for _, r := range running {
			wg.Go(func() { r.Stop(15 * time.Second) })
		}
		wg.Wait()
	}
	for i := range h.opts.Replicas {
		r, err := replicas.Start(ropts, fmt.Sprintf("differential-%d", i))
		if err != nil {
			stop()
			return nil, err
		}
		running = append(running, r)
	}
	h.opts.Logf("virtshard: %d replicas, logs in %s", len(running), ropts.LogDir)
	if err := h.waitRangesShared(ctx, running); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// waitRangesShared waits until the replicas have shared out the ranges,
// so that the scenarios start, as KubeVirt's start, with a controller
// that acts, and no range moves in the middle of one.
func (h *harness) waitRangesShared(ctx context.Context, running []*replicas.Replica) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return replicas.Shared(ctx, running), nil
	})
	if err != nil {
		return fmt.Errorf("%d virtshard replicas did not share out the ranges: %w", len(running), err)
	}
	return nil
}

func (h *harness) ensureNamespace(ctx context.Context, name string) error {
	_, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// freshNamespace creates ns, waiting first for a namespace of that name
// that an earlier run left terminating.
func (h *harness) freshNamespace(ctx context.Context, ns string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{virtapi.Label: "true"}}}, metav1.CreateOptions{})
		if err == nil {
			return h.webhook.WaitServed(ctx, h.dyn, ns)
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
		if err := h.release(ctx, ns); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s of an earlier run is still there", ns)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// finalized are the kinds whose finalizers only a controller removes:
// with it stopped, the harness removes them, or the namespace would never
// go.
var finalized = []schema.GroupVersionResource{
	virtv1.SchemeGroupVersion.WithResource("virtualmachineinstances"),
	virtv1.SchemeGroupVersion.WithResource("virtualmachines"),
	virtv1.SchemeGroupVersion.WithResource("virtualmachineinstancemigrations"),
	corev1.SchemeGroupVersion.WithResource("pods"),
}

// release deletes ns and takes the controllers' finalizers off what is
// in it; it does not wait for the namespace to go.
func (h *harness) release(ctx context.Context, ns string) error {
	for _, gvr := range finalized {
		list, err := h.dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list %s in %s: %w", gvr.Resource, ns, err)
		}
		for _, obj := range list.Items {
			if len(obj.GetFinalizers()) == 0 {
				continue
			}
			_, err := h.dyn.Resource(gvr).Namespace(ns).Patch(ctx, obj.GetName(), types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("remove the finalizers of %s %s/%s: %w", gvr.Resource, ns, obj.GetName(), err)
			}
		}
	}
	err := h.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	return nil
}

// restoreNodes starts again every node a scenario stopped, and waits until
// each is Ready, untainted by the node lifecycle controller and
// schedulable for VMIs again: a node still NotReady when the next side's
// scenarios start has its pods evicted by kube-controller-manager
// (TaintManagerEviction events no controller wrote).
func (h *harness) restoreNodes(ctx context.Context) error {
	list, err := h.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, handler.StoppedAnnotation)
	var restarted []string
	for _, n := range list.Items {
		if _, stopped := n.Annotations[handler.StoppedAnnotation]; !stopped {
			continue
		}
		if _, err := h.kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("start node %s again: %w", n.Name, err)
		}
		restarted = append(restarted, n.Name)
	}
	for _, name := range restarted {
		last := "not read"
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := h.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false, nil
			}
			last = fmt.Sprintf("taints %v, labels %v", n.Spec.Taints, n.Labels)
			return nodeBack(n), nil
		})
		if err != nil {
			return fmt.Errorf("node %s not back within 3 minutes of its restart (%s)", name, last)
		}
	}
	return nil
}

// nodeBack: the node is Ready, carries none of the taints the node
// lifecycle controller puts on a node it lost, and virt-handler's
// heartbeat has made it schedulable for VMIs again.
func nodeBack(n *corev1.Node) bool {
	ready := slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
	tainted := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable
	})
	return ready && !tainted && n.Labels[virtv1.NodeSchedulable] != "false"
}

// compareRuns compares the checkpoints both runs of s reached.
func compareRuns(s *Scenario, kv, ours sideRun, known []Difference) Result {
	res := Result{Scenario: s, Errors: map[Side]error{}}
	if kv.err != nil {
		res.Errors[KubeVirt] = kv.err
	}
	if ours.err != nil {
		res.Errors[Virtshard] = ours.err
	}
	theirs := map[string]Capture{}
	for _, c := range kv.captures {
		theirs[c.Checkpoint] = c
	}
	for _, c := range ours.captures {
		t, ok := theirs[c.Checkpoint]
		if !ok {
			continue
		}
		a := (&Normalizer{GeneratedName: GeneratedName, Namespace: kv.namespace}).Normalize(t.Objects)
		b := (&Normalizer{GeneratedName: GeneratedName, Namespace: ours.namespace}).Normalize(c.Objects)
		res.Checkpoints = append(res.Checkpoints, CheckpointResult{Name: c.Checkpoint, Comparison: Compare(a, b, known), KubeVirt: a, Ours: b})
	}
	return res
}
