package replicaset_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/shard"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// A replica set scaled while the replicas that may hold it go away, one
// killed (SIGKILL: its ranges wait for their leases to expire) and one
// stopped, reaches exactly its replicas: every member in the set's view
// (its fleet label) and on its own key's range, running, and no member ever
// created beyond what the set asked for.
func TestAReplicaSetScalesThroughAKilledReplicaWithoutACreateTooMany(t *testing.T) {
	ctx := context.Background()
	ns, _, kv := controllertest.Clients(t)
	ranges, err := shard.NewRanges(shard.DefaultRangeCount, shard.KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	procs := controllertest.StartProcesses(t, ns, 3)

	// Every member the API server ever admitted, by UID.
	labels := map[string]string{"app": "fleet"}
	selector := metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: labels})
	w, err := kv.VirtualMachineInstances(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	seen := map[types.UID]bool{}
	go func() {
		for ev := range w.ResultChan() {
			if v, ok := ev.Object.(*virtv1.VirtualMachineInstance); ok && ev.Type == watch.Added {
				mu.Lock()
				seen[v.UID] = true
				mu.Unlock()
			}
		}
	}()
	created := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}

	template := workload.AsWritten("member")
	set := &virtv1.VirtualMachineInstanceReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet"},
		Spec: virtv1.VirtualMachineInstanceReplicaSetSpec{Replicas: ptr.To[int32](4), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: template.Spec}},
	}
	set, err = kv.ReplicaSets(ns).Create(ctx, set, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	settled := func(n int32) {
		t.Helper()
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			current, err := kv.ReplicaSets(ns).Get(ctx, set.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			vmis, err := kv.VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return false, err
			}
			running := int32(0)
			for _, v := range vmis.Items {
				if v.Status.Phase == virtv1.Running && v.DeletionTimestamp == nil {
					running++
				}
			}
			last = fmt.Sprintf("status %d replicas, %d ready; %d VMIs, %d running", current.Status.Replicas, current.Status.ReadyReplicas, len(vmis.Items), running)
			return current.Status.ReadyReplicas == n && int32(len(vmis.Items)) == n && running == n, nil
		})
		if err != nil {
			t.Fatalf("replica set of %d: %s", n, last)
		}
	}
	settled(4)

	// Scale up, then kill one replica and stop another while the set
	// creates: whichever of them held the set, the one left takes over
	// from the server's state.
	scale := func(n int32) {
		t.Helper()
		body := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
		if _, err := kv.ReplicaSets(ns).Patch(ctx, set.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	scale(12)
	procs[1].Kill()
	procs[2].Stop(15 * time.Second)
	settled(12)
	if n := created(); n != 12 {
		t.Errorf("%d members created for a set of 12", n)
	}
	vmis, err := kv.VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(ranges.Of(set))
	slots := map[string]bool{}
	for slot := range 12 {
		slots[sharded.ChildName(set.Name, string(set.UID), strconv.Itoa(slot))] = true
	}
	for _, v := range vmis.Items {
		_, labelled := v.Labels[shard.LabelRange]
		if !metav1.IsControlledBy(&v, set) || v.Labels[shard.LabelFleetRange] != want || labelled || !slots[v.Name] {
			t.Errorf("member %s: controller %v, fleet range %q, range label %v; want the set, its range %s as the fleet's, "+
				"none of its own and the name of one of its slots", v.Name, metav1.GetControllerOf(&v), v.Labels[shard.LabelFleetRange], labelled, want)
		}
	}

	scale(3)
	settled(3)
	if n := created(); n != 12 {
		t.Errorf("%d members created in all, want the 12: scaling down creates none", n)
	}
}
