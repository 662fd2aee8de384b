package migration

import (
	"context"
	"errors"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// A migration that carries a CPU or memory hotplug (the VMI is marked
// VCPUChange or MemoryChange) ends only once the target's virt-handler has
// plugged the difference in and removed the mark; the target reads from
// the VMI's labels what its pod was given, to refuse more than that
// (KubeVirt v1.8.1's handleTargetPodHandoff and its Succeeded check in
// watch/migration/migration.go).

// hotplugLabels are the labels the handoff puts on a VMI with a hotplug:
// the target compute container's CPU limit, for dedicated CPUs, and its
// memory request with hugepages. The pod cache keeps no resources, so the
// target pod is read whole for a hotplug, which is rare.
func (c *Controller) hotplugLabels(ctx context.Context, vmi *virtv1.VirtualMachineInstance, cached *corev1.Pod) (map[string]string, error) {
	labels := map[string]string{}
	cpuPlug := vmistatus.Condition(vmi, virtv1.VirtualMachineInstanceVCPUChange) != nil
	memoryPlug := vmistatus.Condition(vmi, virtv1.VirtualMachineInstanceMemoryChange) != nil
	if !cpuPlug && !memoryPlug {
		return labels, nil
	}
	pod, err := c.env.Kube.CoreV1().Pods(cached.Namespace).Get(ctx, cached.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var compute *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == template.ComputeContainer {
			compute = &pod.Spec.Containers[i]
		}
	}
	if compute == nil {
		return nil, errors.New("could not find VMI compute container")
	}
	if cpu := vmi.Spec.Domain.CPU; cpuPlug && cpu != nil && cpu.DedicatedCPUPlacement {
		limit, ok := compute.Resources.Limits[corev1.ResourceCPU]
		if !ok {
			return nil, errors.New("could not find dedicated CPU limit in VMI compute container")
		}
		labels[virtv1.VirtualMachinePodCPULimitsLabel] = strconv.FormatInt(limit.Value(), 10)
	}
	if memoryPlug {
		request, ok := compute.Resources.Requests[corev1.ResourceMemory]
		if !ok {
			return nil, errors.New("could not find memory request in VMI compute container")
		}
		for _, size := range []corev1.ResourceName{corev1.ResourceHugePagesPrefix + "2Mi", corev1.ResourceHugePagesPrefix + "1Gi"} {
			if pages, ok := compute.Resources.Requests[size]; ok {
				request.Add(pages)
			}
		}
		labels[virtv1.VirtualMachinePodMemoryRequestsLabel] = request.String()
	}
	return labels, nil
}
