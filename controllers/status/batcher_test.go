package status

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/sharded"
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

func (s *server) config(holds func(int) bool) Config[*virtv1.VirtualMachineInstance] {
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
		Writer:  sharded.NewWriter("test", fenceFunc(holds), nil),
		Workers: 2,
	}
}

func (s *server) patchCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.patches)
}

func holdAll(int) bool { return true }

// fenceFunc holds the ranges it returns true for, for an hour.
type fenceFunc func(rng int) bool

func (f fenceFunc) Deadline(rng int) (time.Time, bool) { return time.Now().Add(time.Hour), f(rng) }

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

func TestLazyIntentRidesAlongWithTheNextUrgentOne(t *testing.T) {
	s := newServer()
	b := New(s.config(holdAll))
	run(t, b)
	b.Enqueue(0, "ns/v", "uid-v", time.Hour, setPhase(virtv1.Scheduling))
	b.Enqueue(0, "ns/v", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled))
	waitPatches(t, s, 1)
	time.Sleep(20 * time.Millisecond) // would a second patch follow?
	if n := s.patchCount(); n != 1 {
		t.Fatalf("%d patches, want the two intents in one", n)
	}
	got := s.vmi.Status.PhaseTransitionTimestamps
	if s.vmi.Status.Phase != virtv1.Scheduled || len(got) != 2 || got[0].Phase != virtv1.Scheduling {
		t.Errorf("status after one patch: phase %s, transitions %v; want Scheduled with both phases recorded", s.vmi.Status.Phase, got)
	}
}

func TestLazyIntentWaitsWhileBusy(t *testing.T) {
	s := newServer()
	cfg := s.config(holdAll)
	var busy atomic.Bool
	busy.Store(true)
	cfg.LazyWait, cfg.BusyWait, cfg.BusyDepth = 5*time.Millisecond, 5*time.Millisecond, 100
	cfg.Backlog = func() int {
		if busy.Load() {
			return 100
		}
		return 0
	}
	b := New(cfg)
	run(t, b)
	b.EnqueueLazy(0, "ns/v", "uid-v", setPhase(virtv1.Scheduling))
	time.Sleep(100 * time.Millisecond) // twenty lazy waits, all while busy
	if n := s.patchCount(); n != 0 {
		t.Fatalf("%d patches while busy, want the lazy intent postponed", n)
	}
	busy.Store(false)
	waitPatches(t, s, 1)
	if s.vmi.Status.Phase != virtv1.Scheduling {
		t.Errorf("phase %s once idle, want the lazy intent written", s.vmi.Status.Phase)
	}
}

func TestUrgentIntentIsNotPostponedWhileBusy(t *testing.T) {
	s := newServer()
	cfg := s.config(holdAll)
	cfg.LazyWait, cfg.BusyWait, cfg.BusyDepth = time.Hour, time.Hour, 1
	b := New(cfg)
	run(t, b)
	b.EnqueueLazy(0, "ns/v", "uid-v", setPhase(virtv1.Scheduling))
	b.Enqueue(0, "ns/v", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled))
	waitPatches(t, s, 1)
	if got := s.vmi.Status.PhaseTransitionTimestamps; s.vmi.Status.Phase != virtv1.Scheduled || len(got) != 2 {
		t.Errorf("phase %s, transitions %v: want the urgent intent written at once, with the lazy one", s.vmi.Status.Phase, got)
	}
}

func TestConflictRereadsAndReappliesOnTheNewerObject(t *testing.T) {
	s := newServer()
	b := New(s.config(holdAll))
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
	var held sync.Map
	held.Store(3, true)
	b := New(s.config(func(rng int) bool { _, ok := held.Load(rng); return ok }))
	b.Enqueue(3, "ns/v", "uid-v", time.Hour, setPhase(virtv1.Scheduling))
	b.DropRange(3)
	if b.Pending("ns/v", "uid-v") {
		t.Error("DropRange left the intent pending")
	}
	run(t, b)
	b.Enqueue(4, "ns/v", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled)) // range 4 is not held
	time.Sleep(50 * time.Millisecond)
	if n := s.patchCount(); n != 0 {
		t.Errorf("%d patches written for ranges not held", n)
	}
}

func TestAnIntentThatNoLongerAppliesWritesNothing(t *testing.T) {
	s := newServer()
	b := New(s.config(holdAll))
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
	cfg := s.config(holdAll)
	reported := make(chan string, 4)
	cfg.OnNothingWritten = func(rng int, key string) { reported <- strconv.Itoa(rng) + " " + key }
	b := New(cfg)
	run(t, b)
	// Not awaited: not reported.
	b.Enqueue(3, "ns/w", "uid-v", time.Hour, func(*virtv1.VirtualMachineInstance) bool { return false })
	b.Enqueue(3, "ns/w", "uid-v", time.Millisecond, func(*virtv1.VirtualMachineInstance) bool { return false })
	b.Enqueue(3, "ns/v", "uid-v", time.Hour, func(*virtv1.VirtualMachineInstance) bool { return false })
	if !b.Await("ns/v", "uid-v") || b.Await("ns/v", "other-uid") {
		t.Fatal("Await does not report the pending batch of the object alone")
	}
	b.Enqueue(3, "ns/v", "uid-v", time.Millisecond, func(*virtv1.VirtualMachineInstance) bool { return false })
	select {
	case got := <-reported:
		if got != "3 ns/v" {
			t.Errorf("reported %q, want range 3, key ns/v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a batch that wrote nothing was not reported")
	}
	b.Enqueue(3, "ns/v", "uid-v", time.Hour, setPhase(virtv1.Scheduled))
	b.Await("ns/v", "uid-v")
	b.Enqueue(3, "ns/v", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled))
	waitPatches(t, s, 1)
	select {
	case got := <-reported:
		t.Errorf("a batch that wrote a patch was reported: %q", got)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestIntentsDieWithTheirObject(t *testing.T) {
	s := newServer()
	b := New(s.config(holdAll))
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
	cfg := s.config(holdAll)
	var calls atomic.Int32
	cfg.Patch = func(context.Context, string, string, []byte) (*virtv1.VirtualMachineInstance, error) {
		calls.Add(1)
		return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "virtualmachineinstances"}, "v", errors.New("finalizers cannot be added while deleting"))
	}
	b := New(cfg)
	run(t, b)
	b.Enqueue(0, "ns/v", "uid-v", time.Millisecond, setPhase(virtv1.Scheduled))
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return calls.Load() >= 1 && !b.Pending("ns/v", "uid-v"), nil
	}); err != nil {
		t.Fatal("the refused patch was never tried")
	}
	time.Sleep(100 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Errorf("a refused patch was sent %d times, want once", n)
	}
}
