// Package node is virtshard's node controller: what KubeVirt's
// virt-controller does when a node goes away or is drained. A node
// NotReady past a grace period, or deleted, fails the VMIs this replica
// holds on it (reason NodeUnresponsive) and deletes their launcher pods; a
// node tainted for drain (the KubeVirt CR's migrations.nodeDrainTaintKey,
// kubevirt.io/drain by default) gets migrations for the VMIs this replica
// holds on it, which the migration controller runs within the cluster-wide
// limits, ahead of users' migrations.
//
// Nodes are cluster-scoped and few: every replica watches all of them
// (caches.Cluster) and acts only on the VMIs of the ranges it holds.
package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/patch"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/vmistatus"
	"github.com/virtshard/virtshard/shard"
)

// Defaults.
const (
	// DefaultGracePeriod is how long a node may be NotReady before its VMIs
	// fail: KubeVirt's heartbeat timeout.
	DefaultGracePeriod = 5 * time.Minute
	// DefaultDrainTaintKey is KubeVirt's NodeDrainTaintDefaultKey, in
	// force without a KubeVirt CR that sets another.
	DefaultDrainTaintKey = clusterconfig.DefaultNodeDrainTaintKey
	// ReasonNodeUnresponsive is the reason of the VMIs failed (KubeVirt's).
	ReasonNodeUnresponsive = "NodeUnresponsive"
	// byNode indexes VMIs by status.nodeName.
	byNode = "nodeName"
	// evacuationRecheck is how often a drained node with VMIs left on it
	// is looked at again: a migration may have failed.
	evacuationRecheck = 10 * time.Second
)

// Config wires the controller.
type Config struct {
	Kube     kubernetes.Interface
	KubeVirt kubevirt.Interface
	// Fence admits writes of the ranges this replica holds.
	Fence   sharded.Fence
	Ranges  shard.Ranges
	Caches  *caches.Ranges
	Cluster *caches.Cluster
	// GracePeriod a node may be NotReady.
	GracePeriod time.Duration
	// DrainTaintKey, when set, overrides the KubeVirt CR's
	// migrations.nodeDrainTaintKey, which is read at every sync otherwise.
	DrainTaintKey string
	// ClusterConfig is the KubeVirt CR's configuration, current; required.
	ClusterConfig ClusterConfig
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

// Controller is the node controller of one replica.
type Controller struct {
	cfg    Config
	queue  workqueue.TypedRateLimitingInterface[string]
	writer *sharded.Writer
}

// New returns a controller registered with cfg.Caches.
func New(cfg Config) (*Controller, error) {
	if cfg.GracePeriod <= 0 {
		cfg.GracePeriod = DefaultGracePeriod
	}
	if cfg.ClusterConfig == nil {
		return nil, errors.New("node controller: no cluster configuration")
	}
	c := &Controller{
		cfg:    cfg,
		writer: sharded.NewWriter("node", cfg.Fence, cfg.ReconcileMetrics),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "node"}),
	}
	return c, cfg.Caches.Register(c, cache.Indexers{byNode: func(obj any) ([]string, error) {
		return []string{obj.(*virtv1.VirtualMachineInstance).Status.NodeName}, nil
	}}, nil, nil)
}

// Run starts the workers and blocks until ctx is done; the cluster caches
// must be running.
func (c *Controller) Run(ctx context.Context, workers int) error {
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := c.cfg.Cluster.Nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	// Another drain taint key may mark other nodes: look at all of them.
	c.cfg.ClusterConfig.OnChange(func(*clusterconfig.Config) {
		for _, key := range c.cfg.Cluster.Nodes.GetStore().ListKeys() {
			c.queue.Add(key)
		}
	})
	klog.FromContext(ctx).Info("Node controller running", "workers", workers, "gracePeriod", c.cfg.GracePeriod,
		"drainTaint", c.drainTaintKey(), "drainTaintOverride", c.cfg.DrainTaintKey)
	// Nodes are not sharded: every replica looks at every node, and acts
	// on the VMIs of its own ranges there.
	return sharded.Work(ctx, "node", workers, c.queue, c.cfg.ReconcileMetrics, c.sync)
}

// Acquired implements caches.Consumer: the nodes of the range's VMIs are
// looked at, for VMIs on nodes that went away while nobody held the range.
func (c *Controller) Acquired(_ context.Context, r *caches.Range) error {
	for _, key := range r.VMIs.Keys() {
		if vmi, _, _ := r.VMIs.Get(key); vmi != nil && vmi.Status.NodeName != "" {
			c.queue.Add(vmi.Status.NodeName)
		}
	}
	return nil
}

// Releasing implements caches.Consumer; the fence stops every write.
func (c *Controller) Releasing(context.Context, int, shard.Reason) {}

// held is a VMI of a held range on the node.
type held struct {
	rng int
	vmi *virtv1.VirtualMachineInstance
	r   *caches.Range
}

func (c *Controller) vmisOn(node string) []held {
	var out []held
	for i := range c.cfg.Ranges.Count() {
		r := c.cfg.Caches.Get(i)
		if r == nil {
			continue
		}
		vmis, _ := r.VMIs.ByIndex(byNode, node)
		for _, vmi := range vmis {
			if !vmi.IsFinal() {
				out = append(out, held{i, vmi, r})
			}
		}
	}
	return out
}

func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	obj, exists, err := c.cfg.Cluster.Nodes.GetStore().GetByKey(name)
	if err != nil {
		return 0, err
	}
	vmis := c.vmisOn(name)
	if len(vmis) == 0 {
		return 0, nil
	}
	if !exists {
		return 0, c.failAll(ctx, name, vmis, "the node was deleted")
	}
	node := obj.(*corev1.Node)
	if since, notReady := notReadySince(node); notReady {
		if left := c.cfg.GracePeriod - time.Since(since); left > 0 {
			return left, nil
		}
		return 0, c.failAll(ctx, name, vmis, fmt.Sprintf("the node has been NotReady since %s", since.Format(time.RFC3339)))
	}
	if drained(node, c.drainTaintKey()) {
		if err := c.evacuate(ctx, node, vmis); err != nil {
			return 0, err
		}
		return evacuationRecheck, nil
	}
	return 0, nil
}

// notReadySince reports a node whose Ready condition is not True, and
// since when.
func notReadySince(node *corev1.Node) (time.Time, bool) {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.LastTransitionTime.Time, cond.Status != corev1.ConditionTrue
		}
	}
	return node.CreationTimestamp.Time, true // never reported ready
}

// drainTaintKey is the drain taint key in force now: the override, else
// the KubeVirt CR's.
func (c *Controller) drainTaintKey() string {
	if c.cfg.DrainTaintKey != "" {
		return c.cfg.DrainTaintKey
	}
	return ptr.Deref(c.cfg.ClusterConfig.Current().Migrations().NodeDrainTaintKey, DefaultDrainTaintKey)
}

// drained reports a taint of key with effect NoSchedule, the taint
// KubeVirt's evacuation controller matches (Taint.MatchTaint compares key
// and effect): kubevirt.io/drain:NoExecute, say, drains nothing.
func drained(node *corev1.Node, key string) bool {
	want := &corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule}
	for _, taint := range node.Spec.Taints {
		if taint.MatchTaint(want) {
			return true
		}
	}
	return false
}

// failAll fails the VMIs and deletes their launcher pods on the node.
func (c *Controller) failAll(ctx context.Context, node string, vmis []held, why string) error {
	for _, h := range vmis {
		err := c.fail(ctx, h, why)
		if errors.Is(err, sharded.ErrNotHeld) {
			continue // another replica's VMI now: it fails it
		}
		if err != nil {
			return err
		}
		for _, pod := range h.r.PodsOf(h.vmi) {
			if pod.Spec.NodeName != node || pod.DeletionTimestamp != nil {
				continue
			}
			err := c.writer.Write(ctx, h.rng, func(ctx context.Context) error {
				return c.cfg.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
			})
			if err != nil && !apierrors.IsNotFound(err) && !errors.Is(err, sharded.ErrNotHeld) {
				return fmt.Errorf("delete launcher pod %s: %w", pod.Name, err)
			}
		}
	}
	return nil
}

// fail moves a VMI to Failed with the reason NodeUnresponsive, as
// KubeVirt's node controller does, with the cached resourceVersion as a
// precondition.
func (c *Controller) fail(ctx context.Context, h held, why string) error {
	vmi := h.vmi
	failed := vmi.DeepCopy()
	if !vmistatus.Fail(failed, metav1.Now()) {
		return nil
	}
	failed.Status.Reason = ReasonNodeUnresponsive
	body, err := patch.Merge(vmi, failed)
	if err != nil {
		return err
	}
	err = c.writer.Write(ctx, h.rng, func(ctx context.Context) error {
		_, err := c.cfg.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("fail VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	c.cfg.Recorder.Eventf(vmi, corev1.EventTypeWarning, ReasonNodeUnresponsive, "VMI failed: %s on node %s", why, vmi.Status.NodeName)
	return nil
}

// evacuate creates a migration for each live-migratable VMI on the node
// that has none under way.
func (c *Controller) evacuate(ctx context.Context, node *corev1.Node, vmis []held) error {
	for _, h := range vmis {
		vmi := h.vmi
		if !c.writer.Holds(h.rng) || vmi.Status.Phase != virtv1.Running || vmi.DeletionTimestamp != nil || !migratable(vmi) {
			continue
		}
		busy := false
		for _, m := range c.cfg.Cluster.MigrationsOf(vmi.Namespace + "/" + vmi.Name) {
			busy = busy || !m.IsFinal()
		}
		if busy {
			continue
		}
		m := &virtv1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: "kubevirt-evacuation-",
				Namespace:    vmi.Namespace,
				Annotations:  map[string]string{virtv1.EvacuationMigrationAnnotation: node.Name},
			},
			Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
		}
		var created *virtv1.VirtualMachineInstanceMigration
		err := c.writer.Write(ctx, h.rng, func(ctx context.Context) (err error) {
			created, err = c.cfg.KubeVirt.Migrations(vmi.Namespace).Create(ctx, m, metav1.CreateOptions{})
			return err
		})
		if errors.Is(err, sharded.ErrNotHeld) {
			continue
		}
		if err != nil {
			c.cfg.Recorder.Eventf(vmi, corev1.EventTypeWarning, "FailedCreate", "Error creating an evacuation migration: %v", err)
			return fmt.Errorf("create evacuation migration of %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
		c.cfg.Recorder.Eventf(vmi, corev1.EventTypeNormal, "SuccessfulCreate", "Created evacuation migration %s off node %s", created.Name, node.Name)
	}
	return nil
}

// migratable: KubeVirt evacuates VMIs whose eviction strategy asks for a
// live migration and whose node agent has not said it cannot.
func migratable(vmi *virtv1.VirtualMachineInstance) bool {
	if s := vmi.Spec.EvictionStrategy; s != nil && *s != virtv1.EvictionStrategyLiveMigrate && *s != virtv1.EvictionStrategyLiveMigrateIfPossible {
		return false
	}
	for _, cond := range vmi.Status.Conditions {
		if cond.Type == virtv1.VirtualMachineInstanceIsMigratable && cond.Status == corev1.ConditionFalse {
			return false
		}
	}
	return true
}

var _ caches.Consumer = (*Controller)(nil)
