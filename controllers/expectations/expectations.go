package expectations

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Timeout after which unmet expectations count as satisfied: a watch event
// can be lost (a relist then fixes the cache), and a controller must not
// wait forever for it. Kubernetes and KubeVirt use the same five minutes.
//
// The timeout runs from the first time Satisfied finds the key blocked
// after a Raise, not from the Raise itself: the next reconcile follows a
// raise within moments, and this keeps the clock (a slow call on some
// machines) off the hot path of raising, lowering and satisfied checks.
const Timeout = 5 * time.Minute

// Interface is what controllers use; the benchmark compares implementations.
type Interface interface {
	// Raise expects adds creations and dels deletions more for key.
	Raise(rng int, key string, adds, dels int64)
	// Lower records creations and deletions of key seen by the informers.
	Lower(rng int, key string, adds, dels int64)
	// Satisfied reports whether key has no outstanding expectations (or
	// they expired), so that the cache can be trusted for it.
	Satisfied(rng int, key string) bool
}

// Expectations is the lock-free implementation.
type Expectations struct {
	clock clock.PassiveClock
	// ranges[i] holds range i's records; it is swapped for a fresh map when
	// the range is dropped.
	ranges []atomic.Pointer[rangeMap]
}

// record is one key's expectations.
type record struct {
	adds atomic.Int64
	dels atomic.Int64
	// blockedSince is the UnixNano when Satisfied first found outstanding
	// expectations after the last Raise; 0 if it has not.
	blockedSince atomic.Int64
	// uids are the UIDs whose deletion is expected (types.UID → struct{}).
	uids sync.Map
}

// New returns expectations for ranges ranges.
func New(ranges int, clk clock.PassiveClock) *Expectations {
	e := &Expectations{clock: clk, ranges: make([]atomic.Pointer[rangeMap], ranges)}
	for i := range e.ranges {
		e.ranges[i].Store(newRangeMap())
	}
	return e
}

func (e *Expectations) get(rng int, key string) *record {
	return e.ranges[rng].Load().load(key)
}

func (e *Expectations) getOrCreate(rng int, key string) *record {
	return e.ranges[rng].Load().loadOrCreate(key)
}

// Raise implements Interface.
func (e *Expectations) Raise(rng int, key string, adds, dels int64) {
	r := e.getOrCreate(rng, key)
	if r.blockedSince.Load() != 0 { // a plain load is cheaper than a store
		r.blockedSince.Store(0)
	}
	if adds != 0 {
		r.adds.Add(adds)
	}
	if dels != 0 {
		r.dels.Add(dels)
	}
}

// Lower implements Interface.
func (e *Expectations) Lower(rng int, key string, adds, dels int64) {
	r := e.get(rng, key)
	if r == nil {
		return
	}
	if adds != 0 {
		r.adds.Add(-adds)
	}
	if dels != 0 {
		r.dels.Add(-dels)
	}
}

// Satisfied implements Interface.
func (e *Expectations) Satisfied(rng int, key string) bool {
	r := e.get(rng, key)
	if r == nil {
		return true
	}
	if r.adds.Load() <= 0 && r.dels.Load() <= 0 {
		return true
	}
	now := e.clock.Now().UnixNano()
	if r.blockedSince.CompareAndSwap(0, now) {
		return false
	}
	return time.Duration(now-r.blockedSince.Load()) > Timeout
}

// ExpectCreations expects n creations for key.
func (e *Expectations) ExpectCreations(rng int, key string, n int) { e.Raise(rng, key, int64(n), 0) }

// CreationObserved records one creation for key.
func (e *Expectations) CreationObserved(rng int, key string) { e.Lower(rng, key, 1, 0) }

// ExpectDeletions expects the deletion of the objects with uids for key.
// A uid already expected is not counted twice.
func (e *Expectations) ExpectDeletions(rng int, key string, uids ...types.UID) {
	r := e.getOrCreate(rng, key)
	var n int64
	for _, uid := range uids {
		if _, loaded := r.uids.LoadOrStore(uid, struct{}{}); !loaded {
			n++
		}
	}
	e.Raise(rng, key, 0, n)
}

// DeletionObserved records the deletion of uid for key, if it was
// expected: a deletion seen twice (tombstone and relist) counts once.
func (e *Expectations) DeletionObserved(rng int, key string, uid types.UID) {
	r := e.get(rng, key)
	if r == nil {
		return
	}
	if _, expected := r.uids.LoadAndDelete(uid); expected {
		r.dels.Add(-1)
	}
}

// Pending returns the outstanding creations and deletions of key.
func (e *Expectations) Pending(rng int, key string) (adds, dels int64) {
	r := e.get(rng, key)
	if r == nil {
		return 0, 0
	}
	return max(r.adds.Load(), 0), max(r.dels.Load(), 0)
}

// Delete forgets key (the object is gone).
func (e *Expectations) Delete(rng int, key string) { e.ranges[rng].Load().delete(key) }

// DropRange forgets every expectation of range rng, on handoff: the next
// owner starts from its own freshly synced cache.
func (e *Expectations) DropRange(rng int) { e.ranges[rng].Store(newRangeMap()) }

// Count returns how many keys have outstanding expectations, for a metric.
func (e *Expectations) Count() int {
	n := 0
	for i := range e.ranges {
		e.ranges[i].Load().each(func(r *record) {
			if r.adds.Load() > 0 || r.dels.Load() > 0 {
				n++
			}
		})
	}
	return n
}
