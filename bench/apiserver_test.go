package bench

import (
	"fmt"
	"testing"
)

func TestServerCountersSince(t *testing.T) {
	before := serverCounters{writes: 100, terminatedWatchers: map[string]float64{"pods": 3, "virtualmachineinstances": 5, "leases": 9}}
	after := serverCounters{writes: 250, terminatedWatchers: map[string]float64{"pods": 10, "virtualmachineinstances": 5, "nodes": 2, "leases": 1}}
	got := after.since(before)
	if got.writes != 150 {
		t.Errorf("writes %v, want 150", got.writes)
	}
	// Unchanged counters are left out, and so is one that went back (the
	// server restarted): what it closed is not known.
	if want := map[string]float64{"pods": 7, "nodes": 2}; fmt.Sprint(got.terminatedWatchers) != fmt.Sprint(want) {
		t.Errorf("terminated watchers %v, want %v", got.terminatedWatchers, want)
	}
}
