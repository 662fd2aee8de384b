package shard

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
	corev1 "k8s.io/api/core/v1"
)

// Assignment says which member should hold each range. It is advice from
// the leader: the range Lease decides who may act.
type Assignment struct {
	// Generation grows by one with every published change.
	Generation int64 `json:"generation"`
	// Owners[i] is the member range i is assigned to ("" for none).
	Owners []string `json:"owners"`
}

// Of returns the ranges assigned to member.
func (a Assignment) Of(member string) []int {
	var out []int
	for i, owner := range a.Owners {
		if owner == member {
			out = append(out, i)
		}
	}
	return out
}

// Moved counts the ranges whose owner differs between a and b.
func (a Assignment) Moved(b Assignment) int {
	moved := 0
	for i := range max(len(a.Owners), len(b.Owners)) {
		if at(a.Owners, i) != at(b.Owners, i) {
			moved++
		}
	}
	return moved
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

type member string

func (m member) String() string { return string(m) }

type xxhasher struct{}

func (xxhasher) Sum64(data []byte) uint64 { return xxhash.Sum64(data) }

// Assign maps count ranges onto members with bounded-load consistent
// hashing (github.com/buraksezer/consistent, ranges as its partitions): a
// member gets at most ceil(load · count / members) ranges, and a member
// joining or leaving moves few ranges besides its own. With more members
// than ranges, each of the first members by name gets one range and the
// rest get none.
func Assign(count int, members []string, load float64, replicationFactor int) []string {
	owners := make([]string, count)
	members = slices.Clone(members)
	slices.Sort(members)
	members = slices.Compact(members)
	if len(members) == 0 {
		return owners
	}
	if len(members) >= count {
		// One range each, for the first members by name: bounded loads
		// would let some take two (ceil(load) = 2) while others idle.
		copy(owners, members)
		return owners
	}
	ring := make([]consistent.Member, len(members))
	for i, m := range members {
		ring[i] = member(m)
	}
	c := consistent.New(ring, consistent.Config{
		PartitionCount:    count,
		ReplicationFactor: replicationFactor,
		Load:              libraryLoad(count, len(members), load),
		Hasher:            xxhasher{},
	})
	for i := range count {
		owners[i] = c.GetPartitionOwner(i).String()
	}
	return owners
}

// libraryLoad converts load into the factor consistent expects. consistent
// caps a member at ceil(floor(count/members) · factor) partitions, which
// with load 1 and 64 ranges over 3 members is 21 — too few to place them
// all — and with load 1.05 over 4 members is 17 where 16 fit. The factor
// returned makes its cap exactly ceil(load · count / members); the half
// keeps float rounding from adding one.
func libraryLoad(count, members int, load float64) float64 {
	limit := math.Ceil(load * float64(count) / float64(members))
	return (limit - 0.5) / float64(count/members)
}

// ConfigMap keys of a published assignment.
const (
	assignmentGenerationKey = "generation"
	assignmentOwnersKey     = "owners"
)

func encodeAssignment(a Assignment, cm *corev1.ConfigMap) error {
	owners, err := json.Marshal(a.Owners)
	if err != nil {
		return err
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[assignmentGenerationKey] = strconv.FormatInt(a.Generation, 10)
	cm.Data[assignmentOwnersKey] = string(owners)
	return nil
}

func decodeAssignment(cm *corev1.ConfigMap) (Assignment, error) {
	var a Assignment
	gen, err := strconv.ParseInt(cm.Data[assignmentGenerationKey], 10, 64)
	if err != nil {
		return a, fmt.Errorf("assignment %s: bad generation: %w", cm.Name, err)
	}
	a.Generation = gen
	if err := json.Unmarshal([]byte(cm.Data[assignmentOwnersKey]), &a.Owners); err != nil {
		return a, fmt.Errorf("assignment %s: bad owners: %w", cm.Name, err)
	}
	return a, nil
}
