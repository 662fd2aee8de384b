package sharded

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/shard"
)

// Cluster is the range of a cluster-wide item (a node, the KubeVirt CR):
// not sharded, every replica reconciles it, and the gate admits it while
// the replica runs. What its sync writes of a range's objects still goes
// through the fence, by those objects' ranges.
const Cluster = -1

// Declaration declares one controller to the replica: the runtime builds
// it, registers its watches with the range caches, hands it ranges, runs
// its workers and writes through the fence. A new controller is one of
// these in its own package and a line in the replica's list.
type Declaration struct {
	// Name names the controller in logs, profiles, queue and reconcile
	// metrics, and its worker flag (--<name>-workers).
	Name string
	// Workers is how many of its items are reconciled at once, by default.
	Workers int
	// EventSource is the source component of its events: the one KubeVirt
	// v1.8.1's virt-controller records this controller's under
	// (application.go), such as virtualmachine-controller.
	EventSource string
	// New builds the controller on the replica's environment; rt is its
	// runtime: its queue and fenced writer.
	New func(env *Env, rt *Runtime) (*Controller, error)
}

// Controller is what a controller gives the runtime.
type Controller struct {
	// Watches are the kinds it watches, and which items their events queue.
	Watches []Watch
	// Sync reconciles one item of a range the replica holds and is not
	// handing off, or of Cluster.
	Sync SyncFunc[Item]
	// Forget drops what the controller keeps of range rng (expectations,
	// pending status writes) once the range's syncs under way have ended,
	// as the range is handed off; nil when it keeps nothing.
	Forget func(rng int)
	// Background, when set, runs beside the workers until the replica
	// stops (a status batcher); it labels its own profiles.
	Background func(ctx context.Context)
}

// Watch is one kind a controller watches, and the items its events queue.
type Watch struct {
	// declared is the kind for the range caches; none for an informer
	// outside them.
	declared *caches.Watch
	// ranged adds the handler of a sharded kind to an acquired range,
	// until remove.
	ranged func(rt *Runtime, r *caches.Range) (remove func(), err error)
	// informer of a cluster-wide kind, and its handler.
	informer func(c *caches.Ranges) cache.SharedIndexInformer
	handler  func(rt *Runtime) cache.ResourceEventHandler
	// replay queues a cluster-wide kind's items routed into range rng.
	replay func(rt *Runtime, c *caches.Ranges, rng int)
	// config routes a new configuration of the KubeVirt CR to items.
	config func(*clusterconfig.Config) []Item
}

// On watches a sharded kind in every held range; indexers are the ones the
// controller reads it by, beside the kind's own.
func On[T interface {
	metav1.Object
	runtime.Object
}](kind caches.Kind[T], e Events[T], indexers cache.Indexers) Watch {
	if !kind.Placement.Sharded() {
		panic(fmt.Sprintf("sharded.On(%s): a %s kind is watched Across", kind.Resource, kind.Placement))
	}
	declared := kind.Watch(indexers)
	return Watch{
		declared: &declared,
		ranged: func(rt *Runtime, r *caches.Range) (func(), error) {
			return kind.In(r).AddEventHandler(Handler(rt, r.Index, e))
		},
	}
}

// Across watches a cluster-wide kind; e.Route says which items an event
// queues.
func Across[T interface {
	metav1.Object
	runtime.Object
}](kind caches.Kind[T], e Events[T], indexers cache.Indexers) Watch {
	if kind.Placement.Sharded() {
		panic(fmt.Sprintf("sharded.Across(%s): a sharded kind (%s) is watched On its ranges", kind.Resource, kind.Placement))
	}
	declared := kind.Watch(indexers)
	w := Watch{
		declared: &declared,
		informer: func(c *caches.Ranges) cache.SharedIndexInformer { return kind.All(c).Informers()[0] },
		handler:  func(rt *Runtime) cache.ResourceEventHandler { return Handler(rt, Cluster, e) },
	}
	if e.Replay {
		w.replay = func(rt *Runtime, c *caches.Ranges, rng int) {
			for _, obj := range kind.All(c).List() {
				for _, it := range e.items(Cluster, obj) {
					if it.Range == rng {
						rt.add(it)
					}
				}
			}
		}
	}
	return w
}

// OnConfig queues the items route names each time the KubeVirt CR's
// configuration changes (sharded.ClusterConfig.OnChange): a cluster-wide
// object of one, every replica following it.
func OnConfig(route func(*clusterconfig.Config) []Item) Watch { return Watch{config: route} }

// Reading declares a kind the controller reads from the caches, whose
// events queue nothing of its own (another kind's do).
func Reading(w caches.Watch) Watch { return Watch{declared: &w} }

// OnInformer watches a cluster-wide informer outside the range caches,
// which the replica runs (the objects a launcher pod is rendered from):
// informer is asked for it once those run, and may return nil for one the
// cluster does not serve.
func OnInformer[T metav1.Object](informer func() cache.SharedIndexInformer, e Events[T]) Watch {
	return Watch{
		informer: func(*caches.Ranges) cache.SharedIndexInformer { return informer() },
		handler:  func(rt *Runtime) cache.ResourceEventHandler { return Handler(rt, Cluster, e) },
	}
}

// Start registers the controller's watches with the range caches, which
// then hand it ranges. Call it for every controller before the caches run.
func (r *Runtime) Start(env *Env, decl Declaration) error {
	if decl.EventSource != "" && env.RecorderFor != nil {
		own := *env
		own.Recorder = env.RecorderFor(decl.EventSource)
		env = &own
	}
	ctrl, err := decl.New(env, r)
	if err != nil {
		return fmt.Errorf("%s controller: %w", decl.Name, err)
	}
	r.ctrl, r.caches, r.config = ctrl, env.Caches, env.ClusterConfig
	var declared []caches.Watch
	for _, w := range ctrl.Watches {
		if w.declared != nil {
			declared = append(declared, *w.declared)
		}
	}
	return env.Caches.Register(r, declared...)
}

// Follow adds the handlers of the cluster-wide kinds the controller
// watches (the KubeVirt CR's configuration among them), once their
// informers synced and before any range is acquired, and waits for
// informers outside the caches to sync.
func (r *Runtime) Follow(ctx context.Context) error {
	var synced []cache.InformerSynced
	for _, w := range r.ctrl.Watches {
		if w.config != nil {
			route := w.config
			r.config.OnChange(func(cfg *clusterconfig.Config) {
				for _, it := range route(cfg) {
					r.add(it)
				}
			})
		}
		if w.informer == nil {
			continue
		}
		informer := w.informer(r.caches)
		if informer == nil {
			continue // not served
		}
		if _, err := informer.AddEventHandler(w.handler(r)); err != nil {
			return err
		}
		synced = append(synced, informer.HasSynced)
	}
	if !cache.WaitForNamedCacheSync(r.cfg.Name, ctx.Done(), synced...) {
		return fmt.Errorf("%s controller: caches did not sync: %w", r.cfg.Name, ctx.Err())
	}
	return nil
}

// Acquired implements caches.Consumer: open range r to syncs, watch its
// objects (an informer replays what it holds to a new handler, which
// queues the range's items) and queue what cluster-wide objects route
// into it.
func (r *Runtime) Acquired(_ context.Context, rng *caches.Range) error {
	r.gate.Open(rng.Index)
	var removes []func()
	for _, w := range r.ctrl.Watches {
		switch {
		case w.ranged != nil:
			remove, err := w.ranged(r, rng)
			if err != nil {
				for _, remove := range removes {
					remove()
				}
				return err
			}
			removes = append(removes, remove)
		case w.replay != nil:
			w.replay(r, r.caches, rng.Index)
		}
	}
	r.handlersMu.Lock()
	r.handlers[rng.Index] = removes
	r.handlersMu.Unlock()
	return nil
}

// Releasing implements caches.Consumer: close range i to new syncs, wait
// for those under way (or ctx), remove the range's handlers, then let the
// controller forget the range.
// Its writes stop at the fence whatever is still queued; the next owner
// starts from the objects.
func (r *Runtime) Releasing(ctx context.Context, i int, _ shard.Reason) {
	r.gate.Release(ctx, i)
	// Its handlers go too: a range's caches may be kept for its next
	// tenure (caches.Ranges.Keep), whose Acquired adds them again.
	r.handlersMu.Lock()
	removes := r.handlers[i]
	delete(r.handlers, i)
	r.handlersMu.Unlock()
	for _, remove := range removes {
		remove()
	}
	if r.ctrl.Forget != nil {
		r.ctrl.Forget(i)
	}
}

// RunWorkers runs the controller's background loop and workers workers
// until ctx is done.
func (r *Runtime) RunWorkers(ctx context.Context, workers int) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { r.RunBackground(ctx) })
	klog.FromContext(ctx).Info("Controller running", "controller", r.cfg.Name, "workers", workers)
	return r.Run(ctx, workers, r.ctrl.Sync)
}

// RunBackground runs the controller's background loop, if it has one,
// until ctx is done.
func (r *Runtime) RunBackground(ctx context.Context) {
	if bg := r.ctrl.Background; bg != nil {
		bg(ctx)
	}
}

var _ caches.Consumer = (*Runtime)(nil)
