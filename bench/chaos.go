package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/virtshard/virtshard/bench/audit"
	"github.com/virtshard/virtshard/bench/faults"
	"github.com/virtshard/virtshard/shard"
)

// The chaos scenario's schedule.
const (
	// chaosKillEvery is the period of the SIGKILLs.
	chaosKillEvery = 30 * time.Second
	// chaosPartition is how long one replica's API access is cut.
	chaosPartition = 20 * time.Second
)

// FaultRecord is one fault the chaos scenario injected.
type FaultRecord struct {
	// Kind is kill, freeze, apiserver-restart or partition.
	Kind    string `json:"kind"`
	Replica string `json:"replica,omitempty"`
	// AtSeconds is when it started, from the start of the flow.
	AtSeconds float64 `json:"atSeconds"`
	// DurationSeconds is how long a freeze or a partition lasted.
	DurationSeconds float64 `json:"durationSeconds,omitempty"`
	// RecoverySeconds is from the end of the fault (the kill, the thaw, the
	// restart, the restored connection) until the live replicas acted on
	// every range again.
	RecoverySeconds float64 `json:"recoverySeconds"`
}

// chaosSetup is what the chaos scenario puts between the replicas and the
// cluster's API server: a cuttable proxy for each replica, and credentials
// of the one identity that server audits.
type chaosSetup struct {
	proxies     []*faults.Proxy
	kubeconfigs []string
	partitions  []partition
}

// partition is a replica's cut connection: the replica, and the bytes of
// its that its proxy held back (faults.Proxy.Held).
type partition struct {
	replica string
	held    func() []faults.Held
}

// Bounds on when a write a partition held back reaches the audit log,
// around the delivery of its bytes that the proxy recorded: the proxy
// records a chunk just after writing it, and the server parses a request
// moments after its bytes arrive.
const (
	heldWriteEarliest = 50 * time.Millisecond
	heldWriteLatest   = 250 * time.Millisecond
)

// delayedByPartition reports whether v, a write the server refused, is one
// that a partition held back: it reached the server just after the
// partition's proxy delivered bytes of v's replica that it held, and those
// bytes were sent while the replica held v's range. A lease fence cannot
// stop such writes (only the server can, by a precondition). Through TLS
// the proxy cannot tell which request a chunk carried, so any held chunk
// delivered just before v and sent inside the hold excuses it.
func (c *chaosSetup) delayedByPartition(v audit.Violation, res audit.Result) bool {
	for _, p := range c.partitions {
		if v.Replica != p.replica {
			continue
		}
		for _, h := range p.held() {
			if v.At.After(h.Delivered.Add(-heldWriteEarliest)) && v.At.Before(h.Delivered.Add(heldWriteLatest)) && res.InsideAt(v, h.Sent) {
				return true
			}
		}
	}
	return false
}

// heldChunks are the chunks every partition held back, with the replica
// that sent them.
func (c *chaosSetup) heldChunks() []HeldChunk {
	var out []HeldChunk
	for _, p := range c.partitions {
		for _, h := range p.held() {
			out = append(out, HeldChunk{Replica: p.replica, Sent: h.Sent, Delivered: h.Delivered})
		}
	}
	return out
}

// auditedKubeconfig is the file, in a run's log directory, of the
// kubeconfig whose writes the API server audits.
const auditedKubeconfig = "kubeconfig-audited"

// audited writes the audited kubeconfig into dir, and returns where the
// audit log ends now.
func (e *env) audited(dir string) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	from, err := e.copts.AuditLogEnd()
	if err != nil {
		return 0, err
	}
	return from, e.copts.WriteAuditedKubeconfig(filepath.Join(dir, auditedKubeconfig))
}

// startChaos puts a proxy before each replica, each with the audited
// credentials that e.audited wrote into dir.
func (e *env) startChaos(dir string, replicas int) (*chaosSetup, error) {
	c := &chaosSetup{}
	cfg, err := e.copts.RESTConfig()
	if err != nil {
		return nil, err
	}
	server, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	audited := filepath.Join(dir, auditedKubeconfig)
	for i := range replicas {
		p, err := faults.NewProxy(server.Host)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.proxies = append(c.proxies, p)
		kubeconfig := filepath.Join(dir, "kubeconfig-"+strconv.Itoa(i))
		if err := faults.RedirectKubeconfig(audited, kubeconfig, p.Addr()); err != nil {
			c.stop()
			return nil, err
		}
		c.kubeconfigs = append(c.kubeconfigs, kubeconfig)
	}
	return c, nil
}

func (c *chaosSetup) stop() {
	for _, p := range c.proxies {
		_ = p.Close()
	}
}

// chaos runs the flow while faults hit the fleet: every chaosKillEvery a
// random replica is killed with SIGKILL and started again once its ranges
// are held; and, once each, in between: a replica frozen with SIGSTOP for
// twice the lease duration (it wakes up believing it holds its ranges), the
// cluster's API server restarted, and one replica's API access cut for
// chaosPartition. The API server's audit log of the replicas' writes is then
// checked for writes outside the writer's tenure of the object's range.
func (r *vmiRun) chaos(ctx context.Context) (*Report, error) {
	fleets, err := r.startChaosFleets(ctx)
	if err != nil {
		return nil, err
	}
	defer fleets.watch.stop()
	migrating, err := r.startChaosMigrations(ctx)
	if err != nil {
		return nil, err
	}
	f := r.newFlow("vmi", r.vmis, r.rate)
	stop := make(chan struct{})
	var records []FaultRecord
	faultErr := make(chan error, 1)
	start := time.Now()
	go func() { faultErr <- r.injectFaults(ctx, start, stop, &records) }()
	m, err := r.measure(ctx, f)
	close(stop)
	if ferr := <-faultErr; err == nil && ferr != nil {
		err = fmt.Errorf("chaos: %w", ferr)
	}
	if err != nil {
		return nil, err
	}
	fleetRun := fleets.finish(ctx)
	migrated, err := migrating.finish(ctx)
	if err != nil {
		return nil, err
	}
	rep, err := r.report(ctx, m, r.vmis+fleetRun.ReplicaSetMembers+fleetRun.PoolMembers)
	if err != nil {
		return nil, err
	}
	rep.Faults = records
	rep.ChaosMigrations = migrated
	fleetRun.DuplicateLauncherPods = rep.DuplicateLauncherPods
	rep.Fleets = []FleetRun{fleetRun}
	// The API server restart replaced its process and reset its request
	// counters: its CPU time, the writes it served and the watchers it
	// closed over the run are not known.
	rep.AllClientWritesPerVMI, rep.TerminatedWatchers = 0, nil
	delete(rep.ClusterCPUSeconds, "kube-apiserver")
	fault, quiet := splitByFaults(m.flowResult, start, records)
	rep.FaultLatencySeconds, rep.QuietLatencySeconds = &fault, &quiet
	for _, rec := range records {
		if rec.Kind == "kill" {
			rep.TakeoverSeconds = max(rep.TakeoverSeconds, rec.RecoverySeconds)
			rep.HandoffSeconds = append(rep.HandoffSeconds, rec.RecoverySeconds)
		}
	}
	r.fleet.stop() // every write the replicas make is in the log
	res, err := r.checkAudit(ctx)
	if err != nil {
		return nil, err
	}
	if res.LeaseWrites == 0 || res.Checked == 0 {
		return nil, fmt.Errorf("the audit log holds %d range Lease writes and %d other writes of the replicas: it did not record them",
			res.LeaseWrites, res.Checked)
	}
	rep.HeldChunks = r.chaosSetup.heldChunks()
	var violations []audit.Violation
	for _, v := range res.Violations {
		if !v.Applied() && r.chaosSetup.delayedByPartition(v, res) {
			rep.DelayedRefusedWrites++
			continue
		}
		violations = append(violations, v)
	}
	n := len(violations)
	rep.FencedWriteViolations, rep.AuditedWrites = &n, res.Checked
	for i, v := range violations {
		if i == 20 {
			break
		}
		rep.ViolationSamples = append(rep.ViolationSamples, v.String())
	}
	return rep, nil
}

// splitByFaults returns the observed latency of the VMIs created during a
// fault (from its start until 5 s after the ranges were all acted on
// again) and of the others.
func splitByFaults(res *flowResult, start time.Time, records []FaultRecord) (fault, quiet Percentiles) {
	var during, outside []time.Duration
	for name, sent := range res.SentAt {
		running, ok := res.RunningAt[name]
		if !ok {
			continue
		}
		in := false
		for _, rec := range records {
			from := start.Add(time.Duration(rec.AtSeconds * float64(time.Second)))
			to := from.Add(time.Duration((rec.DurationSeconds+rec.RecoverySeconds)*float64(time.Second)) + 5*time.Second)
			in = in || (!sent.Before(from) && sent.Before(to))
		}
		if in {
			during = append(during, running.Sub(sent))
		} else {
			outside = append(outside, running.Sub(sent))
		}
	}
	slices.Sort(during)
	slices.Sort(outside)
	return percentiles(during), percentiles(outside)
}

// injectFaults runs the schedule until stop is closed.
func (r *vmiRun) injectFaults(ctx context.Context, start time.Time, stop <-chan struct{}, records *[]FaultRecord) error {
	random := rand.New(rand.NewPCG(1, 2)) // the same schedule on every run
	extras := []string{"freeze", "apiserver-restart", "partition"}
	for slot := 1; ; slot++ {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(start.Add(time.Duration(slot) * chaosKillEvery))):
		}
		select {
		case <-stop: // the flow ended while the last fault lasted
			return nil
		default:
		}
		victim := random.IntN(r.replicas)
		rec, err := r.killReplica(ctx, victim, start)
		if err != nil {
			return err
		}
		*records = append(*records, rec)
		// Every other slot, the next of the other faults, on another replica.
		if slot%2 == 0 && len(extras) > 0 {
			kind := extras[0]
			extras = extras[1:]
			other := (victim + 1 + random.IntN(r.replicas-1)) % r.replicas
			at := time.Since(start).Seconds()
			rec, err := r.otherFault(ctx, kind, other)
			if err != nil {
				return err
			}
			rec.AtSeconds = at
			*records = append(*records, rec)
		}
	}
}

// killReplica kills replica i, waits until its ranges are acted on again,
// and starts it anew. The fault's window starts when the kill is sent.
func (r *vmiRun) killReplica(ctx context.Context, i int, start time.Time) (FaultRecord, error) {
	victim := r.fleet.member(i)
	r.logf("chaos: kill -9 %s", victim.ID)
	killed := time.Now()
	victim.Kill()
	took, err := r.fleet.waitOwned(ctx, time.Minute)
	if err != nil {
		return FaultRecord{}, err
	}
	if err := r.fleet.start(i); err != nil {
		return FaultRecord{}, err
	}
	// The holders keep its ranges until its caches of them synced, at most
	// the handoff wait: it may hold none for that long.
	if err := r.fleet.waitHolding(ctx, r.fleet.name(i), shard.DefaultHandoffWait+time.Minute); err != nil {
		return FaultRecord{}, err
	}
	return FaultRecord{Kind: "kill", Replica: victim.ID, AtSeconds: killed.Sub(start).Seconds(), RecoverySeconds: took.Seconds()}, nil
}

func (r *vmiRun) otherFault(ctx context.Context, kind string, i int) (FaultRecord, error) {
	rec := FaultRecord{Kind: kind}
	began := time.Now()
	switch kind {
	case "freeze":
		victim := r.fleet.member(i)
		rec.Replica = victim.ID
		r.logf("chaos: freeze %s for %s", victim.ID, 2*shard.DefaultLeaseDuration)
		if err := victim.Freeze(); err != nil {
			return rec, err
		}
		time.Sleep(2 * shard.DefaultLeaseDuration)
		if err := victim.Thaw(); err != nil {
			return rec, err
		}
	case "apiserver-restart":
		r.logf("chaos: restart the cluster's kube-apiserver")
		if err := r.copts.RestartAPIServer(ctx); err != nil {
			return rec, err
		}
	case "partition":
		rec.Replica = r.fleet.name(i)
		r.logf("chaos: cut %s off the API server for %s", rec.Replica, chaosPartition)
		r.chaosSetup.proxies[i].Cut()
		time.Sleep(chaosPartition)
		r.chaosSetup.proxies[i].Restore()
		r.chaosSetup.partitions = append(r.chaosSetup.partitions, partition{replica: rec.Replica, held: r.chaosSetup.proxies[i].Held})
	}
	rec.DurationSeconds = time.Since(began).Seconds()
	took, err := r.fleet.waitOwned(ctx, 2*time.Minute)
	if err != nil {
		return rec, err
	}
	rec.RecoverySeconds = took.Seconds()
	return rec, nil
}

// checkAudit replays the audit log against the range Lease timeline in it.
// A VMI's range is its owner range, and a replica set's member may be
// written by its set's too; a launcher pod's range is its range label.
func (r *vmiRun) checkAudit(ctx context.Context) (audit.Result, error) {
	ranges, err := shard.NewRanges(r.o.Ranges, shard.KeyUID)
	if err != nil {
		return audit.Result{}, err
	}
	owner, fleet := map[string]int{}, map[string]int{}
	vmis, err := r.kv.VirtualMachineInstances(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return audit.Result{}, err
	}
	for i := range vmis.Items {
		owner["virtualmachineinstances/"+vmis.Items[i].Name] = ranges.Owner(&vmis.Items[i])
		if f, err := strconv.Atoi(vmis.Items[i].Labels[shard.LabelFleetRange]); err == nil {
			fleet["virtualmachineinstances/"+vmis.Items[i].Name] = f
		}
	}
	pods, err := r.kube.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return audit.Result{}, err
	}
	for _, p := range pods.Items {
		if i, err := strconv.Atoi(p.Labels[shard.LabelRange]); err == nil {
			owner["pods/"+p.Name] = i
		}
	}
	f, err := r.copts.OpenAuditLog(r.auditFrom)
	if err != nil {
		return audit.Result{}, err
	}
	defer f.Close()
	return audit.Checker{
		LeaseNamespace: r.leases, LeasePrefix: "virtshard-range-", MemberPrefix: "virtshard-member-", LeaseDuration: shard.DefaultLeaseDuration,
		RangeOf: func(resource, namespace, name string) (int, bool) {
			i, ok := owner[resource+"/"+name]
			return i, ok && namespace == r.ns
		},
		FleetRangeOf: func(resource, namespace, name string) (int, bool) {
			i, ok := fleet[resource+"/"+name]
			return i, ok && namespace == r.ns
		},
	}.Check(f)
}
