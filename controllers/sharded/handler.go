package sharded

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Events says which items a kind of object's events queue, and who else
// hears of them: for the controller's own objects, their own key
// (ItsOwnKey); for children (a VMI's launcher pod, a VM's VMI), their
// owners' (ControllerKey).
type Events[T metav1.Object] struct {
	// Keys are the namespace/name keys the object's events queue; none
	// for an object the controller ignores.
	Keys func(obj T) []string
	// Added, Updated and Deleted, when set, hear of each event once per
	// key before it is queued: the controller's expectations and metrics.
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

// Handler is the event handler of range rng's objects of kind T, for every
// controller alike: it unwraps a deleted object's tombstone, skips resyncs
// (an unchanged resourceVersion), tells e's hooks and queues the keys.
func Handler[T metav1.Object](r *Runtime, rng int, e Events[T]) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			o, ok := obj.(T)
			if !ok {
				return
			}
			for _, key := range e.Keys(o) {
				if e.Added != nil {
					e.Added(rng, key, o)
				}
				r.Add(rng, key)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, okOld := oldObj.(T)
			cur, okCur := newObj.(T)
			if !okOld || !okCur || old.GetResourceVersion() == cur.GetResourceVersion() {
				return
			}
			for _, key := range e.Keys(cur) {
				if e.Updated != nil {
					e.Updated(rng, key, old, cur)
				}
				r.Add(rng, key)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			o, ok := obj.(T)
			if !ok {
				return
			}
			for _, key := range e.Keys(o) {
				if e.Deleted != nil {
					e.Deleted(rng, key, o)
				}
				r.Add(rng, key)
			}
		},
	}
}
