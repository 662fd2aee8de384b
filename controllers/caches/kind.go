package caches

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/shard"
)

// Clients are what a kind lists and watches with.
type Clients struct {
	Kube     kubernetes.Interface
	KubeVirt kubevirt.Interface
}

// Kind declares one kind of object the replica caches: what it is, how to
// list and watch it, how an object finds its range, what the cache keeps
// of it. Declared once (package kinds, or a controller's own package for a
// kind only it reads) and named by every controller that watches it; the
// caches serve any kind so declared, with one shared watch per selection
// and replica however many controllers read it.
type Kind[T runtime.Object] struct {
	// Resource names the kind (its plural resource name): unique in a
	// replica, it labels metrics and logs.
	Resource string
	// Placement is how an object finds its range: a sharded kind is cached
	// per held range, a cluster-wide one whole.
	Placement shard.Placement
	// ListWatch lists and watches the kind in namespace ("": all).
	ListWatch func(c Clients, namespace string) cache.ListerWatcher
	// Trim is the cache's transform, applied to every object before it is
	// stored; nil keeps objects as they come.
	Trim cache.TransformFunc
	// Indexers are the kind's own indexes, which every reader may use.
	Indexers cache.Indexers
}

// ListWatchOf is the ListerWatcher of a typed client's List and Watch,
// the usual Kind.ListWatch: ListWatchOf(client.List, client.Watch).
func ListWatchOf[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error), watchFunc func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc:  func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return list(ctx, o) },
		WatchFuncWithContext: watchFunc,
	}
}

// Watch is a kind as one consumer declares it: with the indexers it reads
// by, which the caches add to the kind's own.
type Watch struct {
	kind     *kindInfo
	indexers cache.Indexers
}

// Watch declares that a consumer reads the kind, by these indexers too.
func (k Kind[T]) Watch(indexers cache.Indexers) Watch {
	return Watch{kind: k.info(), indexers: indexers}
}

// kindInfo is a Kind without its type parameter, as the caches keep it.
type kindInfo struct {
	resource  string
	placement shard.Placement
	typ       reflect.Type
	listWatch func(Clients, string) cache.ListerWatcher
	trim      cache.TransformFunc
	indexers  cache.Indexers
}

func (k Kind[T]) info() *kindInfo {
	return &kindInfo{
		resource:  k.Resource,
		placement: k.Placement,
		typ:       reflect.TypeFor[T](),
		listWatch: k.ListWatch,
		trim:      k.Trim,
		indexers:  k.Indexers,
	}
}

// example is a new empty object of the kind, as informers want one.
func (k *kindInfo) example() runtime.Object {
	return reflect.New(k.typ.Elem()).Interface().(runtime.Object)
}

// same reports whether two declarations of a resource agree.
func (k *kindInfo) same(o *kindInfo) bool {
	return k.resource == o.resource && k.placement == o.placement && k.typ == o.typ
}

// In is the kind's objects in range r's caches. It panics if no consumer
// declared the kind: a wiring error, which a controller's first sync hits.
func (k Kind[T]) In(r *Range) Objects[T] {
	set, ok := r.objects[k.Resource]
	if !ok {
		panic(fmt.Sprintf("caches: kind %q is not watched by any controller", k.Resource))
	}
	return Objects[T]{set: set}
}

// All is a cluster-wide kind's objects (Placement ClusterWide), which
// every replica caches whole. It panics as In does.
func (k Kind[T]) All(c *Ranges) Objects[T] {
	s, ok := c.served[k.Resource]
	if !ok || s.cluster == nil {
		panic(fmt.Sprintf("caches: cluster-wide kind %q is not watched by any controller", k.Resource))
	}
	return Objects[T]{set: s.cluster}
}

// Read lists range i's objects of a sharded kind from the API server at
// its current version, past the caches: for a decision that must take in
// every write made so far, those of the range's previous holder that the
// caches may not have seen yet among them.
func (k Kind[T]) Read(ctx context.Context, c *Ranges, i int) ([]T, error) {
	lw := cache.ToListerWatcherWithContext(k.ListWatch(Clients{Kube: c.cfg.Kube, KubeVirt: c.cfg.KubeVirt}, c.cfg.Namespace))
	var out []T
	for _, by := range c.cfg.Ranges.Selections(k.Placement) {
		sel := by(shard.NewSet(c.cfg.Ranges.Count(), i))
		list, err := lw.ListWithContext(ctx, shard.ListOptions(sel, metav1.ListOptions{}))
		if err != nil {
			return nil, fmt.Errorf("read %s of range %d: %w", k.Resource, i, err)
		}
		err = meta.EachListItem(list, func(o runtime.Object) error {
			if obj, ok := o.(T); ok {
				if m, err := meta.Accessor(obj); err == nil && shard.Selects(sel, m) {
					out = append(out, obj)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read %s of range %d: %w", k.Resource, i, err)
		}
	}
	return out, nil
}

// Held returns the kind's objects of every held range (read only).
func (k Kind[T]) Held(c *Ranges) []T {
	var out []T
	for i := range c.held {
		if r := c.held[i].Load(); r != nil {
			out = append(out, k.In(r).List()...)
		}
	}
	return out
}

// Found is an object of a held range, with the range's caches.
type Found[T runtime.Object] struct {
	Range  *Range
	Object T
}

// HeldByIndex returns the objects of every held range whose indexer name
// yields value: the VMIs on a node, those that use a claim.
func (k Kind[T]) HeldByIndex(c *Ranges, name, value string) []Found[T] {
	var out []Found[T]
	for i := range c.held {
		r := c.held[i].Load()
		if r == nil {
			continue
		}
		objs, _ := k.In(r).ByIndex(name, value) // an unknown index is a wiring error: Register refused none
		for _, obj := range objs {
			out = append(out, Found[T]{Range: r, Object: obj})
		}
	}
	return out
}

// Locate finds the held range whose caches have the object with key
// namespace/name: where a controller routes an event of another kind (a
// migration, a claim) to the object it concerns. With the namespace as
// shard key an object's range follows from its key; with the uid it is
// looked up in each held range.
func (k Kind[T]) Locate(c *Ranges, key string) (int, bool) {
	has := func(i int) bool {
		r := c.held[i].Load()
		if r == nil {
			return false
		}
		_, exists, _ := k.In(r).Get(key)
		return exists
	}
	if c.cfg.Ranges.Key() == shard.KeyNamespace {
		if ns, _, err := cache.SplitMetaNamespaceKey(key); err == nil {
			i := c.cfg.Ranges.OfValue(ns)
			return i, has(i)
		}
	}
	for i := range c.held {
		if has(i) {
			return i, true
		}
	}
	return 0, false
}

// objectSet is one kind's caches in one range (or cluster-wide): one
// informer per selection of its placement, which never hold the same
// object, and for each an overlay of the replica's own writes.
type objectSet struct {
	ranges    shard.Ranges
	placement shard.Placement
	informers []cache.SharedIndexInformer
	overlays  atomic.Pointer[[]cache.MutationCache]
}

// overlayTTL bounds how long a written object shadows the cache: well past
// any informer lag, and short enough not to hide someone else's change.
const (
	overlayTTL  = time.Minute
	overlaySize = 100000
)

// resetOverlays starts the overlays of own writes afresh.
func (s *objectSet) resetOverlays() {
	opts := cache.MutationCacheOptions{TTL: overlayTTL, MaxCacheSize: overlaySize}
	overlays := make([]cache.MutationCache, len(s.informers))
	for k, inf := range s.informers {
		overlays[k] = cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), inf.GetStore(), opts)
	}
	s.overlays.Store(&overlays)
}

func (s *objectSet) len() int {
	n := 0
	for _, inf := range s.informers {
		n += len(inf.GetStore().ListKeys())
	}
	return n
}

func (s *objectSet) hasSynced() bool {
	for _, inf := range s.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// Objects is one kind's objects in a range's caches (or cluster-wide),
// typed. Objects it returns are the cache's: read only.
type Objects[T runtime.Object] struct{ set *objectSet }

// Get returns the cached object with key namespace/name.
func (o Objects[T]) Get(key string) (T, bool, error) {
	var zero T
	for _, inf := range o.set.informers {
		obj, exists, err := inf.GetStore().GetByKey(key)
		if err != nil {
			return zero, false, err
		}
		if exists {
			return obj.(T), true, nil
		}
	}
	return zero, false, nil
}

// Latest is the newest copy of the object with key namespace/name the
// replica knows: what its own last write returned (Wrote), while the
// informer has not caught up, else the cache's. The next write then starts
// from the latest resourceVersion instead of conflicting, and a sync does
// not act on a state it has already changed.
func (o Objects[T]) Latest(key string) (T, bool, error) {
	var zero T
	for _, overlay := range *o.set.overlays.Load() {
		obj, exists, err := overlay.GetByKey(key)
		if err != nil || exists {
			t, _ := obj.(T)
			return t, exists, err
		}
	}
	return zero, false, nil
}

// Wrote records an object one of the replica's writes returned, for
// Latest.
func (o Objects[T]) Wrote(obj T) {
	k := 0
	if accessor, err := meta.Accessor(obj); err == nil {
		k = o.set.ranges.Selecting(o.set.placement, accessor)
	}
	(*o.set.overlays.Load())[k].Mutation(obj)
}

// ByIndex returns the cached objects whose indexer name yields value.
func (o Objects[T]) ByIndex(name, value string) ([]T, error) {
	var out []T
	for _, inf := range o.set.informers {
		objs, err := inf.GetIndexer().ByIndex(name, value)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			out = append(out, obj.(T))
		}
	}
	return out, nil
}

// List returns every cached object.
func (o Objects[T]) List() []T {
	var out []T
	for _, inf := range o.set.informers {
		for _, obj := range inf.GetStore().List() {
			out = append(out, obj.(T))
		}
	}
	return out
}

// Keys lists the namespace/name of every cached object.
func (o Objects[T]) Keys() []string {
	var out []string
	for _, inf := range o.set.informers {
		out = append(out, inf.GetStore().ListKeys()...)
	}
	return out
}

// Len counts the cached objects.
func (o Objects[T]) Len() int { return o.set.len() }

// HasSynced reports whether every informer of the set has synced.
func (o Objects[T]) HasSynced() bool { return o.set.hasSynced() }

// AddEventHandler adds h to every informer of the set, until remove. An
// object moves between them only if someone edits its range label; h then
// sees it deleted from one and added to the other.
func (o Objects[T]) AddEventHandler(h cache.ResourceEventHandler) (remove func(), err error) {
	var added []cache.ResourceEventHandlerRegistration
	remove = func() {
		for k, reg := range added {
			_ = o.set.informers[k].RemoveEventHandler(reg) // fails only for a handle of another informer
		}
	}
	for _, inf := range o.set.informers {
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			remove()
			return func() {}, err
		}
		added = append(added, reg)
	}
	return remove, nil
}

// Informers are the set's informers, one per selection of the kind's
// placement.
func (o Objects[T]) Informers() []cache.SharedIndexInformer { return o.set.informers }
