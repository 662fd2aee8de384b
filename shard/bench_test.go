package shard

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	"time"
)

// BenchmarkOwnership is the per-object cost of the client-side guard and of
// the fence check controllers make before writing: which range an object is
// in, and whether this member holds it.
func BenchmarkOwnership(b *testing.B) {
	for _, count := range []int{64, 1024} {
		r, err := NewRanges(count, KeyUID)
		if err != nil {
			b.Fatal(err)
		}
		objs := make([]*podMeta, 1024)
		for i := range objs {
			objs[i] = &podMeta{uid: string(uuid.NewUUID()), namespace: "ns"}
		}
		owned := NewSet(count)
		for i := 0; i < count; i += 3 {
			owned.Add(i)
		}
		b.Run(fmt.Sprintf("ranges=%d/Of", count), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				_ = r.Of(objs[i%len(objs)])
			}
		})
		b.Run(fmt.Sprintf("ranges=%d/guard", count), func(b *testing.B) {
			sel := r.ByKey(owned)
			for i := 0; b.Loop(); i++ {
				_ = sel.owns(objs[i%len(objs)])
			}
		})
		b.Run(fmt.Sprintf("ranges=%d/apimachinery-matcher", count), func(b *testing.B) {
			selector := r.selector(owned.List())
			pods := make([]any, len(objs))
			for i, o := range objs {
				pods[i] = newPod(o.uid)
			}
			for i := 0; b.Loop(); i++ {
				_, _ = selector.Matches(pods[i%len(pods)].(runtimeObject))
			}
		})
	}
}

// BenchmarkSelector is the cost of building the shard selector for a
// member's ranges, done on every acquisition and handoff.
func BenchmarkSelector(b *testing.B) {
	for _, count := range []int{64, 1024} {
		r, err := NewRanges(count, KeyUID)
		if err != nil {
			b.Fatal(err)
		}
		for _, layout := range []string{"contiguous-third", "every-third"} {
			var owned []int
			for i := range count {
				if (layout == "contiguous-third" && i < count/3) || (layout == "every-third" && i%3 == 0) {
					owned = append(owned, i)
				}
			}
			b.Run(fmt.Sprintf("ranges=%d/%s", count, layout), func(b *testing.B) {
				for b.Loop() {
					_ = r.Selector(owned)
				}
			})
		}
	}
}

// BenchmarkHolds is the fence check before every write: lock-free, two
// atomic loads and a clock read.
func BenchmarkHolds(b *testing.B) {
	r, err := NewRanges(64, KeyUID)
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewManager(Config{Client: fake.NewClientset(), Namespace: "ns", Identity: "m", Ranges: r})
	if err != nil {
		b.Fatal(err)
	}
	m.fence.Store(&fence{gen: 1, deadline: time.Now().Add(time.Hour).UnixNano()})
	for i := 0; i < 64; i += 2 {
		m.heldGen[i].Store(1)
	}
	b.Run("serial", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			_ = m.Holds(i % 64)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				_ = m.Holds(i % 64)
				i++
			}
		})
	})
}
