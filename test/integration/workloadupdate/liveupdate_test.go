package workloadupdate_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/cmd/virtshard-controller/app"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/vmistatus"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

// A running VM's template gets a second CPU socket; under the LiveUpdate
// rollout (KubeVirt's default) the VM controller takes it to the VMI's
// spec, the VMI controller marks the VMI HotVCPUChange, the workload
// updater migrates it (kubevirt-workload-update-), and the target takes
// the new topology, after which the mark goes. Three replicas.
func TestALiveUpdateOfCPUSocketsReachesTheVMIThroughAMigration(t *testing.T) {
	ns, _, kv := controllertest.Clients(t)
	ctx := context.Background()
	createKubeVirt(t, dynamic.NewForConfigOrDie(clustertest.Config(t)).Resource(clusterconfig.KubeVirtResource).Namespace(ns))
	controllertest.StartN(t, ns, 3, func(o *app.Options) { o.KubeVirtNamespace = ns })
	// virt-api's defaults: the VMI's CPU topology as it starts.
	controllertest.VirtAPI(t, ns)

	template := workload.VMI("")
	template.Spec.Domain.CPU = &virtv1.CPU{Sockets: 1, Cores: 1, Threads: 1}
	template.Spec.Domain.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("100m")
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "grows"},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyAlways),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: template.Labels}, Spec: template.Spec}}}
	if _, err := kv.VirtualMachines(ns).Create(ctx, vm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitVMI := func(what string, ok func(*virtv1.VirtualMachineInstance) bool) *virtv1.VirtualMachineInstance {
		t.Helper()
		var last *virtv1.VirtualMachineInstance
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			v, err := kv.VirtualMachineInstances(ns).Get(ctx, "grows", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = v
			return ok(v), nil
		}); err != nil {
			t.Fatalf("VMI not %s after two minutes; last seen %+v", what, last)
		}
		return last
	}
	before := waitVMI("Running with one socket", func(v *virtv1.VirtualMachineInstance) bool {
		return v.Status.Phase == virtv1.Running && v.Status.CurrentCPUTopology != nil && v.Status.CurrentCPUTopology.Sockets == 1
	})

	patch := []byte(`{"spec":{"template":{"spec":{"domain":{"cpu":{"sockets":2,"cores":1,"threads":1}}}}}}`)
	if _, err := kv.VirtualMachines(ns).Patch(ctx, "grows", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	after := waitVMI("on two sockets with the mark gone", func(v *virtv1.VirtualMachineInstance) bool {
		return v.Spec.Domain.CPU.Sockets == 2 && v.Status.CurrentCPUTopology != nil && v.Status.CurrentCPUTopology.Sockets == 2 &&
			vmistatus.Condition(v, virtv1.VirtualMachineInstanceVCPUChange) == nil
	})
	if after.UID != before.UID {
		t.Errorf("the VMI was replaced (UID %s, then %s): a live update keeps it", before.UID, after.UID)
	}
	if after.Status.NodeName == before.Status.NodeName {
		t.Errorf("the VMI stayed on %s: the hotplug is taken by a migration", before.Status.NodeName)
	}
	// The migration ends after the VMI shows it (the node reports the
	// migration completed, then the migration controller marks it).
	var migrations *virtv1.VirtualMachineInstanceMigrationList
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := kv.Migrations(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		migrations = list
		return !slices.ContainsFunc(list.Items, func(m virtv1.VirtualMachineInstanceMigration) bool { return !m.IsFinal() }), nil
	}); err != nil && migrations == nil {
		t.Fatal(err)
	}
	if len(migrations.Items) != 1 || !strings.HasPrefix(migrations.Items[0].Name, "kubevirt-workload-update-") ||
		migrations.Items[0].Status.Phase != virtv1.MigrationSucceeded {
		var names []string
		for _, m := range migrations.Items {
			names = append(names, m.Name+"/"+string(m.Status.Phase))
		}
		t.Errorf("migrations %v, want one kubevirt-workload-update- migration, Succeeded", names)
	}
	// By the added vCPU's share: 1000 m over the CR's cpuAllocationRatio
	// (10 by default), as KubeVirt's VMICPUsPatch.
	if got := after.Spec.Domain.Resources.Requests[corev1.ResourceCPU]; got.Cmp(resource.MustParse("200m")) != 0 {
		t.Errorf("the VMI's CPU request is %s after a second socket, want 100m + 100m", got.String())
	}
}
