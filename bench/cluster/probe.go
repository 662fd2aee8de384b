package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/client/kubevirt"
)

// waitNodesReady waits until the first count kwok nodes are Ready.
func waitNodesReady(ctx context.Context, client kubernetes.Interface, count int) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for i := range count {
			node, err := client.CoreV1().Nodes().Get(ctx, NodeName(i), metav1.GetOptions{})
			if err != nil || !nodeReady(node) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %d kwok nodes to be Ready: %w", count, err)
	}
	return nil
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// probeVMIStage proves that kwok plays KubeVirt's node side: a VMI handed
// off to a node must become Running. kwok retries a Stage controller that
// failed to start only on a Stage event, so a failed probe touches the Stage
// and tries again.
func (o Options) probeVMIStage(ctx context.Context, kv *kubevirt.Clientset) error {
	logger := klog.FromContext(ctx)
	vmis := kv.VirtualMachineInstances(metav1.NamespaceDefault)
	for attempt := 1; attempt <= 5; attempt++ {
		probe := &virtv1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "virtshard-stage-probe-"},
			Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{Resources: virtv1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
			}}},
			// The VMI CRD has no status subresource, so status is taken on create.
			Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Scheduled, NodeName: NodeName(0)},
		}
		created, err := vmis.Create(ctx, probe, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create stage probe VMI: %w", err)
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := vmis.Get(ctx, created.Name, metav1.GetOptions{})
			return err == nil && got.Status.Phase == virtv1.Running, nil
		})
		_ = vmis.Delete(ctx, created.Name, metav1.DeleteOptions{})
		if err == nil {
			return nil
		}
		logger.Info("kwok did not run the VMI stage yet, touching it", "attempt", attempt)
		stamp := fmt.Sprintf("virtshard.io/touched=%d", time.Now().UnixNano())
		if err := o.kubectl(ctx, "annotate", "--overwrite", "stage", "vmi-running", stamp); err != nil {
			return err
		}
	}
	return fmt.Errorf("kwok never moved a Scheduled VMI to Running: see %s/clusters/%s/logs/kwok-controller.log", o.Workdir(), o.Name)
}
