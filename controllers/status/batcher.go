package status

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/virtshard/virtshard/controllers/patch"
	"github.com/virtshard/virtshard/controllers/sharded"
)

// Mutation changes obj in place to what the controller wants. It returns
// false when the intent no longer applies to this version of the object
// (for instance the node agent already moved it on), which drops it.
type Mutation[T runtime.Object] func(obj T) bool

// Config of a Batcher for objects of type T.
type Config[T runtime.Object] struct {
	// Name names the batcher's queue and metrics.
	Name string
	// Cached returns the informer's copy of the object of range rng (not to
	// be mutated).
	Cached func(rng int, namespace, name string) (T, error)
	// Fresh reads the object from the API server, after a conflict.
	Fresh func(ctx context.Context, namespace, name string) (T, error)
	// Patch sends a JSON merge patch.
	Patch func(ctx context.Context, namespace, name string, patch []byte) (T, error)
	// Writer sends every patch through the shard fence: intents of a
	// range not held are dropped (its holder writes its own).
	Writer *sharded.Writer
	// Workers bounds concurrent patches.
	Workers int
	// OnPatched is told about every successful patch (expectations, tests).
	OnPatched func(obj T)
	// OnNothingWritten, when set, is told about every awaited batch (see
	// Await) of a held range that ended with no patch, because nothing was
	// left to write or the server refused it for good: no informer event
	// follows, so the reconcile that waited for it must be queued again.
	OnNothingWritten func(rng int, key string)
	// Metrics receives batch sizes; nil means none.
	Metrics *Metrics
	// LazyWait is how long an intent nobody waits for (EnqueueLazy, an
	// intermediate phase) may wait for company while the batcher is idle,
	// so that status follows reality closely; BusyWait while it is busy,
	// so that it rides along with the next intent instead of costing a
	// patch of its own. A batch of lazy intents only that comes due while
	// busy waits another round, until BusyWait after its first intent:
	// lazy batches count toward busy, and unbounded they kept a quiet
	// batcher busy on its own postponed batches for ever.
	LazyWait, BusyWait time.Duration
	// BusyDepth: the batcher is busy while its pending objects and the
	// Backlog count at least this many; 0 means never.
	BusyDepth int
	// Backlog, when set, counts the controller's objects waiting for a
	// sync: a burst fills that queue first.
	Backlog func() int
	// Clock is the batcher's time; nil means the real clock.
	Clock clock.WithTicker
}

// Batcher coalesces intents per object.
type Batcher[T runtime.Object] struct {
	cfg   Config[T]
	queue workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	pending map[string]*batch[T]
}

type batch[T runtime.Object] struct {
	rng int
	// uid is the object the intents are for: an object deleted and
	// created again under the same name is another object, and intents
	// for the old one die with it.
	uid       types.UID
	mutations []Mutation[T]
	due       time.Time
	// since is the first intent's time: a lazy batch is not postponed
	// past BusyWait after it.
	since time.Time
	// lazy holds while every intent came through EnqueueLazy; wait is the
	// last lazy wait, by which a busy batcher postpones the batch.
	lazy bool
	wait time.Duration
	// awaited: a reconcile held back for this batch (Await).
	awaited bool
}

// New returns a Batcher; Run starts it.
func New[T runtime.Object](cfg Config[T]) *Batcher[T] {
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Batcher[T]{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: cfg.Name, Clock: cfg.Clock}),
		pending: map[string]*batch[T]{},
	}
}

// Enqueue adds an intent for the object key (namespace/name) with uid, of
// range rng, to be written within wait.
func (b *Batcher[T]) Enqueue(rng int, key string, uid types.UID, wait time.Duration, m Mutation[T]) {
	b.enqueue(rng, key, uid, wait, m, false)
}

// EnqueueLazy adds an intent nobody waits for (an intermediate phase): due
// after Config.LazyWait, or BusyWait while busy, and postponed by that wait
// again while busy as long as no other intent joined it.
func (b *Batcher[T]) EnqueueLazy(rng int, key string, uid types.UID, m Mutation[T]) {
	wait := b.cfg.LazyWait
	if b.Busy() {
		wait = b.cfg.BusyWait
	}
	b.enqueue(rng, key, uid, wait, m, true)
}

// Busy reports a burst: the batcher's pending objects and the controller's
// Backlog together reach Config.BusyDepth.
func (b *Batcher[T]) Busy() bool {
	if b.cfg.BusyDepth <= 0 {
		return false
	}
	backlog := 0
	if b.cfg.Backlog != nil {
		backlog = b.cfg.Backlog()
	}
	return b.Depth()+backlog >= b.cfg.BusyDepth
}

func (b *Batcher[T]) enqueue(rng int, key string, uid types.UID, wait time.Duration, m Mutation[T], lazy bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.cfg.Clock.Now()
	due := now.Add(wait)
	p := b.pending[key]
	switch {
	case p == nil || p.uid != uid:
		p = &batch[T]{rng: rng, uid: uid, due: due, since: now, lazy: true}
		b.pending[key] = p
		b.queue.AddAfter(key, wait)
	case due.Before(p.due):
		p.due = due
		b.queue.AddAfter(key, wait)
	}
	// Otherwise an earlier flush is already scheduled.
	p.lazy = p.lazy && lazy
	if lazy {
		p.wait = wait
	}
	p.mutations = append(p.mutations, m)
}

// Depth is the number of objects with intents not yet written.
func (b *Batcher[T]) Depth() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// Await is Pending for a reconcile that holds back until the batch is
// written: if the batch then writes nothing, OnNothingWritten is told.
func (b *Batcher[T]) Await(key string, uid types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pending[key]
	if p == nil || p.uid != uid {
		return false
	}
	p.awaited = true
	return true
}

// Pending reports whether the object key with uid has intents not yet
// written.
func (b *Batcher[T]) Pending(key string, uid types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pending[key]
	return p != nil && p.uid == uid
}

// DropRange forgets the pending intents of range rng, on handoff: the next
// owner recomputes them from its own cache.
func (b *Batcher[T]) DropRange(rng int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for key, p := range b.pending {
		if p.rng == rng {
			delete(b.pending, key)
		}
	}
}

// Run writes batches with Config.Workers workers until ctx is done.
func (b *Batcher[T]) Run(ctx context.Context) {
	defer b.queue.ShutDown()
	var wg sync.WaitGroup
	for range b.cfg.Workers {
		wg.Go(func() {
			for b.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	b.queue.ShutDown()
	wg.Wait()
}

func (b *Batcher[T]) next(ctx context.Context) bool {
	key, quit := b.queue.Get()
	if quit {
		return false
	}
	defer b.queue.Done(key)
	if err := b.flush(ctx, key); err != nil {
		klog.FromContext(ctx).V(2).Info("Status patch failed, will retry", "batcher", b.cfg.Name, "key", key, "err", err)
		b.queue.AddRateLimited(key)
		return true
	}
	b.queue.Forget(key)
	return true
}

// flush writes key's pending intents, if any, as one patch, once they are
// due. On failure the intents go back to the front of the batch.
func (b *Batcher[T]) flush(ctx context.Context, key string) error {
	busy := b.Busy()
	b.mu.Lock()
	p := b.pending[key]
	now := b.cfg.Clock.Now()
	if p != nil && busy && p.lazy && !p.due.IsZero() && !now.Before(p.due) {
		// A retry (zero due) is never postponed, nor a batch BusyWait old.
		if limit := p.since.Add(b.cfg.BusyWait); now.Before(limit) {
			p.due = now.Add(p.wait)
			if limit.Before(p.due) {
				p.due = limit
			}
		}
	}
	if p != nil && now.Before(p.due) {
		due := p.due
		b.mu.Unlock()
		// Not due yet. The queue keeps one wake-up per key, the earliest,
		// which may have been this early one: make sure the due one stays.
		b.queue.AddAfter(key, due.Sub(now))
		return nil
	}
	delete(b.pending, key)
	b.mu.Unlock()
	if p == nil || !b.cfg.Writer.Holds(p.rng) {
		return nil
	}
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key we made: nothing to retry
	}
	obj, err := b.cfg.Cached(p.rng, namespace, name)
	for attempt := 0; ; attempt++ {
		if apierrors.IsNotFound(err) {
			return nil // gone: the intents died with it
		}
		if err != nil {
			b.requeue(key, p)
			return err
		}
		if accessor, err := meta.Accessor(obj); err != nil || accessor.GetUID() != p.uid {
			return nil // another object by now: the intents died with theirs
		}
		var patch []byte
		patch, err = mergePatch(obj, p.mutations)
		if err != nil {
			return err
		}
		if patch == nil {
			b.nothingWritten(key, p)
			return nil // nothing left to write
		}
		klog.FromContext(ctx).V(5).Info("Patching", "batcher", b.cfg.Name, "key", key, "intents", len(p.mutations), "patch", string(patch))
		var patched T
		err = b.cfg.Writer.Write(ctx, p.rng, func(ctx context.Context) (err error) {
			patched, err = b.cfg.Patch(ctx, namespace, name, patch)
			return err
		})
		if errors.Is(err, sharded.ErrNotHeld) {
			return nil
		}
		if err == nil {
			b.cfg.Metrics.observe(b.cfg.Name, len(p.mutations))
			if b.cfg.OnPatched != nil {
				b.cfg.OnPatched(patched)
			}
			return nil
		}
		if apierrors.IsConflict(err) {
			b.cfg.Metrics.conflict(b.cfg.Name)
		}
		if permanent(err) {
			// The server will refuse this patch however often it is sent:
			// drop it, and let the next reconcile send a fresh intent.
			klog.FromContext(ctx).Error(err, "Dropping a status patch the server refuses", "batcher", b.cfg.Name, "key", key)
			b.nothingWritten(key, p)
			return nil
		}
		if !apierrors.IsConflict(err) || attempt >= 3 {
			b.requeue(key, p)
			return err
		}
		// Someone wrote the object since our cache saw it: re-read it and
		// re-apply the intents to what is there now.
		obj, err = b.cfg.Fresh(ctx, namespace, name)
	}
}

func (b *Batcher[T]) nothingWritten(key string, p *batch[T]) {
	if p.awaited && b.cfg.OnNothingWritten != nil {
		b.cfg.OnNothingWritten(p.rng, key)
	}
}

func permanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)
}

// requeue puts p's intents back, ahead of any that arrived meanwhile, due
// at once: the caller retries the key with backoff.
func (b *Batcher[T]) requeue(key string, p *batch[T]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur := b.pending[key]; cur != nil && cur.uid == p.uid {
		cur.mutations = append(p.mutations, cur.mutations...)
		cur.due = time.Time{}
		cur.awaited = cur.awaited || p.awaited
		return
	}
	if cur := b.pending[key]; cur != nil {
		return // intents for a newer object with the name win
	}
	p.due = time.Time{}
	b.pending[key] = p
}

// mergePatch applies mutations to a copy of obj and returns the JSON merge
// patch from obj to it, with obj's resourceVersion as precondition, or nil
// when nothing changes.
func mergePatch[T runtime.Object](obj T, mutations []Mutation[T]) ([]byte, error) {
	modified := obj.DeepCopyObject().(T)
	changed := false
	for _, m := range mutations {
		if m(modified) {
			changed = true
		}
	}
	if !changed {
		return nil, nil
	}
	return patch.Merge(obj, modified)
}

// Metrics of batchers.
type Metrics struct {
	batchSize *prometheus.HistogramVec
	conflicts *prometheus.CounterVec
}

// NewMetrics creates the batcher metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "virtshard_status_batch_size",
		Help:    "Intents coalesced into one status patch.",
		Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16},
	}, []string{"batcher"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtshard_status_patch_conflicts_total",
			Help: "Status patches refused because the object changed since it was read.",
		}, []string{"batcher"}),
	}
	reg.MustRegister(m.batchSize, m.conflicts)
	return m
}

func (m *Metrics) conflict(name string) {
	if m != nil {
		m.conflicts.WithLabelValues(name).Inc()
	}
}

func (m *Metrics) observe(name string, n int) {
	if m != nil {
		m.batchSize.WithLabelValues(name).Observe(float64(n))
	}
}
