package shard

import (
	"context"
	"slices"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestProtocolSpansAreReadFromMemberLeases(t *testing.T) {
	for _, tc := range []struct {
		name        string
		tenure      string
		annotations map[string]string
		want        protocols
	}{
		{"a release before the annotations, in a tenure", "t1", nil, protocols{2, 2}},
		{"a release before tenures", "", nil, protocols{1, 1}},
		{"this release", "t1", map[string]string{AnnotationProtocol: strconv.Itoa(Protocol), AnnotationOldestProtocol: strconv.Itoa(OldestProtocol)}, ours},
		{"a later release that still speaks 2", "t1", map[string]string{AnnotationProtocol: "3", AnnotationOldestProtocol: "2"}, protocols{2, 3}},
		{"no oldest: the newest only", "t1", map[string]string{AnnotationProtocol: "3"}, protocols{3, 3}},
		{"an oldest above the newest: the newest only", "t1", map[string]string{AnnotationProtocol: "3", AnnotationOldestProtocol: "4"}, protocols{3, 3}},
		{"garbage declares nothing", "t1", map[string]string{AnnotationProtocol: "two"}, protocols{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Namespace: "ns", Name: "virtshard", Identity: "b"}
			l := cfg.newLease("virtshard-member-b", roleMember, tc.tenure, metav1.Now().Time)
			if tc.tenure == "" {
				delete(l.Annotations, AnnotationTenure)
			}
			for k, v := range tc.annotations {
				l.Annotations[k] = v
			}
			if got := protocolsOf(l); got != tc.want {
				t.Errorf("protocolsOf = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMembersShareAVersionOrNone(t *testing.T) {
	for _, tc := range []struct {
		a, b protocols
		want bool
	}{
		{protocols{2, 2}, protocols{2, 2}, true},
		{protocols{2, 2}, protocols{2, 3}, true},
		{protocols{2, 2}, protocols{3, 4}, false},
		{protocols{1, 1}, protocols{2, 2}, false},
		{protocols{3, 4}, protocols{1, 3}, true},
		{protocols{}, protocols{2, 2}, false},
	} {
		if got := tc.a.compatible(tc.b); got != tc.want {
			t.Errorf("%v compatible with %v = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := tc.b.compatible(tc.a); got != tc.want {
			t.Errorf("%v compatible with %v = %v, want %v (not symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

// The leader assigns ranges to the live members that share a protocol
// version with it, and to none of the others; the member Lease it writes
// itself declares its own span.
func TestTheLeaderAssignsNothingToAMemberOfAnIncompatibleProtocol(t *testing.T) {
	f := newTenureFixture(t)
	member := func(id, tenure string, annotations map[string]string) {
		t.Helper()
		l := f.lease(t, "virtshard-member-"+id, id, tenure, "1")
		l.Labels[LabelRole] = roleMember
		for k, v := range annotations {
			l.Annotations[k] = v
		}
		if err := f.indexer.Update(l); err != nil {
			t.Fatal(err)
		}
		f.m.obs.observe(l, f.clock.Now())
	}
	member("previous", "t1", nil)
	member("next", "t2", map[string]string{AnnotationProtocol: strconv.Itoa(Protocol + 1), AnnotationOldestProtocol: strconv.Itoa(Protocol)})
	member("pre-tenure", "", nil)
	member("far-ahead", "t3", map[string]string{AnnotationProtocol: strconv.Itoa(Protocol + 2), AnnotationOldestProtocol: strconv.Itoa(Protocol + 1)})
	if err := f.m.beat(context.Background()); err != nil {
		t.Fatal(err)
	}
	live, _, err := f.m.liveMembers()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"me", "next", "previous"}; !slices.Equal(live, want) {
		t.Errorf("members assigned ranges %v, want %v", live, want)
	}
	if got := len(f.m.leftOut); got != 2 {
		t.Errorf("%d members left out, want 2 (%v)", got, f.m.leftOut)
	}
	own, err := f.client.CoordinationV1().Leases("ns").Get(context.Background(), "virtshard-member-me", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := protocolsOf(own); got != ours {
		t.Errorf("own member Lease declares %v, want %v", got, ours)
	}
}
