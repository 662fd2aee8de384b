package expectations

import (
	"maps"
	"sync"
	"sync/atomic"
)

// rangeMap maps keys to records for one range. Lookups of existing keys —
// the hot path — read an immutable snapshot through one atomic load and a
// plain map lookup, without locking. New keys go to a dirty copy under a
// per-range mutex, which becomes the snapshot once lookups have missed the
// snapshot as often as the copy has keys, so the copying is amortized (the
// read/dirty scheme of the original sync.Map, typed for string keys: a
// sync.Map's interface keys cost more per lookup than an uncontended
// mutex around a typed map).
type rangeMap struct {
	read   atomic.Pointer[map[string]*record]
	mu     sync.Mutex
	dirty  map[string]*record // nil, or the snapshot plus new keys
	misses int
}

func newRangeMap() *rangeMap {
	m := &rangeMap{}
	empty := map[string]*record{}
	m.read.Store(&empty)
	return m
}

// load returns key's record, or nil.
func (m *rangeMap) load(key string) *record {
	if r, ok := (*m.read.Load())[key]; ok {
		return r
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := (*m.read.Load())[key]; ok {
		return r
	}
	if m.dirty == nil {
		return nil
	}
	r := m.dirty[key]
	m.missLocked()
	return r
}

// loadOrCreate returns key's record, creating it if needed.
func (m *rangeMap) loadOrCreate(key string) *record {
	if r, ok := (*m.read.Load())[key]; ok {
		return r
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := (*m.read.Load())[key]; ok {
		return r
	}
	if m.dirty == nil {
		m.dirty = maps.Clone(*m.read.Load())
	}
	r, ok := m.dirty[key]
	if !ok {
		r = &record{}
		m.dirty[key] = r
	}
	m.missLocked()
	return r
}

func (m *rangeMap) missLocked() {
	m.misses++
	if m.misses >= len(m.dirty) {
		promoted := m.dirty
		m.read.Store(&promoted)
		m.dirty = nil
		m.misses = 0
	}
}

// delete forgets key at once, for readers too.
func (m *rangeMap) delete(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	next := m.dirty
	if next == nil {
		if _, ok := (*m.read.Load())[key]; !ok {
			return
		}
		next = maps.Clone(*m.read.Load())
	}
	delete(next, key)
	m.read.Store(&next)
	m.dirty = nil
	m.misses = 0
}

// each calls f for every record.
func (m *rangeMap) each(f func(*record)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	all := *m.read.Load()
	if m.dirty != nil {
		all = m.dirty
	}
	for _, r := range all {
		f(r)
	}
}
