package workloadupdate_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	before := waitVMI(t, kv, ns, "grows", "Running with one socket", 2*time.Minute, func(v *virtv1.VirtualMachineInstance) bool {
		return v.Status.Phase == virtv1.Running && v.Status.CurrentCPUTopology != nil && v.Status.CurrentCPUTopology.Sockets == 1
	})

	patch := []byte(`{"spec":{"template":{"spec":{"domain":{"cpu":{"sockets":2,"cores":1,"threads":1}}}}}}`)
	if _, err := kv.VirtualMachines(ns).Patch(ctx, "grows", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	after := waitVMI(t, kv, ns, "grows", "on two sockets with the mark gone", 2*time.Minute, func(v *virtv1.VirtualMachineInstance) bool {
		return v.Spec.Domain.CPU.Sockets == 2 && v.Status.CurrentCPUTopology != nil && v.Status.CurrentCPUTopology.Sockets == 2 &&
			vmistatus.Condition(v, virtv1.VirtualMachineInstanceVCPUChange) == nil
	})
	if after.UID != before.UID {
		t.Errorf("the VMI was replaced (UID %s, then %s): a live update keeps it", before.UID, after.UID)
	}
	if after.Status.NodeName == before.Status.NodeName {
		t.Errorf("the VMI stayed on %s: the hotplug is taken by a migration", before.Status.NodeName)
	}
	theWorkloadUpdateMigration(t, kv, ns)
	// By the added vCPU's share: 1000 m over the CR's cpuAllocationRatio
	// (10 by default), as KubeVirt's VMICPUsPatch.
	if got := after.Spec.Domain.Resources.Requests[corev1.ResourceCPU]; got.Cmp(resource.MustParse("200m")) != 0 {
		t.Errorf("the VMI's CPU request is %s after a second socket, want 100m + 100m", got.String())
	}
}
