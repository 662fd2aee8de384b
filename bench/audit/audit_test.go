package audit

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// event renders one audit event line. holder is the Lease's holder for
// Lease writes ("-" for none).
func event(replica, verb, resource, name string, received, done float64, code int, holder string) string {
	return tenured(replica, verb, resource, name, received, done, code, holder, "")
}

// tenured is event for a Lease write that names a tenure.
func tenured(replica, verb, resource, name string, received, done float64, code int, holder, tenure string) string {
	return versioned(replica, verb, resource, name, received, done, code, holder, tenure, "")
}

// versioned is tenured for a Lease write made on resourceVersion rv.
func versioned(replica, verb, resource, name string, received, done float64, code int, holder, tenure, rv string) string {
	ev := map[string]any{
		"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata", "auditID": fmt.Sprint(received),
		"stage": "ResponseComplete", "verb": verb, "userAgent": UserAgentPrefix + replica,
		"objectRef":                map[string]any{"resource": resource, "namespace": "ns", "name": name},
		"responseStatus":           map[string]any{"code": code},
		"requestReceivedTimestamp": at(received).Format("2006-01-02T15:04:05.000000Z07:00"),
		"stageTimestamp":           at(done).Format("2006-01-02T15:04:05.000000Z07:00"),
	}
	if resource == "leases" {
		ev["namespace"] = "ns"
		spec := map[string]any{}
		if holder != "-" {
			spec["holderIdentity"] = holder
		}
		meta := map[string]any{"annotations": map[string]string{"virtshard.io/tenure": tenure}}
		if rv != "" {
			meta["resourceVersion"] = rv
		}
		ev["requestObject"] = map[string]any{"spec": spec, "metadata": meta}
	}
	out, _ := json.Marshal(ev)
	return string(out)
}

func checker() Checker {
	return Checker{LeaseNamespace: "ns", LeasePrefix: "vs-range-", MemberPrefix: "vs-member-", LeaseDuration: 10 * time.Second,
		RangeOf: func(resource, _, name string) (int, bool) {
			if resource != "pods" && resource != "virtualmachineinstances" {
				return 0, false
			}
			var i int
			_, err := fmt.Sscanf(name, "obj-%d", &i)
			return i, err == nil
		}}
}

func TestWritesInsideTheirTenurePass(t *testing.T) {
	log := strings.Join([]string{
		event("a", "update", "leases", "vs-range-1", 0, 0.01, 200, "a"),
		event("a", "create", "pods", "obj-1", 1, 1.1, 201, ""),
		event("a", "update", "leases", "vs-range-1", 8, 8.01, 200, "a"),
		event("a", "patch", "virtualmachineinstances", "obj-1", 17, 17.1, 200, ""),
		// A failed renewal changes no tenure.
		event("b", "update", "leases", "vs-range-1", 17.2, 17.3, 409, "b"),
		// Someone else's object, and objects without a range.
		event("a", "create", "events", "obj-1.17", 17, 17.1, 201, ""),
		event("a", "update", "leases", "vs-range-1", 18, 18.01, 200, "-"),
		event("b", "update", "leases", "vs-range-1", 18.5, 18.51, 200, "b"),
		event("b", "patch", "virtualmachineinstances", "obj-1", 19, 19.1, 200, ""),
	}, "\n")
	res, err := checker().Check(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if res.Checked != 3 || res.LeaseWrites != 4 || len(res.Violations) != 0 {
		t.Errorf("checked %d writes and %d lease writes, violations %v; want 3, 4, none", res.Checked, res.LeaseWrites, res.Violations)
	}
}

func TestWritesOutsideTheirTenureAreViolations(t *testing.T) {
	log := strings.Join([]string{
		event("a", "create", "pods", "obj-2", 0.5, 0.6, 201, ""), // before any tenure
		event("a", "update", "leases", "vs-range-2", 1, 1.01, 200, "a"),
		// a freezes; its lease runs out, b takes the range.
		event("a", "patch", "virtualmachineinstances", "obj-2", 11.5, 11.6, 200, ""), // lease expired
		event("b", "update", "leases", "vs-range-2", 12, 12.01, 200, "b"),
		event("a", "delete", "pods", "obj-2", 25, 25.1, 200, ""), // the zombie wakes up
		event("a", "patch", "pods", "obj-2", 26, 26.1, 409, ""),  // refused, but sent all the same
		event("b", "update", "leases", "vs-range-2", 30, 30.01, 200, "-"),
		event("b", "patch", "virtualmachineinstances", "obj-2", 31, 31.1, 200, ""), // after its release
	}, "\n")
	res, err := checker().Check(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"before any tenure", "last renewed", "b held the range", "b held the range", "released"}
	if len(res.Violations) != len(want) {
		t.Fatalf("violations %v, want %d", res.Violations, len(want))
	}
	for i, v := range res.Violations {
		if !strings.Contains(v.Reason, want[i]) {
			t.Errorf("violation %d: %s, want it to say %q", i, v, want[i])
		}
		if v.Applied() != (v.Code != 409) {
			t.Errorf("violation %d: applied %v with HTTP %d", i, v.Applied(), v.Code)
		}
	}
}

// A range bound to a tenure is held while the member Lease renews that
// tenure, with no writes of its own; it ends with the tenure, whoever ends
// it.
func TestRangesBoundToATenureLastAsLongAsIt(t *testing.T) {
	log := strings.Join([]string{
		tenured("a", "create", "leases", "vs-member-a", 0, 0.01, 201, "a", "t1"),
		tenured("a", "update", "leases", "vs-range-3", 0.5, 0.51, 200, "a", "t1"),
		event("a", "create", "pods", "obj-3", 1, 1.1, 201, ""),
		tenured("a", "update", "leases", "vs-member-a", 8, 8.01, 200, "a", "t1"),
		event("a", "patch", "virtualmachineinstances", "obj-3", 17, 17.1, 200, ""), // renewed at 8: fine
		// a stops renewing; b revokes the tenure and takes the range.
		event("a", "patch", "pods", "obj-3", 18.5, 18.6, 200, ""), // 10.5 s after the last renewal
		tenured("b", "update", "leases", "vs-member-a", 19, 19.01, 200, "-", ""),
		event("a", "delete", "pods", "obj-3", 19.5, 19.6, 200, ""), // its tenure revoked
		tenured("b", "update", "leases", "vs-range-3", 20, 20.01, 200, "b", "t9"),
		tenured("b", "create", "leases", "vs-member-b", 0, 0.01, 201, "b", "t9"),
		tenured("b", "update", "leases", "vs-member-b", 15, 15.01, 200, "b", "t9"),
		event("b", "patch", "pods", "obj-3", 21, 21.1, 200, ""),
		// a comes back in a new tenure; the range stays b's.
		tenured("a", "update", "leases", "vs-member-a", 22, 22.01, 200, "a", "t2"),
		event("a", "patch", "pods", "obj-3", 23, 23.1, 409, ""),
	}, "\n")
	res, err := checker().Check(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"more than 10s before", "ended at", "b held the range"}
	if len(res.Violations) != len(want) || res.Checked != 6 || res.LeaseWrites != 2 || res.MemberLeaseWrites != 6 {
		t.Fatalf("checked %d, %d range and %d member lease writes, violations %v; want 6, 2, 6 and %d violations",
			res.Checked, res.LeaseWrites, res.MemberLeaseWrites, res.Violations, len(want))
	}
	for i, v := range res.Violations {
		if !strings.Contains(v.Reason, want[i]) {
			t.Errorf("violation %d: %s, want it to say %q", i, v, want[i])
		}
	}
}

// A write that reached the server after its replica lost the range is
// judged by when it was sent, if that is known: inside the hold then, it
// was inside.
func TestInsideAtJudgesAWriteBySendTime(t *testing.T) {
	log := strings.Join([]string{
		event("a", "update", "leases", "vs-range-3", 0, 0.01, 200, "a"),
		event("b", "update", "leases", "vs-range-3", 12, 12.01, 200, "b"),
		// Sent by a at 5 s, held back, delivered and refused at 15 s.
		event("a", "patch", "virtualmachineinstances", "obj-3", 15, 15.1, 409, ""),
	}, "\n")
	res, err := checker().Check(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 1 {
		t.Fatalf("violations %v, want the write at 15 s", res.Violations)
	}
	v := res.Violations[0]
	if !res.InsideAt(v, at(5)) {
		t.Error("sent at 5 s, inside a's hold (0 s to its lease's expiry at 10 s): judged outside")
	}
	for _, sent := range []float64{11, 13, -1} {
		if res.InsideAt(v, at(sent)) {
			t.Errorf("sent at %v s, outside a's hold: judged inside", sent)
		}
	}
}

func TestCountWritesByVerbAndResource(t *testing.T) {
	status := func(replica string, received float64) string {
		var ev map[string]any
		_ = json.Unmarshal([]byte(event(replica, "patch", "pods", "obj-1", received, received, 200, "")), &ev)
		ev["objectRef"].(map[string]any)["subresource"] = "status"
		out, _ := json.Marshal(ev)
		return string(out)
	}
	var other map[string]any
	_ = json.Unmarshal([]byte(event("a", "create", "pods", "obj-9", 1, 1, 201, "")), &other)
	other["userAgent"] = "kube-scheduler/v1.37.2"
	foreign, _ := json.Marshal(other)
	log := strings.Join([]string{
		event("a", "create", "pods", "obj-1", 0, 0.1, 201, ""),
		event("b", "create", "pods", "obj-2", 0, 0.1, 409, ""), // refused, still sent
		status("a", 1),
		status("b", 2),
		event("a", "patch", "virtualmachineinstances", "obj-1", 3, 3.1, 200, ""),
		event("a", "update", "leases", "vs-range-1", 4, 4.01, 200, "a"),
		string(foreign),
	}, "\n")
	got, err := CountWrites(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"create pods": 2, "patch pods/status": 2, "patch virtualmachineinstances": 1, "update leases": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counted %v, want %v", got, want)
	}
}

// A fleet's member may be written by the holder of its own range or of its
// fleet's; a holder of neither is a violation.
func TestAFleetMemberMayBeWrittenByItsFleetsHolder(t *testing.T) {
	c := checker()
	c.FleetRangeOf = func(resource, _, name string) (int, bool) {
		return 2, resource == "virtualmachineinstances" && name == "obj-1"
	}
	log := strings.Join([]string{
		event("a", "update", "leases", "vs-range-1", 0, 0.01, 200, "a"),
		event("b", "update", "leases", "vs-range-2", 0, 0.01, 200, "b"),
		event("c", "update", "leases", "vs-range-3", 0, 0.01, 200, "c"),
		event("a", "patch", "virtualmachineinstances", "obj-1", 1, 1.1, 200, ""),  // its own range's holder
		event("b", "delete", "virtualmachineinstances", "obj-1", 2, 2.1, 200, ""), // its fleet's holder
		event("c", "delete", "virtualmachineinstances", "obj-1", 3, 3.1, 200, ""), // neither
	}, "\n")
	res, err := c.Check(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if res.Checked != 3 || len(res.Violations) != 1 || res.Violations[0].Replica != "c" {
		t.Errorf("checked %d writes, violations %v; want 3 and c's delete alone", res.Checked, res.Violations)
	}
}

// A release applied before the claim made on its version can complete
// after it: the claim's resourceVersion puts it after the release.
func TestLeaseWritesAreOrderedByTheVersionTheyWereMadeOn(t *testing.T) {
	log := strings.Join([]string{
		versioned("a", "update", "leases", "vs-range-3", 0, 0.01, 200, "a", "", "10"),
		// b's claim, made on the version a's release wrote, completes first.
		versioned("b", "update", "leases", "vs-range-3", 5.1, 5.2, 200, "b", "", "30"),
		versioned("a", "update", "leases", "vs-range-3", 5.0, 5.3, 200, "-", "", "20"),
		event("b", "create", "pods", "obj-3", 6, 6.1, 201, ""),
		event("a", "patch", "pods", "obj-3", 5.25, 5.26, 200, ""), // after its own release
	}, "\n")
	res, err := checker().Check(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 1 || res.Violations[0].Replica != "a" || !strings.Contains(res.Violations[0].Reason, "b held the range") {
		t.Errorf("violations %v, want only a's write after b's claim", res.Violations)
	}
}
