package bench

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/virtshard/virtshard/bench/audit"
	"github.com/virtshard/virtshard/bench/faults"
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

// A refused write is excused as held back by a partition only if it
// reached the server just after the proxy delivered bytes it held for that
// replica, and those bytes were sent while the replica held the range.
func TestDelayedByPartitionNeedsTheSendTime(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	line := func(replica, verb, resource, name string, received float64, code int, holder string) string {
		ev := map[string]any{
			"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": fmt.Sprint(received),
			"stage": "ResponseComplete", "verb": verb, "userAgent": audit.UserAgentPrefix + replica,
			"objectRef":                map[string]any{"resource": resource, "namespace": "ns", "name": name},
			"responseStatus":           map[string]any{"code": code},
			"requestReceivedTimestamp": at(received).Format("2006-01-02T15:04:05.000000Z07:00"),
			"stageTimestamp":           at(received).Format("2006-01-02T15:04:05.000000Z07:00"),
		}
		if resource == "leases" {
			ev["requestObject"] = map[string]any{"spec": map[string]any{"holderIdentity": holder}}
		}
		out, _ := json.Marshal(ev)
		return string(out)
	}
	// a holds range 0 from 0 s (its lease lasts 10 s), b takes it at 12 s;
	// a's patches reach the server, refused, at 20.1 s and 30 s.
	log := strings.Join([]string{
		line("a", "update", "leases", "range-0", 0, 200, "a"),
		line("b", "update", "leases", "range-0", 12, 200, "b"),
		line("a", "patch", "virtualmachineinstances", "vmi", 20.1, 409, ""),
		line("a", "patch", "virtualmachineinstances", "vmi", 30, 409, ""),
	}, "\n")
	checker := audit.Checker{LeaseNamespace: "ns", LeasePrefix: "range-", LeaseDuration: 10 * time.Second,
		RangeOf: func(string, string, string) (int, bool) { return 0, true }}
	res, err := checker.Check(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 2 {
		t.Fatalf("violations %v, want both patches", res.Violations)
	}
	cases := []struct {
		name string
		held []faults.Held
		want []bool // for the patches at 20.1 s and 30 s
	}{
		{"sent at 5 s, delivered at 20 s", []faults.Held{{Sent: at(5), Delivered: at(20)}}, []bool{true, false}},
		{"sent at 11 s, after the lease expired", []faults.Held{{Sent: at(11), Delivered: at(20)}}, []bool{false, false}},
		{"delivered a second before the write", []faults.Held{{Sent: at(5), Delivered: at(19.1)}}, []bool{false, false}},
		{"nothing held", nil, []bool{false, false}},
	}
	for _, tc := range cases {
		for _, other := range []bool{false, true} {
			replica := "a"
			if other {
				replica = "b" // another replica's proxy excuses nothing of a's
			}
			c := &chaosSetup{partitions: []partition{{replica: replica, held: func() []faults.Held { return tc.held }}}}
			for i, v := range res.Violations {
				want := tc.want[i] && !other
				if got := c.delayedByPartition(v, res); got != want {
					t.Errorf("%s, partition of %s: write at %s excused = %v, want %v", tc.name, replica, v.At.Format(time.StampMilli), got, want)
				}
			}
		}
	}
}

// The report keeps every chunk the partitions held back, with its replica,
// so that a refused write the check did not excuse can be looked at.
func TestTheHeldChunksGoIntoTheReport(t *testing.T) {
	at := time.Date(2026, 12, 6, 14, 2, 31, 0, time.UTC)
	held := []faults.Held{{Sent: at, Delivered: at.Add(20 * time.Second)}, {Sent: at.Add(time.Second), Delivered: at.Add(20 * time.Second)}}
	c := &chaosSetup{partitions: []partition{{replica: "virtshard-3", held: func() []faults.Held { return held }}}}
	got := c.heldChunks()
	if len(got) != 2 || got[0].Replica != "virtshard-3" || !got[1].Sent.Equal(held[1].Sent) || !got[1].Delivered.Equal(held[1].Delivered) {
		t.Errorf("held chunks %+v, want both of virtshard-3's", got)
	}
}
