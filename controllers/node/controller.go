// Package node is virtshard's node controller: what KubeVirt's
// virt-controller does when a node's virt-handler goes silent or the node
// is drained. A node whose virt-handler heartbeat (the kubevirt.io/heartbeat
// annotation) is older than the heartbeat timeout, or that is deleted, is
// unresponsive: it is labelled kubevirt.io/schedulable=false, and the VMIs
// this replica holds on it that are Scheduled or Running with no live
// launcher pod there are failed (reason NodeUnresponsive) (heartbeat.go); a
// node tainted for drain (the KubeVirt CR's migrations.nodeDrainTaintKey,
// kubevirt.io/drain by default) gets migrations for the VMIs this replica
// holds on it, and so does a VMI whose launcher pod a drain evicted
// (evacuation.go); the migration controller runs them within the
// cluster-wide limits, ahead of users' migrations.
//
// Nodes are cluster-scoped and few: every replica watches all of them
// (package kinds, cluster-wide) and acts only on the VMIs of the ranges it
// holds; a node itself is written only by the holder of the range its name
// hashes to.
package node

import (
	"context"
	"errors"
	"flag"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/controllers/sharded"
)

// Defaults.
const (
	// DefaultHeartbeatTimeout is how old a node's virt-handler heartbeat
	// may be before the node is unresponsive: KubeVirt's node controller's
	// heartBeatTimeout.
	DefaultHeartbeatTimeout = 5 * time.Minute
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
	// HeartbeatTimeout is how old a node's virt-handler heartbeat may be.
	HeartbeatTimeout time.Duration
	// DrainTaintKey, when set, overrides the KubeVirt CR's
	// migrations.nodeDrainTaintKey, which is read at every sync otherwise.
	DrainTaintKey string
	// MigrationLimits are the migration controller's overrides of the
	// KubeVirt CR's limits, which bound the evacuations created at once.
	MigrationLimits migration.Limits
}

// DefaultOptions are KubeVirt's.
func DefaultOptions() Options { return Options{HeartbeatTimeout: DefaultHeartbeatTimeout} }

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.HeartbeatTimeout, "heartbeat-timeout", o.HeartbeatTimeout, "a node whose virt-handler heartbeat is older than this is unresponsive: it is labelled kubevirt.io/schedulable=false and its VMIs without a live launcher pod fail")
	fs.StringVar(&o.DrainTaintKey, "drain-taint-key", o.DrainTaintKey, "key of the NoSchedule taint that marks a node whose VMIs are migrated away; empty: the KubeVirt CR's nodeDrainTaintKey, followed live (kubevirt.io/drain without a CR)")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.HeartbeatTimeout <= 0 {
		return errors.New("--heartbeat-timeout must be positive")
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
	if opts.HeartbeatTimeout <= 0 {
		opts.HeartbeatTimeout = DefaultHeartbeatTimeout
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
			// A VMI's node is looked at when its range is taken over and
			// when an eviction marks the VMI to leave; not on every VMI
			// update (KubeVirt's evacuation controller queues the node on
			// each), which would look at a node per VMI write.
			sharded.On(kinds.VMIs, sharded.Events[*virtv1.VirtualMachineInstance]{Route: nodeOf, Changed: markedToLeaveNow, IgnoreDeletes: true},
				cache.Indexers{byNode: func(obj any) ([]string, error) {
					return []string{obj.(*virtv1.VirtualMachineInstance).Status.NodeName}, nil
				}}),
			sharded.Reading(kinds.LauncherPods.Watch(nil)),
			// An evacuation that ends makes room for the node's next one.
			sharded.Across(kinds.Migrations, sharded.Events[*virtv1.VirtualMachineInstanceMigration]{
				Route: evacuatedNode, Changed: endedNow}, nil),
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

// markedToLeaveNow: an eviction has just marked the VMI to leave its node.
func markedToLeaveNow(old, cur *virtv1.VirtualMachineInstance) bool {
	return cur.Status.EvacuationNodeName != "" && cur.Status.EvacuationNodeName != old.Status.EvacuationNodeName
}

// evacuatedNode is the node an evacuation migration moves its VMI off.
func evacuatedNode(m *virtv1.VirtualMachineInstanceMigration) []sharded.Item {
	if node := m.Annotations[virtv1.EvacuationMigrationAnnotation]; node != "" {
		return []sharded.Item{{Range: sharded.Cluster, Key: node}}
	}
	return nil
}

// endedNow: the migration has just become final.
func endedNow(old, cur *virtv1.VirtualMachineInstanceMigration) bool {
	return cur.IsFinal() && !old.IsFinal()
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
	if !exists {
		return 0, c.unresponsive(ctx, name, nil)
	}
	stale, recheck, err := heartbeatStale(node, c.opts.HeartbeatTimeout, c.env.Clock.Now())
	if err != nil {
		// As KubeVirt: a heartbeat that does not parse is virt-handler's to
		// mend; its next one brings the node back here.
		klog.FromContext(ctx).Error(err, "Cannot tell whether the node is responsive", "node", name)
		return 0, nil
	}
	if stale {
		return unresponsiveRecheck, c.unresponsive(ctx, name, node)
	}
	if vmis := c.vmisOn(name); len(vmis) > 0 && evacuating(node, vmis, c.drainTaintKey()) {
		after, err := c.evacuate(ctx, node, vmis)
		if after == 0 || (recheck > 0 && recheck < after) {
			after = recheck
		}
		return after, err
	}
	return recheck, nil
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
