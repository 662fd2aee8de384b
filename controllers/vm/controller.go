package vm

import (
	"context"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/expectations"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/shard"
)

// DefaultMaxStartBackoff is KubeVirt's cap on the crash-loop backoff
// (defaultMaxCrashLoopBackoffDelaySeconds).
const DefaultMaxStartBackoff = 300 * time.Second

// Config wires the controller.
type Config struct {
	Kube     kubernetes.Interface
	KubeVirt kubevirt.Interface
	// Fence admits syncs and writes of the ranges this replica holds.
	Fence  sharded.Fence
	Ranges shard.Ranges
	// Caches are the held ranges' informers; New registers the controller.
	Caches *caches.Ranges
	// MaxStartBackoff caps the wait before restarting a VMI that failed
	// before it ever ran; the first waits are a 30th of it, growing with
	// the square of the failures, as KubeVirt's.
	MaxStartBackoff time.Duration
	Clock           clock.WithTicker
	// Recorder records the controller's events; required.
	Recorder record.EventRecorder
	// ReconcileMetrics record each reconcile; nil for none.
	ReconcileMetrics *sharded.Metrics
}

// Controller is the VM controller of one replica.
type Controller struct {
	cfg          Config
	rt           *sharded.Runtime
	expectations *expectations.Expectations
}

// item is a queued VM: its range and namespace/name.
type item = sharded.Item

// New returns a controller registered with cfg.Caches.
func New(cfg Config) (*Controller, error) {
	if cfg.MaxStartBackoff <= 0 {
		cfg.MaxStartBackoff = DefaultMaxStartBackoff
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	c := &Controller{
		cfg:          cfg,
		rt:           sharded.New(sharded.Config{Name: "vm", Ranges: cfg.Ranges.Count(), Fence: cfg.Fence, Clock: cfg.Clock, Metrics: cfg.ReconcileMetrics}),
		expectations: expectations.New(cfg.Ranges.Count(), cfg.Clock),
	}
	return c, cfg.Caches.Register(c, nil, nil, nil)
}

// Run starts the workers and blocks until ctx is done. Ranges come and go
// through Acquired/Releasing.
func (c *Controller) Run(ctx context.Context, workers int) error {
	klog.FromContext(ctx).Info("VM controller running", "workers", workers)
	return c.rt.Run(ctx, workers, c.sync)
}

// Acquired implements caches.Consumer: watch range r's VMs and VMIs; the
// informers replay what they hold, which queues every VM of the range.
func (c *Controller) Acquired(_ context.Context, r *caches.Range) error {
	c.rt.Acquired(r.Index)
	if _, err := r.VMs.AddEventHandler(c.vmHandler(r.Index)); err != nil {
		return err
	}
	return r.VMIs.AddEventHandler(c.vmiHandler(r.Index))
}

// Releasing implements caches.Consumer: stop acting on range i and forget
// its expectations; the next owner starts from the objects.
func (c *Controller) Releasing(ctx context.Context, i int, _ shard.Reason) {
	c.rt.Releasing(ctx, i)
	c.expectations.DropRange(i)
}

// wrote records a VM our write returned, for the next syncs of its range.
func (c *Controller) wrote(rng int, vm *virtv1.VirtualMachine) {
	if r := c.cfg.Caches.Get(rng); r != nil {
		r.WroteVM(vm)
	}
}

func (c *Controller) vmHandler(rng int) cache.ResourceEventHandler {
	return sharded.Handler(c.rt, rng, sharded.Events[*virtv1.VirtualMachine]{Keys: sharded.ItsOwnKey[*virtv1.VirtualMachine]})
}

// vmiHandler maps VMIs that a VM controls to their VM and feeds the
// expectations.
func (c *Controller) vmiHandler(rng int) cache.ResourceEventHandler {
	return sharded.Handler(c.rt, rng, sharded.Events[*virtv1.VirtualMachineInstance]{
		Keys:  sharded.ControllerKey[*virtv1.VirtualMachineInstance](virtv1.VirtualMachineGroupVersionKind.Kind),
		Added: func(rng int, key string, _ *virtv1.VirtualMachineInstance) { c.expectations.CreationObserved(rng, key) },
		Updated: func(rng int, key string, old, cur *virtv1.VirtualMachineInstance) {
			// A VMI marked for deletion is as good as deleted for the VM,
			// as in KubeVirt.
			if old.DeletionTimestamp == nil && cur.DeletionTimestamp != nil {
				c.expectations.DeletionObserved(rng, key, cur.UID)
			}
		},
		Deleted: func(rng int, key string, vmi *virtv1.VirtualMachineInstance) {
			c.expectations.DeletionObserved(rng, key, vmi.UID)
		},
	})
}

var _ caches.Consumer = (*Controller)(nil)
