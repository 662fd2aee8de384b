package shard

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Map is the shard map as the cluster records it: what `virtshard-shards`
// prints.
type Map struct {
	Leader     string
	Assignment *Assignment
	Ranges     []RangeStatus
	Members    []MemberStatus
}

// RangeStatus is one range Lease.
type RangeStatus struct {
	Range    int
	Holder   string
	Assigned string
	// Tenure is the holder's tenure the range is bound to; Live whether
	// that tenure is still the holder's member Lease's.
	Tenure string
	Live   bool
	// Taken is when the Lease was last written: taken or released.
	Taken       time.Time
	Transitions int32
}

// MemberStatus is one member Lease, with what it holds.
type MemberStatus struct {
	Member string
	Tenure string
	// Protocols are the shard protocol versions it speaks ("2", "2-3").
	Protocols string
	LastRenew time.Time
	Held      int
	Assigned  int
	Leader    bool
}

// ReadMap reads the shard map of the sharded controller name in namespace.
func ReadMap(ctx context.Context, client kubernetes.Interface, namespace, name string) (Map, error) {
	var m Map
	cfg := Config{Namespace: namespace, Name: name}
	leases, err := client.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{LabelShard: name}).String(),
	})
	if err != nil {
		return m, fmt.Errorf("list leases: %w", err)
	}
	cm, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, cfg.assignmentName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return m, fmt.Errorf("get assignment: %w", err)
	default:
		a, err := decodeAssignment(cm)
		if err != nil {
			return m, err
		}
		m.Assignment = &a
	}
	members := map[string]*MemberStatus{}
	member := func(id string) *MemberStatus {
		if members[id] == nil {
			members[id] = &MemberStatus{Member: id}
		}
		return members[id]
	}
	for _, l := range leases.Items {
		switch {
		case l.Name == cfg.leaderLeaseName():
			m.Leader = holder(&l)
		case l.Labels[LabelRole] == roleMember:
			if id := holder(&l); id != "" {
				member(id).LastRenew = renewed(&l)
				member(id).Tenure = tenureOf(&l)
				member(id).Protocols = protocolsOf(&l).String()
			}
		case l.Labels[LabelRole] == roleRange:
			i, err := strconv.Atoi(l.Labels[LabelRange])
			if err != nil {
				continue
			}
			rs := RangeStatus{Range: i, Holder: holder(&l), Tenure: tenureOf(&l), Taken: renewed(&l), Transitions: ptr.Deref(l.Spec.LeaseTransitions, 0)}
			if m.Assignment != nil && i < len(m.Assignment.Owners) {
				rs.Assigned = m.Assignment.Owners[i]
			}
			if rs.Holder != "" {
				member(rs.Holder).Held++
			}
			m.Ranges = append(m.Ranges, rs)
		}
	}
	if m.Assignment != nil {
		for _, owner := range m.Assignment.Owners {
			if owner != "" {
				member(owner).Assigned++
			}
		}
	}
	if m.Leader != "" {
		member(m.Leader).Leader = true
	}
	for k := range m.Ranges {
		rs := &m.Ranges[k]
		rs.Live = rs.Holder != "" && (rs.Tenure == "" || members[rs.Holder] != nil && members[rs.Holder].Tenure == rs.Tenure)
	}
	slices.SortFunc(m.Ranges, func(a, b RangeStatus) int { return a.Range - b.Range })
	for _, ms := range members {
		m.Members = append(m.Members, *ms)
	}
	slices.SortFunc(m.Members, func(a, b MemberStatus) int {
		switch {
		case a.Member < b.Member:
			return -1
		case a.Member > b.Member:
			return 1
		}
		return 0
	})
	return m, nil
}

func renewed(l *coordinationv1.Lease) time.Time {
	if l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// Write prints the map as two tables, ages relative to now.
func (m Map) Write(w io.Writer, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	gen := "none"
	if m.Assignment != nil {
		gen = strconv.FormatInt(m.Assignment.Generation, 10)
	}
	fmt.Fprintf(tw, "leader: %s\tassignment generation: %s\n\n", orNone(m.Leader), gen)
	fmt.Fprintln(tw, "MEMBER\tTENURE\tPROTOCOL\tRANGES HELD\tASSIGNED\tLEADER\tLAST HEARTBEAT")
	for _, ms := range m.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%v\t%s\n", ms.Member, orNone(ms.Tenure), orNone(ms.Protocols), ms.Held, ms.Assigned, ms.Leader, age(ms.LastRenew, now))
	}
	fmt.Fprintln(tw, "\nRANGE\tHOLDER\tTENURE\tASSIGNED\tTAKEN\tTRANSITIONS")
	for _, rs := range m.Ranges {
		tenure := orNone(rs.Tenure)
		if rs.Holder != "" && !rs.Live {
			tenure += " (ended)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\n", rs.Range, orNone(rs.Holder), tenure, orNone(rs.Assigned), age(rs.Taken, now), rs.Transitions)
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(100 * time.Millisecond).String()
}
