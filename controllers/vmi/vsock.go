package vmi

import (
	"context"
	"errors"
	"math"
	"sync"

	"github.com/cespare/xxhash/v2"
	virtv1 "kubevirt.io/api/core/v1"
)

// firstCID is the lowest context ID a guest may have: 0-2 are the
// hypervisor's, the local loopback's and the host's.
const firstCID = 3

// errCIDsExhausted is KubeVirt's "CIDs exhausted": every CID of the
// range's block is taken.
var errCIDsExhausted = errors.New("CIDs exhausted")

// cidAllocator gives VMIs with autoattachVSOCK their status.VSOCKCID at
// the handoff to the node, as KubeVirt's VMI controller does
// (watch/vsock), unique across the cluster without asking any other
// replica: the CIDs are cut into one block per range, and a VMI's CID is
// taken from its range's block, so that two ranges never give the same
// one and the one replica acting on a range keeps its block in order.
//
// A range's record of taken CIDs starts, in each tenure, from a read of
// the range's VMIs at the server's current version (caches.Kind.Read), not
// from the caches: right after a handoff they may lack the CIDs the
// previous holder wrote last. From then on the holder is the range's only
// writer and records its own. A VMI keeps its CID until it is deleted.
type cidAllocator struct {
	count int
	// read lists a range's VMIs at the server's current version.
	read   func(ctx context.Context, rng int) ([]*virtv1.VirtualMachineInstance, error)
	mu     sync.Mutex
	ranges map[int]*rangeCIDs
}

// rangeCIDs are the CIDs taken in one range, both ways, once read.
type rangeCIDs struct {
	mu    sync.Mutex
	read  bool
	byKey map[string]uint32
	taken map[uint32]string
}

func newCIDAllocator(count int, read func(context.Context, int) ([]*virtv1.VirtualMachineInstance, error)) *cidAllocator {
	return &cidAllocator{count: count, read: read, ranges: map[int]*rangeCIDs{}}
}

// lastCID is the highest CID given. CIDs are 32 bits, but the VMI CRD
// says status.VSOCKCID is an int32, and the API server refuses the higher
// half (KubeVirt draws from all 32 bits, and half of its draws are
// refused: a VMI so drawn stays in Scheduling).
const lastCID = math.MaxInt32

// block is range rng's CIDs: [first, first+size).
func (a *cidAllocator) block(rng int) (first, size uint64) {
	size = (lastCID - firstCID + 1) / uint64(a.count)
	return firstCID + uint64(rng)*size, size
}

// allocate returns the CID of vmi, the VMI key of range rng: the one it
// has or was given, else the first free one of the range's block from a
// point its UID picks. The first allocation of a tenure reads the range's
// VMIs; the range's others wait for it, other ranges' do not.
func (a *cidAllocator) allocate(ctx context.Context, rng int, key string, vmi *virtv1.VirtualMachineInstance) (uint32, error) {
	r := a.rangeOf(rng)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.read {
		vmis, err := a.read(ctx, rng)
		if err != nil {
			return 0, err
		}
		for _, v := range vmis {
			if v.Status.VSOCKCID != nil {
				r.record(v.Namespace+"/"+v.Name, *v.Status.VSOCKCID)
			}
		}
		r.read = true
	}
	if cid, ok := r.byKey[key]; ok {
		return cid, nil
	}
	if cid := vmi.Status.VSOCKCID; cid != nil {
		r.record(key, *cid)
		return *cid, nil
	}
	first, size := a.block(rng)
	start := xxhash.Sum64String(string(vmi.UID)) % size
	for i := range size {
		cid := uint32(first + (start+i)%size)
		if _, taken := r.taken[cid]; !taken {
			r.record(key, cid)
			return cid, nil
		}
	}
	return 0, errCIDsExhausted
}

// rangeOf is range rng's record in this tenure, made empty if there is
// none.
func (a *cidAllocator) rangeOf(rng int) *rangeCIDs {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.ranges[rng]
	if !ok {
		r = &rangeCIDs{byKey: map[string]uint32{}, taken: map[uint32]string{}}
		a.ranges[rng] = r
	}
	return r
}

func (r *rangeCIDs) record(key string, cid uint32) {
	r.byKey[key] = cid
	r.taken[cid] = key
}

// release frees the CID of the VMI key, which is gone.
func (a *cidAllocator) release(rng int, key string) {
	a.mu.Lock()
	r, ok := a.ranges[rng]
	a.mu.Unlock()
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cid, ok := r.byKey[key]; ok {
		delete(r.byKey, key)
		delete(r.taken, cid)
	}
}

// forget drops range rng's record as the range is handed off: its next
// tenure reads the range again.
func (a *cidAllocator) forget(rng int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.ranges, rng)
}

// autoattachVSOCK: the VMI asks for a VSOCK device (KubeVirt's
// util.IsAutoAttachVSOCK).
func autoattachVSOCK(vmi *virtv1.VirtualMachineInstance) bool {
	v := vmi.Spec.Domain.Devices.AutoattachVSOCK
	return v != nil && *v
}
