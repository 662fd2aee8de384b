package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// scripted is a controller whose figures a test sets between reads.
type scripted struct {
	stat   []ReplicaStats
	writes map[string]float64
}

func (s *scripted) waitSettled(context.Context, time.Duration) error { return nil }
func (s *scripted) activeRanges(context.Context) (int, string)       { return -1, "" }
func (s *scripted) rangeCount() int                                  { return 0 }
func (s *scripted) stats(context.Context) ([]ReplicaStats, map[string]float64, error) {
	writes := map[string]float64{}
	for k, v := range s.writes {
		writes[k] = v
	}
	return append([]ReplicaStats(nil), s.stat...), writes, nil
}

// A phase counts what changed during it: writes per member without events
// and Leases, each process's CPU, and the balance over the processes.
func TestMeasurePhaseCountsWhatChangedDuringIt(t *testing.T) {
	c := &scripted{
		stat:   []ReplicaStats{{Name: "a", CPUSeconds: 10}, {Name: "b", CPUSeconds: 5}, {Name: "c", CPUSeconds: 1}},
		writes: map[string]float64{"create virtualmachineinstances": 7, "update leases": 100, "create events": 3},
	}
	act := func() error {
		c.stat = []ReplicaStats{{Name: "a", CPUSeconds: 16, CachedVMIs: 100}, {Name: "b", CPUSeconds: 5}, {Name: "c", CPUSeconds: 1}}
		c.writes = map[string]float64{"create virtualmachineinstances": 107, "patch pods": 50, "update leases": 180, "create events": 53}
		return nil
	}
	p, err := measurePhase(context.Background(), c, "up", 100, time.Second, act, func(context.Context) (bool, error) { return true, nil })
	if err != nil {
		t.Fatal(err)
	}
	if p.WritesPerMember.Total != 1.5 || len(p.WritesPerMember.ByVerbResource) != 2 || p.EventsPerMember != 0.5 {
		t.Errorf("writes per member %+v, events %.2f; want 1.50 (VMI creates 1, pod patches 0.5, no Leases), events 0.50", p.WritesPerMember, p.EventsPerMember)
	}
	if got := []float64{p.Processes[0].CPUSeconds, p.Processes[1].CPUSeconds, p.Processes[2].CPUSeconds}; got[0] != 6 || got[1] != 0 || got[2] != 0 {
		t.Errorf("CPU during the phase %v, want [6 0 0]", got)
	}
	if math.Abs(p.CPUMaxOverMean-3) > 1e-9 || math.Abs(p.CachedMaxOverMean-3) > 1e-9 {
		t.Errorf("balance: CPU %.2f, cached %.2f; want 3 and 3 (all on one of three)", p.CPUMaxOverMean, p.CachedMaxOverMean)
	}
}

func TestFleetGoalWantsEveryPhaseAndNoDuplicate(t *testing.T) {
	phases := []FleetPhase{{Seconds: 10}, {Seconds: 2}, {Seconds: 8}, {Seconds: 4}}
	kv := FleetRun{Controller: "kubevirt", Phases: phases}
	vs := FleetRun{Controller: "virtshard", ReplicaSetMembers: 50, PoolMembers: 5,
		Phases: []FleetPhase{{Seconds: 5}, {Seconds: 2}, {Seconds: 4}, {Seconds: 4}}}
	g := fleetGoal(kv, vs)
	if !g.met || !strings.Contains(g.measured, "2.00, 1.00, 2.00, 1.00") {
		t.Errorf("goal %+v, want met with the ratios 2.00, 1.00, 2.00, 1.00", g)
	}
	vs.DuplicateVMIs = 1
	if g := fleetGoal(kv, vs); g.met {
		t.Errorf("a duplicate VMI: goal %+v met", g)
	}
	vs.DuplicateVMIs, vs.Phases = 0, vs.Phases[:3]
	if g := fleetGoal(kv, vs); g.met {
		t.Errorf("a phase missing: goal %+v met", g)
	}
}

// A chaos run fails on a fleet that never became ready or made a member
// twice, as it does on a duplicate launcher pod.
func TestChaosFailsOnItsFleets(t *testing.T) {
	zero := 0
	r := &Report{Scenario: ScenarioChaos, FencedWriteViolations: &zero, Fleets: []FleetRun{{ReplicaSetMembers: 10, PoolMembers: 1}}}
	if f := r.failures(); len(f) != 0 {
		t.Fatalf("a clean run fails: %v", f)
	}
	r.Fleets[0].DuplicateVMs = 1
	r.Fleets[0].NotReady = "replica set 9 of 10 ready"
	if f := strings.Join(r.failures(), "; "); !strings.Contains(f, "1 VMs created beyond") || !strings.Contains(f, "9 of 10") {
		t.Errorf("failures %q, want the duplicate VM and the fleet not ready", f)
	}
}
