package bench

import (
	"strings"
	"testing"
)

func TestSetAvailability(t *testing.T) {
	r := &Report{Timeline: []Sample{
		{Seconds: 1, ActiveRanges: 64},
		{Seconds: 2, ActiveRanges: -1}, // not asked: skipped
		{Seconds: 3, ActiveRanges: 48}, // 16 unserved for the 2 s since the last count
		{Seconds: 4, ActiveRanges: 40},
		{Seconds: 4.5, ActiveRanges: 40},
		{Seconds: 5.5, ActiveRanges: 64},
	}}
	r.setAvailability(64)
	if r.Ranges != 64 || r.MinActiveRanges != 40 || r.MinActiveAtSeconds != 4 {
		t.Errorf("ranges %d, fewest active %d at %.1f s; want 64, 40 at 4 s", r.Ranges, r.MinActiveRanges, r.MinActiveAtSeconds)
	}
	if want := 16*2 + 24*1 + 24*0.5; r.UnservedRangeSeconds != want {
		t.Errorf("%.1f range-seconds unserved, want %.1f", r.UnservedRangeSeconds, want)
	}

	none := &Report{Timeline: []Sample{{Seconds: 1, ActiveRanges: -1}}}
	none.setAvailability(64)
	if none.Ranges != 0 || none.MinActiveRanges != 0 {
		t.Errorf("no sample counted ranges, yet the report says %d of %d", none.MinActiveRanges, none.Ranges)
	}
}

// Each verb and resource any run wrote gets a column; a run that did not
// write it shows 0.
func TestWriteWritesByVerb(t *testing.T) {
	reports := []*Report{
		{Scenario: "throughput", VMIs: 100, Replicas: 1, EventsPerVMI: 1,
			WritesPerVMI: WritesPerVMI{Total: 3, ByVerbResource: map[string]float64{"create pods": 1, "patch pods/status": 1, "patch virtualmachineinstances": 1}}},
		{Scenario: "migrations", VMIs: 10, Replicas: 3, EventsPerVMI: 2.5,
			WritesPerVMI: WritesPerVMI{Total: 2.5, ByVerbResource: map[string]float64{"create pods": 1.5, "delete pods": 1}}},
	}
	var b strings.Builder
	writeWritesByVerb(&b, reports)
	want := "| run | create pods | delete pods | patch pods/status | patch virtualmachineinstances | total | events |\n" +
		"|---|---:|---:|---:|---:|---:|---:|\n" +
		"| throughput-100-r1 | 1.00 | 0.00 | 1.00 | 1.00 | 3.00 | 1.00 |\n" +
		"| migrations-10-r3 | 1.50 | 1.00 | 0.00 | 0.00 | 2.50 | 2.50 |\n"
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

// The writes goal counts one pod status patch per VMI whatever kwok spared.
func TestWritesGoalCountsTheReadinessGatePatch(t *testing.T) {
	r := &Report{VMIs: 1000, WritesPerVMI: WritesPerVMI{Total: 2.4,
		ByVerbResource: map[string]float64{"create pods": 1, "patch pods/status": 0.4, "patch virtualmachineinstances": 1}}}
	g := writesGoal(r)
	if g.met || !strings.Contains(g.measured, "with a kubelet, 3.00") {
		t.Errorf("goal %+v, want missed at 3.00 with a kubelet", g)
	}
	r.WritesPerVMI = WritesPerVMI{Total: 1.5, ByVerbResource: map[string]float64{"create pods": 1, "patch virtualmachineinstances": 0.5}}
	if g := writesGoal(r); !g.met {
		t.Errorf("goal %+v, want met at 2.50 with a kubelet", g)
	}
	// The node label patched alone where kwok set the gate would have
	// ridden in the kubelet's gate patch: no write more.
	r.WritesPerVMI = WritesPerVMI{Total: 3, ByVerbResource: map[string]float64{"create pods": 1, "patch pods": 0.88,
		"patch pods/status": 0.12, "patch virtualmachineinstances": 1}}
	if g := writesGoal(r); g.met || !strings.Contains(g.measured, "with a kubelet, 3.00") {
		t.Errorf("goal %+v, want missed at 3.00 with a kubelet", g)
	}
}

func TestAScaleRunStoppedForMemoryMissesItsGoal(t *testing.T) {
	r := &Report{Scenario: ScenarioScale, VMIs: 50000, Replicas: 4, Running: 20000, FirstTenthVMIsPerSecond: 8, LastTenthVMIsPerSecond: 8}
	stopped := "stopped at 20000 VMIs created: the machine's available memory fell to 900 MiB"
	for _, tc := range []struct {
		stopped string
		want    bool
	}{{"", true}, {stopped, false}} {
		r.Stopped = tc.stopped
		gs := goals([]*Report{r})
		if len(gs) != 1 {
			t.Fatalf("goals %+v, want the scale goal alone", gs)
		}
		if gs[0].met != tc.want || !strings.HasPrefix(gs[0].measured, tc.stopped) {
			t.Errorf("stopped %q: goal %+v, want met %v and the reason first", tc.stopped, gs[0], tc.want)
		}
	}
}

func TestFlowStopsBelowTheMemoryFloor(t *testing.T) {
	available := int64(2 << 30)
	f := newFlow(nil, flowOptions{MemoryFloor: 1 << 30, Available: func() (int64, error) { return available, nil }})
	f.created.Store(123)
	if reason := f.memoryShort(); reason != "" {
		t.Errorf("2 GiB available over a 1 GiB floor: stopped for %q", reason)
	}
	available = 900 << 20
	if reason := f.memoryShort(); !strings.Contains(reason, "123 VMIs created") || !strings.Contains(reason, "900 MiB") {
		t.Errorf("900 MiB available under a 1 GiB floor: reason %q, want the VMIs created and the memory left", reason)
	}
	f.opts.MemoryFloor = 0
	if reason := f.memoryShort(); reason != "" {
		t.Errorf("no floor: stopped for %q", reason)
	}
}
