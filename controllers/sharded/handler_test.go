package sharded

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func pod(name, rv, owner string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	if owner != "" {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "VirtualMachineInstance", Name: owner, Controller: ptr.To(true)}}
	}
	return p
}

// queued drains r's queue.
func queued(r *Runtime) []Item {
	var items []Item
	for r.queue.Len() > 0 {
		it, _ := r.queue.Get()
		r.queue.Done(it)
		items = append(items, it)
	}
	return items
}

func TestHandlerQueuesTheOwnerOfEachChildEvent(t *testing.T) {
	r := New(Config{Name: "test", Ranges: 4, Fence: newFence()})
	var heard []string
	h := Handler(r, 3, Events[*corev1.Pod]{
		Keys:    ControllerKey[*corev1.Pod]("VirtualMachineInstance"),
		Added:   func(rng int, key string, _ *corev1.Pod) { heard = append(heard, "added "+key) },
		Updated: func(rng int, key string, _, _ *corev1.Pod) { heard = append(heard, "updated "+key) },
		Deleted: func(rng int, key string, _ *corev1.Pod) { heard = append(heard, "deleted "+key) },
	})
	h.OnAdd(pod("p", "1", "a"), false)
	h.OnAdd(pod("orphan", "1", ""), false)
	h.OnUpdate(pod("p", "1", "a"), pod("p", "1", "a")) // a resync
	h.OnUpdate(pod("p", "1", "a"), pod("p", "2", "b"))
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod("p", "3", "c")})
	h.OnDelete("not a pod")

	want := []string{"added ns/a", "updated ns/b", "deleted ns/c"}
	if !slices.Equal(heard, want) {
		t.Errorf("hooks heard %q, want %q", heard, want)
	}
	got := queued(r)
	wantItems := []Item{{3, "ns/a"}, {3, "ns/b"}, {3, "ns/c"}}
	if !slices.Equal(got, wantItems) {
		t.Errorf("queued %v, want %v", got, wantItems)
	}
}

func TestHandlerQueuesAnObjectUnderItsOwnKey(t *testing.T) {
	r := New(Config{Name: "test", Ranges: 1, Fence: newFence()})
	h := Handler(r, 0, Events[*corev1.Pod]{Keys: ItsOwnKey[*corev1.Pod]})
	h.OnAdd(pod("p", "1", "a"), false)
	if got := queued(r); !slices.Equal(got, []Item{{0, "ns/p"}}) {
		t.Errorf("queued %v, want the pod itself", got)
	}
}
