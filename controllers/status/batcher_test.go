package status

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
)

// server is an in-memory API server for one VMI: merge patches with
// resourceVersion preconditions, like the real one.
type server struct {
	mu      sync.Mutex
	vmi     *virtv1.VirtualMachineInstance
	cached  *virtv1.VirtualMachineInstance // what the informer saw last
	patches []string
}

func newServer() *server {
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "v", Namespace: "ns", UID: "uid-v", ResourceVersion: "1"}}
	return &server{vmi: vmi, cached: vmi.DeepCopy()}
}

// writeBehindCache changes the object on the server only, as another writer would.
func (s *server) writeBehindCache(f func(*virtv1.VirtualMachineInstance)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.vmi)
	s.bump()
}

func (s *server) bump() {
	rv, _ := strconv.Atoi(s.vmi.ResourceVersion)
	s.vmi.ResourceVersion = strconv.Itoa(rv + 1)
}

func (s *server) config(fence sharded.Fence) Config[*virtv1.VirtualMachineInstance] {
	return Config[*virtv1.VirtualMachineInstance]{
		Name: "test",
		Cached: func(_ int, _, _ string) (*virtv1.VirtualMachineInstance, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.cached.DeepCopy(), nil
		},
		Fresh: func(context.Context, string, string) (*virtv1.VirtualMachineInstance, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.vmi.DeepCopy(), nil
		},
		Patch: func(_ context.Context, _, _ string, patch []byte) (*virtv1.VirtualMachineInstance, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			var p struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(patch, &p); err != nil {
				return nil, err
			}
			if p.Metadata.ResourceVersion != s.vmi.ResourceVersion {
				return nil, apierrors.NewConflict(schema.GroupResource{Resource: "virtualmachineinstances"}, "v", nil)
			}
			current, _ := json.Marshal(s.vmi)
			next, err := jsonpatch.MergePatch(current, patch)
			if err != nil {
				return nil, err
			}
			s.vmi = &virtv1.VirtualMachineInstance{}
			if err := json.Unmarshal(next, s.vmi); err != nil {
				return nil, err
			}
			s.bump()
			s.cached = s.vmi.DeepCopy()
			s.patches = append(s.patches, string(patch))
			return s.vmi.DeepCopy(), nil
		},
		Writer:  sharded.NewWriter("test", fence, nil),
		Workers: 2,
	}
}

func (s *server) patchCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.patches)
}

func setPhase(phase virtv1.VirtualMachineInstancePhase) Mutation[*virtv1.VirtualMachineInstance] {
	return func(v *virtv1.VirtualMachineInstance) bool {
		v.Status.Phase = phase
		v.Status.PhaseTransitionTimestamps = append(v.Status.PhaseTransitionTimestamps,
			virtv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.Now()})
		return true
	}
}

func run(t *testing.T, b *Batcher[*virtv1.VirtualMachineInstance]) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitPatches(t *testing.T, s *server, n int) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return s.patchCount() >= n, nil
	}); err != nil {
		t.Fatalf("%d patches written, want %d", s.patchCount(), n)
	}
}

// The tests about time drive a fake clock and call flush themselves, as the
// batcher's queue would when a batch's wake-up comes: no timing, no sleeps.
// The tests that Run the batcher check its queue and workers.

// stopped returns a batcher on a fake clock that nothing runs.
func stopped(cfg Config[*virtv1.VirtualMachineInstance]) (*Batcher[*virtv1.VirtualMachineInstance], *clocktesting.FakeClock) {
	clock := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	cfg.Clock = clock
	b := New(cfg)
	b.queue.ShutDown() // wake-ups are the test's to give
	return b, clock
}

// flushAt moves the clock on by d and flushes key, failing t on an error.
func flushAt(t *testing.T, b *Batcher[*virtv1.VirtualMachineInstance], clock *clocktesting.FakeClock, d time.Duration, key string) {
	t.Helper()
	clock.Step(d)
	if err := b.flush(context.Background(), key); err != nil {
		t.Fatalf("flush %s: %v", key, err)
	}
}

// dueOf is when the batch of key is due, or the zero time with none.
func (b *Batcher[T]) dueOf(key string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.pending[key]; p != nil {
		return p.due
	}
	return time.Time{}
}

func TestLazyIntentRidesAlongWithTheNextUrgentOne(t *testing.T) {
	s := newServer()
	b, clock := stopped(s.config(&shardedtest.Fence{}))
	b.Enqueue(0, "ns/v", "uid-v", time.Hour, setPhase(virtv1.Scheduling))
	b.Enqueue(0, "ns/v", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled))
	flushAt(t, b, clock, 0, "ns/v")
	if n := s.patchCount(); n != 0 {
		t.Fatalf("%d patches before the urgent intent was due, want none", n)
	}
	flushAt(t, b, clock, time.Millisecond, "ns/v")
	got := s.vmi.Status.PhaseTransitionTimestamps
	if n := s.patchCount(); n != 1 || s.vmi.Status.Phase != virtv1.Scheduled || len(got) != 2 || got[0].Phase != virtv1.Scheduling {
		t.Errorf("%d patches, phase %s, transitions %v; want one patch to Scheduled with both phases recorded", n, s.vmi.Status.Phase, got)
	}
	// The lazy intent's own wake-up, an hour on, finds nothing to write.
	flushAt(t, b, clock, time.Hour, "ns/v")
	if n := s.patchCount(); n != 1 {
		t.Errorf("%d patches after the lazy intent's wake-up, want still the one", n)
	}
}

func TestLazyIntentWaitsWhileBusy(t *testing.T) {
	s := newServer()
	cfg := s.config(&shardedtest.Fence{})
	busy := false
	const lazy, busyWait = 5 * time.Millisecond, 50 * time.Millisecond
	cfg.LazyWait, cfg.BusyWait, cfg.BusyDepth = lazy, busyWait, 100
	cfg.Backlog = func() int {
		if busy {
			return 100
		}
		return 0
	}
	b, clock := stopped(cfg)
	// Enqueued idle, it is due after the lazy wait; busy by then, it is
	// postponed round after round, but written BusyWait after it came:
	// lazy batches count toward busy, and unbounded, a batcher kept busy
	// by its own postponed batches never wrote them (full differential
	// runs left a launcher image and a Scheduling phase unwritten).
	b.EnqueueLazy(0, "ns/v", "uid-v", setPhase(virtv1.Scheduling))
	if due := b.dueOf("ns/v"); !due.Equal(clock.Now().Add(lazy)) {
		t.Fatalf("lazy intent enqueued while idle is due at %s, want after the lazy wait (%s)", due, clock.Now().Add(lazy))
	}
	busy = true
	start := clock.Now()
	for clock.Now().Sub(start) < busyWait-lazy {
		flushAt(t, b, clock, lazy, "ns/v")
		if n := s.patchCount(); n != 0 {
			t.Fatalf("%d patches %s after the intent while busy, want it postponed", n, clock.Now().Sub(start))
		}
	}
	flushAt(t, b, clock, lazy, "ns/v")
	if n := s.patchCount(); n != 1 || s.vmi.Status.Phase != virtv1.Scheduling {
		t.Fatalf("%d patches, phase %s BusyWait after the intent while still busy; want it written", n, s.vmi.Status.Phase)
	}
	// Enqueued busy, it waits the busy wait, and is written then.
	b.EnqueueLazy(0, "ns/v", "uid-v", setPhase(virtv1.Scheduled))
	if due := b.dueOf("ns/v"); !due.Equal(clock.Now().Add(busyWait)) {
		t.Fatalf("lazy intent enqueued while busy is due at %s, want after the busy wait (%s)", due, clock.Now().Add(busyWait))
	}
	flushAt(t, b, clock, busyWait, "ns/v")
	if n := s.patchCount(); n != 2 || s.vmi.Status.Phase != virtv1.Scheduled {
		t.Errorf("%d patches, phase %s once the busy wait passed; want the second lazy intent written", n, s.vmi.Status.Phase)
	}
}

func TestUrgentIntentIsNotPostponedWhileBusy(t *testing.T) {
	s := newServer()
	cfg := s.config(&shardedtest.Fence{})
	cfg.LazyWait, cfg.BusyWait, cfg.BusyDepth = time.Hour, time.Hour, 1
	b, clock := stopped(cfg)
	b.EnqueueLazy(0, "ns/v", "uid-v", setPhase(virtv1.Scheduling))
	b.Enqueue(0, "ns/v", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled))
	flushAt(t, b, clock, time.Millisecond, "ns/v")
	if got := s.vmi.Status.PhaseTransitionTimestamps; s.patchCount() != 1 || s.vmi.Status.Phase != virtv1.Scheduled || len(got) != 2 {
		t.Errorf("%d patches, phase %s, transitions %v: want the urgent intent written when due, with the lazy one", s.patchCount(), s.vmi.Status.Phase, got)
	}
}

func TestConflictRereadsAndReappliesOnTheNewerObject(t *testing.T) {
	s := newServer()
	b := New(s.config(&shardedtest.Fence{}))
	run(t, b)
	// The node agent labels the VMI behind our cache's back.
	s.writeBehindCache(func(v *virtv1.VirtualMachineInstance) { v.Labels = map[string]string{"node-agent": "was-here"} })
	b.Enqueue(0, "ns/v", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled))
	waitPatches(t, s, 1)
	if s.vmi.Labels["node-agent"] != "was-here" || s.vmi.Status.Phase != virtv1.Scheduled {
		t.Errorf("after the conflict: labels %v, phase %s; want both writes kept", s.vmi.Labels, s.vmi.Status.Phase)
	}
}

func TestIntentsOfAReleasedRangeAreNotWritten(t *testing.T) {
	s := newServer()
	b, clock := stopped(s.config(shardedtest.Holding(3)))
	b.Enqueue(3, "ns/v", "uid-v", time.Hour, setPhase(virtv1.Scheduling))
	b.DropRange(3)
	if b.Pending("ns/v", "uid-v") {
		t.Error("DropRange left the intent pending")
	}
	flushAt(t, b, clock, time.Hour, "ns/v")
	b.Enqueue(4, "ns/v", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled)) // range 4 is not held
	flushAt(t, b, clock, time.Millisecond, "ns/v")
	if n := s.patchCount(); n != 0 || b.Pending("ns/v", "uid-v") {
		t.Errorf("%d patches written for ranges not held (intent still pending: %t), want none and the intent dropped", n, b.Pending("ns/v", "uid-v"))
	}
}

func TestAnIntentThatNoLongerAppliesWritesNothing(t *testing.T) {
	s := newServer()
	b := New(s.config(&shardedtest.Fence{}))
	run(t, b)
	b.Enqueue(0, "ns/v", "uid-v", time.Millisecond, func(*virtv1.VirtualMachineInstance) bool { return false })
	// A sentinel on another key (the test server answers every key with
	// its one object).
	b.Enqueue(0, "ns/w", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled))
	waitPatches(t, s, 1)
	if n := s.patchCount(); n != 1 {
		t.Errorf("%d patches, want only the sentinel's", n)
	}
}

// An awaited batch that writes nothing is reported, so the reconcile that
// waited for it runs again; one nobody awaited, or one that writes, is not
// (the informer event of a write does it).
func TestABatchThatWritesNothingIsReported(t *testing.T) {
	s := newServer()
	cfg := s.config(&shardedtest.Fence{})
	var reported []string
	cfg.OnNothingWritten = func(rng int, key string) { reported = append(reported, strconv.Itoa(rng)+" "+key) }
	b, clock := stopped(cfg)
	nothing := func(*virtv1.VirtualMachineInstance) bool { return false }
	// Not awaited: not reported.
	b.Enqueue(3, "ns/w", "uid-v", time.Millisecond, nothing)
	b.Enqueue(3, "ns/v", "uid-v", time.Millisecond, nothing)
	if !b.Await("ns/v", "uid-v") || b.Await("ns/v", "other-uid") {
		t.Fatal("Await does not report the pending batch of the object alone")
	}
	flushAt(t, b, clock, time.Millisecond, "ns/w")
	flushAt(t, b, clock, 0, "ns/v")
	if len(reported) != 1 || reported[0] != "3 ns/v" {
		t.Errorf("reported %q, want range 3, key ns/v alone", reported)
	}
	// Awaited, and written: the informer's event of the write does it.
	b.Enqueue(3, "ns/v", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled))
	b.Await("ns/v", "uid-v")
	flushAt(t, b, clock, time.Millisecond, "ns/v")
	if s.patchCount() != 1 || len(reported) != 1 {
		t.Errorf("%d patches, reported %q: want one patch, and a batch that wrote it not reported", s.patchCount(), reported)
	}
}

func TestIntentsDieWithTheirObject(t *testing.T) {
	s := newServer()
	b := New(s.config(&shardedtest.Fence{}))
	// Intents for an object deleted and created again under its name: they
	// do not block the new object, and are not written to it.
	b.Enqueue(0, "ns/v", "old-uid", time.Hour, setPhase(virtv1.Failed))
	if !b.Pending("ns/v", "old-uid") || b.Pending("ns/v", "uid-v") {
		t.Fatal("pending intents are not told apart by uid")
	}
	b.Enqueue(0, "ns/v", "old-uid", time.Millisecond, setPhase(virtv1.Failed))
	run(t, b)
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return !b.Pending("ns/v", "old-uid"), nil
	}); err != nil {
		t.Fatal("the old object's intents were never flushed")
	}
	if n := s.patchCount(); n != 0 {
		t.Errorf("%d patches written to the new object for the old one", n)
	}
	// An intent for the new object replaces the old object's.
	b.Enqueue(0, "ns/v", "old-uid", time.Hour, setPhase(virtv1.Failed))
	b.Enqueue(0, "ns/v", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled))
	waitPatches(t, s, 1)
	if got := s.vmi.Status.Phase; got != virtv1.Scheduled {
		t.Errorf("phase %s after the new object's intent, want Scheduled and nothing of the old one's", got)
	}
}

func TestARefusedPatchIsDroppedNotRetried(t *testing.T) {
	s := newServer()
	cfg := s.config(&shardedtest.Fence{})
	calls := 0
	cfg.Patch = func(context.Context, string, string, []byte) (*virtv1.VirtualMachineInstance, error) {
		calls++
		return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "virtualmachineinstances"}, "v", errors.New("finalizers cannot be added while deleting"))
	}
	b, clock := stopped(cfg)
	b.Enqueue(0, "ns/v", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled))
	// flushAt fails the test on an error: an error is what the worker
	// would retry with backoff.
	flushAt(t, b, clock, time.Millisecond, "ns/v")
	if calls != 1 || b.Pending("ns/v", "uid-v") {
		t.Errorf("a refused patch was sent %d times and left pending (%t); want it sent once and dropped", calls, b.Pending("ns/v", "uid-v"))
	}
}
