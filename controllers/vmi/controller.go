package vmi

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/expectations"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/status"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/replica/profiling"
	"github.com/virtshard/virtshard/shard"
)

// Indexes of the caches.
const (
	// byClaim indexes VMIs by the namespace/name of each PVC they use.
	byClaim = "claim"
)

// Config wires the controller.
type Config struct {
	Kube     kubernetes.Interface
	KubeVirt kubevirt.Interface
	Metadata metadata.Interface
	// Fence admits syncs and writes of the ranges this replica holds.
	Fence sharded.Fence
	// Namespace restricts the controller to one namespace; "" watches all.
	Namespace string
	Ranges    shard.Ranges
	// Caches are the held ranges' informers; New registers the controller.
	Caches *caches.Ranges
	// Cluster are the cluster-wide caches, run by the caller.
	Cluster *caches.Cluster
	Options template.Options
	// ClusterConfig is the KubeVirt CR's configuration, current.
	ClusterConfig interface{ Current() *clusterconfig.Config }
	// Objects are the cluster-wide caches the launcher pod depends on, run
	// by the caller.
	Objects *caches.TemplateObjects
	// LazyStatusWait is how long an intermediate phase (Scheduling) may wait
	// to ride along with the next status patch while the batcher is idle;
	// BusyStatusWait while it holds at least BusyDepth objects.
	LazyStatusWait time.Duration
	BusyStatusWait time.Duration
	BusyDepth      int
	// UrgentStatusWait is the batching window of everything else.
	UrgentStatusWait time.Duration
	StatusWorkers    int
	Metrics          *Metrics
	ShardMetrics     *shard.Metrics
	StatusMetrics    *status.Metrics
	// Recorder records the controller's events; required.
	Recorder record.EventRecorder
	// ReconcileMetrics record each reconcile; nil for none.
	ReconcileMetrics *sharded.Metrics
}

// Controller is the VMI controller of one replica.
type Controller struct {
	cfg          Config
	rt           *sharded.Runtime
	expectations *expectations.Expectations
	batcher      *status.Batcher[*virtv1.VirtualMachineInstance]

	// gatesSent maps a launcher pod's UID to the unpaused condition
	// (true: unpaused) our last readiness-gate patch set, until the pod
	// cache shows it: a sync meanwhile sends no second patch.
	gatesSent sync.Map
}

// item is a queued VMI: its range and namespace/name.
type item = sharded.Item

// New returns a controller registered with cfg.Caches; Run starts it, and
// it acts on ranges as the caches call Acquired and Releasing.
func New(cfg Config) (*Controller, error) {
	c := &Controller{
		cfg:          cfg,
		rt:           sharded.New(sharded.Config{Name: "vmi", Ranges: cfg.Ranges.Count(), Fence: cfg.Fence, Metrics: cfg.ReconcileMetrics}),
		expectations: expectations.New(cfg.Ranges.Count(), clock.RealClock{}),
	}
	c.batcher = status.New(status.Config[*virtv1.VirtualMachineInstance]{
		Name:    "vmi",
		Workers: cfg.StatusWorkers,
		Writer:  c.rt.Writer,
		Metrics: cfg.StatusMetrics,
		Cached: func(rng int, namespace, name string) (*virtv1.VirtualMachineInstance, error) {
			return c.cachedVMI(rng, namespace+"/"+name)
		},
		Fresh: func(ctx context.Context, namespace, name string) (*virtv1.VirtualMachineInstance, error) {
			return cfg.KubeVirt.VirtualMachineInstances(namespace).Get(ctx, name, metav1.GetOptions{})
		},
		Patch: func(ctx context.Context, namespace, name string, patch []byte) (*virtv1.VirtualMachineInstance, error) {
			return cfg.KubeVirt.VirtualMachineInstances(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		},
		OnPatched: func(vmi *virtv1.VirtualMachineInstance) { c.patched(vmi) },
		// A sync held back for a batch that wrote nothing: no informer
		// event will queue the VMI again.
		OnNothingWritten: func(rng int, key string) { c.rt.Add(rng, key) },
		LazyWait:         cfg.LazyStatusWait,
		BusyWait:         cfg.BusyStatusWait,
		BusyDepth:        cfg.BusyDepth,
		// The sync queue fills first at the start of a burst.
		Backlog: c.rt.Len,
	})

	err := cfg.Caches.Register(c, cache.Indexers{byClaim: claimIndex}, nil, nil)
	return c, err
}

// PendingExpectations counts keys with outstanding expectations.
func (c *Controller) PendingExpectations() float64 { return float64(c.expectations.Count()) }

// CachedObjects counts the objects of resource in the held ranges' caches.
func (c *Controller) CachedObjects(resource string) float64 { return c.cfg.Caches.Cached(resource) }

// LongestInPhase implements Gauges.
func (c *Controller) LongestInPhase() map[virtv1.VirtualMachineInstancePhase]time.Duration {
	return longestInWaitingPhase(c.cfg.Caches.VMIs(), time.Now())
}

// Start follows the cluster-wide objects VMIs wait for (claims,
// migrations, DataVolumes where CDI is served; cfg.Objects and cfg.Cluster
// run them) and returns once they are cached; Run may follow.
func (c *Controller) Start(ctx context.Context) error {
	if _, err := c.cfg.Objects.PVCInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: c.pvcAdded}); err != nil {
		return err
	}
	migrationChanged := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if m, ok := obj.(*virtv1.VirtualMachineInstanceMigration); ok {
			c.enqueueKey(m.Namespace + "/" + m.Spec.VMIName)
		}
	}
	if _, err := c.cfg.Cluster.Migrations.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    migrationChanged,
		UpdateFunc: func(_, obj any) { migrationChanged(obj) },
		DeleteFunc: migrationChanged,
	}); err != nil {
		return err
	}
	synced := []cache.InformerSynced{c.cfg.Objects.PVCInformer.HasSynced, c.cfg.Cluster.Migrations.HasSynced}
	if dvs := c.cfg.Objects.DataVolumes; dvs != nil {
		changed := func(obj any) {
			if m, err := meta.Accessor(obj); err == nil {
				c.claimChanged(m.GetNamespace() + "/" + m.GetName())
			}
		}
		if _, err := dvs.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    changed,
			UpdateFunc: func(_, obj any) { changed(obj) },
		}); err != nil {
			return err
		}
		synced = append(synced, dvs.HasSynced)
	}
	if !cache.WaitForNamedCacheSync("vmi-cluster", ctx.Done(), synced...) {
		return fmt.Errorf("cluster-wide caches did not sync: %w", ctx.Err())
	}
	return nil
}

// Run runs the status batcher and the workers until ctx is done. Ranges
// come and go through Acquired/Releasing.
func (c *Controller) Run(ctx context.Context, workers int) error {
	logger := klog.FromContext(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { profiling.Do(ctx, "vmi-status", c.batcher.Run) })
	logger.Info("VMI controller running", "workers", workers)
	return c.rt.Run(ctx, workers, func(ctx context.Context, it item) (time.Duration, error) {
		return 0, c.sync(ctx, it)
	})
}

// Acquired implements caches.Consumer: watch range r and queue its VMIs.
func (c *Controller) Acquired(_ context.Context, r *caches.Range) error {
	c.rt.Acquired(r.Index)
	// New handlers are replayed what the informers hold: every VMI of the
	// range is queued.
	if err := r.VMIs.AddEventHandler(c.vmiHandler(r.Index)); err != nil {
		return err
	}
	if _, err := r.Pods.AddEventHandler(c.podHandler(r.Index)); err != nil {
		return err
	}
	return nil
}

// Releasing implements caches.Consumer: stop acting on range i — new work
// for it is ignored, pending status intents are dropped and expectations
// forgotten; the caches stop after it returns.
func (c *Controller) Releasing(ctx context.Context, i int, _ shard.Reason) {
	// A sync already past its checks may still create a pod or send an
	// intent: let it finish before dropping and forgetting.
	c.rt.Releasing(ctx, i)
	// Pending status intents are dropped, not flushed, whatever the reason:
	// the next owner recomputes them from the same objects in its first sync
	// and writes them in the same one patch, while a flush would cost a
	// patch per VMI (lazy Scheduling intents included) and hold up the
	// handoff for as long as those patches take under load.
	c.batcher.DropRange(i)
	c.expectations.DropRange(i)
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
	r := c.cfg.Caches.Get(rng)
	if r == nil {
		return nil, errRangeNotHeld
	}
	vmi, exists, err := r.LatestVMI(key)
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
	if r := c.cfg.Caches.Get(c.cfg.Ranges.Owner(vmi)); r != nil {
		r.WroteVMI(vmi)
	}
}

// vmiHandler queues VMIs of range rng and observes their phase changes.
// A VMI leaving the filtered watch is "not ours any more", which arrives as
// a delete: the reconcile finds it gone and forgets it.
func (c *Controller) vmiHandler(rng int) cache.ResourceEventHandler {
	return sharded.Handler(c.rt, rng, sharded.Events[*virtv1.VirtualMachineInstance]{
		Keys: sharded.ItsOwnKey[*virtv1.VirtualMachineInstance],
		Updated: func(_ int, _ string, old, cur *virtv1.VirtualMachineInstance) {
			if old.Status.Phase != cur.Status.Phase && cur.Status.Phase != "" {
				c.cfg.Metrics.phase(string(cur.Status.Phase), time.Since(cur.CreationTimestamp.Time))
			}
		},
	})
}

// podHandler maps launcher pods of range rng to their VMIs and feeds the
// expectations.
func (c *Controller) podHandler(rng int) cache.ResourceEventHandler {
	return sharded.Handler(c.rt, rng, sharded.Events[*corev1.Pod]{
		Keys: sharded.ControllerKey[*corev1.Pod](virtv1.VirtualMachineInstanceGroupVersionKind.Kind),
		Added: func(rng int, key string, pod *corev1.Pod) {
			// A migration's target pod is the migration controller's.
			if _, target := pod.Labels[virtv1.MigrationJobLabel]; !target {
				c.expectations.CreationObserved(rng, key)
			}
		},
		Deleted: func(rng int, key string, pod *corev1.Pod) { c.expectations.DeletionObserved(rng, key, pod.UID) },
	})
}

// enqueueKey queues the VMI key if a range this replica acts on has it.
func (c *Controller) enqueueKey(key string) {
	for i := range c.cfg.Ranges.Count() {
		if r := c.cfg.Caches.Get(i); r != nil {
			if _, exists, _ := r.VMIs.Get(key); exists {
				c.rt.Add(i, key)
				return
			}
		}
	}
}

// pvcAdded wakes the VMIs waiting for the claim.
func (c *Controller) pvcAdded(obj any) {
	if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		c.claimChanged(pvc.Namespace + "/" + pvc.Name)
	}
}

// claimChanged wakes the VMIs that use the claim (or DataVolume) claim.
func (c *Controller) claimChanged(claim string) {
	for i := range c.cfg.Ranges.Count() {
		r := c.cfg.Caches.Get(i)
		if r == nil {
			continue
		}
		waiting, _ := r.VMIs.ByIndex(byClaim, claim)
		for _, vmi := range waiting {
			c.rt.Add(i, vmi.Namespace+"/"+vmi.Name)
		}
	}
}
