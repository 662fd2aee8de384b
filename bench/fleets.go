package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/virtshard/virtshard/bench/virtapi"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	poolv1 "kubevirt.io/api/pool/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/virtshard/virtshard/bench/kubevirt"
	"github.com/virtshard/virtshard/bench/plot"
	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/bench/workload"
)

// The fleet scenario (ScenarioFleet) drives KubeVirt's two fleet kinds,
// first under KubeVirt's own virt-controller, then under the replicas, in
// one invocation and with the same objects: a VMI replica set scaled from 0
// to --vmis and back to 0, then a VM pool of a tenth as many VMs, each with
// a DataVolume template that the simulated CDI imports, created and
// deleted. Every phase is timed from the bench's write to the state the
// controller reports (polled every 250 ms), and measured per process: its
// writes per member, its CPU, the members in its caches.

// fleetLabel tells the replica set's members (fleetRS) from the pool's
// (fleetPool) in the bench's watches.
const (
	fleetLabel = "virtshard.io/bench-fleet"
	fleetRS    = "rs"
	fleetPool  = "pool"
	fleetName  = "fleet"
)

// FleetRun is one controller's run of the fleet scenario.
type FleetRun struct {
	Controller string `json:"controller"`
	// ReplicaSetMembers and PoolMembers are the fleets' sizes.
	ReplicaSetMembers int          `json:"replicaSetMembers"`
	PoolMembers       int          `json:"poolMembers"`
	Phases            []FleetPhase `json:"phases"`
	// Objects created beyond one per member, seen by the bench's watches
	// (distinct UIDs): VMIs of the replica set, VMs and VMIs of the pool,
	// less the VMIs that ended (a member that failed is replaced: not a
	// duplicate); and launcher pods beyond one per VMI, counted at the
	// fleets' peaks.
	DuplicateVMIs         int `json:"duplicateVMIs"`
	DuplicateVMs          int `json:"duplicateVMs"`
	DuplicateLauncherPods int `json:"duplicateLauncherPods"`
	// EndedVMIs are the fleets' VMIs seen Failed or Succeeded while not
	// being deleted, which their fleet replaces.
	EndedVMIs int `json:"endedVMIs,omitempty"`
	// NotReady says which fleet was not ready when the run expected it to
	// be (the chaos scenario's, after its faults).
	NotReady string `json:"notReady,omitempty"`
	// Timeline is the members ready (replica set) and ready (pool) once a
	// second, from the first phase's start.
	Timeline []FleetSample `json:"timeline,omitempty"`
}

// FleetPhase is one phase of a fleet run.
type FleetPhase struct {
	Name    string  `json:"name"`
	Members int     `json:"members"`
	Seconds float64 `json:"seconds"`
	// WritesPerMember are the controller's API writes during the phase
	// (from its own client metrics) per member, events apart, Leases left
	// out (fleetWrite).
	WritesPerMember WritesPerVMI `json:"writesPerMember"`
	EventsPerMember float64      `json:"eventsPerMember"`
	Processes       []FleetLoad  `json:"processes"`
	// CPUMaxOverMean and CachedMaxOverMean are the balance over the
	// processes: the busiest's CPU, and the most members one caches, over
	// the mean (1 is even; 3 with 3 replicas is all on one).
	CPUMaxOverMean    float64 `json:"cpuMaxOverMean"`
	CachedMaxOverMean float64 `json:"cachedMaxOverMean,omitempty"`
}

// FleetLoad is one controller process's part of a phase: its CPU during
// it, and the VMIs and VMs in its caches at the phase's end (the members it
// handles; not read from KubeVirt's virt-controller).
type FleetLoad struct {
	Name       string  `json:"name"`
	CPUSeconds float64 `json:"cpuSeconds"`
	CachedVMIs int     `json:"cachedVMIs"`
	CachedVMs  int     `json:"cachedVMs"`
	// ViewedMembers: fleet VMIs and VMs in the views of the fleets it holds.
	ViewedMembers int `json:"viewedMembers,omitempty"`
}

// FleetSample is the fleets' readiness at one moment.
type FleetSample struct {
	Seconds         float64 `json:"seconds"`
	ReplicaSetReady int     `json:"replicaSetReady"`
	PoolReady       int     `json:"poolReady"`
}

// fleets runs the scenario: KubeVirt's virt-controller first, alone, as it
// acts on every namespace, then the replicas on the run's namespace. Both
// namespaces have virt-api's mutating webhook played (bench/virtapi), as
// in a KubeVirt install: without it KubeVirt's replica set members would
// have no finalizer, and their deletion would ask nothing of
// virt-controller.
func (r *vmiRun) fleets(ctx context.Context, ropts replicas.Options, ranges int) (*Report, error) {
	runs, stats, err := kubevirtThenReplicas(ctx, r, ropts, ranges, "virtshard-bench-fleet", false, r.fleetRun)
	if err != nil {
		return nil, err
	}
	return &Report{Scenario: r.scenario, VMIs: r.vmis, Replicas: r.replicas, Machine: r.machine(), Fleets: runs, ReplicaStats: stats}, nil
}

// kubevirtThenReplicas runs run once under KubeVirt's virt-controller,
// alone (it acts on every namespace), in a namespace of its own, then
// under the replicas in the run's namespace, both namespaces with
// virt-api's webhooks played (hook names their registration). fresh
// deletes KubeVirt's namespace before the replicas start, so that its
// objects do not stay on the nodes through their run. It returns both
// runs' results, KubeVirt's first, and the replicas' stats at the end.
func kubevirtThenReplicas[T any](ctx context.Context, r *vmiRun, ropts replicas.Options, ranges int, hook string, fresh bool,
	run func(ctx context.Context, ns, name string, ctrl underTest) (*T, error)) ([]T, []ReplicaStats, error) {
	kvNamespace := r.ns + "-kubevirt"
	cleanup, err := r.namespaces(ctx, kvNamespace)
	if err != nil {
		return nil, nil, err
	}
	defer cleanup()
	stopHook, err := r.virtAPI(ctx, hook, kvNamespace, r.ns)
	if err != nil {
		return nil, nil, err
	}
	defer stopHook()
	r.logf("%s: starting KubeVirt's virt-controller (log in %s)", r.scenario, ropts.LogDir)
	kv, err := kubevirt.Start(ctx, r.copts, kubevirt.Options{LogDir: ropts.LogDir})
	if err != nil {
		return nil, nil, err
	}
	// The run may restart it (the upgrade scenario): the process to stop
	// is the one kubevirtUnderTest has last.
	kut := &kubevirtUnderTest{c: kv}
	kubevirtRun, err := run(ctx, kvNamespace, "KubeVirt v1.8.1's virt-controller", kut)
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	_ = kut.c.Stop(stopCtx)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("%w (virt-controller's log: %s)", err, kut.c.LogPath())
	}
	if fresh {
		r.deleteNamespace(kvNamespace)
	}

	r.logf("%s: starting %d replicas (logs in %s)", r.scenario, r.replicas, ropts.LogDir)
	if r.fleet, err = startFleet(ctx, ropts, r.replicas, ranges, r.profiles, nil); err != nil {
		return nil, nil, err
	}
	r.ctrl = r.fleet
	replicasRun, err := run(ctx, r.ns, fmt.Sprintf("virtshard, %d replicas", r.replicas), r.fleet)
	if err != nil {
		return nil, nil, err
	}
	stats, _, err := r.fleet.stats(ctx)
	return []T{*kubevirtRun, *replicasRun}, stats, err
}

// virtAPI plays virt-api's webhooks (bench/virtapi) for the namespaces
// until the returned func is called: create-time defaults and the pod
// eviction admitter, as in a KubeVirt install.
func (r *vmiRun) virtAPI(ctx context.Context, name string, namespaces ...string) (stop func(), err error) {
	hook, err := virtapi.Start(ctx, r.cfg, name)
	if err != nil {
		return nil, err
	}
	stop = func() { _ = hook.Stop(context.WithoutCancel(ctx)) }
	for _, ns := range namespaces {
		body := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, virtapi.Label)
		if _, err := r.kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			stop()
			return nil, fmt.Errorf("label namespace %s for virt-api's webhook: %w", ns, err)
		}
		if err := hook.WaitServed(ctx, r.dyn, ns); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// fleetRun runs the four phases in namespace ns under ctrl.
func (r *vmiRun) fleetRun(ctx context.Context, ns, name string, ctrl underTest) (*FleetRun, error) {
	members, poolMembers := r.vmis, max(1, r.vmis/10)
	run := &FleetRun{Controller: name, ReplicaSetMembers: members, PoolMembers: poolMembers}
	w, err := r.watchFleets(ctx, ns)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	sets, pools := r.kv.ReplicaSets(ns), r.kv.Pools(ns)
	start := time.Now()
	stopSampling := r.sampleFleets(ctx, ns, start, run)
	defer stopSampling()
	timeout := r.o.Timeout
	if timeout == 0 {
		// KubeVirt's virt-controller brought a 5,000-member set to ready
		// in 959 s here (BENCHMARKS.md), its first members after 100 s.
		timeout = 5*time.Minute + time.Duration(members)*500*time.Millisecond
	}

	set, err := sets.Create(ctx, fleetReplicaSet(0), metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	scale := func(n int) error {
		_, err := sets.Patch(ctx, set.Name, types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n), metav1.PatchOptions{})
		return err
	}
	phase := func(name string, n int, act func() error, done func(context.Context) (bool, error)) error {
		r.logf("%s: %s: %s", r.scenario, run.Controller, name)
		p, err := measurePhase(ctx, ctrl, name, n, timeout, act, done)
		if err != nil {
			return fmt.Errorf("%s, %s: %w", run.Controller, name, err)
		}
		run.Phases = append(run.Phases, *p)
		return nil
	}
	// Launcher pods are counted at each fleet's peak.
	countDuplicatePods := func() error {
		_, dup, err := workload.LauncherPods(ctx, r.kube, ns)
		run.DuplicateLauncherPods += dup
		return err
	}
	setStatus := func(ctx context.Context) (*virtv1.VirtualMachineInstanceReplicaSet, error) {
		return sets.Get(ctx, set.Name, metav1.GetOptions{})
	}
	if err := phase(fmt.Sprintf("replica set 0 → %d: all ready", members), members, func() error { return scale(members) },
		func(ctx context.Context) (bool, error) {
			s, err := setStatus(ctx)
			return err == nil && s.Status.ReadyReplicas == int32(members), nil
		}); err != nil {
		return nil, err
	}
	if err := countDuplicatePods(); err != nil {
		return nil, err
	}
	if err := phase(fmt.Sprintf("replica set %d → 0: every VMI gone", members), members, func() error { return scale(0) },
		func(ctx context.Context) (bool, error) {
			s, err := setStatus(ctx)
			return err == nil && s.Status.Replicas == 0 && w.live(w.vmis, fleetRS) == 0, nil
		}); err != nil {
		return nil, err
	}
	if err := sets.Delete(ctx, set.Name, metav1.DeleteOptions{}); err != nil {
		return nil, err
	}
	if err := phase(fmt.Sprintf("pool of %d VMs with a DataVolume each: all ready", poolMembers), poolMembers,
		func() error {
			_, err := pools.Create(ctx, fleetPoolOf(poolMembers), metav1.CreateOptions{})
			return err
		},
		func(ctx context.Context) (bool, error) {
			p, err := pools.Get(ctx, fleetName, metav1.GetOptions{})
			return err == nil && p.Status.ReadyReplicas == int32(poolMembers), nil
		}); err != nil {
		return nil, err
	}
	if err := countDuplicatePods(); err != nil {
		return nil, err
	}
	if err := phase(fmt.Sprintf("pool of %d deleted: every VM and VMI gone", poolMembers), poolMembers,
		func() error { return pools.Delete(ctx, fleetName, metav1.DeleteOptions{}) },
		func(context.Context) (bool, error) {
			return w.live(w.vms, fleetPool) == 0 && w.live(w.vmis, fleetPool) == 0, nil
		}); err != nil {
		return nil, err
	}
	run.DuplicateVMIs = w.beyondMembers(w.vmis, fleetRS, members) + w.beyondMembers(w.vmis, fleetPool, poolMembers)
	run.DuplicateVMs = w.beyondMembers(w.vms, fleetPool, poolMembers)
	run.EndedVMIs = w.endedVMIs()
	return run, nil
}

// measurePhase does act, then polls done every 250 ms, and measures ctrl
// around it.
func measurePhase(ctx context.Context, ctrl underTest, name string, members int, timeout time.Duration,
	act func() error, done func(context.Context) (bool, error)) (*FleetPhase, error) {
	before, writesBefore, err := ctrl.stats(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := act(); err != nil {
		return nil, err
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, done); err != nil {
		return nil, fmt.Errorf("not done within %s: %w", timeout, err)
	}
	p := &FleetPhase{Name: name, Members: members, Seconds: time.Since(start).Seconds(),
		WritesPerMember: WritesPerVMI{ByVerbResource: map[string]float64{}}}
	after, writesAfter, err := ctrl.stats(ctx)
	if err != nil {
		return nil, err
	}
	for key, v := range writesAfter {
		delta := (v - writesBefore[key]) / float64(members)
		switch {
		case delta == 0:
		case key == "create events":
			p.EventsPerMember = delta
		case fleetWrite(key):
			p.WritesPerMember.ByVerbResource[key] = delta
			p.WritesPerMember.Total += delta
		}
	}
	cpuBefore := map[string]float64{}
	for _, s := range before {
		cpuBefore[s.Name] = s.CPUSeconds
	}
	var cpuMax, cpuSum float64
	cachedMax, cachedSum := 0, 0
	for _, s := range after {
		// A process that was not there before (none in this scenario)
		// counts from zero.
		load := FleetLoad{Name: s.Name, CPUSeconds: s.CPUSeconds - cpuBefore[s.Name], CachedVMIs: s.CachedVMIs, CachedVMs: s.CachedVMs, ViewedMembers: s.ViewedMembers}
		p.Processes = append(p.Processes, load)
		cpuMax, cpuSum = max(cpuMax, load.CPUSeconds), cpuSum+load.CPUSeconds
		cached := load.CachedVMIs + load.CachedVMs
		cachedMax, cachedSum = max(cachedMax, cached), cachedSum+cached
	}
	if cpuSum > 0 {
		p.CPUMaxOverMean = cpuMax / (cpuSum / float64(len(after)))
	}
	if cachedSum > 0 {
		p.CachedMaxOverMean = float64(cachedMax) / (float64(cachedSum) / float64(len(after)))
	}
	return p, nil
}

// fleetWrite reports whether a "verb resource" key of a controller's
// writes counts toward a fleet's writes per member: every write but its
// events (counted apart) and Leases (leader election and, for the
// replicas, range ownership: a cost of time, not of members).
func fleetWrite(key string) bool {
	resource := replicas.WriteResource(key)
	return resource != "events" && resource != "leases"
}

// fleetWatch counts, from watches of the run's namespace (objects trimmed
// to their metadata and phase), the distinct VMIs and VMs of each fleet
// ever seen, those that ended, and those still there.
type fleetWatch struct {
	vmis, vms *seen
	stop      func()
}

// seen is one resource's objects by fleet label.
type seen struct {
	mu             sync.Mutex
	created, ended map[string]map[types.UID]bool
	store          cache.Store
}

// beyondMembers counts the fleet's objects created beyond one per member,
// less those that ended (and were replaced).
func (w *fleetWatch) beyondMembers(s *seen, fleet string, members int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.created[fleet]) - len(s.ended[fleet]) - members
}

// endedVMIs counts the VMIs of both fleets seen Failed or Succeeded while
// not being deleted.
func (w *fleetWatch) endedVMIs() int {
	w.vmis.mu.Lock()
	defer w.vmis.mu.Unlock()
	return len(w.vmis.ended[fleetRS]) + len(w.vmis.ended[fleetPool])
}

func (w *fleetWatch) live(s *seen, fleet string) int {
	n := 0
	for _, obj := range s.store.List() {
		if obj.(*unstructured.Unstructured).GetLabels()[fleetLabel] == fleet {
			n++
		}
	}
	return n
}

// trimToPhase keeps an object's metadata (less managed fields and
// annotations) and status.phase.
func trimToPhase(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	u.SetManagedFields(nil)
	u.SetAnnotations(nil)
	delete(u.Object, "spec")
	u.Object["status"] = map[string]any{"phase": phase}
	return u, nil
}

func (r *vmiRun) watchFleets(ctx context.Context, ns string) (*fleetWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &fleetWatch{stop: cancel}
	start := func(resource string) (*seen, error) {
		s := &seen{created: map[string]map[types.UID]bool{}, ended: map[string]map[types.UID]bool{}}
		gvr := schema.GroupVersionResource{Group: virtv1.GroupVersion.Group, Version: virtv1.GroupVersion.Version, Resource: resource}
		inf := dynamicinformer.NewFilteredDynamicInformer(r.dyn, gvr, ns, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
			o.LabelSelector = fleetLabel
		}).Informer()
		_ = inf.SetTransform(trimToPhase) // fails only on a started informer
		note := func(obj any) {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			fleet := u.GetLabels()[fleetLabel]
			add := func(to map[string]map[types.UID]bool) {
				if to[fleet] == nil {
					to[fleet] = map[types.UID]bool{}
				}
				to[fleet][u.GetUID()] = true
			}
			add(s.created)
			// Ended on its own: one being deleted stops as asked.
			if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); u.GetDeletionTimestamp() == nil &&
				(phase == string(virtv1.Failed) || phase == string(virtv1.Succeeded)) {
				add(s.ended)
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, obj any) { note(obj) }}); err != nil {
			return nil, err
		}
		s.store = inf.GetStore()
		go inf.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return nil, fmt.Errorf("watch %s in %s: not synced", resource, ns)
		}
		return s, nil
	}
	var err error
	if w.vmis, err = start("virtualmachineinstances"); err != nil {
		cancel()
		return nil, err
	}
	if w.vms, err = start("virtualmachines"); err != nil {
		cancel()
		return nil, err
	}
	return w, nil
}

// sampleFleets records the fleets' ready members once a second into run's
// timeline, until the returned func is called.
func (r *vmiRun) sampleFleets(ctx context.Context, ns string, start time.Time, run *FleetRun) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			s := FleetSample{Seconds: time.Since(start).Seconds()}
			if set, err := r.kv.ReplicaSets(ns).Get(ctx, fleetName, metav1.GetOptions{}); err == nil {
				s.ReplicaSetReady = int(set.Status.ReadyReplicas)
			}
			if p, err := r.kv.Pools(ns).Get(ctx, fleetName, metav1.GetOptions{}); err == nil {
				s.PoolReady = int(p.Status.ReadyReplicas)
			}
			run.Timeline = append(run.Timeline, s)
			if len(run.Timeline)%30 == 0 {
				r.logf("%s: %s: %.0f s: replica set %d ready, pool %d ready", r.scenario, run.Controller, s.Seconds, s.ReplicaSetReady, s.PoolReady)
			}
			return false, nil
		})
	}()
	return func() { cancel(); <-done }
}

// fleetTemplate is the members' VMI template: the workload's VMI as
// virt-api stores it (the local cluster runs no virt-api to default the
// VMIs a controller creates), labelled as the fleet's.
func fleetTemplate(fleet string) *virtv1.VirtualMachineInstanceTemplateSpec {
	vmi := workload.VMI(fleetName)
	labels := map[string]string{fleetLabel: fleet, "app": workload.AppLabel}
	return &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: vmi.Spec}
}

func fleetReplicaSet(replicas int) *virtv1.VirtualMachineInstanceReplicaSet {
	return &virtv1.VirtualMachineInstanceReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: fleetName},
		Spec: virtv1.VirtualMachineInstanceReplicaSetSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{fleetLabel: fleetRS}},
			Template: fleetTemplate(fleetRS),
		},
	}
}

// fleetPoolOf is a pool of n VMs, each with a 1Gi blank DataVolume (the
// simulated CDI's transfer) as its root disk beside the workload's disks.
func fleetPoolOf(n int) *poolv1.VirtualMachinePool {
	tmpl := fleetTemplate(fleetPool)
	tmpl.Spec.Domain.Devices.Disks = append(tmpl.Spec.Domain.Devices.Disks,
		virtv1.Disk{Name: "root", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}})
	tmpl.Spec.Volumes = append(tmpl.Spec.Volumes, virtv1.Volume{Name: "root", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: "root"}}})
	labels := map[string]string{fleetLabel: fleetPool}
	return &poolv1.VirtualMachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: fleetName},
		Spec: poolv1.VirtualMachinePoolSpec{
			Replicas: ptr.To(int32(n)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			VirtualMachineTemplate: &poolv1.VirtualMachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: virtv1.VirtualMachineSpec{
					RunStrategy: ptr.To(virtv1.RunStrategyAlways),
					Template:    tmpl,
					DataVolumeTemplates: []virtv1.DataVolumeTemplateSpec{{
						ObjectMeta: metav1.ObjectMeta{Name: "root"},
						Spec: cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
							Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
								Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}},
					}},
				},
			},
		},
	}
}

// writeFleets prints a fleet report's runs.
func (r *Report) writeFleets(out io.Writer) {
	for _, run := range r.Fleets {
		fmt.Fprintf(out, "%s: replica set of %d, pool of %d; duplicates: %d VMIs, %d VMs, %d launcher pods; %d VMIs ended\n",
			run.Controller, run.ReplicaSetMembers, run.PoolMembers, run.DuplicateVMIs, run.DuplicateVMs, run.DuplicateLauncherPods, run.EndedVMIs)
		if run.NotReady != "" {
			fmt.Fprintf(out, "  not ready: %s\n", run.NotReady)
		}
		for _, p := range run.Phases {
			fmt.Fprintf(out, "  %s: %.1f s = %.1f members/s; writes per member %.2f %s; events per member %.2f; CPU max/mean %.2f, cached members max/mean %.2f\n",
				p.Name, p.Seconds, float64(p.Members)/p.Seconds, p.WritesPerMember.Total, sortedMap(p.WritesPerMember.ByVerbResource),
				p.EventsPerMember, p.CPUMaxOverMean, p.CachedMaxOverMean)
			for _, l := range p.Processes {
				fmt.Fprintf(out, "    %s: CPU %.1f s, %d VMIs and %d VMs cached, %d fleet members viewed\n", l.Name, l.CPUSeconds, l.CachedVMIs, l.CachedVMs, l.ViewedMembers)
			}
		}
	}
}

// writeFleetsOut writes a fleet report and the plot of its runs' ready
// members over time into dir.
func (r *vmiRun) writeFleetsOut(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "report.json"), func(f *os.File) error { return writeJSON(f, rep) }); err != nil {
		return err
	}
	var series []plot.Series
	for _, run := range rep.Fleets {
		set, pool := plot.Series{Name: run.Controller + ": replica set ready"}, plot.Series{Name: run.Controller + ": pool ready"}
		for _, s := range run.Timeline {
			set.Points = append(set.Points, [2]float64{s.Seconds, float64(s.ReplicaSetReady)})
			pool.Points = append(pool.Points, [2]float64{s.Seconds, float64(s.PoolReady)})
		}
		series = append(series, set, pool)
	}
	if err := writeFile(filepath.Join(dir, "fleets.svg"), func(f *os.File) error {
		return plot.Lines(f, plot.Chart{Title: fmt.Sprintf("fleet: replica set of %d, pool of %d", rep.VMIs, max(1, rep.VMIs/10)),
			XLabel: "seconds from the run's start", YLabel: "members ready"}, series)
	}); err != nil {
		return err
	}
	if r.profiles != nil {
		return r.profiles.write(dir)
	}
	return nil
}

// writeFleetsMarkdown is a fleet report as a table: a row per controller
// and phase.
func writeFleetsMarkdown(w io.Writer, r *Report) {
	fmt.Fprintln(w, "| controller | phase | seconds | members/s | writes/member | events/member | CPU s per process | CPU max/mean | members cached per process | duplicates (VMIs, VMs, pods) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---|---:|---|---|")
	for _, run := range r.Fleets {
		for i, p := range run.Phases {
			var cpu, cached []string
			for _, l := range p.Processes {
				cpu = append(cpu, fmt.Sprintf("%.1f", l.CPUSeconds))
				c := strconv.Itoa(l.CachedVMIs + l.CachedVMs)
				if l.ViewedMembers > 0 {
					c += fmt.Sprintf(" (+%d viewed)", l.ViewedMembers)
				}
				cached = append(cached, c)
			}
			dups := ""
			if i == 0 {
				dups = fmt.Sprintf("%d, %d, %d", run.DuplicateVMIs, run.DuplicateVMs, run.DuplicateLauncherPods)
			}
			fmt.Fprintf(w, "| %s | %s | %.1f | %.1f | %.2f | %.2f | %s | %.2f | %s | %s |\n", run.Controller, p.Name, p.Seconds,
				float64(p.Members)/p.Seconds, p.WritesPerMember.Total, p.EventsPerMember, strings.Join(cpu, ", "), p.CPUMaxOverMean,
				strings.Join(cached, ", "), dups)
		}
	}
}

// fleetGoal judges the replicas' fleet run against KubeVirt's: nothing
// created twice, and each phase's time beside KubeVirt's.
func fleetGoal(kubevirt, virtshard FleetRun) goal {
	var ratios []string
	for i, p := range virtshard.Phases {
		if i < len(kubevirt.Phases) && p.Seconds > 0 {
			ratios = append(ratios, fmt.Sprintf("%.2f", kubevirt.Phases[i].Seconds/p.Seconds))
		}
	}
	dups := virtshard.DuplicateVMIs + virtshard.DuplicateVMs + virtshard.DuplicateLauncherPods
	return goal{fmt.Sprintf("fleet: replica set 0 → %d → 0, pool of %d with DataVolumes, %s", virtshard.ReplicaSetMembers, virtshard.PoolMembers, virtshard.Controller),
		"every phase done, 0 duplicates",
		fmt.Sprintf("%d duplicates (KubeVirt's run %d); KubeVirt's time over virtshard's by phase: %s", dups,
			kubevirt.DuplicateVMIs+kubevirt.DuplicateVMs+kubevirt.DuplicateLauncherPods, strings.Join(ratios, ", ")),
		dups == 0 && len(virtshard.Phases) == len(kubevirt.Phases) && len(virtshard.Phases) == 4}
}

// chaosFleets are the fleets the chaos scenario runs beside its VMIs: a
// replica set of a twentieth as many members and a pool of a two-hundredth
// as many VMs with DataVolumes, created before the first fault, so that
// every fault meets them.
type chaosFleets struct {
	r     *vmiRun
	watch *fleetWatch
	run   FleetRun
}

func (r *vmiRun) startChaosFleets(ctx context.Context) (*chaosFleets, error) {
	w, err := r.watchFleets(ctx, r.ns)
	if err != nil {
		return nil, err
	}
	c := &chaosFleets{r: r, watch: w, run: FleetRun{Controller: fmt.Sprintf("virtshard, %d replicas, under chaos", r.replicas),
		ReplicaSetMembers: max(1, r.vmis/20), PoolMembers: max(1, r.vmis/200)}}
	if _, err := r.kv.ReplicaSets(r.ns).Create(ctx, fleetReplicaSet(c.run.ReplicaSetMembers), metav1.CreateOptions{}); err != nil {
		w.stop()
		return nil, err
	}
	if _, err := r.kv.Pools(r.ns).Create(ctx, fleetPoolOf(c.run.PoolMembers), metav1.CreateOptions{}); err != nil {
		w.stop()
		return nil, err
	}
	return c, nil
}

// finish waits, once the faults are over, until both fleets are ready
// (5 minutes at most: NotReady says what was not), and counts what was
// created beyond one per member. Nothing deletes a member during the run;
// a VMI that ended (a fault can fail one) is replaced by its fleet, and
// any other extra VMI or VM is a duplicate.
func (c *chaosFleets) finish(ctx context.Context) FleetRun {
	run := c.run
	var set, pool int32
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if s, err := c.r.kv.ReplicaSets(c.r.ns).Get(ctx, fleetName, metav1.GetOptions{}); err == nil {
			set = s.Status.ReadyReplicas
		}
		if p, err := c.r.kv.Pools(c.r.ns).Get(ctx, fleetName, metav1.GetOptions{}); err == nil {
			pool = p.Status.ReadyReplicas
		}
		return set == int32(run.ReplicaSetMembers) && pool == int32(run.PoolMembers), nil
	})
	if err != nil {
		run.NotReady = fmt.Sprintf("5 minutes after the faults: replica set %d of %d ready, pool %d of %d", set, run.ReplicaSetMembers, pool, run.PoolMembers)
	}
	w := c.watch
	run.DuplicateVMIs = w.beyondMembers(w.vmis, fleetRS, run.ReplicaSetMembers) + w.beyondMembers(w.vmis, fleetPool, run.PoolMembers)
	run.DuplicateVMs = w.beyondMembers(w.vms, fleetPool, run.PoolMembers)
	run.EndedVMIs = w.endedVMIs()
	return run
}
