package sharded

import (
	"context"
	"sync"
)

// Gate admits syncs to the ranges this replica holds and is not handing
// off, and counts those under way, so that a handoff can wait for them.
type Gate struct {
	fence Fence

	mu        sync.Mutex
	releasing []bool
	inflight  []int
	// drained[i] is closed when range i's last sync under way leaves
	// while it is released; nil when nobody waits.
	drained []chan struct{}
}

// NewGate returns a gate over ranges ranges; all are open.
func NewGate(ranges int, fence Fence) *Gate {
	return &Gate{fence: fence, releasing: make([]bool, ranges), inflight: make([]int, ranges), drained: make([]chan struct{}, ranges)}
}

// Enter admits a sync of range rng if the range is held and not being
// released; a sync admitted must Leave.
func (g *Gate) Enter(rng int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Counted before the fence check, under the lock Release takes first:
	// a sync admitted here is one Release waits for.
	if g.releasing[rng] || !Holds(g.fence, rng) {
		return false
	}
	g.inflight[rng]++
	return true
}

// Leave ends a sync Enter admitted.
func (g *Gate) Leave(rng int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight[rng]--
	if g.inflight[rng] == 0 && g.drained[rng] != nil {
		close(g.drained[rng])
		g.drained[rng] = nil
	}
}

// Open admits syncs of range rng again: it was (re)acquired.
func (g *Gate) Open(rng int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.releasing[rng] = false
}

// Release admits no more syncs of range rng and waits until those under
// way have left, or ctx is done.
func (g *Gate) Release(ctx context.Context, rng int) {
	g.mu.Lock()
	g.releasing[rng] = true
	if g.inflight[rng] == 0 {
		g.mu.Unlock()
		return
	}
	if g.drained[rng] == nil {
		g.drained[rng] = make(chan struct{})
	}
	drained := g.drained[rng]
	g.mu.Unlock()
	select {
	case <-drained:
	case <-ctx.Done():
	}
}
