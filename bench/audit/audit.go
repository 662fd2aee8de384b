// Package audit checks the API server's audit log against the range Lease
// timeline it also records: every write a replica made to an object must
// fall inside that replica's tenure of the object's range. A tenure starts
// with a Lease write naming the replica as holder and lasts a lease
// duration past its latest such write, unless another write (a release, or
// another holder) ends it first. A write outside is a fenced-write
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
)

// UserAgentPrefix starts the user agent of every replica's requests; the
// replica's identity follows it.
const UserAgentPrefix = "virtshard-controller/"

// Checker says which Leases are range Leases and which range a written
// object belongs to.
type Checker struct {
	// LeaseNamespace and LeasePrefix name range i's Lease
	// LeasePrefix+strconv.Itoa(i) in LeaseNamespace.
	LeaseNamespace, LeasePrefix string
	LeaseDuration               time.Duration
	// RangeOf returns the range of an object a replica wrote, or false to
	// leave the write unchecked.
	RangeOf func(resource, namespace, name string) (int, bool)
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
	// LeaseWrites counts range Lease writes (acquisitions, renewals,
	// releases).
	LeaseWrites int
	Violations  []Violation
}

type leaseWrite struct {
	at     time.Time
	holder string // "" when released
}

// Check reads an audit log (one JSON event per line) and checks every
// replica write in it.
func (c Checker) Check(log io.Reader) (Result, error) {
	leases := map[int][]leaseWrite{}
	var writes []Write
	var ranges []int
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
			holder, err := leaseHolder(ev)
			if err != nil {
				return err
			}
			leases[i] = append(leases[i], leaseWrite{at: ev.StageTimestamp.Time, holder: holder})
			return nil
		}
		i, ok := c.RangeOf(ref.Resource, ref.Namespace, ref.Name)
		if !ok {
			return nil
		}
		writes = append(writes, Write{Replica: replica, Verb: ev.Verb, Resource: ref.Resource, Namespace: ref.Namespace, Name: ref.Name,
			At: ev.RequestReceivedTimestamp.Time, Code: ev.ResponseStatus.Code})
		ranges = append(ranges, i)
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	res := Result{Checked: len(writes)}
	for i := range leases {
		slices.SortStableFunc(leases[i], func(a, b leaseWrite) int { return a.at.Compare(b.at) })
		res.LeaseWrites += len(leases[i])
	}
	for n, w := range writes {
		if reason := c.outside(leases[ranges[n]], w); reason != "" {
			res.Violations = append(res.Violations, Violation{Write: w, Range: ranges[n], Reason: reason})
		}
	}
	return res, nil
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

// outside says why w falls outside its replica's tenure, or "".
func (c Checker) outside(timeline []leaseWrite, w Write) string {
	// The last Lease write that took effect before the request arrived.
	i, _ := slices.BinarySearchFunc(timeline, w.At, func(l leaseWrite, t time.Time) int {
		if l.at.After(t) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return "before any tenure of the range"
	}
	last := timeline[i-1]
	switch {
	case last.holder == "":
		return fmt.Sprintf("the range was released at %s", last.at.Format(time.RFC3339Nano))
	case last.holder != w.Replica:
		return fmt.Sprintf("%s held the range from %s", last.holder, last.at.Format(time.RFC3339Nano))
	case w.At.Sub(last.at) >= c.LeaseDuration:
		return fmt.Sprintf("the lease was last renewed at %s, more than %s before", last.at.Format(time.RFC3339Nano), c.LeaseDuration)
	}
	return ""
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

// leaseHolder is the holder a Lease write sets: "" for a delete or a
// release.
func leaseHolder(ev *auditv1.Event) (string, error) {
	if ev.Verb == "delete" || ev.RequestObject == nil {
		return "", nil
	}
	var lease struct {
		Spec struct {
			HolderIdentity *string `json:"holderIdentity"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(ev.RequestObject.Raw, &lease); err != nil {
		return "", fmt.Errorf("lease %s in audit event %s: %w", ev.ObjectRef.Name, ev.AuditID, err)
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}
