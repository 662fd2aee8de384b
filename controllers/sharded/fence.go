package sharded

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Fence is the shard manager's word on a range.
type Fence interface {
	// Deadline is when this replica's claim on range rng could lapse
	// unless renewed; ok is false when the replica does not hold rng now.
	Deadline(rng int) (deadline time.Time, ok bool)
}

// Holds reports whether the replica holds range rng now.
func Holds(f Fence, rng int) bool {
	_, ok := f.Deadline(rng)
	return ok
}

// ErrNotHeld is a write the fence refused because the replica does not
// hold the object's range: nothing was sent. The worker loop drops the
// item, and the range's holder reconciles the object.
var ErrNotHeld = errors.New("range not held")

// Writer sends a controller's writes through the fence: the one place a
// write of a range's object leaves the replica.
type Writer struct {
	controller string
	fence      Fence
	metrics    *Metrics
}

// NewWriter returns the writer of controller over fence; m may be nil.
func NewWriter(controller string, fence Fence, m *Metrics) *Writer {
	return &Writer{controller: controller, fence: fence, metrics: m}
}

// Holds reports whether the replica holds range rng now.
func (w *Writer) Holds(rng int) bool { return Holds(w.fence, rng) }

// Write sends one write of an object of range rng: send gets a context
// that ends at the fence's deadline, so that a request held back inside
// the process (by the client's rate limiter, a connection being dialled, a
// GC pause, a stopped process) is abandoned instead of leaving after the
// claim could have lapsed. Write returns ErrNotHeld, without calling send,
// when the replica does not hold rng. A write cut off at the deadline
// returns its error, so the item is retried: by this replica if it renewed
// its claim meanwhile, else by the range's next holder.
//
// The deadline only keeps requests from leaving late; what the server
// receives is guarded by each write's precondition (resourceVersion or
// UID), so a request that left in time and arrives late changes nothing
// someone else changed since.
func (w *Writer) Write(ctx context.Context, rng int, send func(ctx context.Context) error) error {
	deadline, ok := w.fence.Deadline(rng)
	if !ok {
		w.metrics.fenced(w.controller, "not_held")
		return ErrNotHeld
	}
	fenced, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	err := send(fenced)
	if err != nil && ctx.Err() == nil && errors.Is(fenced.Err(), context.DeadlineExceeded) {
		w.metrics.fenced(w.controller, "deadline")
		return fmt.Errorf("write cut off at the fence deadline of range %d: %w", rng, err)
	}
	return err
}

// SendPatch sends body, a patch of an object of range rng (a finalizer
// patch of package patch, say), through w with send, and returns what the
// server returned. Nothing is sent for a nil body, and an object gone is
// no error: both return ok false.
func SendPatch[T any](ctx context.Context, w *Writer, rng int, body []byte, send func(ctx context.Context, body []byte) (T, error)) (updated T, ok bool, err error) {
	if body == nil {
		return updated, false, nil
	}
	err = w.Write(ctx, rng, func(ctx context.Context) (err error) {
		updated, err = send(ctx, body)
		return err
	})
	if apierrors.IsNotFound(err) {
		return updated, false, nil
	}
	return updated, err == nil, err
}
