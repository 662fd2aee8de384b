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
	"k8s.io/utils/ptr"
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

// probeNodeSide proves that the simulated virt-handler plays KubeVirt's
// node side: a VMI handed off to a node where its launcher pod runs must
// become Running.
func (o Options) probeNodeSide(ctx context.Context, client kubernetes.Interface, kv *kubevirt.Clientset) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	node := NodeName(0)
	vmis := kv.VirtualMachineInstances(metav1.NamespaceDefault)
	probe := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "virtshard-node-probe-", Labels: map[string]string{virtv1.NodeNameLabel: node}},
		Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{Resources: virtv1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		}}},
		// The VMI CRD has no status subresource, so status is taken on create.
		Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Scheduled, NodeName: node},
	}
	vmi, err := vmis.Create(ctx, probe, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node-side probe VMI: %w", err)
	}
	defer func() { _ = vmis.Delete(context.Background(), vmi.Name, metav1.DeleteOptions{}) }()
	pods := client.CoreV1().Pods(metav1.NamespaceDefault)
	pod, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            "virt-launcher-" + vmi.Name,
			Labels:          map[string]string{virtv1.AppLabel: "virt-launcher", virtv1.CreatedByLabel: string(vmi.UID)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi, virtv1.VirtualMachineInstanceGroupVersionKind)},
		},
		Spec: corev1.PodSpec{
			NodeName:      node,
			Containers:    []corev1.Container{{Name: "compute", Image: "virt-launcher"}},
			Tolerations:   []corev1.Toleration{{Key: KwokNodeTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			RestartPolicy: corev1.RestartPolicyNever,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node-side probe pod: %w", err)
	}
	defer func() {
		_ = pods.Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err := vmis.Get(ctx, vmi.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == virtv1.Running, nil
	})
	if err != nil {
		return fmt.Errorf("the simulated virt-handler did not start a handed-off VMI whose launcher pod runs: see %s: %w", o.HandlerLogPath(), err)
	}
	return nil
}
