package shard

import (
	"fmt"
	"hash/fnv"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
)

// Key is the object field whose hash places an object in a range, in the
// field-path syntax of KEP-5866 shard selectors.
type Key string

// The shard keys the API server supports.
const (
	KeyUID       Key = "object.metadata.uid"
	KeyNamespace Key = "object.metadata.namespace"
)

// ParseKey accepts "uid", "namespace" or a full field path.
func ParseKey(s string) (Key, error) {
	switch s {
	case "uid", string(KeyUID):
		return KeyUID, nil
	case "namespace", string(KeyNamespace):
		return KeyNamespace, nil
	}
	return "", fmt.Errorf("unknown shard key %q: want uid or namespace", s)
}

// DefaultRangeCount is the default number of ranges.
const DefaultRangeCount = 64

// Ranges cuts the 64-bit FNV-1a hash space into Count fixed, contiguous
// ranges of equal size. Range i covers [i·2^64/Count, (i+1)·2^64/Count). A
// range's index never changes, so it can be stamped on children once.
type Ranges struct {
	count int
	shift uint // 64 - log2(count): a hash's range is hash >> shift
	key   Key
}

// NewRanges returns count ranges over key. count must be a power of two
// between 1 and 65536.
func NewRanges(count int, key Key) (Ranges, error) {
	if count < 1 || count > 1<<16 || count&(count-1) != 0 {
		return Ranges{}, fmt.Errorf("range count must be a power of two between 1 and 65536, got %d", count)
	}
	if key != KeyUID && key != KeyNamespace {
		return Ranges{}, fmt.Errorf("unknown shard key %q", key)
	}
	return Ranges{count: count, shift: uint(64 - bits.TrailingZeros(uint(count))), key: key}, nil
}

// Count is the number of ranges.
func (r Ranges) Count() int { return r.count }

// Key is the field whose hash places an object.
func (r Ranges) Key() Key { return r.key }

// Hash is the FNV-1a hash of value, the same number as
// sharding.HashField(value) without the hex formatting.
func Hash(value string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(value))
	return h.Sum64()
}

// OfHash is the range a hash falls in.
func (r Ranges) OfHash(hash uint64) int {
	if r.shift == 64 {
		return 0
	}
	return int(hash >> r.shift)
}

// OfValue is the range of an object whose key field has value.
func (r Ranges) OfValue(value string) int { return r.OfHash(Hash(value)) }

// Of is the range of obj.
func (r Ranges) Of(obj metav1Object) int {
	if r.key == KeyNamespace {
		return r.OfValue(obj.GetNamespace())
	}
	return r.OfValue(string(obj.GetUID()))
}

// metav1Object is the part of metav1.Object that placing an object needs.
type metav1Object interface {
	GetNamespace() string
	GetUID() types.UID
}

// Labelled returns the range that the range label (LabelRange) on obj
// names, if it names one: a parent stamps it on the children it creates.
// Only the canonical decimal form counts, as only it matches the label
// selectors informers list with.
func (r Ranges) Labelled(obj interface{ GetLabels() map[string]string }) (int, bool) {
	return r.labelledBy(obj, LabelRange)
}

// labelledBy is the range that label on obj names, if it names one.
func (r Ranges) labelledBy(obj interface{ GetLabels() map[string]string }, label string) (int, bool) {
	value, ok := obj.GetLabels()[label]
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(value)
	if err != nil || i < 0 || i >= r.count || strconv.Itoa(i) != value {
		return 0, false
	}
	return i, true
}

// Owner is the range that acts on obj: the one its range label names, else
// the one its key hashes to. A VM's VMI carries its VM's range this way, so
// that one replica acts on both.
func (r Ranges) Owner(obj interface {
	metav1Object
	GetLabels() map[string]string
}) int {
	if i, ok := r.Labelled(obj); ok {
		return i
	}
	return r.Of(obj)
}

// Bounds returns range i's [start, end) in the hex form of shard selectors.
func (r Ranges) Bounds(i int) (start, end string) {
	return r.boundary(i), r.boundary(i + 1)
}

// boundary is the first hash of range i, as 0x-prefixed 16-digit lowercase
// hex, or 0x10000000000000000 (2^64) for i == count.
func (r Ranges) boundary(i int) string {
	if i >= r.count {
		return "0x10000000000000000"
	}
	if r.shift == 64 {
		return "0x0000000000000000"
	}
	return fmt.Sprintf("0x%016x", uint64(i)<<r.shift)
}

// Selector returns the shortest KEP-5866 shard selector matching exactly
// the given ranges: adjacent ranges merge into one shardRange term. It
// returns "" for no ranges (callers must not list with it: "" means
// everything) and for all of them.
func (r Ranges) Selector(owned []int) string {
	return r.selector(owned).String()
}

// selector is Selector as an apimachinery selector.
func (r Ranges) selector(owned []int) sharding.Selector {
	sorted := slices.Clone(owned)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var reqs []sharding.ShardRangeRequirement
	for i := 0; i < len(sorted); {
		j := i
		for j+1 < len(sorted) && sorted[j+1] == sorted[j]+1 {
			j++
		}
		start, _ := r.Bounds(sorted[i])
		_, end := r.Bounds(sorted[j])
		reqs = append(reqs, sharding.ShardRangeRequirement{Key: string(r.key), Start: start, End: end})
		i = j + 1
	}
	if len(reqs) == 1 && reqs[0].Start == "0x0000000000000000" && reqs[0].End == "0x10000000000000000" {
		return sharding.Everything()
	}
	return sharding.NewSelector(reqs...)
}

// Set is a set of range indexes, as a bitmap.
type Set []uint64

// NewSet returns the set of the given ranges.
func NewSet(count int, ranges ...int) Set {
	s := make(Set, (count+63)/64)
	for _, i := range ranges {
		s.Add(i)
	}
	return s
}

// Add puts range i in the set.
func (s Set) Add(i int) { s[i/64] |= 1 << (i % 64) }

// Remove takes range i out of the set.
func (s Set) Remove(i int) { s[i/64] &^= 1 << (i % 64) }

// Has reports whether range i is in the set.
func (s Set) Has(i int) bool { return i >= 0 && i/64 < len(s) && s[i/64]&(1<<(i%64)) != 0 }

// Len is the number of ranges in the set.
func (s Set) Len() int {
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}

// List returns the set's ranges in ascending order.
func (s Set) List() []int {
	var out []int
	for wi, w := range s {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			out = append(out, wi*64+b)
			w &^= 1 << b
		}
	}
	return out
}

// String renders the set compactly, e.g. "0-3,7,9-10".
func (s Set) String() string {
	list := s.List()
	var parts []string
	for i := 0; i < len(list); {
		j := i
		for j+1 < len(list) && list[j+1] == list[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(list[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", list[i], list[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// ParseSet reads a Set of count ranges from its String form; ranges
// outside [0, count) are an error.
func ParseSet(count int, s string) (Set, error) {
	set := NewSet(count)
	if s == "" {
		return set, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		from, to, isSpan := strings.Cut(part, "-")
		lo, err := strconv.Atoi(from)
		if err != nil {
			return nil, fmt.Errorf("range set %q: %w", s, err)
		}
		hi := lo
		if isSpan {
			if hi, err = strconv.Atoi(to); err != nil {
				return nil, fmt.Errorf("range set %q: %w", s, err)
			}
		}
		if lo < 0 || hi >= count || lo > hi {
			return nil, fmt.Errorf("range set %q: %q is not within 0-%d", s, part, count-1)
		}
		for i := lo; i <= hi; i++ {
			set.Add(i)
		}
	}
	return set, nil
}

// Matches reports whether obj's hash lies in one of ranges, with
// apimachinery's own matcher: the reference the fast path is tested against.
func (r Ranges) Matches(ranges []int, obj runtime.Object) (bool, error) {
	if len(ranges) == 0 {
		return false, nil
	}
	return r.selector(ranges).Matches(obj)
}
