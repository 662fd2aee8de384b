package sharded

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Events says which items a kind of object's events queue, and who else
// hears of them: for the controller's own objects, their own key
// (ItsOwnKey); for children (a VMI's launcher pod, a VM's VMI), their
// owners' (ControllerKey); for objects of another range or none (a
// migration, a claim, a node), the items Route finds.
type Events[T metav1.Object] struct {
	// Keys are the namespace/name keys the object's events queue in the
	// object's own range; none for an object the controller ignores.
	Keys func(obj T) []string
	// Route, instead of Keys, names the items an object's events queue
	// wherever they are: in a held range its object is found in
	// (caches.Kind.Locate), or Cluster. An item of a range not held is
	// dropped: its holder hears of the object itself.
	Route func(obj T) []Item
	// Initial queues only what a range holds when it is acquired (an
	// informer replays its objects to a new handler), not later events:
	// a controller that looks again at the items of a range it takes
	// over, and otherwise follows another kind.
	Initial bool
	// Changed, when set, lets an update queue only when it returns true
	// (KubeVirt's filters: a claim's capacity changed, say); without it,
	// every new resourceVersion queues.
	Changed func(old, cur T) bool
	// IgnoreDeletes: a deletion queues nothing.
	IgnoreDeletes bool
	// Replay, for a cluster-wide kind, queues again on the acquisition of
	// a range the items its objects route into that range: what happened
	// while nobody held it.
	Replay bool
	// Added, Updated and Deleted, when set, hear of each event once per
	// item before it is queued: the controller's expectations and metrics.
	Added   func(rng int, key string, obj T)
	Updated func(rng int, key string, old, cur T)
	Deleted func(rng int, key string, obj T)
}

// ItsOwnKey queues an object under its own key.
func ItsOwnKey[T metav1.Object](obj T) []string {
	return []string{obj.GetNamespace() + "/" + obj.GetName()}
}

// ControllerKey queues a child under the key of its controller, if that
// is of the given kind.
func ControllerKey[T metav1.Object](kind string) func(T) []string {
	return func(child T) []string {
		ref := metav1.GetControllerOf(child)
		if ref == nil || ref.Kind != kind {
			return nil
		}
		return []string{child.GetNamespace() + "/" + ref.Name}
	}
}

// items are the items an event of obj in range rng queues.
func (e Events[T]) items(rng int, obj T) []Item {
	if e.Route != nil {
		return e.Route(obj)
	}
	keys := e.Keys(obj)
	items := make([]Item, len(keys))
	for k, key := range keys {
		items[k] = Item{Range: rng, Key: key}
	}
	return items
}

// Handler is the event handler of range rng's objects of kind T (rng is
// Cluster for a cluster-wide kind), for every controller alike: it unwraps
// a deleted object's tombstone, skips resyncs (an unchanged
// resourceVersion), tells e's hooks and queues the items.
func Handler[T metav1.Object](r *Runtime, rng int, e Events[T]) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			o, ok := obj.(T)
			if !ok || (e.Initial && !initial) {
				return
			}
			for _, it := range e.items(rng, o) {
				if e.Added != nil {
					e.Added(it.Range, it.Key, o)
				}
				r.add(it)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, okOld := oldObj.(T)
			cur, okCur := newObj.(T)
			if !okOld || !okCur || e.Initial || old.GetResourceVersion() == cur.GetResourceVersion() ||
				(e.Changed != nil && !e.Changed(old, cur)) {
				return
			}
			for _, it := range e.items(rng, cur) {
				if e.Updated != nil {
					e.Updated(it.Range, it.Key, old, cur)
				}
				r.add(it)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			o, ok := obj.(T)
			if !ok || e.Initial || e.IgnoreDeletes {
				return
			}
			for _, it := range e.items(rng, o) {
				if e.Deleted != nil {
					e.Deleted(it.Range, it.Key, o)
				}
				r.add(it)
			}
		},
	}
}
