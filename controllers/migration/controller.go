package migration

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/shard"
)

// KubeVirt's timeouts of a target pod that does not start.
const (
	DefaultUnschedulableTimeout = 5 * time.Minute
	DefaultPendingTimeout       = 15 * time.Minute
	// finishedToKeep is how many final migrations of one VMI are kept
	// (defaultFinalizedMigrationGarbageCollectionBuffer).
	finishedToKeep = 5
	// permitGrace keeps a permit of a migration the cache does not know
	// yet: another replica may have granted it a moment ago.
	permitGrace = time.Minute
)

// Config wires the controller.
type Config struct {
	Kube     kubernetes.Interface
	KubeVirt kubevirt.Interface
	// Fence admits syncs and writes of the ranges this replica holds.
	Fence   sharded.Fence
	Ranges  shard.Ranges
	Caches  *caches.Ranges
	Cluster *caches.Cluster
	// Namespace and Name place the permit table: <Name>-migration-permits.
	Namespace, Name string
	// Limits override the KubeVirt CR's limits; a zero field takes the
	// CR's, read at every grant (Limits.Over).
	Limits Limits
	// UnschedulableTimeout fails a migration whose target pod stays
	// unschedulable this long; PendingTimeout one whose target pod does
	// not run this long for any reason.
	UnschedulableTimeout time.Duration
	PendingTimeout       time.Duration
	Options              template.Options
	// ClusterConfig is the KubeVirt CR's configuration, current; required.
	ClusterConfig ClusterConfig
	// Objects are the caches the target pod depends on, run by the caller.
	Objects template.Objects
	// Recorder records the controller's events; required.
	Recorder record.EventRecorder
	// ReconcileMetrics record each reconcile; nil for none.
	ReconcileMetrics *sharded.Metrics
}

// ClusterConfig is the KubeVirt CR's configuration as a
// clusterconfig.Watcher serves it.
type ClusterConfig interface {
	Current() *clusterconfig.Config
	OnChange(func(*clusterconfig.Config))
}

// Controller is the migration controller of one replica.
type Controller struct {
	cfg     Config
	rt      *sharded.Runtime
	permits *Permits
}

// item is a migration to reconcile, in the range of its VMI (or, while its
// VMI is not found, of its own key).
type item = sharded.Item

// New returns a controller registered with cfg.Caches.
func New(cfg Config) (*Controller, error) {
	if cfg.ClusterConfig == nil {
		return nil, errors.New("migration controller: no cluster configuration")
	}
	if cfg.Limits.PerCluster < 0 || cfg.Limits.PerNode < 0 {
		return nil, fmt.Errorf("migration controller: negative limits %+v", cfg.Limits)
	}
	if cfg.UnschedulableTimeout <= 0 {
		cfg.UnschedulableTimeout = DefaultUnschedulableTimeout
	}
	if cfg.PendingTimeout <= 0 {
		cfg.PendingTimeout = DefaultPendingTimeout
	}
	c := &Controller{
		cfg: cfg,
		rt:  sharded.New(sharded.Config{Name: "migration", Ranges: cfg.Ranges.Count(), Fence: cfg.Fence, Metrics: cfg.ReconcileMetrics}),
	}
	c.permits = &Permits{
		Client: cfg.Kube, Namespace: cfg.Namespace, Name: cfg.Name + "-migration-permits",
		Live: c.live, Grace: permitGrace, Now: time.Now,
	}
	return c, cfg.Caches.Register(c, nil, nil, nil)
}

// limits are the limits in force now: the overrides, else the KubeVirt
// CR's as the watcher last saw them.
func (c *Controller) limits() Limits {
	return c.cfg.Limits.Over(c.cfg.ClusterConfig.Current().Migrations())
}

// live tells the permit table whether a migration still counts.
func (c *Controller) live(uid types.UID) (exists, final bool) {
	for _, obj := range c.cfg.Cluster.Migrations.GetStore().List() {
		if m := obj.(*virtv1.VirtualMachineInstanceMigration); m.UID == uid {
			return true, m.IsFinal()
		}
	}
	return false, false
}

// Run starts the workers and blocks until ctx is done; the cluster caches
// must be running.
func (c *Controller) Run(ctx context.Context, workers int) error {
	if _, err := c.cfg.Cluster.Migrations.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.migrationChanged,
		UpdateFunc: func(_, obj any) { c.migrationChanged(obj) },
		DeleteFunc: c.migrationChanged,
	}); err != nil {
		return err
	}
	// A raised limit lets waiting migrations go at once, not at their
	// next poll.
	c.cfg.ClusterConfig.OnChange(func(*clusterconfig.Config) { c.wakeWaiting() })
	limits := c.limits()
	klog.FromContext(ctx).Info("Migration controller running", "workers", workers, "perCluster", limits.PerCluster, "perNode", limits.PerNode,
		"perClusterOverride", c.cfg.Limits.PerCluster, "perNodeOverride", c.cfg.Limits.PerNode)
	return c.rt.Run(ctx, workers, c.sync)
}

// Acquired implements caches.Consumer: follow the range's VMIs and target
// pods, and queue the migrations of its VMIs.
func (c *Controller) Acquired(_ context.Context, r *caches.Range) error {
	c.rt.Acquired(r.Index)
	// A VMI's events queue its migrations; a target pod's, its migration.
	if err := r.VMIs.AddEventHandler(sharded.Handler(c.rt, r.Index, sharded.Events[*virtv1.VirtualMachineInstance]{Keys: c.migrationsOf})); err != nil {
		return err
	}
	_, err := r.Pods.AddEventHandler(sharded.Handler(c.rt, r.Index, sharded.Events[*corev1.Pod]{Keys: migrationOf}))
	for _, obj := range c.cfg.Cluster.Migrations.GetStore().List() {
		if m := obj.(*virtv1.VirtualMachineInstanceMigration); c.cfg.Ranges.Of(m) == r.Index {
			c.migrationChanged(m) // a VMI that is nowhere: its own range's
		}
	}
	return err
}

// Releasing implements caches.Consumer. Permits stay with their
// migrations: the next owner goes on with them.
func (c *Controller) Releasing(ctx context.Context, i int, _ shard.Reason) {
	c.rt.Releasing(ctx, i)
}

func unwrap(obj any) any {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tomb.Obj
	}
	return obj
}

// migrationChanged queues a migration in the range of its VMI, if this
// replica holds it, else in its own range, if held.
func (c *Controller) migrationChanged(obj any) {
	m, ok := unwrap(obj).(*virtv1.VirtualMachineInstanceMigration)
	if !ok {
		return
	}
	key := m.Namespace + "/" + m.Name
	if m.IsFinal() || m.DeletionTimestamp != nil {
		c.wakeWaiting() // a permit may be free
	}
	if rng, ok := c.vmiRange(m.Namespace + "/" + m.Spec.VMIName); ok {
		c.rt.Add(rng, key)
		return
	}
	if rng := c.cfg.Ranges.Of(m); c.cfg.Caches.Get(rng) != nil {
		c.rt.Add(rng, key)
	}
}

// wakeWaiting queues this replica's migrations that wait for a permit,
// at once rather than at their next poll (KubeVirt re-enqueues its pending
// migrations the same way when one ends).
func (c *Controller) wakeWaiting() {
	for _, obj := range c.cfg.Cluster.Migrations.GetStore().List() {
		m := obj.(*virtv1.VirtualMachineInstanceMigration)
		if m.Status.Phase != virtv1.MigrationPending {
			continue
		}
		if rng, ok := c.vmiRange(m.Namespace + "/" + m.Spec.VMIName); ok {
			c.rt.Add(rng, m.Namespace+"/"+m.Name)
		}
	}
}

// vmiRange finds the held range whose cache has the VMI.
func (c *Controller) vmiRange(vmiKey string) (int, bool) {
	for i := range c.cfg.Ranges.Count() {
		if r := c.cfg.Caches.Get(i); r != nil {
			if _, exists, _ := r.VMIs.Get(vmiKey); exists {
				return i, true
			}
		}
	}
	return 0, false
}

// migrationsOf are the keys of the VMI's migrations.
func (c *Controller) migrationsOf(vmi *virtv1.VirtualMachineInstance) []string {
	var keys []string
	for _, m := range c.cfg.Cluster.MigrationsOf(vmi.Namespace + "/" + vmi.Name) {
		keys = append(keys, m.Namespace+"/"+m.Name)
	}
	return keys
}

// migrationOf is the key of the migration a target pod is for.
func migrationOf(pod *corev1.Pod) []string {
	if name := pod.Annotations[virtv1.MigrationJobNameAnnotation]; name != "" {
		return []string{pod.Namespace + "/" + name}
	}
	return nil
}

var _ caches.Consumer = (*Controller)(nil)

// now is a metav1.Time for status fields.
func now() metav1.Time { return metav1.Now() }
