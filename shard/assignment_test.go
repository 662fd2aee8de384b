package shard

import (
	"fmt"
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func members(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("virtshard-%d", i)
	}
	return out
}

func TestAssignBoundsEveryMembersLoad(t *testing.T) {
	for _, count := range []int{16, 64, 256} {
		for n := 1; n <= 12; n++ {
			owners := Assign(count, members(n), DefaultLoad, DefaultReplicationFactor)
			perMember := map[string]int{}
			for i, o := range owners {
				if o == "" {
					t.Fatalf("count %d, %d members: range %d unassigned", count, n, i)
				}
				perMember[o]++
			}
			limit := int(math.Ceil(DefaultLoad * float64(count) / float64(n)))
			for m, k := range perMember {
				if k > limit {
					t.Errorf("count %d, %d members: %s gets %d ranges, more than ceil(%v·%d/%d) = %d", count, n, m, k, DefaultLoad, count, n, limit)
				}
			}
		}
	}
}

func TestAssignIsDeterministicAndOrderFree(t *testing.T) {
	a := Assign(64, []string{"c", "a", "b"}, DefaultLoad, DefaultReplicationFactor)
	b := Assign(64, []string{"a", "b", "c", "a"}, DefaultLoad, DefaultReplicationFactor)
	if (Assignment{Owners: a}).Moved(Assignment{Owners: b}) != 0 {
		t.Errorf("the same members in another order (or repeated) gave another assignment:\n%v\n%v", a, b)
	}
}

func TestAssignWithMoreMembersThanRanges(t *testing.T) {
	owners := Assign(4, members(6), DefaultLoad, DefaultReplicationFactor)
	seen := map[string]bool{}
	for i, o := range owners {
		if o == "" || seen[o] {
			t.Errorf("range %d: owner %q, want a distinct member for each of the 4 ranges", i, o)
		}
		seen[o] = true
	}
}

func TestAssignWithNoMembersAssignsNothing(t *testing.T) {
	for i, o := range Assign(8, nil, DefaultLoad, DefaultReplicationFactor) {
		if o != "" {
			t.Errorf("range %d assigned to %q with no members", i, o)
		}
	}
}

func TestAssignmentRoundTripsThroughAConfigMap(t *testing.T) {
	want := Assignment{Generation: 42, Owners: Assign(8, members(3), DefaultLoad, DefaultReplicationFactor)}
	cm := &corev1.ConfigMap{}
	if err := encodeAssignment(want, cm); err != nil {
		t.Fatal(err)
	}
	got, err := decodeAssignment(cm)
	if err != nil {
		t.Fatal(err)
	}
	if got.Generation != 42 || got.Moved(want) != 0 {
		t.Errorf("round trip gave %+v, want %+v", got, want)
	}
	cm.Data[assignmentGenerationKey] = "not a number"
	if _, err := decodeAssignment(cm); err == nil {
		t.Error("a bad generation decoded without error")
	}
}
