// Package node is virtshard's node controller: what KubeVirt's
// virt-controller does when a node goes away or is drained. A node
// NotReady past a grace period, or deleted, fails the VMIs this replica
// holds on it (reason NodeUnresponsive) and deletes their launcher pods; a
// node tainted for drain (the KubeVirt CR's migrations.nodeDrainTaintKey,
// kubevirt.io/drain by default) gets migrations for the VMIs this replica
// holds on it, and so does a VMI whose launcher pod a drain evicted
// (evacuation.go); the migration controller runs them within the
// cluster-wide limits, ahead of users' migrations.
//
// Nodes are cluster-scoped and few: every replica watches all of them
// (package kinds, cluster-wide) and acts only on the VMIs of the ranges it holds.
package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/controllers/patch"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/vmistatus"
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

// Options of the node controller.
type Options struct {
	// GracePeriod a node may be NotReady.
	GracePeriod time.Duration
	// DrainTaintKey, when set, overrides the KubeVirt CR's
	// migrations.nodeDrainTaintKey, which is read at every sync otherwise.
	DrainTaintKey string
	// MigrationLimits are the migration controller's overrides of the
	// KubeVirt CR's limits, which bound the evacuations created at once.
	MigrationLimits migration.Limits
}

// DefaultOptions are KubeVirt's.
func DefaultOptions() Options { return Options{GracePeriod: DefaultGracePeriod} }

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.GracePeriod, "node-grace-period", o.GracePeriod, "fail the VMIs of a node NotReady this long")
	fs.StringVar(&o.DrainTaintKey, "drain-taint-key", o.DrainTaintKey, "key of the NoSchedule taint that marks a node whose VMIs are migrated away; empty: the KubeVirt CR's nodeDrainTaintKey, followed live (kubevirt.io/drain without a CR)")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.GracePeriod <= 0 {
		return errors.New("--node-grace-period must be positive")
	}
	return nil
}

// evacuationEventSource is the source of KubeVirt's evacuation events
// (application.go, initEvacuationController).
const evacuationEventSource = "evacuation-controller"

// Declare declares the node controller to the replica.
func Declare(opts Options) sharded.Declaration {
	return sharded.Declaration{Name: "node", Workers: 8, EventSource: "node-controller", New: func(env *sharded.Env, rt *sharded.Runtime) (*sharded.Controller, error) {
		c, err := newController(env, rt, opts)
		if err != nil {
			return nil, err
		}
		return c.declare(), nil
	}}
}

// Controller is the node controller of one replica.
type Controller struct {
	env  *sharded.Env
	opts Options
	rt   *sharded.Runtime
	// evacuations records the evacuation events, which KubeVirt's own
	// evacuation controller records as evacuation-controller.
	evacuations record.EventRecorder
}

func newController(env *sharded.Env, rt *sharded.Runtime, opts Options) (*Controller, error) {
	if opts.GracePeriod <= 0 {
		opts.GracePeriod = DefaultGracePeriod
	}
	if env.ClusterConfig == nil {
		return nil, errors.New("no cluster configuration")
	}
	evacuations := env.Recorder
	if env.RecorderFor != nil {
		evacuations = env.RecorderFor(evacuationEventSource)
	}
	return &Controller{env: env, opts: opts, rt: rt, evacuations: evacuations}, nil
}

// declare is what the runtime runs. Nodes are not sharded: every replica
// looks at every node (an item of sharded.Cluster), and acts on the VMIs
// of its own ranges there. A range taken over has its VMIs' nodes looked
// at again, for VMIs on nodes that went away while nobody held it. The
// fence stops every write of a range handed off; nothing is kept per range.
func (c *Controller) declare() *sharded.Controller {
	nodeOf := func(vmi *virtv1.VirtualMachineInstance) []sharded.Item {
		if vmi.Status.NodeName == "" {
			return nil
		}
		return []sharded.Item{{Range: sharded.Cluster, Key: vmi.Status.NodeName}}
	}
	return &sharded.Controller{
		Watches: []sharded.Watch{
			sharded.Across(kinds.Nodes, sharded.Events[*corev1.Node]{Route: func(n *corev1.Node) []sharded.Item {
				return []sharded.Item{{Range: sharded.Cluster, Key: n.Name}}
			}}, nil),
			sharded.On(kinds.VMIs, sharded.Events[*virtv1.VirtualMachineInstance]{Route: nodeOf, Initial: true},
				cache.Indexers{byNode: func(obj any) ([]string, error) {
					return []string{obj.(*virtv1.VirtualMachineInstance).Status.NodeName}, nil
				}}),
			sharded.Reading(kinds.LauncherPods.Watch(nil)),
			sharded.Reading(kinds.Migrations.Watch(nil)),
			// Another drain taint key may mark other nodes: look at all.
			sharded.OnConfig(func(*clusterconfig.Config) []sharded.Item {
				var items []sharded.Item
				for _, key := range kinds.Nodes.All(c.env.Caches).Keys() {
					items = append(items, sharded.Item{Range: sharded.Cluster, Key: key})
				}
				return items
			}),
		},
		Sync: c.sync,
	}
}

// held is a VMI of a held range, with the range's caches.
type held = caches.Found[*virtv1.VirtualMachineInstance]

// vmisOn are the VMIs of the held ranges on the node that are not final.
func (c *Controller) vmisOn(node string) []held {
	return slices.DeleteFunc(kinds.VMIs.HeldByIndex(c.env.Caches, byNode, node), func(h held) bool { return h.Object.IsFinal() })
}

func (c *Controller) sync(ctx context.Context, it sharded.Item) (time.Duration, error) {
	name := it.Key
	node, exists, err := kinds.Nodes.All(c.env.Caches).Get(name)
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
	if since, notReady := notReadySince(node); notReady {
		if left := c.opts.GracePeriod - time.Since(since); left > 0 {
			return left, nil
		}
		return 0, c.failAll(ctx, name, vmis, fmt.Sprintf("the node has been NotReady since %s", since.Format(time.RFC3339)))
	}
	if evacuating(node, vmis, c.drainTaintKey()) {
		return c.evacuate(ctx, node, vmis)
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
	if c.opts.DrainTaintKey != "" {
		return c.opts.DrainTaintKey
	}
	return ptr.Deref(c.env.ClusterConfig.Current().Migrations().NodeDrainTaintKey, DefaultDrainTaintKey)
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
		for _, pod := range kinds.PodsOf(h.Range, h.Object) {
			if pod.Spec.NodeName != node || pod.DeletionTimestamp != nil {
				continue
			}
			err := c.rt.Write(ctx, h.Range.Index, func(ctx context.Context) error {
				return c.env.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
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
	vmi := h.Object
	failed := vmi.DeepCopy()
	if !vmistatus.Fail(failed, metav1.Now()) {
		return nil
	}
	failed.Status.Reason = ReasonNodeUnresponsive
	body, err := patch.Merge(vmi, failed)
	if err != nil {
		return err
	}
	err = c.rt.Write(ctx, h.Range.Index, func(ctx context.Context) error {
		_, err := c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("fail VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	c.env.Recorder.Eventf(vmi, corev1.EventTypeWarning, ReasonNodeUnresponsive, "VMI failed: %s on node %s", why, vmi.Status.NodeName)
	return nil
}
