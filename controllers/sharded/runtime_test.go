package sharded

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/virtshard/virtshard/controllers/sharded/fencetest"
)

// newFence holds every range.
func newFence() *fencetest.Fence { return &fencetest.Fence{} }

func TestGateAdmitsOnlyHeldRangesNotBeingReleased(t *testing.T) {
	f := newFence()
	g := NewGate(2, f)
	f.Drop(1)
	if g.Enter(1) {
		t.Error("a sync of a range not held was admitted")
	}
	if !g.Enter(0) {
		t.Fatal("a sync of a held range was refused")
	}
	g.Leave(0)
	g.Release(context.Background(), 0)
	if g.Enter(0) {
		t.Error("a sync of a released range was admitted")
	}
	g.Open(0)
	if !g.Enter(0) {
		t.Error("a sync of a range acquired again was refused")
	}
	g.Leave(0)
}

func TestReleaseWaitsForTheSyncsUnderWay(t *testing.T) {
	g := NewGate(1, newFence())
	for range 2 {
		if !g.Enter(0) {
			t.Fatal("a sync of a held range was refused")
		}
	}
	released := make(chan struct{})
	go func() { g.Release(context.Background(), 0); close(released) }()
	g.Leave(0)
	select {
	case <-released:
		t.Fatal("Release returned with a sync still under way")
	case <-time.After(50 * time.Millisecond):
	}
	g.Leave(0)
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("Release did not return once the last sync left")
	}

	// A Release cut short by its context returns without the sync.
	g.Open(0)
	g.Enter(0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	g.Release(ctx, 0)
	if ctx.Err() == nil {
		t.Error("Release returned before its context ended, with a sync under way")
	}
	g.Leave(0)
}

// runRuntime runs r with reconcile until the test ends.
func runRuntime(t *testing.T, r *Runtime, reconcile SyncFunc[Item]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx, 2, reconcile); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s within 5 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRuntimeRetriesAPanicAndAnErrorAndRecordsThem(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	r := New(Config{Name: "test", Ranges: 1, Fence: newFence(), Metrics: m})
	var calls atomic.Int32
	runRuntime(t, r, func(_ context.Context, it Item) (time.Duration, error) {
		switch calls.Add(1) {
		case 1:
			panic("a bug")
		case 2:
			return 0, errors.New("the API server said no")
		}
		return 0, nil
	})
	r.Add(0, "ns/a")
	waitFor(t, "three reconciles (panic, error, success)", func() bool { return calls.Load() >= 3 })
	waitFor(t, "the metrics of three reconciles", func() bool {
		return testutil.ToFloat64(m.requeues.WithLabelValues("test", "error")) == 2 &&
			testutil.CollectAndCount(m.duration) == 2 // success and error series
	})
}

func TestRuntimeSyncsNothingOfAReleasedRange(t *testing.T) {
	f := newFence()
	r := New(Config{Name: "test", Ranges: 2, Fence: f})
	synced := make(chan Item, 10)
	runRuntime(t, r, func(_ context.Context, it Item) (time.Duration, error) {
		synced <- it
		return 0, nil
	})
	r.gate.Release(context.Background(), 0)
	f.Drop(1)
	r.Add(0, "ns/released")
	r.Add(1, "ns/not-held")
	time.Sleep(50 * time.Millisecond)
	r.gate.Open(0)
	r.Add(0, "ns/acquired")
	if it := <-synced; it != (Item{0, "ns/acquired"}) {
		t.Errorf("synced %v, want only the item of the range acquired again", it)
	}
	if len(synced) != 0 {
		t.Errorf("%d more syncs, want none", len(synced))
	}
}

func TestRuntimeRequeuesAfterTheDurationAsked(t *testing.T) {
	r := New(Config{Name: "test", Ranges: 1, Fence: newFence()})
	var calls atomic.Int32
	runRuntime(t, r, func(context.Context, Item) (time.Duration, error) {
		if calls.Add(1) == 1 {
			return 10 * time.Millisecond, nil
		}
		return 0, nil
	})
	r.Add(0, "ns/a")
	waitFor(t, "the second sync asked for", func() bool { return calls.Load() == 2 })
}

func TestWriteSendsNothingForARangeNotHeld(t *testing.T) {
	f := newFence()
	f.Drop(0)
	m := NewMetrics(prometheus.NewRegistry())
	err := NewWriter("test", f, m).Write(context.Background(), 0, func(context.Context) error {
		t.Error("a write of a range not held was sent")
		return nil
	})
	if !errors.Is(err, ErrNotHeld) {
		t.Errorf("got %v, want ErrNotHeld", err)
	}
	if n := testutil.ToFloat64(m.fences.WithLabelValues("test", "not_held")); n != 1 {
		t.Errorf("%v writes counted not_held, want 1", n)
	}
}

func TestWriteEndsAtTheFenceDeadline(t *testing.T) {
	f, deadline := newFence(), time.Now().Add(50*time.Millisecond)
	f.Until(deadline)
	m := NewMetrics(prometheus.NewRegistry())
	err := NewWriter("test", f, m).Write(context.Background(), 0, func(ctx context.Context) error {
		if d, ok := ctx.Deadline(); !ok || !d.Equal(deadline) {
			t.Errorf("the write's deadline is %v (%v), want the fence's %v", d, ok, deadline)
		}
		<-ctx.Done() // a request held back in the process, as by a dial that hangs
		return ctx.Err()
	})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want the write cut off at the deadline", err)
	}
	if n := testutil.ToFloat64(m.fences.WithLabelValues("test", "deadline")); n != 1 {
		t.Errorf("%v writes counted deadline, want 1", n)
	}
}

func TestWriteCancelledByItsCallerIsNoFenceMatter(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := NewWriter("test", newFence(), m).Write(ctx, 0, func(ctx context.Context) error { return ctx.Err() })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want the caller's cancellation", err)
	}
	if n := testutil.CollectAndCount(m.fences); n != 0 {
		t.Errorf("%d fenced-write series, want none", n)
	}
}

func TestRuntimeDropsAnItemWhoseWriteWasNotHeld(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	r := New(Config{Name: "test", Ranges: 1, Fence: newFence(), Metrics: m})
	var calls atomic.Int32
	runRuntime(t, r, func(context.Context, Item) (time.Duration, error) {
		calls.Add(1)
		return 0, fmt.Errorf("patch: %w", ErrNotHeld) // the range went between the gate and the write
	})
	r.Add(0, "ns/a")
	waitFor(t, "the reconcile", func() bool { return testutil.CollectAndCount(m.duration) == 1 })
	if n := testutil.ToFloat64(m.requeues.WithLabelValues("test", "error")); n != 0 || calls.Load() != 1 {
		t.Errorf("%d reconciles, %v requeued with backoff; want one, none requeued", calls.Load(), n)
	}
}

func TestSendPatchSendsNothingForNoPatchAndTakesAnObjectGoneAsDone(t *testing.T) {
	w := NewWriter("test", newFence(), nil)
	sent := 0
	send := func(answer error) func(context.Context, []byte) (string, error) {
		return func(context.Context, []byte) (string, error) {
			sent++
			if answer != nil {
				return "", answer
			}
			return "updated", nil
		}
	}
	if _, ok, err := SendPatch(context.Background(), w, 0, nil, send(nil)); ok || err != nil || sent != 0 {
		t.Errorf("no patch: ok %v, err %v, %d sent; want nothing sent", ok, err, sent)
	}
	gone := apierrors.NewNotFound(schema.GroupResource{Resource: "things"}, "a")
	if _, ok, err := SendPatch(context.Background(), w, 0, []byte("{}"), send(gone)); ok || err != nil || sent != 1 {
		t.Errorf("object gone: ok %v, err %v; want not ok, no error", ok, err)
	}
	if got, ok, err := SendPatch(context.Background(), w, 0, []byte("{}"), send(nil)); !ok || err != nil || got != "updated" {
		t.Errorf("sent: %q, ok %v, err %v; want what the server returned", got, ok, err)
	}
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "things"}, "a", errors.New("changed"))
	if _, ok, err := SendPatch(context.Background(), w, 0, []byte("{}"), send(conflict)); ok || !apierrors.IsConflict(err) {
		t.Errorf("conflict: ok %v, err %v; want the conflict", ok, err)
	}
}
