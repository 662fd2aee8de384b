package expectations

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

// mutexExpectations is the reference: the same Interface and semantics
// behind one global mutex, as Kubernetes' and KubeVirt's expectations guard
// their store.
type mutexExpectations struct {
	clock   clock.PassiveClock
	mu      sync.Mutex
	records []map[string]*mutexRecord
}

type mutexRecord struct {
	adds, dels   int64
	blockedSince time.Time
}

func newMutexExpectations(ranges int, clk clock.PassiveClock) *mutexExpectations {
	m := &mutexExpectations{clock: clk, records: make([]map[string]*mutexRecord, ranges)}
	for i := range m.records {
		m.records[i] = map[string]*mutexRecord{}
	}
	return m
}

func (m *mutexExpectations) Raise(rng int, key string, adds, dels int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.records[rng][key]
	if r == nil {
		r = &mutexRecord{}
		m.records[rng][key] = r
	}
	r.adds += adds
	r.dels += dels
	r.blockedSince = time.Time{}
}

func (m *mutexExpectations) Lower(rng int, key string, adds, dels int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.records[rng][key]; r != nil {
		r.adds -= adds
		r.dels -= dels
	}
}

func (m *mutexExpectations) Satisfied(rng int, key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.records[rng][key]
	if r == nil || (r.adds <= 0 && r.dels <= 0) {
		return true
	}
	now := m.clock.Now()
	if r.blockedSince.IsZero() {
		r.blockedSince = now
		return false
	}
	return now.Sub(r.blockedSince) > Timeout
}

// BenchmarkExpectations runs what a worker does per reconcile — check,
// raise for a create, lower when the informer sees it — on 4096 keys over 64
// ranges from b's parallelism (-cpu=1,2,4), for both implementations.
func BenchmarkExpectations(b *testing.B) {
	const ranges, keys = 64, 4096
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("namespace-%d/vmi-%d", i%50, i)
	}
	impls := []struct {
		name string
		new  func() Interface
	}{
		{"impl=lockfree", func() Interface { return New(ranges, clock.RealClock{}) }},
		{"impl=mutex", func() Interface { return newMutexExpectations(ranges, clock.RealClock{}) }},
	}
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			e := impl.new()
			for i, k := range names {
				e.Raise(i%ranges, k, 0, 0) // records exist, as in steady state
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(7919))
				for pb.Next() {
					i++
					k := i % keys
					rng := k % ranges
					if e.Satisfied(rng, names[k]) {
						e.Raise(rng, names[k], 1, 0)
						e.Lower(rng, names[k], 1, 0)
					}
				}
			})
		})
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	e := New(4, clock.RealClock{})
	e.Raise(1, "ns/vmi", 0, 0)
	allocs := testing.AllocsPerRun(1000, func() {
		if e.Satisfied(1, "ns/vmi") {
			e.Raise(1, "ns/vmi", 1, 0)
			e.Lower(1, "ns/vmi", 1, 0)
		}
	})
	if allocs != 0 {
		t.Errorf("Raise/Lower/Satisfied allocate %v times per call, want 0", allocs)
	}
}
