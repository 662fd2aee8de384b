package migration

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
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

// Options of the migration controller.
type Options struct {
	// Limits override the KubeVirt CR's limits; a zero field takes the
	// CR's, read at every grant (Limits.Over).
	Limits Limits
	// UnschedulableTimeout fails a migration whose target pod stays
	// unschedulable this long; PendingTimeout one whose target pod does
	// not run this long for any reason.
	UnschedulableTimeout time.Duration
	PendingTimeout       time.Duration
}

// DefaultOptions are KubeVirt's.
func DefaultOptions() Options {
	return Options{UnschedulableTimeout: DefaultUnschedulableTimeout, PendingTimeout: DefaultPendingTimeout}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Limits.PerCluster, "parallel-migrations-per-cluster", o.Limits.PerCluster, "live migrations in flight in the whole cluster, across all replicas; 0: the KubeVirt CR's spec.configuration.migrations.parallelMigrationsPerCluster, followed live (5 without a CR)")
	fs.IntVar(&o.Limits.PerNode, "parallel-outbound-migrations-per-node", o.Limits.PerNode, "live migrations in flight out of one node; 0: the KubeVirt CR's parallelOutboundMigrationsPerNode, followed live (2 without a CR)")
	fs.DurationVar(&o.UnschedulableTimeout, "migration-unschedulable-timeout", o.UnschedulableTimeout, "fail a migration whose target pod is unschedulable this long")
	fs.DurationVar(&o.PendingTimeout, "migration-pending-timeout", o.PendingTimeout, "fail a migration whose target pod is not running this long")
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if o.Limits.PerCluster < 0 || o.Limits.PerNode < 0 {
		errs = append(errs, errors.New("migration limits must be at least 1, or 0 for the KubeVirt CR's"))
	}
	if o.UnschedulableTimeout <= 0 || o.PendingTimeout <= 0 {
		errs = append(errs, errors.New("migration timeouts must be positive"))
	}
	return errors.Join(errs...)
}

// Declare declares the migration controller to the replica.
func Declare(opts Options) sharded.Declaration {
	return sharded.Declaration{Name: "migration", Workers: 8, EventSource: "virtualmachine-controller", New: func(env *sharded.Env, rt *sharded.Runtime) (*sharded.Controller, error) {
		c, err := newController(env, rt, opts)
		if err != nil {
			return nil, err
		}
		return c.declare(), nil
	}}
}

// Controller is the migration controller of one replica.
type Controller struct {
	env     *sharded.Env
	opts    Options
	rt      *sharded.Runtime
	permits *Permits
}

// item is a migration to reconcile, in the range of its VMI (or, while its
// VMI is not found, of its own key).
type item = sharded.Item

func newController(env *sharded.Env, rt *sharded.Runtime, opts Options) (*Controller, error) {
	if env.ClusterConfig == nil {
		return nil, errors.New("no cluster configuration")
	}
	if opts.Limits.PerCluster < 0 || opts.Limits.PerNode < 0 {
		return nil, fmt.Errorf("negative limits %+v", opts.Limits)
	}
	if opts.UnschedulableTimeout <= 0 {
		opts.UnschedulableTimeout = DefaultUnschedulableTimeout
	}
	if opts.PendingTimeout <= 0 {
		opts.PendingTimeout = DefaultPendingTimeout
	}
	c := &Controller{env: env, opts: opts, rt: rt}
	c.permits = &Permits{
		Client: env.Kube, Namespace: env.ReplicaNamespace, Name: env.Name + "-migration-permits",
		Live: c.live, Grace: permitGrace, Now: time.Now,
	}
	return c, nil
}

// declare is what the runtime runs: a migration is reconciled in the
// range of its VMI (a VMI's events queue its migrations, a target pod's
// its migration), or in its own range while its VMI is nowhere. Permits
// stay with their migrations at a handoff: the next owner goes on with
// them.
func (c *Controller) declare() *sharded.Controller {
	return &sharded.Controller{
		Watches: []sharded.Watch{
			sharded.Across(kinds.Migrations, sharded.Events[*virtv1.VirtualMachineInstanceMigration]{Route: c.route, Replay: true}, nil),
			sharded.On(kinds.VMIs, sharded.Events[*virtv1.VirtualMachineInstance]{Keys: c.migrationsOf}, nil),
			sharded.On(kinds.LauncherPods, sharded.Events[*corev1.Pod]{Keys: migrationOf}, nil),
			// The policy a migration carries is read at its hand-off.
			sharded.Reading(kinds.MigrationPolicies.Watch(nil)),
			// A target pod goes to nodes like its source node.
			sharded.Reading(kinds.Nodes.Watch(nil)),
			// A raised limit lets waiting migrations go at once, not at
			// their next poll.
			sharded.OnConfig(func(*clusterconfig.Config) []item { return c.pendingItems() }),
			// A quota changed may now let a refused target pod in.
			sharded.OnInformer(func() cache.SharedIndexInformer { return c.env.Objects.QuotaInformer },
				sharded.Events[*corev1.ResourceQuota]{Route: c.rejectedByQuotaIn}),
		},
		Sync: c.sync,
	}
}

// limits are the limits in force now: the overrides, else the KubeVirt
// CR's as the watcher last saw them.
func (c *Controller) limits() Limits {
	return c.opts.Limits.Over(c.env.ClusterConfig.Current().Migrations())
}

// live tells the permit table whether a migration still counts.
func (c *Controller) live(uid types.UID) (exists, final bool) {
	for _, m := range kinds.Migrations.All(c.env.Caches).List() {
		if m.UID == uid {
			return true, m.IsFinal()
		}
	}
	return false, false
}

// route queues a migration in the range of its VMI, if this replica
// holds it, else in its own range, if held; a final or deleted one may
// free a permit for the migrations waiting.
func (c *Controller) route(m *virtv1.VirtualMachineInstanceMigration) []item {
	var items []item
	if m.IsFinal() || m.DeletionTimestamp != nil {
		items = c.pendingItems()
	}
	key := m.Namespace + "/" + m.Name
	if rng, ok := kinds.VMIs.Locate(c.env.Caches, m.Namespace+"/"+m.Spec.VMIName); ok {
		return append(items, item{Range: rng, Key: key})
	}
	if rng := c.env.Ranges.Of(m); c.env.Caches.Get(rng) != nil {
		return append(items, item{Range: rng, Key: key})
	}
	return items
}

// pendingItems are this replica's migrations that wait for a permit, to be
// queued at once rather than at their next poll (KubeVirt re-enqueues its
// pending migrations the same way when one ends).
func (c *Controller) pendingItems() []item {
	var items []item
	for _, m := range kinds.Migrations.All(c.env.Caches).List() {
		if m.Status.Phase != virtv1.MigrationPending {
			continue
		}
		if rng, ok := kinds.VMIs.Locate(c.env.Caches, m.Namespace+"/"+m.Spec.VMIName); ok {
			items = append(items, item{Range: rng, Key: m.Namespace + "/" + m.Name})
		}
	}
	return items
}

// rejectedByQuotaIn are this replica's migrations in q's namespace whose
// target pod a quota refused (KubeVirt's updateResourceQuota).
func (c *Controller) rejectedByQuotaIn(q *corev1.ResourceQuota) []item {
	var items []item
	for _, m := range kinds.Migrations.All(c.env.Caches).List() {
		if m.Namespace != q.Namespace || !slices.ContainsFunc(m.Status.Conditions, rejectedByQuota) {
			continue
		}
		if rng, ok := kinds.VMIs.Locate(c.env.Caches, m.Namespace+"/"+m.Spec.VMIName); ok {
			items = append(items, item{Range: rng, Key: m.Namespace + "/" + m.Name})
		}
	}
	return items
}

// migrationsOf are the keys of the VMI's migrations.
func (c *Controller) migrationsOf(vmi *virtv1.VirtualMachineInstance) []string {
	var keys []string
	for _, m := range kinds.MigrationsOf(c.env.Caches, vmi.Namespace+"/"+vmi.Name) {
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

// now is a metav1.Time for status fields.
func now() metav1.Time { return metav1.Now() }
