package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/kubevirt"
	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/shard"
)

// The upgrade scenario (ScenarioUpgrade) upgrades the controller with
// --vmis VMIs Running on the old launcher and measures until none is left
// on it, first under KubeVirt's virt-controller, then under the replicas,
// the KubeVirt CR's workloadUpdateMethods LiveMigrate for both:
//   - KubeVirt's virt-controller is stopped and started again with the new
//     --launcher-image, as virt-operator's rollout of a release replaces it;
//   - the replicas start as --previous-controller (the release before) and
//     are rolled one by one, highest ordinal first, to --controller with the
//     new launcher image, as a StatefulSet rolling update does, every range's
//     service sampled throughout; once a third of the VMIs are updated, one
//     replica is killed (SIGKILL) and started again.
//
// In both runs a tenth more VMIs are created from the upgrade's start, one
// every upgradeCreatePace, as users go on creating VMs through an upgrade.

// upgradedLauncherImage is the launcher image the upgrade moves to.
const upgradedLauncherImage = kubevirt.DefaultLauncherImage + "-upgraded"

// upgradeCreatePace is how often a VMI is created during the upgrade.
const upgradeCreatePace = 200 * time.Millisecond

// gapGoal is the longest a range may go unserved in a rolling update.
const gapGoal = 2 * time.Second

// UpgradeRun is one controller's run of the upgrade scenario.
type UpgradeRun struct {
	Controller string `json:"controller"`
	// VMIs ran on the old launcher before the upgrade; Created more were
	// created during it.
	VMIs    int `json:"vmis"`
	Created int `json:"created"`
	// RestartSeconds: KubeVirt, from the stop until the new process led;
	// the replicas, the whole roll.
	RestartSeconds float64 `json:"restartSeconds"`
	// Seconds from the upgrade's start until every VMI ran, none on the
	// old launcher (status.launcherContainerImageVersion, as KubeVirt's
	// workload updater judges it).
	Seconds float64 `json:"seconds"`
	// Migrations the workload updater created; Succeeded and Failed of
	// them; Repeated beyond one per VMI.
	Migrations int `json:"migrations"`
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
	Repeated   int `json:"repeated"`
	// Migrations in flight, sampled every 250 ms, against the limits.
	MaxInFlightCluster int `json:"maxInFlightCluster"`
	MaxOutboundPerNode int `json:"maxOutboundPerNode"`
	LimitPerCluster    int `json:"limitPerCluster"`
	LimitPerNode       int `json:"limitPerNode"`
	Samples            int `json:"samples"`
	// Lost are the VMIs not Running at the end.
	Lost int `json:"lost"`
	// CROutdated is the KubeVirt CR's
	// status.outdatedVirtualMachineInstanceWorkloads at the end, as the
	// controller last wrote it (nil: never written).
	CROutdated *int `json:"crOutdated"`
	// WritesPerMigration and Processes' CPU over the upgrade, each process
	// stopped or killed counted up to its last scrape before.
	WritesPerMigration WritesPerVMI `json:"writesPerMigration"`
	Processes          []FleetLoad  `json:"processes"`
	// Roll is the replicas' rolling update; KilledAtSeconds when a replica
	// was killed, and Kill the ranges' service from then on.
	Roll            *RollFigures `json:"roll,omitempty"`
	KilledAtSeconds float64      `json:"killedAtSeconds,omitempty"`
	Kill            *RangeGaps   `json:"kill,omitempty"`
}

// RollFigures are a rolling update of the replicas from one binary to
// another.
type RollFigures struct {
	// From and To are the binaries, by the name given and their SHA-256.
	From string `json:"from"`
	To   string `json:"to"`
	// HandoffSeconds per replica: from its SIGTERM until the others held
	// every range.
	HandoffSeconds []float64 `json:"handoffSeconds"`
	Gaps           RangeGaps `json:"gaps"`
	// FencedWriteViolations are the replicas' writes over the whole run
	// that the audit log shows outside the writer's tenure of the object's
	// range, of AuditedWrites checked.
	FencedWriteViolations int      `json:"fencedWriteViolations"`
	AuditedWrites         int      `json:"auditedWrites"`
	ViolationSamples      []string `json:"violationSamples,omitempty"`
}

// RangeGaps is how the ranges were served while sampled: every
// PeriodSeconds each live replica's virtshard_shard_range_active was read;
// a range no replica acted on was unserved from the first sample that
// showed it so until the first that did not.
type RangeGaps struct {
	Ranges        int     `json:"ranges"`
	PeriodSeconds float64 `json:"periodSeconds"`
	Samples       int     `json:"samples"`
	// FailedScrapes counted as the replica serving nothing. FromLeases
	// counts the scrapes of a release that exports no
	// virtshard_shard_range_active: its ranges were those whose Leases it
	// held, counted only while it acted on as many as it held.
	FailedScrapes int `json:"failedScrapes"`
	FromLeases    int `json:"fromLeases,omitempty"`
	// LongestSeconds is the longest gap of any range, LongestRange its
	// range (-1: none); OverGoal the ranges with a gap over gapGoal;
	// UnservedRangeSeconds all gaps added up.
	LongestSeconds       float64 `json:"longestSeconds"`
	LongestRange         int     `json:"longestRange"`
	OverGoal             int     `json:"overGoal"`
	UnservedRangeSeconds float64 `json:"unservedRangeSeconds"`
	// PerRangeSeconds is each range's longest gap, by range index.
	PerRangeSeconds []float64 `json:"perRangeSeconds"`
}

// upgrades runs the scenario: KubeVirt's virt-controller first, alone,
// then the replicas, each on VMIs of its own.
func (r *vmiRun) upgrades(ctx context.Context, ropts replicas.Options, ranges int) (*Report, error) {
	var err error
	// Each run sets the strategy once its controller made sure the CR is
	// there; it is removed at the end.
	defer func() { _ = r.workloadUpdateStrategy(context.WithoutCancel(ctx), "null") }()
	// The replicas' writes are checked in the audit log against their
	// tenures, as the chaos scenario checks them.
	if r.auditFrom, err = r.copts.AuditLogEnd(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(ropts.LogDir, 0o755); err != nil {
		return nil, err
	}
	ropts.Kubeconfig = filepath.Join(ropts.LogDir, auditedKubeconfig)
	if err := r.copts.WriteAuditedKubeconfig(ropts.Kubeconfig); err != nil {
		return nil, err
	}
	next := ropts
	next.Args = append(slices.Clone(ropts.Args), "--launcher-image", upgradedLauncherImage)
	if r.o.PreviousController != "" {
		if ropts.Binary, err = filepath.Abs(r.o.PreviousController); err != nil {
			return nil, err
		}
	}
	ropts.Args = append(slices.Clone(ropts.Args), "--launcher-image", kubevirt.DefaultLauncherImage)
	runs, stats, err := kubevirtThenReplicas(ctx, r, ropts, ranges, "virtshard-bench-upgrade", true, func(ctx context.Context, ns, name string, ctrl underTest) (*UpgradeRun, error) {
		return r.upgradeRun(ctx, ns, name, ctrl, next)
	})
	if err != nil {
		return nil, err
	}
	return &Report{Scenario: r.scenario, VMIs: r.vmis, Replicas: r.replicas, Machine: r.machine(), Upgrades: runs, ReplicaStats: stats}, nil
}

// workloadUpdateStrategy merges strategy (JSON) into the KubeVirt CR's
// spec.workloadUpdateStrategy; "null" removes it.
func (r *vmiRun) workloadUpdateStrategy(ctx context.Context, strategy string) error {
	patch := fmt.Sprintf(`{"spec":{"workloadUpdateStrategy":%s}}`, strategy)
	_, err := r.dyn.Resource(clusterconfig.KubeVirtResource).Namespace(kubevirt.Namespace).Patch(ctx, kubevirt.CRName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("set the KubeVirt CR's workload update strategy: %w", err)
	}
	return nil
}

// upgradeRun runs the VMIs in ns under ctrl on the old launcher, upgrades
// ctrl (the replicas to next) and waits until none is outdated.
func (r *vmiRun) upgradeRun(ctx context.Context, ns, name string, ctrl underTest, next replicas.Options) (*UpgradeRun, error) {
	run := &UpgradeRun{Controller: name, VMIs: r.vmis, Created: r.vmis / 10,
		LimitPerCluster: migration.DefaultLimits.PerCluster, LimitPerNode: migration.DefaultLimits.PerNode}
	timeout := r.o.Timeout
	if timeout == 0 {
		timeout = 5*time.Minute + time.Duration(r.vmis)*time.Second
	}
	live := fmt.Sprintf(`{"workloadUpdateMethods":[%q]}`, virtv1.WorkloadUpdateMethodLiveMigrate)
	if err := r.workloadUpdateStrategy(ctx, live); err != nil {
		return nil, err
	}
	r.logf("%s: %s: %d VMIs to Running on %s", r.scenario, name, r.vmis, kubevirt.DefaultLauncherImage)
	if err := r.createMigratableVMIs(ctx, ns, "upgrade", 0, r.vmis, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if _, err := r.waitMigratableRunning(ctx, ns, r.vmis, timeout); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	acct := &processTally{}
	if err := acct.begin(ctx, ctrl); err != nil {
		return nil, err
	}

	r.logf("%s: %s: upgrading to %s", r.scenario, name, upgradedLauncherImage)
	start := time.Now()
	sampler := &inFlightSampler{kube: r.kube, kv: r.kv, ns: ns}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan struct{})
	go func() { sampler.run(sampleCtx); close(sampled) }()
	upgradeCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	created := make(chan error, 1)
	go func() {
		created <- r.createMigratableVMIs(upgradeCtx, ns, "upgrade", r.vmis, r.vmis+run.Created, upgradeCreatePace)
	}()

	var killAfter int // updated VMIs after which a replica is killed
	switch c := ctrl.(type) {
	case *kubevirtUnderTest:
		if err := acct.retire(ctx, c); err != nil {
			return nil, err
		}
		took, err := c.restart(upgradeCtx, r.copts, kubevirt.Options{LogDir: filepath.Dir(c.c.LogPath()), LauncherImage: upgradedLauncherImage})
		if err != nil {
			return nil, err
		}
		run.RestartSeconds = took.Seconds()
	case *fleet:
		roll, err := r.rollReplicas(upgradeCtx, c, next, acct)
		if err != nil {
			return nil, err
		}
		run.Roll = roll
		run.RestartSeconds = time.Since(start).Seconds()
		killAfter = (r.vmis + run.Created) / 3
	}

	total := r.vmis + run.Created
	var killed func() *RangeGaps
	err := wait.PollUntilContextCancel(upgradeCtx, time.Second, true, func(ctx context.Context) (bool, error) {
		updated, running, err := r.launcherCounts(ctx, ns)
		if err != nil {
			return false, nil
		}
		if f, ok := ctrl.(*fleet); ok && killed == nil && killAfter > 0 && updated >= killAfter {
			run.KilledAtSeconds = time.Since(start).Seconds()
			if killed, err = r.killOne(ctx, f, acct); err != nil {
				return false, err
			}
		}
		return updated == total && running == total, nil
	})
	if err != nil {
		updated, running, _ := r.launcherCounts(ctx, ns)
		return nil, fmt.Errorf("%s: %d of %d VMIs on %s, %d Running, after %s: %w", name, updated, total, upgradedLauncherImage, running, time.Since(start).Round(time.Second), err)
	}
	run.Seconds = time.Since(start).Seconds()
	if err := <-created; err != nil {
		return nil, err
	}
	stopSampling()
	<-sampled
	if killed != nil {
		run.Kill = killed()
	}
	run.MaxInFlightCluster, run.MaxOutboundPerNode, run.Samples = sampler.maxCluster, sampler.maxNode, sampler.samples

	if err := r.countUpdateMigrations(ctx, ns, run); err != nil {
		return nil, err
	}
	_, running, err := r.launcherCounts(ctx, ns)
	if err != nil {
		return nil, err
	}
	run.Lost = total - running
	if run.CROutdated, err = r.crOutdated(ctx); err != nil {
		return nil, err
	}
	writes, cpu, err := acct.end(ctx, ctrl)
	if err != nil {
		return nil, err
	}
	run.WritesPerMigration = perMigration(writes, run.Migrations)
	for _, n := range slices.Sorted(maps.Keys(cpu)) {
		run.Processes = append(run.Processes, FleetLoad{Name: n, CPUSeconds: cpu[n]})
	}
	if run.Roll != nil {
		res, err := r.checkAudit(ctx)
		if err != nil {
			return nil, err
		}
		if res.Checked == 0 {
			return nil, fmt.Errorf("the audit log holds none of the replicas' writes: it did not record them")
		}
		run.Roll.FencedWriteViolations, run.Roll.AuditedWrites = len(res.Violations), res.Checked
		for i, v := range res.Violations {
			if i == 20 {
				break
			}
			run.Roll.ViolationSamples = append(run.Roll.ViolationSamples, v.String())
		}
	}
	return run, nil
}

// rollReplicas rolls the replicas to next while the ranges' service is
// sampled.
func (r *vmiRun) rollReplicas(ctx context.Context, f *fleet, next replicas.Options, acct *processTally) (*RollFigures, error) {
	previous := r.o.PreviousName
	if previous == "" {
		previous = "--previous-controller"
		if r.o.PreviousController == "" {
			previous = "this commit, restarted"
		}
	}
	from, err := binaryName(previous, f.opts.Binary)
	if err != nil {
		return nil, err
	}
	to, err := binaryName("this commit", next.Binary)
	if err != nil {
		return nil, err
	}
	gaps := newGapSampler(f, r.kube)
	stop := gaps.start(ctx)
	handoffs, err := f.roll(ctx, next, r.logf, func(old *replicas.Replica) {
		if err := acct.retireReplica(ctx, old); err != nil {
			r.logf("%s: %s's writes and CPU before its stop not counted: %v", r.scenario, old.ID, err)
		}
	})
	g := stop()
	if err != nil {
		return nil, fmt.Errorf("roll from %s to %s: %w", from, to, err)
	}
	return &RollFigures{From: from, To: to, HandoffSeconds: handoffs, Gaps: *g}, nil
}

// killOne kills replica 1 and starts it again, as the StatefulSet
// controller would, with the ranges' service sampled from the kill until
// the returned func is called (at the upgrade's end: the figures cover the
// takeover and the restarted replica's return).
func (r *vmiRun) killOne(ctx context.Context, f *fleet, acct *processTally) (func() *RangeGaps, error) {
	victim := f.member(1)
	if err := acct.retireReplica(ctx, victim); err != nil {
		return nil, err
	}
	gaps := newGapSampler(f, r.kube)
	stop := gaps.start(ctx)
	r.logf("%s: kill -9 %s", r.scenario, victim.ID)
	victim.Kill()
	if _, err := f.waitOwned(ctx, 2*time.Minute); err != nil {
		stop()
		return nil, err
	}
	if err := f.start(1); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// launcherCounts counts the VMIs of ns on the upgraded launcher and those
// Running.
func (r *vmiRun) launcherCounts(ctx context.Context, ns string) (updated, running int, err error) {
	list, err := r.kv.VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, 0, err
	}
	for _, v := range list.Items {
		if v.Status.Phase == virtv1.Running {
			running++
			if v.Status.LauncherContainerImageVersion == upgradedLauncherImage {
				updated++
			}
		}
	}
	return updated, running, nil
}

// countUpdateMigrations counts the workload updater's migrations in ns.
func (r *vmiRun) countUpdateMigrations(ctx context.Context, ns string, run *UpgradeRun) error {
	migrations, err := r.kv.Migrations(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	per := map[string]int{}
	for _, m := range migrations.Items {
		if _, ok := m.Annotations[virtv1.WorkloadUpdateMigrationAnnotation]; !ok {
			continue
		}
		run.Migrations++
		if per[m.Spec.VMIName]++; per[m.Spec.VMIName] > 1 {
			run.Repeated++
		}
		switch m.Status.Phase {
		case virtv1.MigrationSucceeded:
			run.Succeeded++
		case virtv1.MigrationFailed:
			run.Failed++
		}
	}
	return nil
}

// crOutdated reads the KubeVirt CR's outdated count, waiting up to 30 s
// for the controller to write 0.
func (r *vmiRun) crOutdated(ctx context.Context) (*int, error) {
	var count *int
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cr, err := r.dyn.Resource(clusterconfig.KubeVirtResource).Namespace(kubevirt.Namespace).Get(ctx, kubevirt.CRName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		status, _ := cr.Object["status"].(map[string]any)
		switch v := status["outdatedVirtualMachineInstanceWorkloads"].(type) {
		case int64:
			n := int(v)
			count = &n
		case float64:
			n := int(v)
			count = &n
		}
		return count != nil && *count == 0, nil
	})
	return count, nil
}

// binaryName is a binary named as given, with the start of its SHA-256.
func binaryName(name, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%s (%s, sha256 %s)", name, filepath.Base(path), hex.EncodeToString(sum[:6])), nil
}

// processTally adds up the controller processes' writes and CPU over the
// upgrade across restarts: a process stopped or killed counts up to its
// last scrape before.
type processTally struct {
	before map[string]float64 // writes by "verb resource"
	cpu0   map[string]float64 // CPU by process name
	writes map[string]float64 // retired processes' writes
	cpu    map[string]float64 // retired processes' CPU
}

func (t *processTally) begin(ctx context.Context, ctrl underTest) error {
	stats, writes, err := ctrl.stats(ctx)
	if err != nil {
		return err
	}
	t.before, t.cpu0, t.writes, t.cpu = writes, map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, s := range stats {
		t.cpu0[s.Name] = s.CPUSeconds
	}
	return nil
}

func (t *processTally) add(stats []ReplicaStats, writes map[string]float64) {
	for _, s := range stats {
		t.cpu[s.Name] += s.CPUSeconds
	}
	for k, v := range writes {
		t.writes[k] += v
	}
}

// retire counts KubeVirt's virt-controller before it is stopped.
func (t *processTally) retire(ctx context.Context, k *kubevirtUnderTest) error {
	stats, writes, err := k.stats(ctx)
	if err != nil {
		return err
	}
	t.add(stats, writes)
	return nil
}

// retireReplica counts replica r before it is stopped or killed.
func (t *processTally) retireReplica(ctx context.Context, r *replicas.Replica) error {
	s, writes, err := replicaStats(ctx, r)
	if err != nil {
		return err
	}
	t.add([]ReplicaStats{s}, writes)
	return nil
}

// end returns the writes and each process name's CPU since begin.
func (t *processTally) end(ctx context.Context, ctrl underTest) (writes, cpu map[string]float64, err error) {
	stats, now, err := ctrl.stats(ctx)
	if err != nil {
		return nil, nil, err
	}
	writes, cpu = t.endWith(stats, now)
	return writes, cpu, nil
}

// endWith is end with the running processes' figures.
func (t *processTally) endWith(stats []ReplicaStats, now map[string]float64) (writes, cpu map[string]float64) {
	t.add(stats, now)
	return deltas(t.before, t.writes), deltas(t.cpu0, t.cpu)
}

// gapSampler samples which ranges the live replicas act on.
type gapSampler struct {
	f      *fleet
	kube   kubernetes.Interface
	period time.Duration

	mu      sync.Mutex
	g       RangeGaps
	since   map[int]time.Time // unserved since
	longest map[int]time.Duration
}

func newGapSampler(f *fleet, kube kubernetes.Interface) *gapSampler {
	return &gapSampler{f: f, kube: kube, period: 250 * time.Millisecond, since: map[int]time.Time{}, longest: map[int]time.Duration{},
		g: RangeGaps{Ranges: f.ranges, PeriodSeconds: 0.25, LongestRange: -1}}
}

// start samples until the returned func is called, which returns the
// figures.
func (s *gapSampler) start(ctx context.Context) func() *RangeGaps {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(s.period)
		defer tick.Stop()
		for {
			s.sample(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() *RangeGaps {
		cancel()
		<-done
		s.mu.Lock()
		defer s.mu.Unlock()
		now := time.Now()
		for i := range s.since {
			s.close(i, now)
		}
		s.g.PerRangeSeconds = make([]float64, s.f.ranges)
		for i, d := range s.longest {
			s.g.PerRangeSeconds[i] = d.Seconds()
		}
		return &s.g
	}
}

func (s *gapSampler) sample(ctx context.Context) {
	served := map[int]bool{}
	failed := 0
	// Replicas of a release without the per-range gauge: all of them, and
	// those acting on every range they hold.
	oldRelease := 0
	var byLeases []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, rep := range s.f.live() {
		wg.Go(func() {
			scrapeCtx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			families, err := rep.Metrics(scrapeCtx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				return
			}
			active := replicas.Sum(families, "virtshard_shard_ranges_active", nil)
			n := 0
			if fam := families["virtshard_shard_range_active"]; fam != nil {
				for _, m := range fam.Metric {
					for _, l := range m.Label {
						if i, err := strconv.Atoi(l.GetValue()); l.GetName() == "range" && err == nil && m.GetGauge().GetValue() > 0 {
							served[i] = true
							n++
						}
					}
				}
			}
			if active == 0 || n > 0 {
				return
			}
			// A release before virtshard_shard_range_active: the ranges
			// whose Leases it holds count as served only while it acts on
			// as many as it holds (read below, once for all).
			oldRelease++
			if active == replicas.Sum(families, "virtshard_shard_ranges_owned", nil) {
				byLeases = append(byLeases, rep.ID)
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	if len(byLeases) > 0 {
		held := s.heldRanges(ctx)
		for _, id := range byLeases {
			for _, i := range held[id] {
				served[i] = true
			}
		}
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.g.Samples++
	s.g.FailedScrapes += failed
	s.g.FromLeases += oldRelease
	for i := range s.f.ranges {
		_, open := s.since[i]
		switch {
		case !served[i] && !open:
			s.since[i] = now
		case served[i] && open:
			s.close(i, now)
		}
	}
}

// heldRanges are the ranges each member holds, by the range Leases.
func (s *gapSampler) heldRanges(ctx context.Context) map[string][]int {
	out := map[string][]int{}
	leases, err := s.kube.CoordinationV1().Leases(s.f.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: shard.LabelRole + "=range"})
	if err != nil {
		return out
	}
	for _, l := range leases.Items {
		i, err := strconv.Atoi(l.Labels[shard.LabelRange])
		if err == nil && l.Spec.HolderIdentity != nil {
			out[*l.Spec.HolderIdentity] = append(out[*l.Spec.HolderIdentity], i)
		}
	}
	return out
}

// close ends range i's gap at now.
func (s *gapSampler) close(i int, now time.Time) {
	gap := now.Sub(s.since[i])
	delete(s.since, i)
	s.g.UnservedRangeSeconds += gap.Seconds()
	if gap > gapGoal && s.longest[i] <= gapGoal {
		s.g.OverGoal++
	}
	s.longest[i] = max(s.longest[i], gap)
	if gap.Seconds() > s.g.LongestSeconds {
		s.g.LongestSeconds, s.g.LongestRange = gap.Seconds(), i
	}
}

// writeUpgradeMarkdown is an upgrade report as tables: a row per
// controller, then the replicas' roll.
func writeUpgradeMarkdown(w io.Writer, r *Report) {
	fmt.Fprintln(w, "| controller | VMIs (+ created during) | restart / roll, s | none outdated, s | migrations (succeeded, failed, repeated) | in flight max (limit) | out of a node max (limit) | samples | lost | CR outdated at the end | writes/migration | CPU s per process |")
	fmt.Fprintln(w, "|---|---|---:|---:|---|---|---|---:|---:|---:|---:|---|")
	for _, u := range r.Upgrades {
		var cpu []string
		for _, p := range u.Processes {
			cpu = append(cpu, fmt.Sprintf("%s %.1f", p.Name, p.CPUSeconds))
		}
		crOutdated := "never written"
		if u.CROutdated != nil {
			crOutdated = strconv.Itoa(*u.CROutdated)
		}
		fmt.Fprintf(w, "| %s | %d (+ %d) | %.1f | %.1f | %d (%d, %d, %d) | %d (%d) | %d (%d) | %d | %d | %s | %.2f | %s |\n", u.Controller, u.VMIs, u.Created,
			u.RestartSeconds, u.Seconds, u.Migrations, u.Succeeded, u.Failed, u.Repeated, u.MaxInFlightCluster, u.LimitPerCluster,
			u.MaxOutboundPerNode, u.LimitPerNode, u.Samples, u.Lost, crOutdated, u.WritesPerMigration.Total, strings.Join(cpu, ", "))
	}
	for _, u := range r.Upgrades {
		if u.Roll == nil {
			continue
		}
		ro := u.Roll
		handoffs := make([]string, len(ro.HandoffSeconds))
		for i, h := range ro.HandoffSeconds {
			handoffs[i] = fmt.Sprintf("%.2f", h)
		}
		fmt.Fprintf(w, "\nThe replicas' roll from %s to %s: handoffs %s s; %s; %d fenced-write violations in %d audited writes.\n",
			ro.From, ro.To, strings.Join(handoffs, ", "), ro.Gaps.Describe(), ro.FencedWriteViolations, ro.AuditedWrites)
		if u.Kill != nil {
			fmt.Fprintf(w, "A replica killed %.0f s into the upgrade: %s.\n", u.KilledAtSeconds, u.Kill.Describe())
		}
	}
}

// Describe puts the gaps in words.
func (g RangeGaps) Describe() string {
	longest := "no range went unserved"
	if g.LongestRange >= 0 {
		longest = fmt.Sprintf("longest gap %.2f s (range %d), %d of %d ranges unserved over %s once, %.1f range-seconds unserved in all",
			g.LongestSeconds, g.LongestRange, g.OverGoal, g.Ranges, gapGoal, g.UnservedRangeSeconds)
	}
	how := fmt.Sprintf("sampled every %.2f s, %d samples, %d failed scrapes", g.PeriodSeconds, g.Samples, g.FailedScrapes)
	if g.FromLeases > 0 {
		how += fmt.Sprintf(", %d scrapes of the previous release read with its range Leases", g.FromLeases)
	}
	return fmt.Sprintf("%s (%s)", longest, how)
}

// upgradeGoal judges the replicas' upgrade: every VMI updated within the
// limits, none lost, the roll keeping every range served (no gap over
// gapGoal) with no fenced-write violation; the time beside KubeVirt's.
func upgradeGoal(kubevirt, virtshard UpgradeRun) goal {
	ok := virtshard.Lost == 0 && virtshard.Failed == 0 && virtshard.MaxInFlightCluster <= virtshard.LimitPerCluster &&
		virtshard.MaxOutboundPerNode <= virtshard.LimitPerNode && virtshard.Samples > 0 && virtshard.Roll != nil &&
		virtshard.Roll.Gaps.OverGoal == 0 && virtshard.Roll.Gaps.Samples > 0 && virtshard.Roll.FencedWriteViolations == 0
	got := fmt.Sprintf("%d migrations, %d failed, %d lost; in flight at most %d (limit %d); none outdated after %.1f s, KubeVirt's virt-controller %.1f s (%.2f×)",
		virtshard.Migrations, virtshard.Failed, virtshard.Lost, virtshard.MaxInFlightCluster, virtshard.LimitPerCluster,
		virtshard.Seconds, kubevirt.Seconds, kubevirt.Seconds/max(virtshard.Seconds, 0.001))
	if virtshard.Roll != nil {
		got += fmt.Sprintf("; roll: %s, %d violations", virtshard.Roll.Gaps.Describe(), virtshard.Roll.FencedWriteViolations)
	}
	return goal{fmt.Sprintf("upgrade: %d VMIs, %s", virtshard.VMIs, virtshard.Controller),
		fmt.Sprintf("every VMI updated within the limits, 0 lost; the roll: no range unserved over %s, 0 violations", gapGoal), got, ok}
}
