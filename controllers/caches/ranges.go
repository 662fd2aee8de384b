package caches

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/shard"
)

// Config wires the range caches.
type Config struct {
	Kube     kubernetes.Interface
	KubeVirt kubevirt.Interface
	// Namespace restricts the caches to one namespace; "" watches all.
	Namespace string
	Ranges    shard.Ranges
	Metrics   *shard.Metrics
}

// Consumer is a controller that acts on the ranges the replica holds.
//
// Acquired is called once range r's informers have synced; the consumer
// adds its event handlers there (an informer replays what it holds to a new
// handler) and queues the range's objects. Releasing is called before the
// informers stop, as shard.Handler describes.
type Consumer interface {
	Acquired(ctx context.Context, r *Range) error
	Releasing(ctx context.Context, i int, reason shard.Reason)
}

var _ shard.Preparer = (*Ranges)(nil)

// Ranges holds the informers of each range the replica holds, and of the
// ranges it prepares to hold, for every kind its consumers declared, and
// the informers of the cluster-wide kinds.
type Ranges struct {
	cfg       Config
	consumers []Consumer
	started   atomic.Bool
	held      []atomic.Pointer[Range]
	// prepared are ranges whose informers run ahead of Acquired
	// (shard.Preparer): the manager expects to be given them soon.
	prepared []atomic.Pointer[Range]
	// keep[i]: Keep asked that range i's caches outlive its release.
	keep []atomic.Bool

	// served are the declared kinds by resource, in declaration order in
	// kinds; written only before the first range is acquired.
	served map[string]*served
	kinds  []*served
}

// served is one declared kind as the caches serve it.
type served struct {
	kind     *kindInfo
	indexers cache.Indexers
	// watches are a sharded kind's shared watches, one per selection of
	// its placement (shard.SharedWatch): every range's informers list and
	// watch through them.
	watches []*shard.SharedWatch
	// cluster is a cluster-wide kind's one set of caches.
	cluster *objectSet
}

// Range is one held range's caches.
type Range struct {
	Index int
	// objects are the range's caches by resource; fixed once started.
	objects map[string]*objectSet

	cancel context.CancelFunc
	done   sync.WaitGroup
}

// NewRanges returns the range caches; controllers Register before the
// shard manager runs.
func NewRanges(cfg Config) *Ranges {
	count := cfg.Ranges.Count()
	return &Ranges{
		cfg:      cfg,
		held:     make([]atomic.Pointer[Range], count),
		prepared: make([]atomic.Pointer[Range], count),
		keep:     make([]atomic.Bool, count),
		served:   map[string]*served{},
	}
}

// Register adds a consumer with the kinds it watches. Consumers learn of
// an acquired range in registration order and of its release in reverse.
// Every kind registered by anyone is cached in every range (or, cluster-
// wide, once); an indexer name may be declared only once per kind.
func (c *Ranges) Register(consumer Consumer, watches ...Watch) error {
	if c.started.Load() {
		return errors.New("register a consumer before any range is acquired")
	}
	for _, w := range watches {
		if err := c.serve(w); err != nil {
			return err
		}
	}
	if consumer != nil {
		c.consumers = append(c.consumers, consumer)
	}
	return nil
}

// serve adds w's kind, or w's indexers to the kind already served.
func (c *Ranges) serve(w Watch) error {
	s, ok := c.served[w.kind.resource]
	if !ok {
		s = &served{kind: w.kind, indexers: cache.Indexers{}}
		if err := addIndexers(s.indexers, w.kind.indexers, w.kind.resource); err != nil {
			return err
		}
		lw := w.kind.listWatch(Clients{Kube: c.cfg.Kube, KubeVirt: c.cfg.KubeVirt}, c.cfg.Namespace)
		for _, by := range c.cfg.Ranges.Selections(w.kind.placement) {
			s.watches = append(s.watches, shard.NewSharedWatch(lw, c.cfg.Ranges.Count(), by, w.kind.resource, c.cfg.Metrics))
		}
		if !w.kind.placement.Sharded() {
			informer := cache.NewSharedIndexInformer(lw, w.kind.example(), 0, maps.Clone(s.indexers))
			// SetTransform and AddIndexers fail only on a started informer.
			_ = informer.SetTransform(w.kind.trim)
			s.cluster = &objectSet{ranges: c.cfg.Ranges, placement: w.kind.placement, informers: []cache.SharedIndexInformer{informer}}
			s.cluster.resetOverlays()
		}
		c.served[w.kind.resource] = s
		c.kinds = append(c.kinds, s)
	} else if !s.kind.same(w.kind) {
		return fmt.Errorf("kind %q declared twice, differently (%s and %s)", w.kind.resource, s.kind.placement, w.kind.placement)
	}
	if err := addIndexers(s.indexers, w.indexers, w.kind.resource); err != nil {
		return err
	}
	if s.cluster != nil {
		return s.cluster.informers[0].AddIndexers(w.indexers)
	}
	return nil
}

func addIndexers(to, from cache.Indexers, resource string) error {
	for name, fn := range from {
		if _, dup := to[name]; dup {
			return fmt.Errorf("indexer %q of %s registered twice", name, resource)
		}
		to[name] = fn
	}
	return nil
}

// RunCluster starts the cluster-wide kinds' informers on ctx and waits for
// them to sync: before any range is taken, so that a controller routing a
// cluster-wide object to a range finds it.
func (c *Ranges) RunCluster(ctx context.Context) error {
	var synced []cache.InformerSynced
	for _, s := range c.kinds {
		if s.cluster == nil {
			continue
		}
		informer := s.cluster.informers[0]
		go informer.RunWithContext(ctx)
		synced = append(synced, informer.HasSynced)
	}
	if !cache.WaitForNamedCacheSync("cluster", ctx.Done(), synced...) {
		return fmt.Errorf("cluster-wide caches did not sync: %w", ctx.Err())
	}
	return nil
}

// Get is range i's caches while the replica holds it, else nil.
func (c *Ranges) Get(i int) *Range { return c.held[i].Load() }

// Prepared is range i's caches that Prepare started and no Acquired has
// taken yet, else nil.
func (c *Ranges) Prepared(i int) *Range { return c.prepared[i].Load() }

// Cached counts the objects of a resource in the held ranges' caches, or
// in the cluster-wide cache of a cluster-wide kind.
func (c *Ranges) Cached(resource string) float64 {
	s, ok := c.served[resource]
	switch {
	case !ok:
		return 0
	case s.cluster != nil:
		return float64(len(s.cluster.informers[0].GetStore().ListKeys()))
	}
	n := 0
	for i := range c.held {
		if r := c.held[i].Load(); r != nil {
			n += r.objects[resource].len()
		}
	}
	return float64(n)
}

// Prepare implements shard.Preparer: start range i's informers ahead of
// Acquired. Nothing acts on them until then; their events reach no consumer.
func (c *Ranges) Prepare(i int) {
	c.started.Store(true)
	if c.prepared[i].Load() != nil {
		return
	}
	r, err := c.start(i)
	if err != nil {
		klog.Background().Error(err, "Preparing range caches failed; Acquired will start them", "range", i)
		return
	}
	c.prepared[i].Store(r)
}

// Unprepare implements shard.Preparer: stop range i's prepared informers.
func (c *Ranges) Unprepare(i int) {
	if r := c.prepared[i].Swap(nil); r != nil {
		go r.stop() // the manager's claim loop must not wait for it
	}
}

// Synced implements shard.Preparer: range i's prepared caches have synced.
func (c *Ranges) Synced(i int) bool {
	r := c.prepared[i].Load()
	return r != nil && r.hasSynced()
}

// Keep implements shard.Preparer: range i's release that follows leaves
// its informers running, prepared, with a fresh overlay of own writes.
func (c *Ranges) Keep(i int) { c.keep[i].Store(true) }

// Acquired implements shard.Handler: start range i's informers unless
// Prepare did, wait for them, then hand the range to every consumer.
func (c *Ranges) Acquired(ctx context.Context, i int) error {
	c.started.Store(true)
	r := c.prepared[i].Swap(nil)
	if r == nil {
		var err error
		if r, err = c.start(i); err != nil {
			return err
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), r.hasSynced) {
		r.stop()
		return fmt.Errorf("caches of range %d did not sync: %w", i, ctx.Err())
	}
	c.held[i].Store(r)
	for k, consumer := range c.consumers {
		if err := consumer.Acquired(ctx, r); err != nil {
			for _, done := range c.consumers[:k] {
				done.Releasing(ctx, i, shard.ReasonFailed)
			}
			c.held[i].Store(nil)
			r.stop()
			return err
		}
	}
	return nil
}

// Releasing implements shard.Handler: consumers stop acting on range i, in
// reverse order, and then its informers stop, unless Keep asked to keep
// them prepared.
func (c *Ranges) Releasing(ctx context.Context, i int, reason shard.Reason) {
	for k := len(c.consumers) - 1; k >= 0; k-- {
		c.consumers[k].Releasing(ctx, i, reason)
	}
	r := c.held[i].Swap(nil)
	switch {
	case r == nil:
		c.keep[i].Store(false)
	case c.keep[i].Swap(false):
		// No consumer reads the range any more: its overlays start over,
		// as a prepared range's do.
		for _, set := range r.objects {
			set.resetOverlays()
		}
		if old := c.prepared[i].Swap(r); old != nil {
			go old.stop()
		}
	default:
		r.stop()
	}
}

func (r *Range) hasSynced() bool {
	for _, set := range r.objects {
		if !set.hasSynced() {
			return false
		}
	}
	return true
}

func (r *Range) stop() {
	r.cancel()
	r.done.Wait()
}

// start makes and runs range i's informers of every sharded kind.
func (c *Ranges) start(i int) (*Range, error) {
	r := &Range{Index: i, objects: map[string]*objectSet{}}
	for _, s := range c.kinds {
		if s.cluster != nil {
			continue
		}
		set := &objectSet{ranges: c.cfg.Ranges, placement: s.kind.placement}
		for _, w := range s.watches {
			informer, err := w.NewInformer(i, s.kind.example(), s.indexers, s.kind.trim)
			if err != nil {
				return nil, err
			}
			set.informers = append(set.informers, informer)
		}
		set.resetOverlays()
		r.objects[s.kind.resource] = set
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	for _, set := range r.objects {
		for _, informer := range set.informers {
			r.done.Go(func() { informer.RunWithContext(ctx) })
		}
	}
	return r, nil
}
