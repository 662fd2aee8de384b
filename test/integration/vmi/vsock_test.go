package vmi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/test/controllertest"
)

// VMIs that ask for VSOCK each get a CID no other VMI has, as KubeVirt's
// one virt-controller gives them, while three replicas give them out and
// one is killed in the middle of a burst: the ranges it held are taken
// over, and their new holders give CIDs again after reading the ranges
// from the server.
func TestVSOCKCIDsAreUniqueAcrossReplicasAndAKill(t *testing.T) {
	const perBurst = 40
	ns, _, kv := controllertest.Clients(t)
	procs := controllertest.StartProcesses(t, ns, 3)
	controllertest.WaitShared(t, procs)
	ctx := context.Background()
	burst := func(from int) {
		for i := from; i < from+perBurst; i++ {
			vmi := workload.VMI(fmt.Sprintf("vsock-%d", i))
			vmi.Spec.Domain.Devices.AutoattachVSOCK = ptr.To(true)
			if _, err := kv.VirtualMachineInstances(ns).Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// given lists the VMIs' CIDs, failing on one given twice.
	given := func(ctx context.Context) (int, error) {
		list, err := kv.VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		holders := map[uint32]string{}
		for _, vmi := range list.Items {
			cid := vmi.Status.VSOCKCID
			if cid == nil {
				continue
			}
			if other, dup := holders[*cid]; dup {
				t.Fatalf("CID %d given to both %s and %s", *cid, other, vmi.Name)
			}
			if *cid < 3 {
				t.Errorf("%s has CID %d, one of the host's", vmi.Name, *cid)
			}
			holders[*cid] = vmi.Name
		}
		return len(holders), nil
	}

	burst(0)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := given(ctx)
		return err == nil && n >= perBurst/4, nil
	}); err != nil {
		t.Fatal("no quarter of the first burst got CIDs within 2 minutes")
	}
	procs[1].Kill()
	n, _ := given(ctx)
	t.Logf("killed replica-1 with %d CIDs given", n)
	burst(perBurst)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := given(ctx)
		return err == nil && n == 2*perBurst, nil
	}); err != nil {
		n, _ := given(ctx)
		t.Fatalf("%d of %d VMIs have CIDs 3 minutes after the kill", n, 2*perBurst)
	}
}
