package bench_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/virtshard/virtshard/bench"
	"github.com/virtshard/virtshard/test/clustertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// maxWritesPerVMI bounds the controllers' writes per VMI in a burst that
// keeps the status batcher busy (at least burstPerReplica VMIs per active
// replica, ten times its busy depth of 20): the launcher pod's create, the
// patch of its readiness-gate condition (KubeVirt's syncPausedConditionToPod:
// a pod cannot be created with status) and one VMI status patch, plus 5% for
// patches a conflict or a handoff repeats. In smaller runs the batcher is
// often idle, and some VMIs get an intermediate Scheduling patch of their
// own (3.23 seen in the 100-VMI migrations run): smallRunWritesPerVMI; so do
// runs whose replicas stop and start (failover, rolling: a new holder of a
// range patches what its predecessor's batch left unsent, and the simulated
// virt-handler's PUTs make some of those patches conflict and repeat: 3.19
// seen in rolling-400-r4 on a loaded machine). 125 VMIs per replica were
// not enough to keep it busy on this 2-core machine either: scale-500-r4
// spent 3.18 (1.18 VMI patches per VMI) in a clean-clone run on
// 2026-12-05, so a burst counts from 200 per replica. (rolling-400-r4 once
// spent 3.58: the VMI controller re-sent a pod's node label while the pod
// cache lagged, up to four times a pod; it sends it once now, 3.00 in a
// run of that scenario alone.) A run may spend less: kwok's
// pod stage sets a pod's readiness gates itself, and a pod it got to before
// the controller needs no patch.
const (
	maxWritesPerVMI      = 3 * 1.05
	smallRunWritesPerVMI = 3.5
	burstPerReplica      = 200
	// maxFleetWritesRatio bounds a replica set's growth under virtshard
	// to a share of KubeVirt's in the same run. It was 1+smallRunWritesPerVMI
	// writes per member (4.5): on 2026-12-06 the controller of 73169a8,
	// whose CI had passed with it, spent 4.80 in a run of the scenario
	// alone and this session's 4.52 to 4.67 (the VMIs' status patches
	// vary, 1.07 to 1.47 a member), KubeVirt 8.43 and 8.68 beside them:
	// 0.54 to 0.57 of KubeVirt's. A side-by-side ratio holds on a noisy
	// machine; 0.49 at 5,000 members (BENCHMARKS.md).
	maxFleetWritesRatio = 0.65
)

// TestSmoke runs every scenario small (make bench-smoke) against the local
// cluster with real replica processes and checks the invariants: every VMI
// Running, none stuck, no duplicate launcher pod, writes per VMI within
// budget, and the scenario's own figures measured.
func TestSmoke(t *testing.T) {
	o := bench.NewOptions()
	o.Suite, o.Output = bench.SuiteSmoke, "json"
	o.Controller = clustertest.ControllerBinary(t)
	o.Out = t.TempDir()
	reports, err := o.SuiteReports(context.Background(), clustertest.Options(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != bench.SuiteRuns(bench.SuiteSmoke) {
		t.Fatalf("got %d reports, want one per smoke run (%d)", len(reports), bench.SuiteRuns(bench.SuiteSmoke))
	}
	for _, r := range reports {
		t.Run(r.Dir(), func(t *testing.T) {
			if r.Scenario == bench.ScenarioFleet {
				checkFleets(t, r, filepath.Join(o.Out, r.Dir()))
				return
			}
			if r.Scenario == bench.ScenarioDrain {
				checkDrains(t, r, filepath.Join(o.Out, r.Dir()))
				return
			}
			if r.Scenario == bench.ScenarioUpgrade {
				checkUpgrades(t, r)
				return
			}
			if r.Running != r.VMIs || r.Stuck != 0 {
				t.Errorf("%d of %d Running, %d stuck", r.Running, r.VMIs, r.Stuck)
			}
			if r.Scenario == bench.ScenarioCeiling {
				if r.CeilingPodsPerSecond <= 0 {
					t.Errorf("no ceiling measured: %+v", r)
				}
				return
			}
			if r.DuplicateLauncherPods != 0 {
				t.Errorf("%d duplicate launcher pods", r.DuplicateLauncherPods)
			}
			if r.Scenario == bench.ScenarioKubeVirt {
				// KubeVirt's own virt-controller: one process, no ranges,
				// its writes by its own count.
				if len(r.ReplicaStats) != 1 || r.ReplicaStats[0].PeakRSSBytes <= 0 || r.ReplicaStats[0].CPUSeconds <= 0 {
					t.Errorf("virt-controller stats %+v: not measured", r.ReplicaStats)
				}
				if creates := r.WritesPerVMI.ByVerbResource["create pods"]; creates < 1 || r.ScheduledPerSecond <= 0 {
					t.Errorf("virt-controller: %.2f pod creates per VMI, %.1f VMIs/s to Scheduled: not measured", creates, r.ScheduledPerSecond)
				}
				return
			}
			active := r.Replicas
			if r.Scenario == bench.ScenarioSingleton {
				active = 1
			}
			budget := maxWritesPerVMI
			if r.VMIs/active < burstPerReplica || r.Scenario == bench.ScenarioFailover || r.Scenario == bench.ScenarioRolling {
				budget = smallRunWritesPerVMI
			}
			if r.WritesPerVMI.Total <= 0 || r.WritesPerVMI.Total > budget {
				t.Errorf("controller writes per VMI %.2f %v, want in (0, %.2f]", r.WritesPerVMI.Total, r.WritesPerVMI.ByVerbResource, budget)
			}
			// Timestamps have whole seconds, so the latency by KubeVirt's
			// definition may well be 0: what must hold is that every VMI
			// carried its Running timestamp.
			if r.VMIsPerSecond <= 0 || r.ScheduledPerSecond <= 0 || r.LatencyVMIs != r.Running || r.ObservedLatencySeconds.P99 <= 0 {
				t.Errorf("throughput or latency not measured: %.1f VMIs/s (%.1f to Scheduled), %d of %d VMIs with a Running timestamp, observed latency %s",
					r.VMIsPerSecond, r.ScheduledPerSecond, r.LatencyVMIs, r.Running, r.ObservedLatencySeconds)
			}
			if len(r.ReplicaStats) != r.Replicas {
				t.Errorf("stats of %d replicas, want %d", len(r.ReplicaStats), r.Replicas)
			}
			cached, ranges := 0, 0
			for _, s := range r.ReplicaStats {
				if s.PeakRSSBytes <= 0 || s.CPUSeconds <= 0 {
					t.Errorf("%s: peak RSS %d, CPU %.2f s: not measured", s.Name, s.PeakRSSBytes, s.CPUSeconds)
				}
				cached += s.CachedVMIs
				ranges += s.OwnedRanges
			}
			wantRanges := o.Ranges
			if r.Scenario == bench.ScenarioSingleton {
				wantRanges = 1
			}
			if ranges != wantRanges || r.Ranges != wantRanges {
				t.Errorf("replicas hold %d ranges, report says %d, want %d", ranges, r.Ranges, wantRanges)
			}
			wantCached := r.VMIs
			if r.Scenario == bench.ScenarioLatency {
				wantCached = 3 * r.VMIs // the burst and two open loops
			}
			if cached != wantCached {
				t.Errorf("replicas cache %d VMIs together, want each of the %d exactly once", cached, wantCached)
			}
			switch r.Scenario {
			case bench.ScenarioMigrations:
				m := r.Migration
				switch {
				case m == nil:
					t.Error("no migration figures")
				case m.Migrations != r.VMIs/5 || m.Succeeded != m.Migrations || m.Failed != 0:
					t.Errorf("%d migrations, %d succeeded, %d failed; want a fifth of %d VMIs, all succeeded", m.Migrations, m.Succeeded, m.Failed, r.VMIs)
				case m.MaxInFlightCluster == 0 || m.MaxInFlightCluster > m.LimitPerCluster || m.MaxOutboundPerNode > m.LimitPerNode:
					t.Errorf("sampled %d in flight (limit %d), %d out of a node (limit %d)", m.MaxInFlightCluster, m.LimitPerCluster, m.MaxOutboundPerNode, m.LimitPerNode)
				case m.MigrationsPerSecond <= 0 || m.DurationSeconds.P99 <= 0:
					t.Errorf("rate %.2f/s, durations %s: not measured", m.MigrationsPerSecond, m.DurationSeconds)
				case m.WritesPerMigration.ByVerbResource["create pods"] < 1:
					t.Errorf("writes per migration %.2f %v: want at least its target pod's create", m.WritesPerMigration.Total, m.WritesPerMigration.ByVerbResource)
				}
			case bench.ScenarioThroughput:
				if r.FloorVMIsPerSecond <= 0 || r.FloorRatio <= 0 || r.APIServerCPURatio <= 0 {
					t.Errorf("floor %.1f VMIs/s, ratio %.2f, API server CPU ratio %.2f: not measured", r.FloorVMIsPerSecond, r.FloorRatio, r.APIServerCPURatio)
				}
				if r.NodeSideCPUSecondsPer1000VMIs["virtshard-handler"] <= 0 {
					t.Errorf("node side CPU %v: the simulated virt-handler's not measured", r.NodeSideCPUSecondsPer1000VMIs)
				}
			case bench.ScenarioLatency:
				if len(r.LatencyRuns) != 2 || r.LatencyRuns[1].Rate <= r.LatencyRuns[0].Rate/10 {
					t.Errorf("latency runs %+v: want one at --rate and one at half the throughput", r.LatencyRuns)
				}
			case bench.ScenarioFailover, bench.ScenarioRolling:
				if r.TakeoverSeconds <= 0 || len(r.HandoffSeconds) == 0 {
					t.Errorf("takeover %.2f s, handoffs %v: not measured", r.TakeoverSeconds, r.HandoffSeconds)
				}
			}
			// A killed replica's ranges wait a lease duration for new
			// holders: the once-a-second samples must see them unserved.
			if r.Scenario == bench.ScenarioFailover && (r.MinActiveRanges >= r.Ranges || r.UnservedRangeSeconds <= 0) {
				t.Errorf("failover: at least %d of %d ranges acted on, %.1f range-seconds unserved: the takeover went unseen",
					r.MinActiveRanges, r.Ranges, r.UnservedRangeSeconds)
			}
			dir := filepath.Join(o.Out, r.Dir())
			for _, file := range []string{"report.json", "timeline.csv", "latency.csv", "throughput.svg", "ranges.svg", "latency-cdf.svg", "cpu-kube-apiserver.pprof", "cpu-virtshard-0.pprof"} {
				if fi, err := os.Stat(filepath.Join(dir, file)); err != nil || fi.Size() == 0 {
					t.Errorf("%s missing or empty in --out: %v", file, err)
				}
			}
		})
	}
}

// checkFleets checks a fleet run: both controllers through every phase;
// the replicas with no member made twice, each member in exactly one
// replica's caches at the fleets' peaks, and a replica set's growth within
// a share of KubeVirt's writes in the same run.
func checkFleets(t *testing.T, r *bench.Report, dir string) {
	if len(r.Fleets) != 2 {
		t.Fatalf("%d fleet runs, want KubeVirt's and the replicas'", len(r.Fleets))
	}
	for _, run := range r.Fleets {
		if len(run.Phases) != 4 {
			t.Errorf("%s: %d phases, want 4", run.Controller, len(run.Phases))
			continue
		}
		for _, p := range run.Phases {
			if p.Seconds <= 0 || len(p.Processes) == 0 {
				t.Errorf("%s, %s: %.1f s, %d processes: not measured", run.Controller, p.Name, p.Seconds, len(p.Processes))
			}
		}
		if creates := run.Phases[0].WritesPerMember.ByVerbResource["create virtualmachineinstances"]; creates != 1 {
			t.Errorf("%s: %.2f VMI creates per member of the replica set, want 1", run.Controller, creates)
		}
	}
	vs := r.Fleets[1]
	if vs.DuplicateVMIs != 0 || vs.DuplicateVMs != 0 || vs.DuplicateLauncherPods != 0 || vs.EndedVMIs != 0 {
		t.Errorf("%s: duplicates: %d VMIs, %d VMs, %d launcher pods; %d VMIs ended", vs.Controller, vs.DuplicateVMIs, vs.DuplicateVMs, vs.DuplicateLauncherPods, vs.EndedVMIs)
	}
	if len(vs.Phases) == 4 {
		cached := func(p bench.FleetPhase) (vmis, vms int) {
			for _, l := range p.Processes {
				vmis, vms = vmis+l.CachedVMIs, vms+l.CachedVMs
			}
			return vmis, vms
		}
		if vmis, _ := cached(vs.Phases[0]); len(vs.Phases[0].Processes) != r.Replicas || vmis != vs.ReplicaSetMembers {
			t.Errorf("replica set ready: %d processes cache %d VMIs together, want %d replicas caching each of %d once",
				len(vs.Phases[0].Processes), vmis, r.Replicas, vs.ReplicaSetMembers)
		}
		if vmis, vms := cached(vs.Phases[2]); vmis != vs.PoolMembers || vms != vs.PoolMembers {
			t.Errorf("pool ready: the replicas cache %d VMIs and %d VMs together, want each of %d once", vmis, vms, vs.PoolMembers)
		}
		kv := r.Fleets[0].Phases[0].WritesPerMember.Total
		if w := vs.Phases[0].WritesPerMember; kv <= 0 || w.Total > maxFleetWritesRatio*kv {
			t.Errorf("replica set growth: %.2f writes per member %v, KubeVirt %.2f: want at most %.2f of KubeVirt's", w.Total, w.ByVerbResource, kv, maxFleetWritesRatio)
		}
	}
	for _, file := range []string{"report.json", "fleets.svg", "cpu-virtshard-0.pprof"} {
		if fi, err := os.Stat(filepath.Join(dir, file)); err != nil || fi.Size() == 0 {
			t.Errorf("%s missing or empty in --out: %v", file, err)
		}
	}
}

// checkDrains checks a drain run: under both controllers every VMI on the
// drained nodes evacuated and none lost, within the cluster's limit of
// migrations in flight. Out of one node the replicas are held to the limit
// plus the VMIs they evacuated twice: the sampler counts a second
// evacuation against the node its annotation names although its VMI had
// left it (a known defect, BENCHMARKS.md "Drains"), logged here.
func checkDrains(t *testing.T, r *bench.Report, dir string) {
	if len(r.Drains) != 2 {
		t.Fatalf("%d drain runs, want KubeVirt's and the replicas'", len(r.Drains))
	}
	for _, d := range r.Drains {
		onNodes := 0
		for _, n := range d.Nodes {
			onNodes += n.VMIs
			if n.Seconds <= 0 || n.MovedSeconds <= 0 || n.MovedSeconds > n.Seconds {
				t.Errorf("%s: node %s moved at %.1f s and empty at %.1f s: not measured", d.Controller, n.Name, n.MovedSeconds, n.Seconds)
			}
		}
		if len(d.Nodes) != 3 || onNodes == 0 || d.Migrations-d.Repeated != onNodes || d.Succeeded != d.Migrations || d.Failed != 0 || d.Lost != 0 {
			t.Errorf("%s: %d nodes with %d VMIs, %d evacuations (%d repeated), %d succeeded, %d failed, %d lost: want each VMI evacuated, none lost",
				d.Controller, len(d.Nodes), onNodes, d.Migrations, d.Repeated, d.Succeeded, d.Failed, d.Lost)
		}
		if d.Samples == 0 || d.MaxInFlightCluster == 0 || d.MaxInFlightCluster > d.LimitPerCluster || d.MaxOutboundPerNode > d.LimitPerNode+d.Repeated {
			t.Errorf("%s: %d samples, at most %d in flight (limit %d), %d out of a node (limit %d, %d repeated)",
				d.Controller, d.Samples, d.MaxInFlightCluster, d.LimitPerCluster, d.MaxOutboundPerNode, d.LimitPerNode, d.Repeated)
		}
		if d.Repeated > 0 {
			t.Logf("%s evacuated %d VMIs twice: %v", d.Controller, d.Repeated, d.RepeatedOff)
		}
	}
	for _, file := range []string{"report.json", "cpu-virtshard-0.pprof"} {
		if fi, err := os.Stat(filepath.Join(dir, file)); err != nil || fi.Size() == 0 {
			t.Errorf("%s missing or empty in --out: %v", file, err)
		}
	}
}

// checkUpgrades checks an upgrade run: under both controllers every VMI
// ends on the new launcher through the workload updater's migrations
// within the limits, none lost, the KubeVirt CR's count back at 0; the
// replicas' roll and kill sampled, every range served again, no write
// outside its writer's tenure. (The smoke rolls the binary to itself: the
// roll from the previous commit's is make bench's.)
func checkUpgrades(t *testing.T, r *bench.Report) {
	if len(r.Upgrades) != 2 {
		t.Fatalf("%d upgrade runs, want KubeVirt's and the replicas'", len(r.Upgrades))
	}
	for _, u := range r.Upgrades {
		total := u.VMIs + u.Created
		if u.Created == 0 || u.Seconds <= 0 || u.RestartSeconds <= 0 {
			t.Errorf("%s: %d VMIs created during the upgrade, none outdated after %.1f s, restart %.1f s: not measured", u.Controller, u.Created, u.Seconds, u.RestartSeconds)
		}
		// The VMIs created before the new launcher was in force are
		// migrated; those created after are not.
		if u.Migrations < u.VMIs || u.Migrations-u.Repeated > total || u.Succeeded != u.Migrations-u.Failed || u.Lost != 0 {
			t.Errorf("%s: %d update migrations (%d repeated, %d succeeded, %d failed) for %d VMIs on the old launcher, %d lost",
				u.Controller, u.Migrations, u.Repeated, u.Succeeded, u.Failed, u.VMIs, u.Lost)
		}
		if u.Samples == 0 || u.MaxInFlightCluster == 0 || u.MaxOutboundPerNode == 0 {
			t.Errorf("%s: %d samples, at most %d in flight, %d out of a node: not measured", u.Controller, u.Samples, u.MaxInFlightCluster, u.MaxOutboundPerNode)
		}
		if u.CROutdated == nil || *u.CROutdated != 0 {
			t.Errorf("%s: the KubeVirt CR's outdated count at the end %v, want 0", u.Controller, u.CROutdated)
		}
		if u.WritesPerMigration.ByVerbResource["create pods"] < 1 {
			t.Errorf("%s: writes per migration %v: want at least its target pod's create", u.Controller, u.WritesPerMigration.ByVerbResource)
		}
	}
	// The limits are virtshard's to keep; KubeVirt's samples are recorded
	// as measured.
	v := r.Upgrades[1]
	if v.MaxInFlightCluster > v.LimitPerCluster || v.MaxOutboundPerNode > v.LimitPerNode {
		t.Errorf("%s: at most %d in flight (limit %d), %d out of a node (limit %d)", v.Controller, v.MaxInFlightCluster, v.LimitPerCluster, v.MaxOutboundPerNode, v.LimitPerNode)
	}
	if v.Roll == nil || v.Kill == nil {
		t.Fatalf("%s: roll %v, kill %v: not measured", v.Controller, v.Roll, v.Kill)
	}
	if len(v.Roll.HandoffSeconds) != r.Replicas || v.Roll.Gaps.Samples == 0 || v.Roll.AuditedWrites == 0 {
		t.Errorf("roll: handoffs %v, %d gap samples, %d audited writes: not measured", v.Roll.HandoffSeconds, v.Roll.Gaps.Samples, v.Roll.AuditedWrites)
	}
	if v.Roll.FencedWriteViolations != 0 {
		t.Errorf("roll: %d fenced-write violations: %v", v.Roll.FencedWriteViolations, v.Roll.ViolationSamples)
	}
	// A killed replica's ranges wait for its tenure to expire: the
	// samples must see them unserved.
	if v.Kill.Samples == 0 || v.Kill.LongestRange < 0 {
		t.Errorf("kill: %d samples, longest gap %.2f s (range %d): the takeover went unseen", v.Kill.Samples, v.Kill.LongestSeconds, v.Kill.LongestRange)
	}
	t.Logf("roll: %s; kill: %s", v.Roll.Gaps.Describe(), v.Kill.Describe())
}
