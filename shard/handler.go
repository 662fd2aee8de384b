package shard

import "context"

// Reason says why a member stops acting on a range.
type Reason string

const (
	// ReasonRebalance: the assignment moved the range to another member.
	ReasonRebalance Reason = "rebalance"
	// ReasonRelease: the member is shutting down gracefully.
	ReasonRelease Reason = "release"
	// ReasonExpiry: the member could not renew the range's lease in time and
	// must assume someone else may hold it now.
	ReasonExpiry Reason = "expiry"
	// ReasonFailed: the handler's Acquired failed; the range is given back.
	ReasonFailed Reason = "failed"
)

// Handler is how a controller learns which ranges it may act on.
//
// Acquired is called once this member holds range i's lease. It starts the
// range's informers and workers and returns once their caches are synced;
// ctx is cancelled when the range is released or lost, so a slow sync must
// watch it. An error gives the range back.
//
// Releasing is called when the member stops acting on range i, before the
// lease is released (for rebalance and release) or after it may already be
// lost (expiry). It stops the range's workers, flushes or drops its pending
// writes and forgets its expectations. It must return promptly: the lease is
// not renewed meanwhile, and its context ends at the renew deadline, after
// which Holds is false and writes are fenced.
//
// Calls for one range never overlap; calls for different ranges may run
// concurrently.
type Handler interface {
	Acquired(ctx context.Context, i int) error
	Releasing(ctx context.Context, i int, reason Reason)
}

// HandlerFuncs adapts functions to Handler; nil functions do nothing.
type HandlerFuncs struct {
	AcquiredFunc  func(ctx context.Context, i int) error
	ReleasingFunc func(ctx context.Context, i int, reason Reason)
}

// Acquired calls AcquiredFunc.
func (h HandlerFuncs) Acquired(ctx context.Context, i int) error {
	if h.AcquiredFunc == nil {
		return nil
	}
	return h.AcquiredFunc(ctx, i)
}

// Releasing calls ReleasingFunc.
func (h HandlerFuncs) Releasing(ctx context.Context, i int, reason Reason) {
	if h.ReleasingFunc != nil {
		h.ReleasingFunc(ctx, i, reason)
	}
}

// Preparer is optionally implemented by a Handler whose Acquired is slow
// because it fills caches: the member asks it to warm range i before it may
// hold the range, so that a takeover waits for the lease, not for the sync,
// and a rebalance does not wait at all: the holder keeps a range the
// assignment moved away until its new owner's caches of it have synced
// (Synced), at most Config.HandoffWait.
//
// Prepare is called for a range this member does not hold but is assigned,
// or will most likely be assigned because its holder has stopped
// heartbeating (Config.SuspectAfter). It must only read (start informers),
// never act, and must not block. Unprepare is called a lease duration after
// that stopped holding, if the range was not acquired meanwhile, and when
// the member stops; Acquired of a prepared range uses what Prepare started.
// Prepare and Unprepare come from one goroutine and never overlap Acquired
// or Releasing of the same range.
//
// Keep is called just before Releasing of a range for ReasonExpiry: the
// handler keeps the range's caches as if Prepare had started them, and
// the member treats the range as prepared from then on. A tenure that
// ends under load (renewals slower than the renew deadline) ends on every
// range at once, and the member most likely takes them back as soon as
// its next tenure begins: without Keep, each would be listed again, from
// a server already too slow to answer a renewal.
//
// Synced reports whether the caches Prepare started for range i have synced;
// it is asked from the claim loop, must not block, and is false for a range
// not prepared.
type Preparer interface {
	Prepare(i int)
	Unprepare(i int)
	Keep(i int)
	Synced(i int) bool
}
