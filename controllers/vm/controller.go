package vm

import (
	"errors"
	"flag"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/expectations"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/template"
)

// DefaultMaxStartBackoff is KubeVirt's cap on the crash-loop backoff
// (defaultMaxCrashLoopBackoffDelaySeconds).
const DefaultMaxStartBackoff = 300 * time.Second

// Options of the VM controller.
type Options struct {
	// MaxStartBackoff caps the wait before restarting a VMI that failed
	// before it ever ran; the first waits are a 30th of it, growing with
	// the square of the failures, as KubeVirt's.
	MaxStartBackoff time.Duration
}

// DefaultOptions are KubeVirt's.
func DefaultOptions() Options { return Options{MaxStartBackoff: DefaultMaxStartBackoff} }

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.MaxStartBackoff, "max-start-backoff", o.MaxStartBackoff, "cap of the wait before a VM whose VMI failed before running is started again")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.MaxStartBackoff <= 0 {
		return errors.New("--max-start-backoff must be positive")
	}
	return nil
}

// Declare declares the VM controller to the replica.
func Declare(opts Options) sharded.Declaration {
	return sharded.Declaration{Name: "vm", Workers: 8, EventSource: "virtualmachine-controller", New: func(env *sharded.Env, rt *sharded.Runtime) (*sharded.Controller, error) {
		return newController(env, rt, opts).declare(), nil
	}}
}

// Controller is the VM controller of one replica.
type Controller struct {
	env          *sharded.Env
	opts         Options
	rt           *sharded.Runtime
	expectations *expectations.Expectations
	// dataVolumeExpectations count the DataVolumes a VM's sync created
	// that the cache has not seen yet.
	dataVolumeExpectations *expectations.Expectations
}

// item is a queued VM: its range and namespace/name.
type item = sharded.Item

func newController(env *sharded.Env, rt *sharded.Runtime, opts Options) *Controller {
	if opts.MaxStartBackoff <= 0 {
		opts.MaxStartBackoff = DefaultMaxStartBackoff
	}
	return &Controller{env: env, opts: opts, rt: rt, expectations: expectations.New(env.Ranges.Count(), env.Clock),
		dataVolumeExpectations: expectations.New(env.Ranges.Count(), env.Clock)}
}

// declare is what the runtime runs: a range's VMs queue themselves, the
// VMIs they control queue them and feed the expectations. A handoff
// forgets the range's expectations; the next owner starts from the
// objects.
func (c *Controller) declare() *sharded.Controller {
	return &sharded.Controller{
		Watches: []sharded.Watch{
			sharded.On(kinds.VMs, sharded.Events[*virtv1.VirtualMachine]{Keys: sharded.ItsOwnKey[*virtv1.VirtualMachine]},
				cache.Indexers{byClaim: claimIndex}),
			sharded.On(kinds.VMIs, c.vmiEvents(), nil),
			// A DataVolume wakes the VMs that make or use it (KubeVirt's
			// queueVMsForDataVolume), where the cluster serves CDI; a new
			// claim the VMs that use it (KubeVirt's addPVC: additions only).
			sharded.OnInformer(func() cache.SharedIndexInformer { return c.env.Objects.DataVolumes }, c.dataVolumeEvents()),
			sharded.OnInformer(func() cache.SharedIndexInformer { return c.env.Objects.PVCInformer },
				sharded.Events[*corev1.PersistentVolumeClaim]{
					Route: func(pvc *corev1.PersistentVolumeClaim) []item {
						if pvc.DeletionTimestamp != nil {
							return nil
						}
						return c.usersOf(pvc.Namespace + "/" + pvc.Name)
					},
					Changed:       func(_, _ *corev1.PersistentVolumeClaim) bool { return false },
					IgnoreDeletes: true,
				}),
			// Cached to find a VM's older start revisions; their events
			// queue nothing.
			sharded.On(kinds.Revisions, sharded.Events[*appsv1.ControllerRevision]{Keys: noKeys[*appsv1.ControllerRevision]}, nil),
		},
		Sync: c.sync,
		Forget: func(rng int) {
			c.expectations.DropRange(rng)
			c.dataVolumeExpectations.DropRange(rng)
		},
	}
}

// byClaim indexes VMs by the claims their template volumes use and the
// DataVolumes their templates make, namespace/name.
const byClaim = "byClaim"

func claimIndex(obj any) ([]string, error) {
	vm, ok := obj.(*virtv1.VirtualMachine)
	if !ok {
		return nil, nil
	}
	var keys []string
	for _, t := range vm.Spec.DataVolumeTemplates {
		keys = append(keys, vm.Namespace+"/"+t.Name)
	}
	if vm.Spec.Template != nil {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			if name := template.VolumeClaim(v); name != "" && !slices.Contains(keys, vm.Namespace+"/"+name) {
				keys = append(keys, vm.Namespace+"/"+name)
			}
		}
	}
	return keys, nil
}

// usersOf are the VMs of the held ranges that make or use claim (or
// DataVolume) key.
func (c *Controller) usersOf(key string) []item {
	var items []item
	for _, found := range kinds.VMs.HeldByIndex(c.env.Caches, byClaim, key) {
		items = append(items, item{Range: found.Range.Index, Key: found.Object.Namespace + "/" + found.Object.Name})
	}
	return items
}

// dataVolumeEvents route a DataVolume to the VMs that make or use it; the
// one its VM made is that VM's creation observed.
func (c *Controller) dataVolumeEvents() sharded.Events[*unstructured.Unstructured] {
	return sharded.Events[*unstructured.Unstructured]{
		Route: func(dv *unstructured.Unstructured) []item { return c.usersOf(dv.GetNamespace() + "/" + dv.GetName()) },
		Added: func(rng int, key string, dv *unstructured.Unstructured) {
			if ref := metav1.GetControllerOf(dv); ref != nil && ref.Kind == virtv1.VirtualMachineGroupVersionKind.Kind &&
				dv.GetNamespace()+"/"+ref.Name == key {
				c.dataVolumeExpectations.CreationObserved(rng, key)
			}
		},
	}
}

// wrote records a VM our write returned, for the next syncs of its range.
func (c *Controller) wrote(rng int, vm *virtv1.VirtualMachine) {
	if r := c.env.Caches.Get(rng); r != nil {
		kinds.VMs.In(r).Wrote(vm)
	}
}

// vmiEvents map VMIs that a VM controls to their VM and feed the
// expectations.
func (c *Controller) vmiEvents() sharded.Events[*virtv1.VirtualMachineInstance] {
	return sharded.Events[*virtv1.VirtualMachineInstance]{
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
	}
}

// noKeys queues nothing: a kind watched only to be cached.
func noKeys[T any](T) []string { return nil }
