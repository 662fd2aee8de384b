package bench

import (
	"testing"
	"time"
)

func TestSplitByFaults(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	res := &flowResult{
		SentAt:    map[string]time.Time{"before": at(1), "during": at(31), "after-recovery": at(47), "late": at(60), "never": at(32)},
		RunningAt: map[string]time.Time{"before": at(2), "during": at(41), "after-recovery": at(48), "late": at(62)},
	}
	// A kill at 30 s whose ranges were all acted on again 10 s later: the
	// window runs to 45 s.
	fault, quiet := splitByFaults(res, start, []FaultRecord{{Kind: "kill", AtSeconds: 30, RecoverySeconds: 10}})
	if fault.P50 != 10 || fault.P99 != 10 {
		t.Errorf("fault latency %v, want the one VMI created during the fault, 10 s", fault)
	}
	if quiet.P99 != 2 {
		t.Errorf("quiet latency %v, want p99 2 s from the three others", quiet)
	}
}
