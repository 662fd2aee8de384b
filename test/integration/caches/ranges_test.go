package caches_test

import (
	"context"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/shard"
	"github.com/virtshard/virtshard/test/clustertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// counting is a consumer that counts the ranges handed to it.
type counting struct{ acquired atomic.Int32 }

func (c *counting) Acquired(context.Context, *caches.Range) error { c.acquired.Add(1); return nil }
func (c *counting) Releasing(context.Context, int, shard.Reason)  {}

// A prepared range fills its caches before anyone acts on it, and Acquired
// hands those same caches to the consumers instead of starting new ones.
func TestPreparedCachesAreWhatAcquiredUses(t *testing.T) {
	cfg := clustertest.Config(t)
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := clustertest.Namespace(t)
	ranges, err := shard.NewRanges(shard.DefaultRangeCount, shard.KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	vmi, err := kv.VirtualMachineInstances(ns).Create(context.Background(), &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "warm"},
		Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{Resources: virtv1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	i := ranges.Of(vmi)
	c := caches.NewRanges(caches.Config{Kube: kubernetes.NewForConfigOrDie(cfg), KubeVirt: kv, Namespace: ns, Ranges: ranges})
	consumer := &counting{}
	if err := c.Register(consumer, kinds.VMIs.Watch(nil), kinds.LauncherPods.Watch(nil), kinds.VMs.Watch(nil)); err != nil {
		t.Fatal(err)
	}

	c.Prepare(i)
	c.Prepare(i) // a second ask starts nothing new
	prepared := c.Prepared(i)
	if prepared == nil {
		t.Fatalf("Prepare(%d) started no caches", i)
	}
	key, _ := cache.MetaNamespaceKeyFunc(vmi)
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, found, err := kinds.VMIs.In(prepared).Get(key)
		return found && err == nil, nil
	})
	if err != nil {
		t.Fatalf("prepared caches of range %d never held VMI %s", i, key)
	}
	if c.Get(i) != nil || consumer.acquired.Load() != 0 {
		t.Fatalf("range %d handed to consumers before Acquired", i)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Acquired(ctx, i); err != nil {
		t.Fatal(err)
	}
	if c.Get(i) != prepared {
		t.Errorf("Acquired(%d) started new caches instead of the prepared ones", i)
	}
	if n := consumer.acquired.Load(); n != 1 {
		t.Errorf("consumer told of %d acquisitions, want 1", n)
	}
	c.Releasing(ctx, i, shard.ReasonRelease)

	// Unprepare stops what Prepare started, and Acquired then starts afresh.
	j := (i + 1) % ranges.Count()
	c.Prepare(j)
	dropped := c.Prepared(j)
	c.Unprepare(j)
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return stopped(dropped), nil
	})
	if err != nil {
		t.Fatalf("informers of unprepared range %d still run", j)
	}
	if err := c.Acquired(ctx, j); err != nil {
		t.Fatal(err)
	}
	if got := c.Get(j); got == nil || got == dropped {
		t.Errorf("Acquired(%d) after Unprepare reused dropped caches or none", j)
	}
	c.Releasing(ctx, j, shard.ReasonRelease)

	// Kept at expiry, a held range's caches run on, prepared, and the next
	// Acquired uses them; a release without Keep stops them.
	if err := c.Acquired(ctx, i); err != nil {
		t.Fatal(err)
	}
	held := c.Get(i)
	c.Keep(i)
	c.Releasing(ctx, i, shard.ReasonExpiry)
	if c.Get(i) != nil || c.Prepared(i) != held {
		t.Fatalf("range %d released after Keep: held %p, prepared %p, want its caches %p prepared", i, c.Get(i), c.Prepared(i), held)
	}
	if anyStopped(held) {
		t.Fatalf("informers of range %d stopped though kept", i)
	}
	if err := c.Acquired(ctx, i); err != nil {
		t.Fatal(err)
	}
	if c.Get(i) != held {
		t.Errorf("Acquired(%d) after Keep started new caches instead of the kept ones", i)
	}
	c.Releasing(ctx, i, shard.ReasonExpiry)
	if c.Prepared(i) != nil {
		t.Errorf("range %d's caches kept after a release without Keep", i)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return stopped(held), nil
	})
	if err != nil {
		t.Errorf("informers of range %d still run after a release without Keep", i)
	}
}

// informers are range r's informers of every kind the test serves.
func informers(r *caches.Range) []cache.SharedIndexInformer {
	return slices.Concat(kinds.VMIs.In(r).Informers(), kinds.LauncherPods.In(r).Informers(), kinds.VMs.In(r).Informers())
}

// stopped reports whether all of range r's informers stopped.
func stopped(r *caches.Range) bool {
	for _, informer := range informers(r) {
		if !informer.IsStopped() {
			return false
		}
	}
	return true
}

// anyStopped reports whether one of range r's informers stopped.
func anyStopped(r *caches.Range) bool {
	for _, informer := range informers(r) {
		if informer.IsStopped() {
			return true
		}
	}
	return false
}
