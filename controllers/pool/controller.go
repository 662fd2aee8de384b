package pool

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
	poolv1 "kubevirt.io/api/pool/v1beta1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/expectations"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/shard"
)

// Finalizer is the one KubeVirt's pool controller puts on a pool and on
// each of its VMs.
const Finalizer = "pool.kubevirt.io/finalizer"

// BurstReplicas caps the VMs one sync creates or deletes, as KubeVirt's
// pkg/controller BurstReplicas does.
const BurstReplicas = 250

// Pools are VirtualMachinePools, on their own range.
var Pools = caches.Kind[*poolv1.VirtualMachinePool]{
	Resource:  "virtualmachinepools",
	Placement: shard.OwnKey,
	ListWatch: func(c caches.Clients, ns string) cache.ListerWatcher {
		pools := c.KubeVirt.Pools(ns)
		return caches.ListWatchOf(pools.List, pools.Watch)
	},
	Trim: shard.TrimForCache,
}

var kind = "VirtualMachinePool"

// byPool indexes VMs by the UID of the pool that controls them.
const byPool = "poolUID"

func poolIndex(obj any) ([]string, error) {
	ref := metav1.GetControllerOf(obj.(*virtv1.VirtualMachine))
	if ref == nil || ref.Kind != kind {
		return nil, nil
	}
	return []string{string(ref.UID)}, nil
}

// Declare declares the controller; KubeVirt runs it with 3 threads
// (--pool-controller-threads).
func Declare() sharded.Declaration {
	return sharded.Declaration{Name: "pool", Workers: 3, EventSource: "virtualmachinepool-controller", New: func(env *sharded.Env, rt *sharded.Runtime) (*sharded.Controller, error) {
		return newController(env, rt).declare(), nil
	}}
}

// Controller is the pool controller of one replica.
type Controller struct {
	env          *sharded.Env
	rt           *sharded.Runtime
	expectations *expectations.Expectations
}

func newController(env *sharded.Env, rt *sharded.Runtime) *Controller {
	return &Controller{env: env, rt: rt, expectations: expectations.New(env.Ranges.Count(), env.Clock)}
}

// declare: a pool queues itself; its VMs queue it and feed the
// expectations (a VM marked for deletion counts as deleted, as in
// KubeVirt); its revisions queue it as they come and change, and so do the
// VMIs of its VMs that started from another revision than their VM's
// template. A handoff forgets the range's expectations.
func (c *Controller) declare() *sharded.Controller {
	return &sharded.Controller{
		Watches: []sharded.Watch{
			sharded.On(Pools, sharded.Events[*poolv1.VirtualMachinePool]{Keys: sharded.ItsOwnKey[*poolv1.VirtualMachinePool]}, nil),
			sharded.On(kinds.FleetVMs, sharded.Events[*virtv1.VirtualMachine]{
				Keys: sharded.ControllerKey[*virtv1.VirtualMachine](kind),
				Added: func(rng int, key string, vm *virtv1.VirtualMachine) {
					if vm.DeletionTimestamp != nil {
						c.expectations.DeletionObserved(rng, key, vm.UID)
						return
					}
					c.expectations.CreationObserved(rng, key)
				},
				Updated: func(rng int, key string, old, cur *virtv1.VirtualMachine) {
					if old.DeletionTimestamp == nil && cur.DeletionTimestamp != nil {
						c.expectations.DeletionObserved(rng, key, cur.UID)
					}
				},
				Deleted: func(rng int, key string, vm *virtv1.VirtualMachine) {
					c.expectations.DeletionObserved(rng, key, vm.UID)
				},
			}, cache.Indexers{byPool: poolIndex}),
			sharded.On(kinds.Revisions, sharded.Events[*appsv1.ControllerRevision]{Keys: sharded.ControllerKey[*appsv1.ControllerRevision](kind), IgnoreDeletes: true}, nil),
			sharded.On(kinds.FleetVMIs, sharded.Events[*virtv1.VirtualMachineInstance]{Route: c.outdatedVMI, IgnoreDeletes: true}, nil),
		},
		Sync:   c.sync,
		Forget: c.expectations.DropRange,
	}
}

// outdatedVMI routes a VMI whose VM is a pool's to the pool, when the VMI
// is not at the revision of its VM's template.
func (c *Controller) outdatedVMI(vmi *virtv1.VirtualMachineInstance) []sharded.Item {
	ref := metav1.GetControllerOf(vmi)
	if ref == nil || ref.Kind != virtv1.VirtualMachineGroupVersionKind.Kind {
		return nil
	}
	// A pool's VM carries its pool's range as its fleet's, and its VMI the
	// VM's.
	rng, err := strconv.Atoi(vmi.Labels[shard.LabelFleetRange])
	if err != nil {
		return nil
	}
	key := vmi.Namespace + "/" + ref.Name
	r := c.env.Caches.Get(rng)
	if r == nil {
		return nil
	}
	v, ok, _ := kinds.FleetVMs.In(r).Get(key)
	if !ok || v.UID != ref.UID || v.Spec.Template == nil {
		return nil
	}
	owner := metav1.GetControllerOf(v)
	if owner == nil || owner.Kind != kind {
		return nil
	}
	want, wantOK := v.Spec.Template.ObjectMeta.Labels[virtv1.VirtualMachinePoolRevisionName]
	has, hasOK := vmi.Labels[virtv1.VirtualMachinePoolRevisionName]
	if wantOK && hasOK && want == has {
		return nil
	}
	return []sharded.Item{{Range: rng, Key: v.Namespace + "/" + owner.Name}}
}
