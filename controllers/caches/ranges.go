package caches

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"

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
// ranges it prepares to hold.
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

	vmiIndexers cache.Indexers
	podIndexers cache.Indexers
	vmIndexers  cache.Indexers

	// One watch per resource (two for VMIs) serves the informers of every
	// range: see shard.SharedWatch.
	unlabelledVMIs, labelledVMIs, pods, vms *shard.SharedWatch
}

// Range is one held range's caches.
type Range struct {
	Index int
	VMIs  VMIs
	// Pods are the launcher pods of the range's VMIs, by range label,
	// trimmed by TrimPod: partial objects, never to be sent back whole.
	Pods cache.SharedIndexInformer
	// VMs are the VirtualMachines whose key hashes into the range.
	VMs cache.SharedIndexInformer

	// written overlays the caches with the replica's own writes
	// (LatestVMI, WroteVMI, LatestVM, WroteVM).
	written *written

	cancel context.CancelFunc
	done   sync.WaitGroup
}

// NewRanges returns the range caches; controllers Register before the
// shard manager runs.
func NewRanges(cfg Config) *Ranges {
	kv, ns, count := cfg.KubeVirt, cfg.Namespace, cfg.Ranges.Count()
	vmiLW := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kv.VirtualMachineInstances(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kv.VirtualMachineInstances(ns).Watch(ctx, o)
		},
	}
	vmLW := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kv.VirtualMachines(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kv.VirtualMachines(ns).Watch(ctx, o)
		},
	}
	pods := cfg.Kube.CoreV1()
	podLW := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return pods.Pods(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return pods.Pods(ns).Watch(ctx, o)
		},
	}
	return &Ranges{
		cfg:            cfg,
		held:           make([]atomic.Pointer[Range], count),
		prepared:       make([]atomic.Pointer[Range], count),
		keep:           make([]atomic.Bool, count),
		vmiIndexers:    cache.Indexers{},
		podIndexers:    cache.Indexers{byVMIUID: podVMIUID},
		vmIndexers:     cache.Indexers{},
		unlabelledVMIs: shard.NewSharedWatch(vmiLW, count, cfg.Ranges.ByUnlabelledKey, "virtualmachineinstances", cfg.Metrics),
		labelledVMIs:   shard.NewSharedWatch(vmiLW, count, cfg.Ranges.ByLabel, "virtualmachineinstances", cfg.Metrics),
		pods:           shard.NewSharedWatch(podLW, count, cfg.Ranges.ByLabel, "pods", cfg.Metrics),
		vms:            shard.NewSharedWatch(vmLW, count, cfg.Ranges.ByKey, "virtualmachines", cfg.Metrics),
	}
}

// Register adds a consumer with the indexers it reads by. Consumers learn of
// an acquired range in registration order and of its release in reverse.
func (c *Ranges) Register(consumer Consumer, vmis, pods, vms cache.Indexers) error {
	if c.started.Load() {
		return errors.New("register a consumer before any range is acquired")
	}
	for _, add := range []struct{ to, from cache.Indexers }{{c.vmiIndexers, vmis}, {c.podIndexers, pods}, {c.vmIndexers, vms}} {
		for name, fn := range add.from {
			if _, dup := add.to[name]; dup {
				return fmt.Errorf("indexer %q registered twice", name)
			}
			add.to[name] = fn
		}
	}
	c.consumers = append(c.consumers, consumer)
	return nil
}

// byVMIUID indexes launcher pods (and migration target pods) by the UID of
// the VMI that created them, for Range.PodsOf.
const byVMIUID = "vmiUID"

func podVMIUID(obj any) ([]string, error) {
	return []string{obj.(*corev1.Pod).Labels[virtv1.CreatedByLabel]}, nil
}

// PodsOf returns the cached pods vmi created: its launcher pods and its
// migrations' target pods (read only).
func (r *Range) PodsOf(vmi *virtv1.VirtualMachineInstance) []*corev1.Pod {
	objs, _ := r.Pods.GetIndexer().ByIndex(byVMIUID, string(vmi.UID)) // the index is always there
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, obj := range objs {
		pods = append(pods, obj.(*corev1.Pod))
	}
	return pods
}

// Get is range i's caches while the replica holds it, else nil.
func (c *Ranges) Get(i int) *Range { return c.held[i].Load() }

// Prepared is range i's caches that Prepare started and no Acquired has
// taken yet, else nil.
func (c *Ranges) Prepared(i int) *Range { return c.prepared[i].Load() }

// Cached counts the objects of a resource ("virtualmachineinstances",
// "pods" or "virtualmachines") in the held ranges' caches.
func (c *Ranges) Cached(resource string) float64 {
	n := 0
	for i := range c.held {
		r := c.held[i].Load()
		switch {
		case r == nil:
		case resource == "pods":
			n += len(r.Pods.GetStore().ListKeys())
		case resource == "virtualmachines":
			n += len(r.VMs.GetStore().ListKeys())
		default:
			n += r.VMIs.Len()
		}
	}
	return float64(n)
}

// VMIs returns every VMI cached for the held ranges (read only).
func (c *Ranges) VMIs() []*virtv1.VirtualMachineInstance {
	var out []*virtv1.VirtualMachineInstance
	for i := range c.held {
		if r := c.held[i].Load(); r != nil {
			out = append(out, r.VMIs.List()...)
		}
	}
	return out
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
	if !cache.WaitForCacheSync(ctx.Done(), r.VMIs.HasSynced, r.Pods.HasSynced, r.VMs.HasSynced) {
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
		// No consumer reads the range any more: its overlay starts over,
		// as a prepared range's does.
		r.written = newWritten(c.cfg.Ranges, r)
		if old := c.prepared[i].Swap(r); old != nil {
			go old.stop()
		}
	default:
		r.stop()
	}
}

func (r *Range) stop() {
	r.cancel()
	r.done.Wait()
}

func (c *Ranges) start(i int) (*Range, error) {
	r := &Range{Index: i}
	informers := []struct {
		into     *cache.SharedIndexInformer
		watch    *shard.SharedWatch
		example  runtime.Object
		indexers cache.Indexers
		trim     cache.TransformFunc
	}{
		{&r.VMIs.Unlabelled, c.unlabelledVMIs, &virtv1.VirtualMachineInstance{}, c.vmiIndexers, shard.TrimForCache},
		{&r.VMIs.Labelled, c.labelledVMIs, &virtv1.VirtualMachineInstance{}, c.vmiIndexers, shard.TrimForCache},
		{&r.Pods, c.pods, &corev1.Pod{}, c.podIndexers, TrimPod},
		{&r.VMs, c.vms, &virtv1.VirtualMachine{}, c.vmIndexers, shard.TrimForCache},
	}
	for _, inf := range informers {
		var err error
		if *inf.into, err = inf.watch.NewInformer(i, inf.example, inf.indexers, inf.trim); err != nil {
			return nil, err
		}
	}
	r.written = newWritten(c.cfg.Ranges, r)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	for _, inf := range informers {
		informer := *inf.into
		r.done.Go(func() { informer.RunWithContext(ctx) })
	}
	return r, nil
}
