package vmi

import (
	"context"
	"errors"
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// reads counts the allocator's reads of a range and answers with vmis.
type reads struct {
	n    int
	vmis []*virtv1.VirtualMachineInstance
	err  error
}

func (r *reads) read(context.Context, int) ([]*virtv1.VirtualMachineInstance, error) {
	r.n++
	return r.vmis, r.err
}

func vsockVMI(name, uid string) *virtv1.VirtualMachineInstance {
	v := newVMI(name)
	v.UID = types.UID(uid)
	v.Spec.Domain.Devices.AutoattachVSOCK = ptr.To(true)
	return v
}

// The ranges' blocks cut the CIDs a guest may have and the CRD takes (3
// to 2^31-1) without overlap or gap, whatever the range count.
func TestCIDBlocksCoverTheCIDsOnce(t *testing.T) {
	for _, count := range []int{1, 3, 64, 1000} {
		a := newCIDAllocator(count, nil)
		next := uint64(firstCID)
		for i := range count {
			first, size := a.block(i)
			if first != next || size == 0 {
				t.Fatalf("%d ranges: block %d starts at %d (size %d), want %d", count, i, first, size, next)
			}
			next = first + size
		}
		// The VMI CRD takes CIDs up to the int32 maximum.
		if next-1 > math.MaxInt32 || math.MaxInt32-(next-1) >= uint64(count) {
			t.Errorf("%d ranges: the blocks end at %d, want within %d of %d", count, next-1, count, math.MaxInt32)
		}
	}
}

// A VMI gets a CID of its range's block, the same one each time it is
// asked; a second VMI whose UID points at a taken CID gets the next one,
// and a CID the range's VMIs had before the tenure (KubeVirt's, from
// anywhere) is never given again. The range is read once a tenure.
func TestAllocateGivesEachVMIOneCIDOfItsBlock(t *testing.T) {
	ctx := context.Background()
	a := newCIDAllocator(64, nil)
	first, size := a.block(5)
	// start is the CID a VMI of uid gets in an empty range 5.
	start := func(uid string) uint32 {
		v := vsockVMI("probe", uid)
		probe := newCIDAllocator(64, (&reads{}).read)
		cid, err := probe.allocate(ctx, 5, "default/probe", v)
		if err != nil {
			t.Fatal(err)
		}
		return cid
	}
	// An earlier VMI of the range holds the CID vmi "a" would start at.
	before := vsockVMI("before", "uid-before")
	before.Status.VSOCKCID = ptr.To(start("uid-a"))
	r := &reads{vmis: []*virtv1.VirtualMachineInstance{before}}
	a.read = r.read

	v := vsockVMI("a", "uid-a")
	cid, err := a.allocate(ctx, 5, "default/a", v)
	if err != nil {
		t.Fatal(err)
	}
	if cid == *before.Status.VSOCKCID || uint64(cid) < first || uint64(cid) >= first+size {
		t.Errorf("CID %d: want one of range 5's block [%d, %d) other than the earlier VMI's %d", cid, first, first+size, *before.Status.VSOCKCID)
	}
	if again, _ := a.allocate(ctx, 5, "default/a", v); again != cid {
		t.Errorf("asked again: CID %d, want %d", again, cid)
	}
	other, err := a.allocate(ctx, 5, "default/b", vsockVMI("b", "uid-b"))
	if err != nil || other == cid || other == *before.Status.VSOCKCID {
		t.Errorf("second VMI: CID %d (%v), want a third one", other, err)
	}
	if r.n != 1 {
		t.Errorf("the range was read %d times in one tenure, want once", r.n)
	}

	// Freed when the VMI is gone; read again in the next tenure.
	a.release(5, "default/a")
	if again, _ := a.allocate(ctx, 5, "default/a2", vsockVMI("a2", "uid-a")); again != cid {
		t.Errorf("a VMI starting where a deleted one was: CID %d, want its freed %d", again, cid)
	}
	a.forget(5)
	if _, err := a.allocate(ctx, 5, "default/c", vsockVMI("c", "uid-c")); err != nil || r.n != 2 {
		t.Errorf("after a handoff: %v, %d reads, want the range read again", err, r.n)
	}
}

// Two ranges never give one CID, even to VMIs of one UID.
func TestRangesGiveDisjointCIDs(t *testing.T) {
	a := newCIDAllocator(64, (&reads{}).read)
	seen := map[uint32]int{}
	for rng := range 64 {
		cid, err := a.allocate(context.Background(), rng, "default/a", vsockVMI("a", "uid-same"))
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := seen[cid]; dup {
			t.Fatalf("ranges %d and %d both gave CID %d", prev, rng, cid)
		}
		if cid < firstCID || cid > math.MaxInt32 {
			t.Errorf("range %d gave CID %d, which the VMI CRD (int32) refuses or a host has", rng, cid)
		}
		seen[cid] = rng
	}
}

// A failed read gives no CID, and the next allocation reads again.
func TestAFailedReadGivesNoCID(t *testing.T) {
	r := &reads{err: errors.New("the server is away")}
	a := newCIDAllocator(64, r.read)
	if _, err := a.allocate(context.Background(), 1, "default/a", vsockVMI("a", "uid-a")); err == nil {
		t.Fatal("a CID without the range's read")
	}
	r.err = nil
	if _, err := a.allocate(context.Background(), 1, "default/a", vsockVMI("a", "uid-a")); err != nil || r.n != 2 {
		t.Errorf("after the server came back: %v, %d reads, want a CID after a second read", err, r.n)
	}
}

// A VMI that asks for VSOCK is handed to its node with a CID of its
// range's block, as KubeVirt's VMI controller gives it at Scheduled; one
// that does not gets none.
func TestTheHandoffGivesAVSOCKVMIItsCID(t *testing.T) {
	for _, asks := range []bool{true, false} {
		vmi := newVMI("a")
		vmi.Status.Phase = virtv1.Scheduling
		vmi.Spec.Domain.Devices.AutoattachVSOCK = ptr.To(asks)
		pod := runningLauncherPod(t, vmi)
		pod.Spec.NodeName = "node-1"
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		f := newFixture(t, vmi, pod)
		if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
			t.Fatal(err)
		}
		waitForPatch(t, f.KubeVirt.Actions, "virtualmachineinstances", `"phase":"Scheduled"`)
		got, err := f.KubeVirt.VirtualMachineInstances(vmi.Namespace).Get(context.Background(), vmi.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !asks {
			if got.Status.VSOCKCID != nil {
				t.Errorf("a VMI without VSOCK got CID %d", *got.Status.VSOCKCID)
			}
			continue
		}
		first, size := f.c.cids.block(f.item(vmi).Range)
		if cid := got.Status.VSOCKCID; cid == nil || uint64(*cid) < first || uint64(*cid) >= first+size {
			t.Errorf("VSOCKCID %v, want one of its range's block [%d, %d)", got.Status.VSOCKCID, first, first+size)
		}
	}
}
