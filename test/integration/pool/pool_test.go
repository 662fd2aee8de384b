package pool_test

import (
	"context"
	"fmt"
	"os"
	"slices"
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
	poolv1 "kubevirt.io/api/pool/v1beta1"

	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/shard"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// A pool on three replicas keeps its VMs at <pool>-<index>: one deleted
// comes back under its name, in the pool's view, and no VM is ever
// created beyond those; through a replica killed, a new VMI template
// rewrites every VM and restarts each VMI started from the old one.
func TestAPoolKeepsItsNamesAndReplacesOutdatedVMs(t *testing.T) {
	ctx := context.Background()
	ns, _, kv := controllertest.Clients(t)
	ranges, err := shard.NewRanges(shard.DefaultRangeCount, shard.KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	procs := controllertest.StartProcesses(t, ns, 3)

	labels := map[string]string{"app": "web"}
	selector := metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: labels})
	w, err := kv.VirtualMachines(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	var creates []string
	go func() {
		for ev := range w.ResultChan() {
			if v, ok := ev.Object.(*virtv1.VirtualMachine); ok && ev.Type == watch.Added {
				mu.Lock()
				creates = append(creates, v.Name)
				mu.Unlock()
			}
		}
	}()

	template := workload.AsWritten("web")
	pool := &poolv1.VirtualMachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: poolv1.VirtualMachinePoolSpec{Replicas: ptr.To[int32](3), Selector: &metav1.LabelSelector{MatchLabels: labels},
			VirtualMachineTemplate: &poolv1.VirtualMachineTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyAlways),
					Template: &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"version": "1"}}, Spec: template.Spec}}}},
	}
	pool, err = kv.Pools(ns).Create(ctx, pool, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"web-0", "web-1", "web-2"}

	// settled waits until the pool's VMs are names, in the pool's view and
	// on their own ranges, ready, each with its running VMI at the VM's revision and of the
	// given version; it returns the VMIs' UIDs.
	settled := func(version string) map[string]types.UID {
		t.Helper()
		var last string
		uids := map[string]types.UID{}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			current, err := kv.Pools(ns).Get(ctx, pool.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			vms, err := kv.VirtualMachines(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return false, err
			}
			var live []string
			for _, v := range vms.Items {
				if v.DeletionTimestamp != nil {
					continue
				}
				live = append(live, v.Name)
				if v.Labels[shard.LabelFleetRange] != strconv.Itoa(ranges.Of(pool)) || v.Labels[shard.LabelRange] != "" || !metav1.IsControlledBy(&v, pool) {
					last = fmt.Sprintf("VM %s: fleet range %q, range label %q, controller %v", v.Name, v.Labels[shard.LabelFleetRange],
						v.Labels[shard.LabelRange], metav1.GetControllerOf(&v))
					return false, nil
				}
				vmi, err := kv.VirtualMachineInstances(ns).Get(ctx, v.Name, metav1.GetOptions{})
				if err != nil {
					last = fmt.Sprintf("VMI %s: %v", v.Name, err)
					return false, nil
				}
				revision := v.Labels[virtv1.VirtualMachinePoolRevisionName]
				if vmi.Labels[shard.LabelFleetRange] != v.Labels[shard.LabelFleetRange] || vmi.Labels[shard.LabelRange] != strconv.Itoa(ranges.Of(&v)) {
					last = fmt.Sprintf("VMI %s: fleet range %q, range %q; want its pool's and its VM's %d", v.Name,
						vmi.Labels[shard.LabelFleetRange], vmi.Labels[shard.LabelRange], ranges.Of(&v))
					return false, nil
				}
				if vmi.Status.Phase != virtv1.Running || vmi.DeletionTimestamp != nil || vmi.Labels["version"] != version || vmi.Labels[virtv1.VirtualMachinePoolRevisionName] != revision {
					last = fmt.Sprintf("VMI %s: %s, version %q, revision %q (VM's %q)", v.Name, vmi.Status.Phase, vmi.Labels["version"], vmi.Labels[virtv1.VirtualMachinePoolRevisionName], revision)
					return false, nil
				}
				uids[v.Name] = vmi.UID
			}
			slices.Sort(live)
			last = fmt.Sprintf("VMs %q; status %d replicas, %d ready", live, current.Status.Replicas, current.Status.ReadyReplicas)
			return slices.Equal(live, names) && current.Status.ReadyReplicas == 3 && current.Status.Replicas == 3, nil
		})
		if err != nil {
			t.Fatalf("pool at version %s: %s", version, last)
		}
		return uids
	}
	settled("1")

	// A VM deleted comes back under its name.
	gone, err := kv.VirtualMachines(ns).Get(ctx, "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.VirtualMachines(ns).Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		v, err := kv.VirtualMachines(ns).Get(ctx, "web-1", metav1.GetOptions{})
		return err == nil && v.UID != gone.UID, nil
	})
	if err != nil {
		t.Fatal("web-1 deleted did not come back under its name")
	}
	before := settled("1")

	// A replica killed, and a new VMI template: every VM rewritten, every
	// VMI restarted from the new one.
	procs[1].Kill()
	body := `{"spec":{"virtualMachineTemplate":{"spec":{"template":{"metadata":{"labels":{"version":"2"}}}}}}}`
	if _, err := kv.Pools(ns).Patch(ctx, pool.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	after := settled("2")
	for name, uid := range after {
		if before[name] == uid {
			t.Errorf("VMI %s kept its UID %s: want it restarted from the new template", name, uid)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(creates)
	if want := []string{"web-0", "web-1", "web-1", "web-2"}; !slices.Equal(creates, want) {
		t.Errorf("VMs created %q, want %q: the three and web-1 again, none for the update", creates, want)
	}
}
