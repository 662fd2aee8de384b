// Package fuzz_test fuzzes package shard's range arithmetic, selector
// building and ownership lookup. It lives apart from shard's own tests,
// whose TestMain brings the local cluster up, so that fuzzing needs none.
package fuzz_test

import (
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	serversharding "k8s.io/apiserver/pkg/sharding"

	"github.com/virtshard/virtshard/shard"
)

// ranges makes a Ranges of 2^(exp mod 11) ranges (1 to 1024).
func ranges(t *testing.T, exp uint8, byNamespace bool) shard.Ranges {
	key := shard.KeyUID
	if byNamespace {
		key = shard.KeyNamespace
	}
	r, err := shard.NewRanges(1<<(exp%11), key)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// owned picks ranges from the bits of mask, repeating it over the count.
func owned(count int, mask []byte) []int {
	if len(mask) == 0 {
		return nil
	}
	var out []int
	for i := range count {
		if mask[(i/8)%len(mask)]&(1<<(i%8)) != 0 {
			out = append(out, i)
		}
	}
	return out
}

// Range arithmetic: a hash's range contains it, ranges tile the space, and
// a Set holds exactly what was added.
func FuzzRangeArithmetic(f *testing.F) {
	f.Add(uint8(6), uint64(0), []byte{0x0f})
	f.Add(uint8(0), ^uint64(0), []byte{})
	f.Add(uint8(10), uint64(1)<<63, []byte{0xff, 0x00, 0x81})
	f.Fuzz(func(t *testing.T, exp uint8, hash uint64, mask []byte) {
		r := ranges(t, exp, false)
		i := r.OfHash(hash)
		if i < 0 || i >= r.Count() {
			t.Fatalf("OfHash(%#x) = %d, outside [0, %d)", hash, i, r.Count())
		}
		start, end := r.Bounds(i)
		lo, err := strconv.ParseUint(start[2:], 16, 64)
		if err != nil {
			t.Fatalf("bound %q: %v", start, err)
		}
		if hash < lo {
			t.Fatalf("hash %#x in range %d, which starts at %s", hash, i, start)
		}
		if end != "0x10000000000000000" {
			hi, err := strconv.ParseUint(end[2:], 16, 64)
			if err != nil || hash >= hi {
				t.Fatalf("hash %#x in range %d, which ends at %s (%v)", hash, i, end, err)
			}
		}
		list := owned(r.Count(), mask)
		set := shard.NewSet(r.Count(), list...)
		if set.Len() != len(list) {
			t.Fatalf("set of %v has %d members", list, set.Len())
		}
		for j, got := range set.List() {
			if got != list[j] {
				t.Fatalf("set lists %v, want %v", set.List(), list)
			}
		}
		set.Remove(i)
		if set.Has(i) {
			t.Fatalf("range %d still in the set after Remove", i)
		}
		set.Add(i)
		if !set.Has(i) || set.Has(-1) || set.Has(r.Count()*64) {
			t.Fatalf("Has is wrong around %d", i)
		}
	})
}

// A selector built for some ranges parses with the API server's own parser
// and matches an object exactly when the object's range is one of them.
func FuzzSelector(f *testing.F) {
	f.Add(uint8(6), false, []byte{0x0f}, "6d9f1c2a-0000-4000-8000-000000000001", "default")
	f.Add(uint8(3), true, []byte{0xaa}, "", "kube-system")
	f.Add(uint8(1), false, []byte{0x01}, "x", "")
	f.Fuzz(func(t *testing.T, exp uint8, byNamespace bool, mask []byte, uid, namespace string) {
		r := ranges(t, exp, byNamespace)
		list := owned(r.Count(), mask)
		obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: namespace}}
		want := shard.NewSet(r.Count(), list...).Has(r.Of(obj))
		selector := r.Selector(list)
		if selector == "" {
			// Nothing or everything owned: callers list without a selector
			// only in the second case.
			if len(list) != 0 && len(list) != r.Count() {
				t.Fatalf("empty selector for %d of %d ranges", len(list), r.Count())
			}
			return
		}
		parsed, err := serversharding.Parse(selector)
		if err != nil {
			t.Fatalf("selector %q does not parse: %v", selector, err)
		}
		got, err := parsed.Matches(obj)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("selector %q matches %v for range %d, want %v", selector, got, r.Of(obj), want)
		}
		if m, err := r.Matches(list, obj); err != nil || m != want {
			t.Fatalf("Matches says %v (%v), want %v", m, err, want)
		}
	})
}

// An object's owner is the range its canonical range label names, else the
// range of its key.
func FuzzOwner(f *testing.F) {
	f.Add(uint8(6), "5", true, "uid-1", "ns")
	f.Add(uint8(6), "64", true, "uid-1", "ns")
	f.Add(uint8(6), "05", true, "uid-1", "ns")
	f.Add(uint8(6), "-1", true, "uid-1", "ns")
	f.Add(uint8(6), "+3", true, "uid-1", "ns")
	f.Add(uint8(0), "0", false, "", "")
	f.Fuzz(func(t *testing.T, exp uint8, label string, labelled bool, uid, namespace string) {
		r := ranges(t, exp, false)
		obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: namespace}}
		if labelled {
			obj.Labels = map[string]string{shard.LabelRange: label}
		}
		owner := r.Owner(obj)
		if owner < 0 || owner >= r.Count() {
			t.Fatalf("owner %d outside [0, %d)", owner, r.Count())
		}
		n, err := strconv.Atoi(label)
		canonical := labelled && err == nil && n >= 0 && n < r.Count() && strconv.Itoa(n) == label
		i, ok := r.Labelled(obj)
		switch {
		case ok != canonical:
			t.Fatalf("label %q (labelled %v): Labelled says %v, want %v", label, labelled, ok, canonical)
		case canonical && (owner != n || i != n):
			t.Fatalf("label %q: owner %d, Labelled %d", label, owner, i)
		case !canonical && owner != r.Of(obj):
			t.Fatalf("label %q is not a range: owner %d, want the key's range %d", label, owner, r.Of(obj))
		}
	})
}
