package caches

import (
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/shard"
)

// written overlays a range's caches with the objects the replica's own
// writes returned, until the informers catch up: the next write of an
// object then starts from its latest resourceVersion instead of
// conflicting, and a sync does not act on a state it has already changed.
type written struct {
	ranges shard.Ranges
	// vmis overlays the labelled and the unlabelled VMI informer's store.
	vmis [2]cache.MutationCache
	vms  cache.MutationCache
}

// overlayTTL bounds how long a written object shadows the cache: well past
// any informer lag, and short enough not to hide someone else's change.
const (
	overlayTTL  = time.Minute
	overlaySize = 100000
)

func newWritten(ranges shard.Ranges, r *Range) *written {
	opts := cache.MutationCacheOptions{TTL: overlayTTL, MaxCacheSize: overlaySize}
	w := &written{ranges: ranges}
	for k, store := range r.VMIs.Stores() {
		w.vmis[k] = cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), store, opts)
	}
	w.vms = cache.NewIntegerResourceVersionMutationCacheWithOptions(klog.Background(), r.VMs.GetStore(), opts)
	return w
}

// LatestVMI is the newest copy of the VMI with key namespace/name the
// replica knows (read only): what its own last write returned, while the
// informer has not caught up, else the cache's.
func (r *Range) LatestVMI(key string) (*virtv1.VirtualMachineInstance, bool, error) {
	for _, overlay := range r.written.vmis {
		obj, exists, err := overlay.GetByKey(key)
		if err != nil || exists {
			vmi, _ := obj.(*virtv1.VirtualMachineInstance)
			return vmi, exists, err
		}
	}
	return nil, false, nil
}

// WroteVMI records a VMI one of the replica's writes returned.
func (r *Range) WroteVMI(vmi *virtv1.VirtualMachineInstance) {
	if _, labelled := r.written.ranges.Labelled(vmi); labelled {
		r.written.vmis[0].Mutation(vmi)
	} else {
		r.written.vmis[1].Mutation(vmi)
	}
}

// LatestVM is LatestVMI for VirtualMachines.
func (r *Range) LatestVM(key string) (*virtv1.VirtualMachine, bool, error) {
	obj, exists, err := r.written.vms.GetByKey(key)
	vm, _ := obj.(*virtv1.VirtualMachine)
	return vm, exists, err
}

// WroteVM records a VirtualMachine one of the replica's writes returned.
func (r *Range) WroteVM(vm *virtv1.VirtualMachine) { r.written.vms.Mutation(vm) }
