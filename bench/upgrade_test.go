package bench

import (
	"testing"
	"time"
)

// A range's gap runs from the first sample that saw it unserved to the
// first that saw it served again; a gap still open when sampling stops
// ends then.
func TestRangeGapsAddUpEachRangesLongestGap(t *testing.T) {
	s := newGapSampler(&fleet{ranges: 4}, nil)
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s.since[1] = at(0)
	s.close(1, at(500*time.Millisecond))
	s.since[1] = at(time.Second)
	s.close(1, at(4*time.Second)) // 3 s: over the goal
	s.since[2] = at(0)
	s.close(2, at(2*time.Second)) // exactly the goal: not over it
	g := s.g
	if g.LongestRange != 1 || g.LongestSeconds != 3 {
		t.Errorf("longest %.2f s on range %d, want 3 s on range 1", g.LongestSeconds, g.LongestRange)
	}
	if g.OverGoal != 1 {
		t.Errorf("%d ranges over the goal, want 1", g.OverGoal)
	}
	if g.UnservedRangeSeconds != 5.5 {
		t.Errorf("%.2f range-seconds unserved, want 5.5", g.UnservedRangeSeconds)
	}
	s.since[1] = at(5 * time.Second)
	s.close(1, at(8*time.Second)) // range 1 over the goal again: still one range
	if s.g.OverGoal != 1 {
		t.Errorf("%d ranges over the goal after a second long gap of the same range, want 1", s.g.OverGoal)
	}
}

// The tally adds the processes stopped or killed during the upgrade to
// those running at its end, less what they had at its start.
func TestProcessTallyCountsRetiredProcesses(t *testing.T) {
	tally := &processTally{before: map[string]float64{"create pods": 10}, cpu0: map[string]float64{"a": 5, "b": 1},
		writes: map[string]float64{}, cpu: map[string]float64{}}
	// a's first process retired at 7 s of CPU and 15 pod creates.
	tally.add([]ReplicaStats{{Name: "a", CPUSeconds: 7}}, map[string]float64{"create pods": 15})
	// At the end a's successor has run 2 s and created 4 pods, b 3 s and 1.
	writes, cpu := tally.endWith([]ReplicaStats{{Name: "a", CPUSeconds: 2}, {Name: "b", CPUSeconds: 3}}, map[string]float64{"create pods": 5})
	if writes["create pods"] != 10 {
		t.Errorf("%v pod creates over the upgrade, want 10", writes["create pods"])
	}
	if cpu["a"] != 4 || cpu["b"] != 2 {
		t.Errorf("CPU seconds over the upgrade %v, want a 4, b 2", cpu)
	}
}
