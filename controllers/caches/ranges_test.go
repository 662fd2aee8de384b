package caches_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/shard"
)

// newRanges returns caches over fakes holding objects, serving watches,
// with count ranges by key.
func newRanges(t *testing.T, count int, key shard.Key, watches []caches.Watch, objects ...*virtv1.VirtualMachineInstance) *caches.Ranges {
	t.Helper()
	ranges, err := shard.NewRanges(count, key)
	if err != nil {
		t.Fatal(err)
	}
	kv := kvfake.NewClientset()
	for _, obj := range objects {
		if err := kv.Tracker().Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	c := caches.NewRanges(caches.Config{Kube: kubefake.NewClientset(), KubeVirt: kv, Ranges: ranges})
	if err := c.Register(nil, watches...); err != nil {
		t.Fatal(err)
	}
	return c
}

func vmi(ns, name string, labels map[string]string) *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: k8stypes.UID("uid-" + name), ResourceVersion: "5", Labels: labels}}
}

// A range's overlay serves what the replica wrote while the informer still
// holds an older copy, and the informer's copy once it is as new.
func TestLatestIsWhatTheReplicaWroteUntilTheCacheCatchesUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := vmi("ns", "a", nil), vmi("ns", "b", map[string]string{shard.LabelRange: "0"})
	c := newRanges(t, 1, shard.KeyUID, []caches.Watch{kinds.VMIs.Watch(nil), kinds.VMs.Watch(nil)}, a, b)
	if err := c.Acquired(ctx, 0); err != nil {
		t.Fatal(err)
	}
	vmis := kinds.VMIs.In(c.Get(0))
	if got, ok, _ := vmis.Latest("ns/a"); !ok || got.ResourceVersion != "5" {
		t.Fatalf("before any write: %v, %v; want the cache's copy", got, ok)
	}
	patched := a.DeepCopy()
	patched.ResourceVersion, patched.Status.Phase = "9", virtv1.Scheduled
	vmis.Wrote(patched)
	if got, _, _ := vmis.Latest("ns/a"); got.ResourceVersion != "9" || got.Status.Phase != virtv1.Scheduled {
		t.Errorf("after a write: resourceVersion %s phase %s, want the written copy", got.ResourceVersion, got.Status.Phase)
	}
	stale := patched.DeepCopy()
	stale.ResourceVersion = "7"
	vmis.Wrote(stale) // an older write's answer arriving late
	if got, _, _ := vmis.Latest("ns/a"); got.ResourceVersion != "9" {
		t.Errorf("after a late, older answer: resourceVersion %s, want the newest, 9", got.ResourceVersion)
	}
	if _, ok, _ := vmis.Latest("ns/missing"); ok {
		t.Error("a VMI nobody has is found")
	}
	// A VM's VMI is in the labelled informer's store, and so is the
	// overlay of its writes.
	labelled := b.DeepCopy()
	labelled.ResourceVersion = "8"
	vmis.Wrote(labelled)
	if got, ok, _ := vmis.Latest("ns/b"); !ok || got.ResourceVersion != "8" {
		t.Errorf("labelled VMI after a write: %v, %v; want resourceVersion 8", got, ok)
	}
}

// Locate finds the held range whose caches have a key (with the namespace
// as shard key it looks only where the namespace hashes), and HeldByIndex
// the held ranges' objects an index yields.
func TestLocateFindsTheHeldRangeThatHasTheKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, key := range []shard.Key{shard.KeyUID, shard.KeyNamespace} {
		t.Run(string(key), func(t *testing.T) {
			a := vmi("ns", "a", nil)
			byName := cache.Indexers{"byName": func(obj any) ([]string, error) { return []string{obj.(*virtv1.VirtualMachineInstance).Name}, nil }}
			c := newRanges(t, 4, key, []caches.Watch{kinds.VMIs.Watch(byName)}, a)
			ranges, _ := shard.NewRanges(4, key)
			home := ranges.Of(a)
			if _, ok := kinds.VMIs.Locate(c, "ns/a"); ok {
				t.Fatal("located in a range not held")
			}
			for i := range 4 {
				if err := c.Acquired(ctx, i); err != nil {
					t.Fatal(err)
				}
			}
			if rng, ok := kinds.VMIs.Locate(c, "ns/a"); !ok || rng != home {
				t.Errorf("Locate = %d, %v; want range %d", rng, ok, home)
			}
			if _, ok := kinds.VMIs.Locate(c, "ns/none"); ok {
				t.Error("located a key no range has")
			}
			found := kinds.VMIs.HeldByIndex(c, "byName", "a")
			if len(found) != 1 || found[0].Range.Index != home || found[0].Object.Name != "a" {
				t.Errorf("HeldByIndex = %+v, want VMI a in range %d", found, home)
			}
			if n := c.Cached("virtualmachineinstances"); n != 1 {
				t.Errorf("Cached = %v, want 1", n)
			}
		})
	}
}

// A kind is served once, however many consumers declare it, and its
// declarations must agree.
func TestRegisterServesAKindOnceAndRefusesConflicts(t *testing.T) {
	index := func(string) cache.Indexers {
		return cache.Indexers{"byName": func(obj any) ([]string, error) { return nil, nil }}
	}
	c := newRanges(t, 1, shard.KeyUID, []caches.Watch{kinds.VMIs.Watch(index("a"))})
	if err := c.Register(nil, kinds.VMIs.Watch(nil)); err != nil {
		t.Errorf("a second consumer of the kind: %v", err)
	}
	if err := c.Register(nil, kinds.VMIs.Watch(index("b"))); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("an indexer declared twice: %v, want an error", err)
	}
	other := kinds.VMIs
	other.Placement = shard.OwnKey
	if err := c.Register(nil, other.Watch(nil)); err == nil || !strings.Contains(err.Error(), "differently") {
		t.Errorf("a kind declared with another placement: %v, want an error", err)
	}
	if err := c.Acquired(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Register(nil, kinds.VMs.Watch(nil)); err == nil {
		t.Error("a kind registered after a range was acquired")
	}
}

// A kind nobody declared is a wiring error, found at its first read.
func TestAKindNobodyDeclaredPanicsOnRead(t *testing.T) {
	c := newRanges(t, 1, shard.KeyUID, []caches.Watch{kinds.VMIs.Watch(nil)})
	if err := c.Acquired(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "virtualmachines") {
			t.Errorf("recovered %v, want a panic naming the kind", p)
		}
	}()
	kinds.VMs.In(c.Get(0)).Len()
}
