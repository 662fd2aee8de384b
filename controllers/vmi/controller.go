package vmi

import (
	"context"
	"errors"
	"flag"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/expectations"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/status"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/replica/profiling"
)

// Indexes of the caches.
const (
	// byClaim indexes VMIs by the namespace/name of each PVC they use.
	byClaim = "claim"
)

// Options of the VMI controller: how its status writes are batched.
type Options struct {
	// LazyStatusWait is how long an intermediate phase (Scheduling) may wait
	// to ride along with the next status patch while the batcher is idle;
	// BusyStatusWait while it holds at least BusyDepth objects.
	LazyStatusWait time.Duration
	BusyStatusWait time.Duration
	BusyDepth      int
	// UrgentStatusWait is the batching window of everything else.
	UrgentStatusWait time.Duration
	// StatusWorkers is how many status patches are sent at once.
	StatusWorkers int
}

// DefaultOptions are the batching the bench measured (BENCHMARKS.md).
func DefaultOptions() Options {
	return Options{LazyStatusWait: 2 * time.Second, BusyStatusWait: time.Minute, BusyDepth: 20, UrgentStatusWait: 5 * time.Millisecond, StatusWorkers: 8}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.StatusWorkers, "status-workers", o.StatusWorkers, "concurrent status patches")
	fs.DurationVar(&o.LazyStatusWait, "lazy-status-wait", o.LazyStatusWait, "how long an intermediate phase may wait to share a patch")
	fs.DurationVar(&o.BusyStatusWait, "busy-status-wait", o.BusyStatusWait, "the same while at least --busy-depth VMIs are queued or have status pending")
	fs.IntVar(&o.BusyDepth, "busy-depth", o.BusyDepth, "VMIs queued for a sync or with status pending from which the controller counts as busy")
	fs.DurationVar(&o.UrgentStatusWait, "urgent-status-wait", o.UrgentStatusWait, "batching window of other status writes")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.StatusWorkers < 1 {
		return errors.New("--status-workers must be at least 1")
	}
	return nil
}

// Declare declares the VMI controller to the replica.
func Declare(opts Options) sharded.Declaration {
	return sharded.Declaration{Name: "vmi", Workers: 8, EventSource: "virtualmachine-controller", New: func(env *sharded.Env, rt *sharded.Runtime) (*sharded.Controller, error) {
		c := newController(env, rt, opts, NewMetrics(env.Registry), status.NewMetrics(env.Registry))
		RegisterGauges(env.Registry, c)
		return c.declare(), nil
	}}
}

// Controller is the VMI controller of one replica.
type Controller struct {
	env          *sharded.Env
	opts         Options
	rt           *sharded.Runtime
	metrics      *Metrics
	expectations *expectations.Expectations
	batcher      *status.Batcher[*virtv1.VirtualMachineInstance]
	// cids are the VSOCK CIDs given in the ranges held.
	cids *cidAllocator

	// gatesSent maps a launcher pod's UID to the unpaused condition
	// (true: unpaused) our last readiness-gate patch set, until the pod
	// cache shows it: a sync meanwhile sends no second patch.
	gatesSent sync.Map
	// labelsSent maps a launcher pod's UID to the resourceVersion of the
	// copy our last write of its synced labels and annotations started
	// from, until the pod cache moves past it: a VMI synced while the
	// cache lags must not send the same labels again (a pod's informer
	// can trail its VMI's by several syncs under load).
	labelsSent sync.Map
}

// item is a queued VMI: its range and namespace/name.
type item = sharded.Item

// newController returns the controller; m and sm may be nil (tests).
func newController(env *sharded.Env, rt *sharded.Runtime, opts Options, m *Metrics, sm *status.Metrics) *Controller {
	c := &Controller{
		env:          env,
		opts:         opts,
		rt:           rt,
		metrics:      m,
		expectations: expectations.New(env.Ranges.Count(), env.Clock),
	}
	c.cids = newCIDAllocator(env.Ranges.Count(), func(ctx context.Context, rng int) ([]*virtv1.VirtualMachineInstance, error) {
		return kinds.VMIs.Read(ctx, env.Caches, rng)
	})
	c.batcher = status.New(status.Config[*virtv1.VirtualMachineInstance]{
		Name:    "vmi",
		Workers: opts.StatusWorkers,
		Writer:  rt.Writer,
		Metrics: sm,
		Cached: func(rng int, namespace, name string) (*virtv1.VirtualMachineInstance, error) {
			return c.cachedVMI(rng, namespace+"/"+name)
		},
		Fresh: func(ctx context.Context, namespace, name string) (*virtv1.VirtualMachineInstance, error) {
			return env.KubeVirt.VirtualMachineInstances(namespace).Get(ctx, name, metav1.GetOptions{})
		},
		Patch: func(ctx context.Context, namespace, name string, patch []byte) (*virtv1.VirtualMachineInstance, error) {
			return env.KubeVirt.VirtualMachineInstances(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		},
		OnPatched: func(vmi *virtv1.VirtualMachineInstance) { c.patched(vmi) },
		// A sync held back for a batch that wrote nothing: no informer
		// event will queue the VMI again.
		OnNothingWritten: func(rng int, key string) { rt.Add(rng, key) },
		LazyWait:         opts.LazyStatusWait,
		BusyWait:         opts.BusyStatusWait,
		BusyDepth:        opts.BusyDepth,
		// The sync queue fills first at the start of a burst.
		Backlog: rt.Len,
	})
	return c
}

// declare is what the runtime runs: a range's VMIs queue themselves,
// their launcher pods queue them and feed the expectations; migrations,
// claims and DataVolumes wake the VMIs that wait for them. A handoff drops
// the range's pending status intents and expectations.
func (c *Controller) declare() *sharded.Controller {
	watches := []sharded.Watch{
		sharded.On(kinds.VMIs, c.vmiEvents(), cache.Indexers{byClaim: claimIndex}),
		sharded.On(kinds.LauncherPods, c.podEvents(), nil),
		// The nodes' TSC frequencies, for a VMI's topology hint.
		sharded.Reading(kinds.Nodes.Watch(nil)),
		sharded.Across(kinds.Migrations, sharded.Events[*virtv1.VirtualMachineInstanceMigration]{
			Route: func(m *virtv1.VirtualMachineInstanceMigration) []item {
				return c.located(m.Namespace + "/" + m.Spec.VMIName)
			},
		}, nil),
		// A claim wakes the VMIs that use it when it appears or its size
		// changes (KubeVirt's addPVC and updatePVC).
		sharded.OnInformer(func() cache.SharedIndexInformer { return c.env.Objects.PVCInformer }, sharded.Events[*corev1.PersistentVolumeClaim]{
			Route: func(pvc *corev1.PersistentVolumeClaim) []item {
				if pvc.DeletionTimestamp != nil {
					return nil
				}
				return c.waitingFor(pvc.Namespace + "/" + pvc.Name)
			},
			Changed: func(old, cur *corev1.PersistentVolumeClaim) bool {
				return !equality.Semantic.DeepEqual(old.Status.Capacity, cur.Status.Capacity) ||
					!equality.Semantic.DeepEqual(old.Spec.Resources.Requests, cur.Spec.Resources.Requests)
			},
			IgnoreDeletes: true,
		}),
	}
	// Any change of a DataVolume wakes the VMIs that use it (KubeVirt's
	// add, update and deleteDataVolume), where the cluster serves CDI.
	watches = append(watches, sharded.OnInformer(func() cache.SharedIndexInformer { return c.env.Objects.DataVolumes },
		sharded.Events[*unstructured.Unstructured]{
			Route: func(dv *unstructured.Unstructured) []item {
				return c.waitingFor(dv.GetNamespace() + "/" + dv.GetName())
			},
		}))
	return &sharded.Controller{
		Watches: watches,
		Sync: func(ctx context.Context, it item) (time.Duration, error) {
			return 0, c.sync(ctx, it)
		},
		// A sync already past its checks may still have created a pod or
		// sent an intent: the runtime lets it finish first. Pending status
		// intents are dropped, not flushed, whatever the reason: the next
		// owner recomputes them from the same objects in its first sync
		// and writes them in the same one patch, while a flush would cost
		// a patch per VMI (lazy Scheduling intents included) and hold up
		// the handoff for as long as those patches take under load.
		Forget: func(rng int) {
			c.batcher.DropRange(rng)
			c.expectations.DropRange(rng)
			c.cids.forget(rng)
		},
		Background: func(ctx context.Context) { profiling.Do(ctx, "vmi-status", c.batcher.Run) },
	}
}

// PendingExpectations counts keys with outstanding expectations.
func (c *Controller) PendingExpectations() float64 { return float64(c.expectations.Count()) }

// LongestInPhase implements Gauges.
func (c *Controller) LongestInPhase() map[virtv1.VirtualMachineInstancePhase]time.Duration {
	return longestInWaitingPhase(kinds.VMIs.Held(c.env.Caches), time.Now())
}

func claimIndex(obj any) ([]string, error) {
	vmi := obj.(*virtv1.VirtualMachineInstance)
	var keys []string
	for _, claim := range template.ClaimNames(vmi) {
		keys = append(keys, vmi.Namespace+"/"+claim)
	}
	return keys, nil
}

// cachedVMI is the latest copy of a VMI of range rng the replica knows:
// its own last patch's, until the informer catches up, so that the next
// patch starts from the latest resourceVersion instead of conflicting.
func (c *Controller) cachedVMI(rng int, key string) (*virtv1.VirtualMachineInstance, error) {
	r := c.env.Caches.Get(rng)
	if r == nil {
		return nil, errRangeNotHeld
	}
	vmi, exists, err := kinds.VMIs.In(r).Latest(key)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, notFound(key)
	}
	return vmi, nil
}

// patched records a VMI our batcher wrote, for cachedVMI.
func (c *Controller) patched(vmi *virtv1.VirtualMachineInstance) {
	if r := c.env.Caches.Get(c.env.Ranges.Owner(vmi)); r != nil {
		kinds.VMIs.In(r).Wrote(vmi)
	}
}

// vmiEvents queue VMIs under their own key and observe their phase
// changes. A VMI leaving the filtered watch is "not ours any more", which
// arrives as a delete: the reconcile finds it gone and forgets it.
func (c *Controller) vmiEvents() sharded.Events[*virtv1.VirtualMachineInstance] {
	return sharded.Events[*virtv1.VirtualMachineInstance]{
		Keys: sharded.ItsOwnKey[*virtv1.VirtualMachineInstance],
		Updated: func(_ int, _ string, old, cur *virtv1.VirtualMachineInstance) {
			if old.Status.Phase != cur.Status.Phase && cur.Status.Phase != "" {
				c.metrics.phase(string(cur.Status.Phase), time.Since(cur.CreationTimestamp.Time))
			}
		},
	}
}

// podEvents map launcher pods to their VMIs and feed the expectations.
func (c *Controller) podEvents() sharded.Events[*corev1.Pod] {
	return sharded.Events[*corev1.Pod]{
		Keys: sharded.ControllerKey[*corev1.Pod](virtv1.VirtualMachineInstanceGroupVersionKind.Kind),
		Added: func(rng int, key string, pod *corev1.Pod) {
			// A migration's target pod is the migration controller's.
			if _, target := pod.Labels[virtv1.MigrationJobLabel]; !target {
				c.expectations.CreationObserved(rng, key)
			}
		},
		Deleted: func(rng int, key string, pod *corev1.Pod) {
			c.expectations.DeletionObserved(rng, key, pod.UID)
			c.gatesSent.Delete(pod.UID)
			c.labelsSent.Delete(pod.UID)
		},
	}
}

// located is the VMI key, in the held range that has it.
func (c *Controller) located(key string) []item {
	if rng, ok := kinds.VMIs.Locate(c.env.Caches, key); ok {
		return []item{{Range: rng, Key: key}}
	}
	return nil
}

// waitingFor are the VMIs of the held ranges that use the claim (or
// DataVolume) namespace/name.
func (c *Controller) waitingFor(claim string) []item {
	var items []item
	for _, found := range kinds.VMIs.HeldByIndex(c.env.Caches, byClaim, claim) {
		items = append(items, item{Range: found.Range.Index, Key: found.Object.Namespace + "/" + found.Object.Name})
	}
	return items
}
