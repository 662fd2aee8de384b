// Package fencetest is the shard fence of tests: one that holds the
// ranges a test says, and can hold an ask back to play a write that
// reaches the server after a handoff. The runtime's own tests and the
// controllers' test kit (shardedtest) share it. Product code must not
// import it.
package fencetest

import (
	"sync"
	"time"
)

// Fence holds every range (or, made by Holding, only some), until Drop or
// Cut; its deadline is an hour from each ask, or Until's.
type Fence struct {
	mu      sync.Mutex
	until   time.Time
	only    map[int]bool // nil: every range
	dropped map[int]bool
	cut     bool
	// hold, when set, holds an ask back (HoldAsk).
	hold *heldAsk
}

type heldAsk struct {
	skip           int // asks to answer before the one held
	asked, release chan struct{}
}

// Deadline implements sharded.Fence.
func (f *Fence) Deadline(rng int) (time.Time, bool) {
	f.mu.Lock()
	deadline, held := time.Now().Add(time.Hour), !f.cut && !f.dropped[rng] && (f.only == nil || f.only[rng])
	if !f.until.IsZero() {
		deadline = f.until
	}
	hold := f.hold
	if hold != nil && hold.skip > 0 {
		hold.skip--
		hold = nil
	} else {
		f.hold = nil
	}
	f.mu.Unlock()
	if hold != nil {
		close(hold.asked)
		<-hold.release
	}
	return deadline, held
}

// HoldAsk holds the n-th Deadline call from now (1: the next) back until
// release, and then answers as the fence stood when it was asked: a
// replica that checked the fence just before a handoff and sends its write
// after it, as a request held up in the process or on the wire reaches the
// server late. asked is closed once the call is held.
func (f *Fence) HoldAsk(n int) (asked <-chan struct{}, release func()) {
	h := &heldAsk{skip: n - 1, asked: make(chan struct{}), release: make(chan struct{})}
	f.mu.Lock()
	f.hold = h
	f.mu.Unlock()
	var once sync.Once
	return h.asked, func() { once.Do(func() { close(h.release) }) }
}

// Until fixes the deadline the fence gives.
func (f *Fence) Until(deadline time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.until = deadline
}

// Holding is a fence that holds only the given ranges.
func Holding(ranges ...int) *Fence {
	f := &Fence{only: map[int]bool{}}
	for _, i := range ranges {
		f.only[i] = true
	}
	return f
}

// Drop stops holding range rng.
func (f *Fence) Drop(rng int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dropped == nil {
		f.dropped = map[int]bool{}
	}
	f.dropped[rng] = true
}

// Cut stops holding every range.
func (f *Fence) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = true
}
