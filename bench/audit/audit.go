// Package audit checks the API server's audit log against the Lease
// timeline it also records: every write a replica made to an object must
// fall inside that replica's hold of the object's range. A hold starts with
// a range Lease write naming the replica as holder, and ends with the next
// write of that Lease (a release, or another holder). While it lasts, the
// replica may write as long as the tenure the range Lease names does: its
// member Lease was last written by the replica in that tenure less than a
// lease duration before. A range Lease that names no tenure is held a lease
// duration past its own latest write. A write outside is a fenced-write
// violation: the zombie the fence exists for.
package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/virtshard/virtshard/shard"
)

// UserAgentPrefix starts the user agent of every replica's requests; the
// replica's identity follows it.
const UserAgentPrefix = "virtshard-controller/"

// Checker says which Leases are range Leases and which range a written
// object belongs to.
type Checker struct {
	// LeaseNamespace and LeasePrefix name range i's Lease
	// LeasePrefix+strconv.Itoa(i) in LeaseNamespace, and MemberPrefix the
	// member Lease MemberPrefix+identity.
	LeaseNamespace, LeasePrefix, MemberPrefix string
	LeaseDuration                             time.Duration
	// RangeOf returns the range of an object a replica wrote, or false to
	// leave the write unchecked.
	RangeOf func(resource, namespace, name string) (int, bool)
	// FleetRangeOf, if set, returns a second range whose holder may write
	// the object too: a fleet's member is acted on by the holder of its own
	// range and created, deleted, adopted and released by its fleet's. A
	// write held by either is in tenure.
	FleetRangeOf func(resource, namespace, name string) (int, bool)
}

// Write is one mutating request of a replica.
type Write struct {
	Replica, Verb, Resource, Namespace, Name string
	At                                       time.Time
	// Code is the response status: a write outside the tenure that the
	// server refused (a resourceVersion conflict, a name taken) changed
	// nothing, but the fence should have kept it from being sent at all.
	Code int32
}

// Violation is a write outside the replica's tenure of the object's range;
// Applied says whether it took effect.
type Violation struct {
	Write
	Range  int
	Reason string
}

// Applied reports whether the write took effect.
func (v Violation) Applied() bool { return v.Code/100 == 2 }

func (v Violation) String() string {
	return fmt.Sprintf("%s %s %s %s/%s in range %d at %s (HTTP %d): %s", v.Replica, v.Verb, v.Resource, v.Namespace, v.Name, v.Range,
		v.At.Format(time.RFC3339Nano), v.Code, v.Reason)
}

// Result of a check.
type Result struct {
	// Checked counts the replicas' writes to objects with a range, sent
	// and answered, whatever the answer.
	Checked int
	// LeaseWrites counts range Lease writes (acquisitions, releases,
	// renewals of Leases without a tenure), MemberLeaseWrites the member
	// Leases' (tenures begun, renewed, revoked, ended).
	LeaseWrites, MemberLeaseWrites int
	Violations                     []Violation

	checker Checker
	leases  map[int][]leaseWrite
	members map[string][]leaseWrite
}

// InsideAt reports whether v's write would have been inside its replica's
// hold of the range had it reached the server at t: a write a partition
// held back is judged by when it was sent.
func (r Result) InsideAt(v Violation, t time.Time) bool {
	w := v.Write
	w.At = t
	return r.checker.outside(r.leases[v.Range], r.members[w.Replica], w) == ""
}

type leaseWrite struct {
	at     time.Time
	holder string // "" when released
	tenure string
	// rv is the resourceVersion the write was made on (0: none, a create).
	rv uint64
}

// Check reads an audit log (one JSON event per line) and checks every
// replica write in it.
func (c Checker) Check(log io.Reader) (Result, error) {
	leases := map[int][]leaseWrite{}
	members := map[string][]leaseWrite{} // by identity
	var writes []Write
	var ranges []int
	fleets := map[int]int{} // writes' fleet ranges, by index in writes
	err := Scan(log, func(ev *auditv1.Event) error {
		replica, ok := strings.CutPrefix(ev.UserAgent, UserAgentPrefix)
		if !ok || ev.Stage != auditv1.StageResponseComplete || ev.ObjectRef == nil || ev.ResponseStatus == nil {
			return nil
		}
		ref := ev.ObjectRef
		if i, ok := c.leaseRange(ref); ok {
			if ev.ResponseStatus.Code/100 != 2 {
				return nil // a failed claim or renewal changes no tenure
			}
			w, err := leaseWritten(ev)
			if err != nil {
				return err
			}
			leases[i] = append(leases[i], w)
			return nil
		}
		if id, ok := c.memberLease(ref); ok {
			if ev.ResponseStatus.Code/100 != 2 {
				return nil
			}
			w, err := leaseWritten(ev)
			if err != nil {
				return err
			}
			members[id] = append(members[id], w)
			return nil
		}
		i, ok := c.RangeOf(ref.Resource, ref.Namespace, ref.Name)
		if !ok {
			return nil
		}
		if c.FleetRangeOf != nil {
			if f, ok := c.FleetRangeOf(ref.Resource, ref.Namespace, ref.Name); ok {
				fleets[len(writes)] = f
			}
		}
		writes = append(writes, Write{Replica: replica, Verb: ev.Verb, Resource: ref.Resource, Namespace: ref.Namespace, Name: ref.Name,
			At: ev.RequestReceivedTimestamp.Time, Code: ev.ResponseStatus.Code})
		ranges = append(ranges, i)
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	res := Result{Checked: len(writes), checker: c, leases: leases, members: members}
	for i := range leases {
		inCommitOrder(leases[i])
		res.LeaseWrites += len(leases[i])
	}
	for id := range members {
		inCommitOrder(members[id])
		res.MemberLeaseWrites += len(members[id])
	}
	for n, w := range writes {
		reason := c.outside(leases[ranges[n]], members[w.Replica], w)
		if f, ok := fleets[n]; ok && reason != "" && c.outside(leases[f], members[w.Replica], w) == "" {
			reason = "" // its fleet's holder wrote it
		}
		if reason != "" {
			res.Violations = append(res.Violations, Violation{Write: w, Range: ranges[n], Reason: reason})
		}
	}
	return res, nil
}

// inCommitOrder sorts one Lease's successful writes into the order the
// server applied them. The audit log's completion times mostly give it, but
// not always: a release received first and applied first can complete a
// moment after the claim that was made on the version it wrote (seen in a
// chaos run: 0.8 ms apart). Two successful writes made on versions a < b
// were applied in that order (each was made on the version current when it
// was applied, and versions grow), so such a pair is swapped, and the
// earlier write's time moved to just before the later one's: it took
// effect by then.
func inCommitOrder(timeline []leaseWrite) {
	slices.SortStableFunc(timeline, func(a, b leaseWrite) int { return a.at.Compare(b.at) })
	for j := 1; j < len(timeline); j++ {
		for k := j; k > 0 && timeline[k-1].rv != 0 && timeline[k].rv != 0 && timeline[k-1].rv > timeline[k].rv; k-- {
			timeline[k-1], timeline[k] = timeline[k], timeline[k-1]
		}
	}
	for i := len(timeline) - 2; i >= 0; i-- {
		if next := timeline[i+1].at; timeline[i].at.After(next) {
			timeline[i].at = next.Add(-time.Nanosecond)
		}
	}
}

// Scan calls fn with each event of an audit log (one JSON event per line)
// until fn returns an error.
func Scan(log io.Reader, fn func(*auditv1.Event) error) error {
	scanner := bufio.NewScanner(log)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	for scanner.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(scanner.Bytes(), &ev); err != nil {
			return fmt.Errorf("audit event: %w", err)
		}
		if err := fn(&ev); err != nil {
			return err
		}
	}
	return scanner.Err()
}

// outside says why w falls outside its replica's hold of the range, given
// the range Lease's timeline and the replica's member Lease's, or "".
func (c Checker) outside(rangeLease, memberLease []leaseWrite, w Write) string {
	last, ok := lastBefore(rangeLease, w.At)
	switch {
	case !ok:
		return "before any tenure of the range"
	case last.holder == "":
		return fmt.Sprintf("the range was released at %s", last.at.Format(time.RFC3339Nano))
	case last.holder != w.Replica:
		return fmt.Sprintf("%s held the range from %s", last.holder, last.at.Format(time.RFC3339Nano))
	case last.tenure == "" && w.At.Sub(last.at) >= c.LeaseDuration:
		return fmt.Sprintf("the lease was last renewed at %s, more than %s before", last.at.Format(time.RFC3339Nano), c.LeaseDuration)
	case last.tenure == "":
		return ""
	}
	beat, ok := lastBefore(memberLease, w.At)
	switch {
	case !ok:
		return fmt.Sprintf("the range is bound to tenure %s, which no member Lease write began", last.tenure)
	case beat.holder != w.Replica || beat.tenure != last.tenure:
		return fmt.Sprintf("tenure %s, to which the range is bound, ended at %s", last.tenure, beat.at.Format(time.RFC3339Nano))
	case w.At.Sub(beat.at) >= c.LeaseDuration:
		return fmt.Sprintf("tenure %s was last renewed at %s, more than %s before", last.tenure, beat.at.Format(time.RFC3339Nano), c.LeaseDuration)
	}
	return ""
}

// lastBefore is the last write of timeline that took effect before t.
func lastBefore(timeline []leaseWrite, t time.Time) (leaseWrite, bool) {
	i, _ := slices.BinarySearchFunc(timeline, t, func(l leaseWrite, t time.Time) int {
		if l.at.After(t) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return leaseWrite{}, false
	}
	return timeline[i-1], true
}

// memberLease returns the identity whose member Lease ref is.
func (c Checker) memberLease(ref *auditv1.ObjectReference) (string, bool) {
	if c.MemberPrefix == "" || ref.Resource != "leases" || ref.Namespace != c.LeaseNamespace {
		return "", false
	}
	return strings.CutPrefix(ref.Name, c.MemberPrefix)
}

func (c Checker) leaseRange(ref *auditv1.ObjectReference) (int, bool) {
	if ref.Resource != "leases" || ref.Namespace != c.LeaseNamespace {
		return 0, false
	}
	suffix, ok := strings.CutPrefix(ref.Name, c.LeasePrefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(suffix)
	return i, err == nil
}

// leaseWritten is what a Lease write sets: its holder ("" for a delete or
// a release) and tenure.
func leaseWritten(ev *auditv1.Event) (leaseWrite, error) {
	w := leaseWrite{at: ev.StageTimestamp.Time}
	if ev.Verb == "delete" || ev.RequestObject == nil {
		return w, nil
	}
	var lease struct {
		Metadata struct {
			Annotations     map[string]string `json:"annotations"`
			ResourceVersion string            `json:"resourceVersion"`
		} `json:"metadata"`
		Spec struct {
			HolderIdentity *string `json:"holderIdentity"`
		} `json:"spec"`
	}
	err := json.Unmarshal(ev.RequestObject.Raw, &lease)
	if err != nil {
		return w, fmt.Errorf("lease %s in audit event %s: %w", ev.ObjectRef.Name, ev.AuditID, err)
	}
	if lease.Metadata.ResourceVersion != "" {
		if w.rv, err = strconv.ParseUint(lease.Metadata.ResourceVersion, 10, 64); err != nil {
			return w, fmt.Errorf("lease %s in audit event %s: resourceVersion: %w", ev.ObjectRef.Name, ev.AuditID, err)
		}
	}
	if lease.Spec.HolderIdentity != nil {
		w.holder = *lease.Spec.HolderIdentity
		w.tenure = lease.Metadata.Annotations[shard.AnnotationTenure]
	}
	return w, nil
}

// CountWrites counts the replicas' writes in an audit log by "verb
// resource" ("patch pods/status"), as bench/replicas.Writes keys the
// replicas' own counters: the API server's count, which a replica killed
// mid-run cannot lose. Every answered write counts, whatever the answer.
func CountWrites(log io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	err := Scan(log, func(ev *auditv1.Event) error {
		if !strings.HasPrefix(ev.UserAgent, UserAgentPrefix) || ev.Stage != auditv1.StageResponseComplete || ev.ObjectRef == nil {
			return nil
		}
		switch ev.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
		default:
			return nil
		}
		resource := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			resource += "/" + ev.ObjectRef.Subresource
		}
		out[ev.Verb+" "+resource]++
		return nil
	})
	return out, err
}
