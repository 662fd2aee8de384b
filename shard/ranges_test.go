package shard

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	serversharding "k8s.io/apiserver/pkg/sharding"
)

// parseSelector is the API server's own parser of shard selectors.
var parseSelector = serversharding.Parse

func mustRanges(t testing.TB, count int, key Key) Ranges {
	t.Helper()
	r, err := NewRanges(count, key)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewRangesRefusesBadCounts(t *testing.T) {
	for _, count := range []int{0, -1, 3, 48, 1 << 17} {
		if _, err := NewRanges(count, KeyUID); err == nil {
			t.Errorf("NewRanges(%d) accepted a count that is not a power of two in [1, 65536]", count)
		}
	}
	if _, err := NewRanges(64, "object.metadata.name"); err == nil {
		t.Error("NewRanges accepted a key the API server cannot shard by")
	}
}

func TestHashIsApimachinerysHash(t *testing.T) {
	for i := range 1000 {
		v := string(uuid.NewUUID())
		if i == 0 {
			v = ""
		}
		if got, want := fmt.Sprintf("%016x", Hash(v)), sharding.HashField(v); got != want {
			t.Fatalf("Hash(%q) = %s, apimachinery says %s", v, got, want)
		}
	}
}

func TestBoundsTileTheHashSpace(t *testing.T) {
	for _, count := range []int{1, 2, 64, 1024} {
		r := mustRanges(t, count, KeyUID)
		start, _ := r.Bounds(0)
		_, end := r.Bounds(count - 1)
		if start != "0x0000000000000000" || end != "0x10000000000000000" {
			t.Errorf("count %d: ranges span [%s, %s), want the whole space", count, start, end)
		}
		for i := 0; i+1 < count; i++ {
			_, e := r.Bounds(i)
			s, _ := r.Bounds(i + 1)
			if e != s {
				t.Errorf("count %d: range %d ends at %s but %d starts at %s", count, i, e, i+1, s)
			}
		}
	}
}

func pod(uid, namespace string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: namespace}}
}

// The fast path (Of) and the selector must agree with apimachinery's matcher
// on every object: the server filters with that matcher.
func TestOfAndSelectorAgreeWithApimachinery(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, key := range []Key{KeyUID, KeyNamespace} {
		for _, count := range []int{1, 8, 64} {
			r := mustRanges(t, count, key)
			for trial := range 50 {
				var owned []int
				for i := range count {
					if rng.IntN(3) == 0 {
						owned = append(owned, i)
					}
				}
				set := NewSet(count, owned...)
				selector := r.Selector(owned)
				var parsed sharding.Selector
				if selector != "" {
					var err error
					if parsed, err = parseSelector(selector); err != nil {
						t.Fatalf("selector %q does not parse: %v", selector, err)
					}
				}
				for n := range 200 {
					obj := pod(string(uuid.NewUUID()), fmt.Sprintf("ns-%d-%d", trial, n))
					want, err := r.Matches(owned, obj)
					if err != nil {
						t.Fatal(err)
					}
					if got := set.Has(r.Of(obj)); got != want {
						t.Fatalf("key %s count %d owned %v: Of says %v, apimachinery says %v", key, count, owned, got, want)
					}
					if len(owned) == 0 {
						continue
					}
					if selector == "" { // every range owned: no filter at all
						if !want {
							t.Fatalf("all %d ranges owned but apimachinery does not match %v", count, obj.UID)
						}
						continue
					}
					if got, _ := parsed.Matches(obj); got != want {
						t.Fatalf("selector %q matches %v, want %v", selector, got, want)
					}
				}
			}
		}
	}
}

func TestSelectorMergesAdjacentRanges(t *testing.T) {
	r := mustRanges(t, 8, KeyUID)
	tests := []struct {
		name  string
		owned []int
		want  string
	}{
		{"no ranges give no selector", nil, ""},
		{"all ranges need no selector", []int{0, 1, 2, 3, 4, 5, 6, 7}, ""},
		{"one range is one term", []int{3}, "shardRange(object.metadata.uid, '0x6000000000000000', '0x8000000000000000')"},
		{"adjacent ranges merge into one term", []int{2, 3, 4}, "shardRange(object.metadata.uid, '0x4000000000000000', '0xa000000000000000')"},
		{"order and duplicates do not matter", []int{4, 2, 3, 3}, "shardRange(object.metadata.uid, '0x4000000000000000', '0xa000000000000000')"},
		{"gaps make separate terms", []int{0, 1, 7}, "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000') || " +
			"shardRange(object.metadata.uid, '0xe000000000000000', '0x10000000000000000')"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Selector(tt.owned); got != tt.want {
				t.Errorf("Selector(%v) = %q, want %q", tt.owned, got, tt.want)
			}
		})
	}
}

func TestSet(t *testing.T) {
	s := NewSet(130, 0, 1, 2, 64, 129)
	if s.Len() != 5 || !s.Has(64) || s.Has(3) || s.Has(-1) || s.Has(1000) {
		t.Errorf("set %v has wrong members", s.List())
	}
	s.Remove(1)
	if got := s.String(); got != "0,2,64,129" {
		t.Errorf("String() = %q", got)
	}
	s.Add(1)
	if got := s.String(); got != "0-2,64,129" {
		t.Errorf("String() = %q", got)
	}
}

func TestParseSetReadsWhatStringWrites(t *testing.T) {
	for _, ranges := range [][]int{nil, {0}, {0, 1, 2, 64, 129}, {5, 7, 9, 10, 11}} {
		s := NewSet(130, ranges...)
		got, err := ParseSet(130, s.String())
		if err != nil {
			t.Fatalf("ParseSet(%q): %v", s.String(), err)
		}
		if !slices.Equal(got.List(), s.List()) {
			t.Errorf("ParseSet(%q) = %v, want %v", s.String(), got.List(), s.List())
		}
	}
	for _, bad := range []string{"x", "1-", "-1", "3-2", "130", "0,,1"} {
		if _, err := ParseSet(130, bad); err == nil {
			t.Errorf("ParseSet(%q) accepted it", bad)
		}
	}
}
