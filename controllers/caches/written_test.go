package caches

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/shard"
)

// A range's overlay serves what the replica wrote while the informer still
// holds an older copy, and the informer's copy once it is as new.
func TestLatestIsWhatTheReplicaWroteUntilTheCacheCatchesUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ranges, err := shard.NewRanges(1, shard.KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-a", ResourceVersion: "5"}}
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-vm", ResourceVersion: "3"}}
	c := NewRanges(Config{Kube: kubefake.NewClientset(), KubeVirt: kvfake.NewClientset(vmi, vm), Ranges: ranges})
	if err := c.Acquired(ctx, 0); err != nil {
		t.Fatal(err)
	}
	r := c.Get(0)
	if got, ok, _ := r.LatestVMI("ns/a"); !ok || got.ResourceVersion != "5" {
		t.Fatalf("before any write: %v, %v; want the cache's copy", got, ok)
	}
	patched := vmi.DeepCopy()
	patched.ResourceVersion, patched.Status.Phase = "9", virtv1.Scheduled
	r.WroteVMI(patched)
	if got, _, _ := r.LatestVMI("ns/a"); got.ResourceVersion != "9" || got.Status.Phase != virtv1.Scheduled {
		t.Errorf("after a write: resourceVersion %s phase %s, want the written copy", got.ResourceVersion, got.Status.Phase)
	}
	stale := patched.DeepCopy()
	stale.ResourceVersion = "7"
	r.WroteVMI(stale) // an older write's answer arriving late
	if got, _, _ := r.LatestVMI("ns/a"); got.ResourceVersion != "9" {
		t.Errorf("after a late, older answer: resourceVersion %s, want the newest, 9", got.ResourceVersion)
	}

	updated := vm.DeepCopy()
	updated.ResourceVersion = "4"
	r.WroteVM(updated)
	if got, ok, _ := r.LatestVM("ns/a"); !ok || got.ResourceVersion != "4" {
		t.Errorf("VM after a write: %v, %v; want resourceVersion 4", got, ok)
	}
	if _, ok, _ := r.LatestVMI("ns/missing"); ok {
		t.Error("a VMI nobody has is found")
	}
}
