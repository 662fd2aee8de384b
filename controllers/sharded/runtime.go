package sharded

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/replica/profiling"
)

// Item is a queued object of a sharded controller: its range and its
// namespace/name key.
type Item struct {
	Range int
	Key   string
}

// SyncFunc reconciles one item. A positive duration asks for another sync
// after it, when time alone will change the answer; an error requeues the
// item with backoff.
type SyncFunc[T comparable] func(ctx context.Context, item T) (time.Duration, error)

// Config of a Runtime.
type Config struct {
	// Name names the controller in logs, profiles, queue and reconcile
	// metrics.
	Name string
	// Ranges is the number of shard ranges.
	Ranges int
	// Fence admits syncs and writes of the ranges the replica holds.
	Fence Fence
	// Clock drives the queue's delays; nil means the real clock.
	Clock clock.WithTicker
	// Metrics receives reconcile durations; nil for none.
	Metrics *Metrics
}

// Runtime is one sharded controller's queue, gate, workers and fenced
// writer.
type Runtime struct {
	*Writer
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[Item]
	gate  *Gate

	// ctrl is the controller the runtime runs (Start), reading caches.
	ctrl   *Controller
	caches *caches.Ranges
	config ClusterConfig
	// handlers remove the event handlers added to each held range.
	handlersMu sync.Mutex
	handlers   map[int][]func()
}

// New returns a runtime with every range open.
func New(cfg Config) *Runtime {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Runtime{
		Writer: NewWriter(cfg.Name, cfg.Fence, cfg.Metrics),
		cfg:    cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[Item](),
			workqueue.TypedRateLimitingQueueConfig[Item]{Name: cfg.Name, Clock: cfg.Clock}),
		gate:     NewGate(cfg.Ranges, cfg.Fence),
		handlers: map[int][]func(){},
	}
}

// Add queues the object key of range rng.
func (r *Runtime) Add(rng int, key string) { r.queue.Add(Item{rng, key}) }

func (r *Runtime) add(it Item) { r.queue.Add(it) }

// AddAfter queues the object key of range rng after d.
func (r *Runtime) AddAfter(rng int, key string, d time.Duration) { r.queue.AddAfter(Item{rng, key}, d) }

// Len is the number of items queued and not being reconciled.
func (r *Runtime) Len() int { return r.queue.Len() }

// Run runs workers workers of reconcile until ctx is done; a reconcile runs only
// while its range is held and not being released, or is Cluster's. It
// returns once the workers have stopped.
func (r *Runtime) Run(ctx context.Context, workers int, reconcile SyncFunc[Item]) error {
	return work(ctx, r.cfg.Name, workers, r.queue, r.cfg.Metrics, func(ctx context.Context, it Item) (time.Duration, error) {
		if it.Range == Cluster {
			return reconcile(ctx, it)
		}
		if !r.gate.Enter(it.Range) {
			return 0, nil // not ours (any more): the next owner reconciles it
		}
		defer r.gate.Leave(it.Range)
		return reconcile(ctx, it)
	})
}

// work runs workers workers that take items from q and reconcile them
// until ctx is done, then shuts q down and waits for them: the loop of
// every controller (Runtime.Run).
func work[T comparable](ctx context.Context, name string, workers int, q workqueue.TypedRateLimitingInterface[T], m *Metrics, reconcile SyncFunc[T]) error {
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			// A panic outside a reconcile is a bug of the loop: log it and
			// crash, as Kubernetes' controllers do.
			defer utilruntime.HandleCrashWithContext(ctx)
			profiling.Do(ctx, name, func(ctx context.Context) {
				for next(ctx, name, q, m, reconcile) {
				}
			})
		})
	}
	wg.Wait()
	return nil
}

func next[T comparable](ctx context.Context, name string, q workqueue.TypedRateLimitingInterface[T], m *Metrics, reconcile SyncFunc[T]) bool {
	it, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(it)
	start := time.Now()
	after, err := guarded(ctx, name, it, reconcile)
	if errors.Is(err, ErrNotHeld) {
		err = nil // the range moved on: its holder reconciles the item
	}
	m.reconciled(name, time.Since(start), err)
	switch {
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Reconcile failed, requeueing", "controller", name, "item", it, "err", err)
		m.requeued(name, "error")
		q.AddRateLimited(it)
	case after > 0:
		m.requeued(name, "after")
		q.Forget(it)
		q.AddAfter(it, after)
	default:
		q.Forget(it)
	}
	return true
}

// guarded runs sync and turns its panic into an error: one object that
// trips a bug is logged and retried with backoff, instead of crashing every
// replica that takes its range over in turn.
func guarded[T comparable](ctx context.Context, name string, it T, reconcile SyncFunc[T]) (after time.Duration, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("reconcile panicked: %v", p)
			klog.FromContext(ctx).Error(err, "Reconcile panicked", "controller", name, "item", it, "stack", string(debug.Stack()))
		}
	}()
	return reconcile(ctx, it)
}

// Metrics are the reconcile and fenced-write metrics of every controller.
type Metrics struct {
	duration *prometheus.HistogramVec
	requeues *prometheus.CounterVec
	fences   *prometheus.CounterVec
}

// NewMetrics creates the reconcile metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "virtshard_controller_reconcile_duration_seconds",
			Help:    "Time of one reconcile, by controller and result.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"controller", "result"}),
		requeues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtshard_controller_requeues_total",
			Help: "Items queued again by their reconcile, by controller and reason (error: with backoff; after: at a time the reconcile asked for).",
		}, []string{"controller", "reason"}),
		fences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtshard_controller_fenced_writes_total",
			Help: "Writes the shard fence stopped, by controller and reason (not_held: not sent, the replica did not hold the range; deadline: abandoned at the fence's deadline).",
		}, []string{"controller", "reason"}),
	}
	reg.MustRegister(m.duration, m.requeues, m.fences)
	return m
}

func (m *Metrics) reconciled(controller string, took time.Duration, err error) {
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "error"
	}
	m.duration.WithLabelValues(controller, result).Observe(took.Seconds())
}

func (m *Metrics) requeued(controller, reason string) {
	if m != nil {
		m.requeues.WithLabelValues(controller, reason).Inc()
	}
}

func (m *Metrics) fenced(controller, reason string) {
	if m != nil {
		m.fences.WithLabelValues(controller, reason).Inc()
	}
}
