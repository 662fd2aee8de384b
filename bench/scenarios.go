package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/virtshard/virtshard/bench/audit"
	"github.com/virtshard/virtshard/bench/ceiling"
	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/bench/proc"
	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
)

// env is what every scenario runs against: the local cluster and its
// clients.
type env struct {
	o     *Options
	copts cluster.Options
	// cfg is the bench's own client configuration (unthrottled), for the
	// clients a scenario makes beyond kube and kv.
	cfg      *rest.Config
	kube     kubernetes.Interface
	kv       *kubevirt.Clientset
	dyn      dynamic.Interface
	progress io.Writer
}

func newEnv(o *Options, copts cluster.Options) (*env, error) {
	cfg, err := copts.RESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = -1, 0
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var progress io.Writer = os.Stderr
	if o.Output == "json" {
		progress = nil
	}
	return &env{o: o, copts: copts, cfg: cfg, kube: kube, kv: kv, dyn: dyn, progress: progress}, nil
}

func (e *env) logf(format string, args ...any) {
	if e.progress != nil {
		fmt.Fprintf(e.progress, format+"\n", args...)
	}
}

func (e *env) machine() Machine {
	var info syscall.Sysinfo_t
	_ = syscall.Sysinfo(&info)
	return Machine{Cores: runtime.NumCPU(), MemoryBytes: int64(info.Totalram) * int64(info.Unit), Nodes: e.o.Nodes}
}

// namespaces creates the namespaces and returns a func that deletes them,
// side by side, and waits until they are gone, so the next run does not
// pay for this one's cleanup.
func (e *env) namespaces(ctx context.Context, names ...string) (func(), error) {
	cleanup := func(names []string) func() {
		return func() {
			var wg sync.WaitGroup
			for _, name := range names {
				wg.Go(func() { e.deleteNamespace(name) })
			}
			wg.Wait()
		}
	}
	for i, name := range names {
		if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			cleanup(names[:i])()
			return nil, fmt.Errorf("create namespace %s: %w", name, err)
		}
	}
	return cleanup(names), nil
}

// deleteNamespace deletes a run's namespace and waits until it is gone.
// The namespace controller looks again at a namespace whose pods are
// terminating only after half their grace period (45 s for a launcher
// pod), and 8 s later at one with finalizers pending. So the pools, VMs
// and VMIs go first, their finalizers released by the bench (in a cluster the
// controllers and node agents release them; kwok's Stage does it one VMI
// at a time, and no controller runs any more), then the pods without
// grace, and the namespace goes in one pass.
func (e *env) deleteNamespace(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	releaseAll(ctx, e.kv.Pools(name))
	releaseAll(ctx, e.kv.VirtualMachines(name))
	releaseAll(ctx, e.kv.VirtualMachineInstances(name))
	_ = e.kube.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	_ = e.kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	_ = ceiling.WaitGone(ctx, e.kube, name)
}

// releaseAll deletes every object of c, releasing their finalizers, and
// waits until none is left.
func releaseAll[T, L kruntime.Object](ctx context.Context, c kubevirt.Client[T, L]) {
	_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := c.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		left, err := meta.ExtractList(list)
		if err != nil || len(left) == 0 {
			return err == nil, nil
		}
		workqueue.ParallelizeUntil(ctx, 16, len(left), func(i int) {
			if m, err := meta.Accessor(left[i]); err == nil && len(m.GetFinalizers()) > 0 {
				_, _ = c.Patch(ctx, m.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
		})
		// One delete-collection call can end at the server's request
		// timeout before it reached every object (about 4,000 of 10,000
		// VMIs here): the next round sends it again.
		_ = c.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		return false, nil
	})
}

// clusterCPU reads each control-plane process's CPU seconds so far.
func (e *env) clusterCPU() map[string]float64 {
	dir := filepath.Join(e.copts.Workdir(), "clusters", e.copts.Name, "pids")
	files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	out := map[string]float64{}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			continue
		}
		if cpu, err := proc.CPUSeconds(pid); err == nil {
			out[strings.TrimSuffix(filepath.Base(file), ".pid")] = cpu
		}
	}
	return out
}

// vmiRun is one scenario run with VMIs and controller replicas.
type vmiRun struct {
	*env
	scenario string
	vmis     int
	replicas int
	rate     float64
	ns       string
	fleet    *fleet
	// ctrl is the controller under test: the fleet, or KubeVirt's own
	// virt-controller (scenario kubevirt).
	ctrl     underTest
	profiles *profiles
	// cdfs are the latency distributions measured, for the plots.
	cdfs []cdf
	// auditFrom, when not negative, is where the run's events start in the
	// cluster's audit log: scenarios that stop replicas count their writes
	// there, where a killed replica cannot lose them.
	auditFrom int64
	// leases is the namespace of the replicas' Leases.
	leases string
	// chaosSetup is the chaos scenario's proxies and audited credentials.
	chaosSetup *chaosSetup
}

// runScenario runs one VMI scenario and, when out is set, writes its raw
// data, plots and profiles there.
func (e *env) runScenario(ctx context.Context, scenario, out string) (*Report, error) {
	o := e.o
	if scenario == ScenarioCeiling {
		return e.runCeiling(ctx, o.VMIs)
	}
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	r := &vmiRun{env: e, scenario: scenario, vmis: o.VMIs, replicas: o.Replicas, rate: o.Rate,
		ns: "bench-" + scenario + "-" + suffix, auditFrom: -1}
	leases := "bench-leases-" + suffix
	r.leases = leases
	cleanup, err := e.namespaces(ctx, r.ns, leases)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	binary, err := filepath.Abs(o.Controller)
	if err != nil {
		return nil, err
	}
	ranges, args := o.Ranges, []string{"--pprof", "--ranges", strconv.Itoa(o.Ranges)}
	if scenario == ScenarioSingleton {
		// One range: its holder is the active replica, the other waits with
		// cold caches, as KubeVirt's active/passive virt-controller does.
		ranges, args = 1, []string{"--pprof", "--ranges", "1"}
	}
	if out != "" {
		r.profiles = newProfiles(ctx)
		defer r.profiles.stop()
	}
	ropts := replicas.Options{Binary: binary, Kubeconfig: e.copts.KubeconfigPath(), Namespace: leases, WatchNamespace: r.ns,
		LogDir: filepath.Join(e.copts.Workdir(), "logs", "bench-"+suffix), Args: append(args, o.ReplicaArgs...)}
	// The kubevirt, fleet and drain scenarios start the controllers they
	// measure.
	var selfStarted func() (*Report, error)
	writeOut := r.writeOut
	switch scenario {
	case ScenarioKubeVirt:
		selfStarted = func() (*Report, error) { return r.runKubeVirt(ctx, suffix) }
	case ScenarioFleet:
		selfStarted, writeOut = func() (*Report, error) {
			// Stopped before the output is written: the replicas' last
			// profile windows complete as they stop.
			defer func() {
				if r.fleet != nil {
					r.fleet.stop()
				}
			}()
			return r.fleets(ctx, ropts, ranges)
		}, r.writeFleetsOut
	case ScenarioDrain:
		selfStarted, writeOut = func() (*Report, error) {
			defer func() {
				if r.fleet != nil {
					r.fleet.stop()
				}
			}()
			return r.drains(ctx, ropts, ranges)
		}, r.writeReportOut
	case ScenarioUpgrade:
		selfStarted, writeOut = func() (*Report, error) {
			defer func() {
				if r.fleet != nil {
					r.fleet.stop()
				}
			}()
			return r.upgrades(ctx, ropts, ranges)
		}, r.writeReportOut
	}
	if selfStarted != nil {
		report, err := selfStarted()
		if err == nil && out != "" {
			err = writeOut(out, report)
		}
		if err != nil {
			return nil, err
		}
		return report, nil
	}
	var kubeconfigs []string
	switch scenario {
	case ScenarioChaos, ScenarioFailover, ScenarioRolling:
		if r.auditFrom, err = e.audited(ropts.LogDir); err != nil {
			return nil, err
		}
		ropts.Kubeconfig = filepath.Join(ropts.LogDir, auditedKubeconfig)
	}
	if scenario == ScenarioChaos {
		r.chaosSetup, err = e.startChaos(ropts.LogDir, r.replicas)
		if err != nil {
			return nil, err
		}
		defer r.chaosSetup.stop()
		kubeconfigs = r.chaosSetup.kubeconfigs
	}
	e.logf("%s: starting %d replicas (logs in %s)", scenario, r.replicas, ropts.LogDir)
	r.fleet, err = startFleet(ctx, ropts, r.replicas, ranges, r.profiles, kubeconfigs)
	if err != nil {
		return nil, err
	}
	defer r.fleet.stop()
	r.ctrl = r.fleet

	var report *Report
	switch scenario {
	case ScenarioThroughput, ScenarioSingleton, ScenarioScale:
		report, err = r.burst(ctx, scenario == ScenarioThroughput)
	case ScenarioLatency:
		report, err = r.latency(ctx)
	case ScenarioFailover:
		report, err = r.failover(ctx)
	case ScenarioRolling:
		report, err = r.rolling(ctx)
	case ScenarioMigrations:
		report, err = r.migrations(ctx)
	case ScenarioChaos:
		report, err = r.chaos(ctx)
	default:
		err = fmt.Errorf("no such scenario %q", scenario)
	}
	if err != nil {
		return nil, err
	}
	if out != "" {
		// The replicas' last profile windows complete as they stop.
		r.fleet.stop()
		if err := r.writeOut(out, report); err != nil {
			return nil, err
		}
	}
	return report, nil
}

// runCeiling is the bare-pod ceiling: pods/s through the same path as a
// launcher pod, with no controller.
func (e *env) runCeiling(ctx context.Context, count int) (*Report, error) {
	ns := "bench-ceiling-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	res, err := e.ceiling(ctx, ns, count)
	if err != nil {
		return nil, err
	}
	return &Report{Scenario: ScenarioCeiling, VMIs: count, Machine: e.machine(), Running: res.Count,
		DurationSeconds: res.Duration.Seconds(), CeilingPodsPerSecond: res.PerSecond, CeilingClusterCPUSeconds: res.clusterCPU,
		ObservedLatencySeconds: Percentiles{P50: res.P50.Seconds(), P95: res.P95.Seconds(), P99: res.P99.Seconds()}}, nil
}

// ceilingRun is a ceiling or floor run's result and the control plane's
// CPU seconds during it.
type ceilingRun struct {
	ceiling.Result
	clusterCPU map[string]float64
}

// floorRun is the floor's.
type floorRun = ceilingRun

// ceiling runs count bare pods.
func (e *env) ceiling(ctx context.Context, ns string, count int) (*ceilingRun, error) {
	e.logf("ceiling: %d bare pods", count)
	return e.limit(ctx, ns, count, func(ctx context.Context, opts ceiling.Options) (ceiling.Result, error) {
		return ceiling.Pods(ctx, e.kube, opts)
	})
}

// floor runs count VMIs with only the writes any controller must make,
// sent by the bench, with no controller acting on its namespace; prof,
// when set, gets the API server's CPU profile during the run.
func (r *vmiRun) floor(ctx context.Context, ns string, count int) (*floorRun, error) {
	r.logf("floor: %d VMIs, their launcher pods and hand-offs sent by the bench", count)
	stopProfile := r.profiles.collectFromAPIServer(r.kube, "kube-apiserver-floor")
	defer stopProfile()
	return r.limit(ctx, ns, count, func(ctx context.Context, opts ceiling.Options) (ceiling.Result, error) {
		return ceiling.Floor(ctx, r.kube, r.kv, opts)
	})
}

// limit runs one ceiling or floor run in namespace ns, measuring the
// control plane's CPU around it, and waits until ns is gone.
func (e *env) limit(ctx context.Context, ns string, count int, run func(context.Context, ceiling.Options) (ceiling.Result, error)) (*ceilingRun, error) {
	cpuBefore := e.clusterCPU()
	res, err := run(ctx, ceiling.Options{Count: count, Concurrency: e.o.Creators, Namespace: ns, Timeout: e.o.timeout(count)})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ns, err)
	}
	out := &ceilingRun{Result: res, clusterCPU: deltas(cpuBefore, e.clusterCPU())}
	if err := ceiling.WaitGone(ctx, e.kube, ns); err != nil {
		return nil, err
	}
	return out, nil
}

// deltas is each counter of after less its value in before.
func deltas(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for name, v := range after {
		out[name] = v - before[name]
	}
	return out
}

// newFlow returns a flow of count VMIs at rate into the run's namespace.
func (r *vmiRun) newFlow(prefix string, count int, rate float64) *flow {
	return newFlow(r.kv, flowOptions{Namespace: r.ns, Prefix: prefix, Count: count, Creators: r.o.Creators, Rate: rate,
		Spread:  r.scenario == ScenarioMigrations,
		Timeout: r.o.timeout(count), Stall: 2 * time.Minute, Progress: r.progress, Ranges: r.ctrl.activeRanges,
		MemoryFloor: int64(r.o.MemoryFloorMiB) << 20, Available: proc.AvailableMemoryBytes})
}

// measured is a flow run with the API server's and the replicas' counters
// read around it.
type measured struct {
	*flowResult
	server     serverCounters
	clusterCPU map[string]float64
}

func (r *vmiRun) measure(ctx context.Context, f *flow) (*measured, error) {
	before, err := readServerCounters(ctx, r.kube)
	if err != nil {
		return nil, fmt.Errorf("read the API server's request counters: %w", err)
	}
	cpuBefore := r.clusterCPU()
	stopProfile := r.profiles.collectFromAPIServer(r.kube, "kube-apiserver")
	res, err := f.run(ctx)
	stopProfile()
	if err != nil {
		return nil, err
	}
	after, err := readServerCounters(ctx, r.kube)
	if err != nil {
		return nil, fmt.Errorf("read the API server's request counters: %w", err)
	}
	return &measured{flowResult: res, server: after.since(before), clusterCPU: deltas(cpuBefore, r.clusterCPU())}, nil
}

// report fills the figures every VMI scenario has, from flow m; the
// replicas' writes are divided by created, every VMI of the run.
func (r *vmiRun) report(ctx context.Context, m *measured, created int) (*Report, error) {
	rep := &Report{Scenario: r.scenario, VMIs: r.vmis, Replicas: r.replicas, Rate: r.rate, Machine: r.machine(),
		Running: m.Running, Stuck: r.vmis - m.Running, DurationSeconds: m.Duration.Seconds(),
		LatencySeconds: percentiles(m.Latency), LatencyVMIs: len(m.Latency), HandoffLatencySeconds: percentiles(m.Handoff), ObservedLatencySeconds: percentiles(m.Observed),
		Stopped:               m.Stopped,
		AllClientWritesPerVMI: m.server.writes / float64(r.vmis), TerminatedWatchers: m.server.terminatedWatchers, ClusterCPUSeconds: m.clusterCPU, Timeline: m.Samples,
		WritesPerVMI: WritesPerVMI{ByVerbResource: map[string]float64{}}}
	if m.Duration > 0 {
		rep.VMIsPerSecond = float64(m.Running) / m.Duration.Seconds()
		rep.RunningPerSecond = rep.VMIsPerSecond
	}
	if m.ScheduledDuration > 0 {
		rep.ScheduledPerSecond = float64(m.Scheduled) / m.ScheduledDuration.Seconds()
	}
	if m.Running > 0 {
		rep.APIServerCPUPerVMI = m.clusterCPU["kube-apiserver"] / float64(m.Running)
		rep.NodeSideCPUSecondsPer1000VMIs = map[string]float64{}
		for _, name := range []string{"virtshard-handler", "kwok-controller"} {
			if cpu, ok := m.clusterCPU[name]; ok {
				rep.NodeSideCPUSecondsPer1000VMIs[name] = 1000 * cpu / float64(m.Running)
			}
		}
	}
	var err error
	if _, rep.DuplicateLauncherPods, err = workload.LauncherPods(ctx, r.kube, r.ns); err != nil {
		return nil, err
	}
	if err := r.ctrl.waitSettled(ctx, time.Minute); err != nil {
		return nil, fmt.Errorf("ranges did not settle after the run: %w", err)
	}
	stats, writes, err := r.ctrl.stats(ctx)
	if err != nil {
		return nil, err
	}
	rep.ReplicaStats = stats
	// Heap profiles after the replicas' figures are read: fetching them
	// costs the replicas CPU.
	if r.fleet != nil {
		if missing := r.profiles.heap(ctx, r.fleet.live()); len(missing) > 0 {
			r.logf("no heap profile from %v", missing)
		}
	}
	if r.auditFrom >= 0 {
		if writes, err = r.auditedWrites(); err != nil {
			return nil, err
		}
	}
	for key, v := range writes {
		switch {
		case replicas.ControllerWrite(key):
			rep.WritesPerVMI.ByVerbResource[key] = v / float64(created)
			rep.WritesPerVMI.Total += v / float64(created)
		case key == "create events":
			rep.EventsPerVMI = v / float64(created)
		}
	}
	rep.setTenths()
	if ranges := r.ctrl.rangeCount(); ranges > 0 {
		rep.setAvailability(ranges)
	}
	r.cdfs = append(r.cdfs, cdf{"creation→Running (timestamps)", m.Latency}, cdf{"creation→Scheduled (timestamps)", m.Handoff},
		cdf{"observed by the bench", m.Observed})
	return rep, nil
}

// auditedWrites counts the replicas' writes in the audit log since the
// run began.
func (r *vmiRun) auditedWrites() (map[string]float64, error) {
	f, err := r.copts.OpenAuditLog(r.auditFrom)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	writes, err := audit.CountWrites(f)
	if err != nil {
		return nil, fmt.Errorf("count the replicas' writes in the audit log: %w", err)
	}
	return writes, nil
}

// byTenth returns the rate at which VMIs reached a phase in each tenth of
// them: a tenth of n divided by the time from the previous tenth reaching
// it to this one, from the once-a-second timeline; count reads the VMIs
// in the phase from a sample.
func byTenth(samples []Sample, n int, count func(Sample) int) []float64 {
	tenth := n / 10
	if tenth == 0 || len(samples) == 0 {
		return nil
	}
	at := func(k int) float64 {
		if k == 0 {
			return 0
		}
		for _, s := range samples {
			if count(s) >= k {
				return s.Seconds
			}
		}
		return samples[len(samples)-1].Seconds
	}
	out := make([]float64, 10)
	for k := range out {
		if d := at((k+1)*tenth) - at(k*tenth); d > 0 {
			out[k] = float64(tenth) / d
		}
	}
	return out
}

func running(s Sample) int   { return s.Running }
func scheduled(s Sample) int { return s.Scheduled }

// burst runs every VMI at --rate (as fast as possible by default); with
// floor, the floor runs first with as many VMIs, in the same invocation.
func (r *vmiRun) burst(ctx context.Context, withFloor bool) (*Report, error) {
	var fl *floorRun
	if withFloor {
		var err error
		if fl, err = r.floor(ctx, r.ns+"-floor", r.vmis); err != nil {
			return nil, err
		}
	}
	m, err := r.measure(ctx, r.newFlow("vmi", r.vmis, r.rate))
	if err != nil {
		return nil, err
	}
	rep, err := r.report(ctx, m, r.vmis)
	if err != nil {
		return nil, err
	}
	if fl != nil && fl.PerSecond > 0 && fl.Count > 0 {
		rep.FloorVMIsPerSecond = fl.PerSecond
		rep.FloorRatio = rep.VMIsPerSecond / fl.PerSecond
		rep.FloorAPIServerCPUPerVMI = fl.clusterCPU["kube-apiserver"] / float64(fl.Count)
		if rep.FloorAPIServerCPUPerVMI > 0 {
			rep.APIServerCPURatio = rep.APIServerCPUPerVMI / rep.FloorAPIServerCPUPerVMI
		}
		rep.FloorClusterCPUSeconds = fl.clusterCPU
	}
	return rep, nil
}

// latency measures the throughput with a burst, then runs open loops at
// --rate and at half that throughput; the report's latency is the one at
// --rate.
func (r *vmiRun) latency(ctx context.Context) (*Report, error) {
	burst := r.newFlow("burst", r.vmis, 0)
	b, err := burst.run(ctx)
	if err != nil {
		return nil, err
	}
	if b.Running < r.vmis || b.Duration <= 0 {
		return nil, fmt.Errorf("latency: the throughput burst left %d of %d VMIs not Running", r.vmis-b.Running, r.vmis)
	}
	half := float64(b.Running) / b.Duration.Seconds() / 2
	var atRate *measured
	var runs []LatencyRun
	for i, rate := range []float64{r.rate, half} {
		m, err := r.measure(ctx, r.newFlow(fmt.Sprintf("open%d", i), r.vmis, rate))
		if err != nil {
			return nil, err
		}
		runs = append(runs, LatencyRun{Rate: rate, VMIs: r.vmis, Running: m.Running, LatencySeconds: percentiles(m.Latency),
			HandoffSeconds: percentiles(m.Handoff), ObservedSeconds: percentiles(m.Observed)})
		if i == 0 {
			atRate = m
		} else {
			r.cdfs = append(r.cdfs, cdf{fmt.Sprintf("creation→Running at %.0f/s", rate), m.Latency})
		}
	}
	// Writes and duplicates count every VMI of the three flows.
	rep, err := r.report(ctx, atRate, 3*r.vmis)
	if err != nil {
		return nil, err
	}
	rep.LatencyRuns = runs
	return rep, nil
}

// failover kills one replica with SIGKILL once a quarter of the VMIs are
// Running, measures until its ranges are held again, and starts it again,
// as the StatefulSet controller would.
func (r *vmiRun) failover(ctx context.Context) (*Report, error) {
	f := r.newFlow("vmi", r.vmis, r.rate)
	var takeover time.Duration
	var killedAt time.Time
	rep, m, err := r.withFault(ctx, f, func() error {
		if err := f.waitRunning(ctx, r.vmis/4); err != nil {
			return err
		}
		victim := r.fleet.member(1)
		r.logf("failover: kill -9 %s", victim.ID)
		killedAt = time.Now()
		victim.Kill()
		if _, err := r.fleet.waitOwned(ctx, time.Minute); err != nil {
			return err
		}
		takeover = time.Since(killedAt)
		// The StatefulSet controller starts it again.
		if err := r.fleet.start(1); err != nil {
			return err
		}
		return r.fleet.waitHolding(ctx, r.fleet.name(1), time.Minute)
	})
	if err != nil {
		return nil, err
	}
	rep.TakeoverSeconds = takeover.Seconds()
	rep.HandoffSeconds = []float64{takeover.Seconds()}
	fault := percentiles(m.observedBetween(killedAt, killedAt.Add(takeover+5*time.Second)))
	rep.FaultLatencySeconds = &fault
	return rep, nil
}

// withFault runs flow f with fault beside it and reports the flow once
// both are done.
func (r *vmiRun) withFault(ctx context.Context, f *flow, fault func() error) (*Report, *measured, error) {
	faultErr := make(chan error, 1)
	go func() { faultErr <- fault() }()
	m, err := r.measure(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	if err := <-faultErr; err != nil {
		return nil, nil, fmt.Errorf("%s: %w", r.scenario, err)
	}
	rep, err := r.report(ctx, m, r.vmis)
	return rep, m, err
}

// rolling restarts every replica in turn with SIGTERM, as a StatefulSet
// rolling update does, while the VMIs flow. A handoff is the time from the
// SIGTERM until the other replicas hold every range.
func (r *vmiRun) rolling(ctx context.Context) (*Report, error) {
	f := r.newFlow("vmi", r.vmis, r.rate)
	var handoffs []float64
	rep, _, err := r.withFault(ctx, f, func() error {
		if err := f.waitRunning(ctx, r.vmis/10); err != nil {
			return err
		}
		var err error
		handoffs, err = r.fleet.roll(ctx, r.fleet.opts, r.logf, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	rep.HandoffSeconds = handoffs
	for _, h := range handoffs {
		rep.TakeoverSeconds = max(rep.TakeoverSeconds, h)
	}
	return rep, nil
}
