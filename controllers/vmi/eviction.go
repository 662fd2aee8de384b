package vmi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// When a drain evicts a launcher pod, virt-api's eviction admitter refuses
// the eviction and marks the VMI (status.evacuationNodeName); the node
// controller migrates it. Meanwhile KubeVirt's VMI controller (v1.8.1
// lifecycle.go, updateStatus) shows the mark in the VMI's EvictionRequested
// condition and tells the descheduler on the ready launcher pod
// (descheduler.MarkEvictionInProgress), and takes both back once the mark
// is gone (the migration's target clears it).

// evictionInProgressAnnotation is the descheduler's annotation of a pod
// whose eviction is under way (KubeVirt's descheduler package).
const evictionInProgressAnnotation = "descheduler.alpha.kubernetes.io/eviction-in-progress"

// evictionMessage is KubeVirt's message of the EvictionRequested condition.
const evictionMessage = "VMI is marked for eviction"

// evictionRequested brings the EvictionRequested condition in line with
// the VMI's mark, as the VMI is when written.
func evictionRequested(at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		cur := vmistatus.Condition(v, virtv1.VirtualMachineInstanceEvictionRequested)
		if !v.IsMarkedForEviction() {
			if cur == nil {
				return false
			}
			vmistatus.RemoveCondition(v, virtv1.VirtualMachineInstanceEvictionRequested)
			return true
		}
		if cur != nil && cur.Status == corev1.ConditionTrue {
			return false
		}
		vmistatus.UpdateCondition(v, virtv1.VirtualMachineInstanceCondition{
			Type: virtv1.VirtualMachineInstanceEvictionRequested, Status: corev1.ConditionTrue,
			Reason: virtv1.VirtualMachineInstanceReasonEvictionRequested, Message: evictionMessage,
			LastProbeTime: at, LastTransitionTime: at,
		})
		return true
	}
}

// evictionRequestShown: the condition says what the mark says.
func evictionRequestShown(vmi *virtv1.VirtualMachineInstance) bool {
	cur := vmistatus.Condition(vmi, virtv1.VirtualMachineInstanceEvictionRequested)
	if vmi.IsMarkedForEviction() {
		return cur != nil && cur.Status == corev1.ConditionTrue
	}
	return cur == nil
}

// syncEvictionInProgress annotates the ready launcher pod of a marked VMI
// as evicting, or takes the annotation back once the mark is gone, with
// KubeVirt's JSON patches (the removal tests the value it read).
func (c *Controller) syncEvictionInProgress(ctx context.Context, it item, vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod) error {
	value, annotated := pod.Annotations[evictionInProgressAnnotation]
	path := "/metadata/annotations/descheduler.alpha.kubernetes.io~1eviction-in-progress"
	var ops []map[string]any
	switch marked := vmi.IsMarkedForEviction(); {
	case marked && !annotated:
		ops = []map[string]any{{"op": "add", "path": path, "value": "true"}}
	case !marked && annotated:
		ops = []map[string]any{{"op": "test", "path": path, "value": value}, {"op": "remove", "path": path}}
	default:
		return nil
	}
	// The pod's UID is tested too: the patch cannot land on a successor of
	// the same name.
	ops = append([]map[string]any{{"op": "test", "path": "/metadata/uid", "value": pod.UID}}, ops...)
	body, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		_, err := c.env.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.JSONPatchType, body, metav1.PatchOptions{})
		return err
	})
	if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || errors.Is(err, sharded.ErrNotHeld) {
		return nil // gone, changed since (its event brings the VMI back), or not ours
	}
	if err != nil {
		return fmt.Errorf("mark launcher pod %s's eviction: %w", pod.Name, err)
	}
	return nil
}
