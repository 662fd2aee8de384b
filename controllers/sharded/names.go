package sharded

import (
	"hash/fnv"
	"strings"
)

// The runtime's contract on what a controller creates: every object has a
// name that follows from what it is for (its owner, and what the owner
// asked), never one the API server generates. The fence stops a write from leaving after
// the replica's claim could have lapsed, but not one already on the wire:
// a create sent by a replica that just lost the range can reach the server
// after the range's next holder decided the same. With one name for both,
// the server takes the first and answers the second AlreadyExists, so a
// handoff cannot make a second child. KubeVirt names launcher pods,
// migration target pods and evacuation migrations with GenerateName; where
// it does, virtshard keeps its prefix and derives the suffix (ChildName),
// and keeps KubeVirt's GenerateName beside the Name, as a record: the
// server ignores a GenerateName when a Name is given. A test of this
// package fails on a GenerateName set in controllers/ other than beside a
// Name in the same literal or assignment.

// suffixAlphabet is the alphabet of the API server's generated names
// (k8s.io/apimachinery/pkg/util/rand), without vowels or confusable
// characters, so a derived suffix looks like a generated one.
const suffixAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// suffixLength is the API server's: five characters.
const suffixLength = 5

// ChildName is prefix followed by five characters derived from parts, in
// the form of a name generated from the GenerateName prefix: the same parts
// always give the same name.
func ChildName(prefix string, parts ...string) string {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	sum := h.Sum64()
	var b strings.Builder
	b.WriteString(prefix)
	for range suffixLength {
		b.WriteByte(suffixAlphabet[sum%uint64(len(suffixAlphabet))])
		sum /= uint64(len(suffixAlphabet))
	}
	return b.String()
}
