package vmi

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// A DataVolume on a WaitForFirstConsumer storage class is not populated
// until a pod that mounts its claim is scheduled. As KubeVirt v1.8.1
// (pkg/virt-controller/watch/vmi/lifecycle.go), the VMI then gets a
// temporary pod first — the launcher pod marked
// kubevirt.io/ephemeral-provisioning, which exits at once — and stays
// Pending with Provisioning=True. Once no DataVolume waits for its first
// consumer, the temporary pod is deleted, and once every DataVolume is
// populated the launcher pod is created.

// isProvisioningPod: pod is a temporary WaitForFirstConsumer pod
// (KubeVirt's isTempPod); it never runs the VMI.
func isProvisioningPod(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[virtv1.EphemeralProvisioningObject]
	return ok
}

// provisioningPods are the temporary pods among the VMI's pods.
func provisioningPods(vmi *virtv1.VirtualMachineInstance, pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if isProvisioningPod(p) && metav1.IsControlledBy(p, vmi) {
			out = append(out, p)
		}
	}
	return out
}

// deleteProvisioningPods deletes the temporary pods that ran or ended, at
// once (grace 0), as cleanupWaitForFirstConsumerTemporaryPods does; one
// still Pending is left until it runs. KubeVirt also posts the event for a
// pod it left alone; virtshard posts it for the pods it deleted only.
func (c *Controller) deleteProvisioningPods(ctx context.Context, it item, vmi *virtv1.VirtualMachineInstance, pods []*corev1.Pod) error {
	for _, pod := range pods {
		switch pod.Status.Phase {
		case corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed:
		default:
			continue
		}
		if pod.DeletionTimestamp != nil {
			continue
		}
		deleted, err := c.deletePod(ctx, it, pod, ptr.To[int64](0))
		if err != nil {
			c.env.Recorder.Eventf(vmi, corev1.EventTypeWarning, ReasonFailedDelete, "Failed to delete WaitForFirstConsumer temporary pod %s", pod.Name)
			return fmt.Errorf("delete temporary pod %s: %w", pod.Name, err)
		}
		if deleted {
			c.env.Recorder.Eventf(vmi, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted WaitForFirstConsumer temporary pod %s", pod.Name)
		}
	}
	return nil
}
