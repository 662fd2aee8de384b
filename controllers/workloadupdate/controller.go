package workloadupdate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// KubeVirt's workload updater's constants
// (watch/workload-updater/workload-updater.go).
const (
	// throttle: the updater looks at most once per this.
	throttle = 5 * time.Second
	// DefaultBatchEvictionSize and DefaultBatchEvictionInterval are in
	// force when the CR's strategy sets none.
	DefaultBatchEvictionSize     = 10
	DefaultBatchEvictionInterval = time.Minute
	// migrationPrefix names the migrations it creates.
	migrationPrefix = "kubevirt-workload-update-"

	reasonFailedCreate             = "FailedCreate"
	reasonSuccessfulCreate         = "SuccessfulCreate"
	reasonFailedEvict              = "FailedEvict"
	reasonSuccessfulEvict          = "SuccessfulEvict"
	reasonSuccessfulChangeAbortion = "SuccessfulChangeAbortion"
	reasonFailedChangeAbortion     = "FailedChangeAbortion"
)

// itemKey is the one item the replica's updater reconciles, as KubeVirt's
// keys its queue by the KubeVirt CR: the replica's VMIs, all at once.
const itemKey = "workload-updates"

// kubeVirts is the KubeVirt CR's resource, whose status gets the count.
var kubeVirts = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "kubevirts"}

// Options of the workload updater.
type Options struct {
	// MigrationLimits are the migration controller's overrides of the
	// KubeVirt CR's limits, which bound the migrations created at once.
	MigrationLimits migration.Limits
}

// Declare declares the workload updater to the replica.
func Declare(opts Options) sharded.Declaration {
	return sharded.Declaration{Name: "workload-updater", Workers: 1, EventSource: "workload-update-controller",
		New: func(env *sharded.Env, rt *sharded.Runtime) (*sharded.Controller, error) {
			c, err := newController(env, rt, opts)
			if err != nil {
				return nil, err
			}
			return c.declare(), nil
		}}
}

// Controller is the workload updater of one replica.
type Controller struct {
	env    *sharded.Env
	rt     *sharded.Runtime
	opts   Options
	ledger *ledger
	// outdated is KubeVirt's kubevirt_vmi_number_of_outdated, for this
	// replica's ranges: summed over the replicas, KubeVirt's figure.
	outdated prometheus.Gauge

	// The one item is never synced twice at once: these need no lock.
	lastLook time.Time
	// written are the counts this replica last wrote to the record, and
	// total the cluster's count it read with them.
	written map[int]int
	total   int
}

func newController(env *sharded.Env, rt *sharded.Runtime, opts Options) (*Controller, error) {
	if env.ClusterConfig == nil {
		return nil, errors.New("no cluster configuration")
	}
	c := &Controller{env: env, rt: rt, opts: opts,
		ledger: &ledger{client: env.Kube, namespace: env.ReplicaNamespace, name: env.Name + "-workload-updates"},
		outdated: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kubevirt_vmi_number_of_outdated",
			Help: "Indication for the total number of VirtualMachineInstance workloads that are not running within the most up-to-date version of the virt-launcher environment (of this replica's ranges: sum over the replicas)."}),
	}
	if env.Registry != nil {
		if err := env.Registry.Register(c.outdated); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Controller) declare() *sharded.Controller {
	item := []sharded.Item{{Range: sharded.Cluster, Key: itemKey}}
	return &sharded.Controller{
		Watches: []sharded.Watch{
			// The VMIs it may act on or count, and those that end (one
			// counted may have).
			sharded.On(kinds.VMIs, sharded.Events[*virtv1.VirtualMachineInstance]{Route: func(vmi *virtv1.VirtualMachineInstance) []sharded.Item {
				if c.noticed(vmi) {
					return item
				}
				return nil
			}}, nil),
			sharded.Across(kinds.Migrations, sharded.Events[*virtv1.VirtualMachineInstanceMigration]{Route: func(*virtv1.VirtualMachineInstanceMigration) []sharded.Item {
				return item
			}}, nil),
			sharded.Reading(kinds.LauncherPods.Watch(nil)),
			sharded.OnConfig(func(*clusterconfig.Config) []sharded.Item { return item }),
		},
		Sync: c.sync,
	}
}

// noticed: a VMI event the updater looks at: one on an outdated launcher
// (labelled so, or not yet), with a change waiting for a migration or
// called off, or one that ends (it may have been counted). KubeVirt's looks
// at the VMIs only on hotplug changes, a change of the CR or a migration,
// and again and again while any is left; these bring a range's outdated
// VMIs to the replica that takes the range over, too.
func (c *Controller) noticed(vmi *virtv1.VirtualMachineInstance) bool {
	_, labelled := vmi.Labels[virtv1.OutdatedLauncherImageLabel]
	_, aborted := vmi.Annotations[virtv1.WorkloadUpdateMigrationAbortionAnnotation]
	image := vmi.Status.LauncherContainerImageVersion
	return labelled || aborted || image != "" && (image != c.env.Template.LauncherImage || vmi.IsFinal()) ||
		vmi.DeletionTimestamp != nil || vmistatus.HotplugPending(vmi) || volumesChangePending(vmi)
}

func (c *Controller) sync(ctx context.Context, _ sharded.Item) (time.Duration, error) {
	cfg := c.env.ClusterConfig.Current()
	w := cfg.Workloads()
	// As KubeVirt: nothing without a CR, nor while virt-operator deploys.
	if cfg.KubeVirt() == "" || !w.Deployed {
		return 0, nil
	}
	now := c.env.Clock.Now()
	if wait := c.lastLook.Add(throttle).Sub(now); wait > 0 {
		return wait, nil
	}
	c.lastLook = now

	p := c.look(cfg, w.Strategy, now)
	counts, mine := p.outdated, 0
	for _, n := range counts {
		mine += n
	}
	c.outdated.Set(float64(mine))
	size := ptr.Deref(w.Strategy.BatchEvictionSize, DefaultBatchEvictionSize)
	interval := DefaultBatchEvictionInterval
	if d := w.Strategy.BatchEvictionInterval; d != nil {
		interval = d.Duration
	}
	evict := 0
	if len(p.evict) > 0 || !equalCounts(c.written, counts) {
		r, granted, err := c.ledger.update(ctx, func(r record) (record, int) {
			return r.withCounts(counts).draw(len(p.evict), size, interval, now)
		})
		if err != nil {
			return 0, err
		}
		c.written, c.total, evict = counts, r.total(), granted
	}
	if err := c.publish(ctx, cfg, w); err != nil {
		return 0, err
	}

	var errs []error
	errs = append(errs, c.migrate(ctx, cfg, p.migrate)...)
	errs = append(errs, c.evict(ctx, p.evict[:evict])...)
	errs = append(errs, c.abort(ctx, p.abort)...)
	var after time.Duration
	if len(p.migrate) > 0 || len(p.evict) > 0 || len(p.abort) > 0 || mine > 0 {
		// KubeVirt looks again at once while any is left to act on (its
		// 30 s requeue is 30 ns): the throttle spaces the looks here. And
		// while any is counted: a look on a migration's end may find its
		// VMI's cached copy still outdated, and the VMI's next update (to
		// the new launcher) is not one the updater hears of, so without
		// another look the count would stay.
		after = throttle
	}
	return after, errors.Join(errs...)
}

// look sorts the VMIs of the ranges the replica acts on.
func (c *Controller) look(cfg *clusterconfig.Config, s virtv1.KubeVirtWorkloadUpdateStrategy, now time.Time) plan {
	j := judge{image: c.env.Template.LauncherImage, now: now,
		migrations: func(key string) []*virtv1.VirtualMachineInstanceMigration {
			return kinds.MigrationsOf(c.env.Caches, key)
		},
	}
	for _, m := range s.WorkloadUpdateMethods {
		j.migrateAllowed = j.migrateAllowed || m == virtv1.WorkloadUpdateMethodLiveMigrate
		j.evictAllowed = j.evictAllowed || m == virtv1.WorkloadUpdateMethodEvict
	}
	p := plan{outdated: map[int]int{}}
	for i := range c.env.Ranges.Count() {
		r := c.env.Caches.Get(i)
		if r == nil || !c.rt.Holds(i) {
			continue
		}
		p.outdated[i] = 0
		for _, vmi := range kinds.VMIs.In(r).List() {
			j.add(&p, held{Range: r, Object: vmi})
		}
	}
	// Not always the same VMIs first, should some not move.
	rand.Shuffle(len(p.migrate), func(a, b int) { p.migrate[a], p.migrate[b] = p.migrate[b], p.migrate[a] })
	return p
}

func equalCounts(a, b map[int]int) bool {
	if a == nil || len(a) != len(b) {
		return false
	}
	for i, n := range a {
		if m, ok := b[i]; !ok || m != n {
			return false
		}
	}
	return true
}

// publish writes the cluster's count of outdated VMIs to the KubeVirt CR's
// status when the CR's differs, as KubeVirt does: a JSON patch that adds
// it, or tests and replaces it. The count is read again first: another
// replica may have changed its ranges' since this one read.
func (c *Controller) publish(ctx context.Context, cfg *clusterconfig.Config, w clusterconfig.Workloads) error {
	if w.Outdated != nil && *w.Outdated == c.total && c.written != nil {
		return nil
	}
	_, r, err := c.ledger.read(ctx)
	if err != nil {
		return err
	}
	c.total = r.total()
	if w.Outdated != nil && *w.Outdated == c.total {
		return nil
	}
	const path = "/status/outdatedVirtualMachineInstanceWorkloads"
	ops := []map[string]any{{"op": "add", "path": path, "value": c.total}}
	if w.Outdated != nil {
		ops = []map[string]any{{"op": "test", "path": path, "value": *w.Outdated}, {"op": "replace", "path": path, "value": c.total}}
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(cfg.KubeVirt())
	if _, err := c.env.Dynamic.Resource(kubeVirts).Namespace(ns).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("unable to patch kubevirt obj status to update the outdatedVirtualMachineInstanceWorkloads valued: %w", err)
	}
	return nil
}

// migrate creates workload update migrations for candidates, as many as
// the cluster-wide limit leaves room for, less the running migrations
// (every replica caches them all), and at most the replica's share of the
// limit, in proportion to the ranges it holds (rounded up): KubeVirt
// creates only what the limit lets run at once, and the migration
// controller holds the limit whatever is created. A share of the room
// instead would leave a replica that looks just after another less than
// the limit allows.
func (c *Controller) migrate(ctx context.Context, cfg *clusterconfig.Config, candidates []migration.Decided) []error {
	if len(candidates) == 0 {
		return nil
	}
	limits := c.opts.MigrationLimits.Over(cfg.Migrations())
	running := 0
	for _, m := range kinds.Migrations.All(c.env.Caches).List() {
		if m.IsRunning() {
			running++
		}
	}
	room, held := limits.PerCluster-running, 0
	for i := range c.env.Ranges.Count() {
		if c.rt.Holds(i) {
			held++
		}
	}
	if room <= 0 || held == 0 {
		return nil
	}
	share := min(room, (limits.PerCluster*held+c.env.Ranges.Count()-1)/c.env.Ranges.Count())
	var errs []error
	for _, d := range candidates[:min(share, len(candidates))] {
		if err := c.createMigration(ctx, cfg, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (c *Controller) createMigration(ctx context.Context, cfg *clusterconfig.Config, d migration.Decided) error {
	vmi := d.Object
	created, err := migration.CreateSystem(ctx, c.env, c.rt, d, workloadUpdate(cfg, vmi))
	if err != nil {
		c.env.Recorder.Eventf(vmi, corev1.EventTypeWarning, reasonFailedCreate, "Error creating a Migration for automated workload update: %v", err)
		return fmt.Errorf("create workload update migration of %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	if created != nil {
		klog.FromContext(ctx).V(2).Info("Initiated migration of vmi as part of workload update", "vmi", klog.KObj(vmi), "migration", created.Name)
		c.env.Recorder.Eventf(vmi, corev1.EventTypeNormal, reasonSuccessfulCreate, "Created Migration %s for automated workload update", created.Name)
	}
	return nil
}

// workloadUpdate is the VMI's workload update migration: KubeVirt's
// kubevirt-workload-update- migration, labelled with the VMI when it
// carries a volumes change; under the priority queue system-critical, or
// user-triggered for a change the user waits for.
func workloadUpdate(cfg *clusterconfig.Config, vmi *virtv1.VirtualMachineInstance) migration.System {
	s := migration.System{
		Prefix:      migrationPrefix,
		Annotations: map[string]string{virtv1.WorkloadUpdateMigrationAnnotation: ""},
	}
	if volumesChangePending(vmi) {
		s.Labels = map[string]string{virtv1.VolumesUpdateMigration: vmi.Name}
		if len(vmi.Name) > validation.DNS1035LabelMaxLength {
			s.Labels[virtv1.VolumesUpdateMigration] = string(vmi.UID)
		}
	}
	if cfg.MigrationPriorityQueueEnabled() {
		s.Priority = ptr.To(virtv1.PrioritySystemCritical)
		if vmistatus.HotplugPending(vmi) || volumesChangePending(vmi) {
			s.Priority = ptr.To(virtv1.PriorityUserTriggered)
		}
	}
	return s
}

// evict evicts the launcher pods of vmis through the Eviction API, which
// respects their disruption budgets (virt-api's admitter turns the
// eviction of a VMI that migrates on eviction into an evacuation).
func (c *Controller) evict(ctx context.Context, vmis []held) []error {
	var errs []error
	for _, h := range vmis {
		vmi := h.Object
		pod := currentPod(h)
		if pod == nil {
			err := fmt.Errorf("no launcher pod of %s/%s on %q", vmi.Namespace, vmi.Name, vmi.Status.NodeName)
			c.env.Recorder.Eventf(vmi, corev1.EventTypeWarning, reasonFailedEvict, "Error detecting active pod for VMI during workload update: %v", err)
			errs = append(errs, err)
			continue
		}
		err := c.rt.Write(ctx, h.Range.Index, func(ctx context.Context) error {
			return c.env.Kube.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}, DeleteOptions: &metav1.DeleteOptions{}})
		})
		switch {
		case errors.Is(err, sharded.ErrNotHeld):
		case err != nil && !apierrors.IsNotFound(err):
			c.env.Recorder.Eventf(vmi, corev1.EventTypeWarning, reasonFailedEvict, "Error deleting VMI during automated workload update: %v", err)
			errs = append(errs, fmt.Errorf("evict the launcher pod of %s/%s: %w", vmi.Namespace, vmi.Name, err))
		default:
			klog.FromContext(ctx).V(2).Info("Evicted vmi pod as part of workload update", "vmi", klog.KObj(vmi))
			// KubeVirt formats the eviction's error, nil here or a pod
			// already gone, into its message; so does this.
			c.env.Recorder.Eventf(vmi, corev1.EventTypeNormal, reasonSuccessfulEvict, "Initiated eviction of VMI as part of automated workload update: %v", err)
		}
	}
	return errs
}

// currentPod is the VMI's newest launcher pod on its node (KubeVirt's
// CurrentVMIPod).
func currentPod(h held) *corev1.Pod {
	var cur *corev1.Pod
	for _, p := range kinds.PodsOf(h.Range, h.Object) {
		if p.Spec.NodeName != h.Object.Status.NodeName {
			continue
		}
		if cur == nil || cur.CreationTimestamp.Before(&p.CreationTimestamp) {
			cur = p
		}
	}
	return cur
}

// abort deletes the workload update migrations of vmis, whose change was
// called off.
func (c *Controller) abort(ctx context.Context, vmis []held) []error {
	var errs []error
	for _, h := range vmis {
		vmi := h.Object
		for _, m := range unfinishedUpdates(kinds.MigrationsOf(c.env.Caches, vmi.Namespace+"/"+vmi.Name)) {
			err := c.rt.Write(ctx, h.Range.Index, func(ctx context.Context) error {
				return c.env.KubeVirt.Migrations(m.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{})
			})
			switch {
			case errors.Is(err, sharded.ErrNotHeld), apierrors.IsNotFound(err):
			case err != nil:
				c.env.Recorder.Eventf(vmi, corev1.EventTypeNormal, reasonFailedChangeAbortion, "Failed to abort change for vmi: %s: %v", vmi.Name, err)
				errs = append(errs, fmt.Errorf("delete migration %s/%s: %w", m.Namespace, m.Name, err))
			default:
				c.env.Recorder.Eventf(vmi, corev1.EventTypeNormal, reasonSuccessfulChangeAbortion, "Aborted change for vmi: %s", vmi.Name)
			}
		}
	}
	return errs
}
