package replicaset

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/expectations"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/shard"
)

// BurstReplicas caps the VMIs one sync creates or deletes, as KubeVirt's
// pkg/controller BurstReplicas does: the rest follow once these are seen.
const BurstReplicas = 250

// ReplicaSets are VirtualMachineInstanceReplicaSets, on their own range.
var ReplicaSets = caches.Kind[*virtv1.VirtualMachineInstanceReplicaSet]{
	Resource:  "virtualmachineinstancereplicasets",
	Placement: shard.OwnKey,
	ListWatch: func(c caches.Clients, ns string) cache.ListerWatcher {
		sets := c.KubeVirt.ReplicaSets(ns)
		return caches.ListWatchOf(sets.List, sets.Watch)
	},
	Trim: shard.TrimForCache,
}

// byReplicaSet indexes VMIs by the UID of the replica set that controls
// them.
const byReplicaSet = "replicaSetUID"

func replicaSetIndex(obj any) ([]string, error) {
	ref := metav1.GetControllerOf(obj.(*virtv1.VirtualMachineInstance))
	if ref == nil || ref.Kind != kind {
		return nil, nil
	}
	return []string{string(ref.UID)}, nil
}

var kind = virtv1.VirtualMachineInstanceReplicaSetGroupVersionKind.Kind

// Declare declares the controller; KubeVirt runs it with 3 threads
// (defaultControllerThreads).
func Declare() sharded.Declaration {
	return sharded.Declaration{Name: "replicaset", Workers: 3, EventSource: "virtualmachinereplicaset-controller", New: func(env *sharded.Env, rt *sharded.Runtime) (*sharded.Controller, error) {
		return newController(env, rt).declare(), nil
	}}
}

// Controller is the replica set controller of one replica.
type Controller struct {
	env          *sharded.Env
	rt           *sharded.Runtime
	expectations *expectations.Expectations
	// adopting holds the UIDs of orphans being adopted. An adoption is
	// expected as a creation is: the adopted VMI arrives in the range's
	// cache as an addition (or, from the set's own range, an update), and
	// until it does the set does not count its members again, or it would
	// not see the VMI it just adopted and create one too many.
	adopting sync.Map
}

func newController(env *sharded.Env, rt *sharded.Runtime) *Controller {
	return &Controller{env: env, rt: rt, expectations: expectations.New(env.Ranges.Count(), env.Clock)}
}

// declare: a set queues itself, its members queue it and feed the
// expectations (a member marked for deletion counts as deleted, as in
// KubeVirt). A handoff forgets the range's expectations.
func (c *Controller) declare() *sharded.Controller {
	return &sharded.Controller{
		Watches: []sharded.Watch{
			sharded.On(ReplicaSets, sharded.Events[*virtv1.VirtualMachineInstanceReplicaSet]{Keys: sharded.ItsOwnKey[*virtv1.VirtualMachineInstanceReplicaSet]}, nil),
			sharded.On(kinds.FleetVMIs, sharded.Events[*virtv1.VirtualMachineInstance]{
				Keys: sharded.ControllerKey[*virtv1.VirtualMachineInstance](kind),
				Added: func(rng int, key string, vmi *virtv1.VirtualMachineInstance) {
					switch _, adopted := c.adopting.LoadAndDelete(vmi.UID); {
					case adopted:
						c.expectations.CreationObserved(rng, key)
					case vmi.DeletionTimestamp != nil:
						c.expectations.DeletionObserved(rng, key, vmi.UID)
					default:
						c.expectations.CreationObserved(rng, key)
					}
				},
				Updated: func(rng int, key string, old, cur *virtv1.VirtualMachineInstance) {
					if _, adopted := c.adopting.LoadAndDelete(cur.UID); adopted {
						c.expectations.CreationObserved(rng, key)
					}
					if old.DeletionTimestamp == nil && cur.DeletionTimestamp != nil {
						c.expectations.DeletionObserved(rng, key, cur.UID)
					}
				},
				Deleted: func(rng int, key string, vmi *virtv1.VirtualMachineInstance) {
					c.expectations.DeletionObserved(rng, key, vmi.UID)
				},
			}, cache.Indexers{byReplicaSet: replicaSetIndex}),
		},
		Sync:   c.sync,
		Forget: c.expectations.DropRange,
	}
}
