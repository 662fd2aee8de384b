package vmi

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"
)

// evictedRunning is a running VMI on node-1 with its ready launcher pod;
// marked, virt-api's eviction admitter has marked it.
func evictedRunning(t *testing.T, marked bool) (*virtv1.VirtualMachineInstance, *corev1.Pod) {
	vmi := newVMI("a")
	vmi.Status.Phase, vmi.Status.NodeName = virtv1.Running, "node-1"
	if marked {
		vmi.Status.EvacuationNodeName = "node-1"
	}
	pod := runningLauncherPod(t, vmi)
	pod.Spec.NodeName = "node-1"
	pod.Labels[virtv1.NodeNameLabel] = "node-1"
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	return vmi, pod
}

// patchesOf are the bodies of the patches of resource (without a
// subresource) the fake recorded.
func patchesOf(actions []k8stesting.Action, resource string) []string {
	var out []string
	for _, a := range actions {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == resource && a.GetSubresource() == "" {
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

// waitForPatch waits until one of resource's patches contains want.
func waitForPatch(t *testing.T, actions func() []k8stesting.Action, resource, want string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for _, p := range patchesOf(actions(), resource) {
			if strings.Contains(p, want) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s patches %q, want one with %s", resource, patchesOf(actions(), resource), want)
	}
}

// A VMI marked for eviction shows it in its EvictionRequested condition,
// and its ready launcher pod is annotated as evicting for the descheduler,
// as KubeVirt's VMI controller does.
func TestAnEvictedVMIShowsItAndTellsTheDescheduler(t *testing.T) {
	vmi, pod := evictedRunning(t, true)
	f := newFixture(t, vmi, pod)
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	waitForPatch(t, f.Kube.Actions, "pods", `{"op":"add","path":"/metadata/annotations/descheduler.alpha.kubernetes.io~1eviction-in-progress","value":"true"}`)
	waitForPatch(t, f.KubeVirt.Actions, "virtualmachineinstances", `"reason":"EvictionRequested"`)
}

// Once the mark is gone (the migration's target cleared it), the
// condition and the pod's annotation go too.
func TestAVMINoLongerMarkedTakesTheEvictionBack(t *testing.T) {
	vmi, pod := evictedRunning(t, false)
	vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{
		Type: virtv1.VirtualMachineInstanceEvictionRequested, Status: corev1.ConditionTrue, Reason: virtv1.VirtualMachineInstanceReasonEvictionRequested,
	})
	pod.Annotations[evictionInProgressAnnotation] = "true"
	f := newFixture(t, vmi, pod)
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	waitForPatch(t, f.Kube.Actions, "pods", `{"op":"remove","path":"/metadata/annotations/descheduler.alpha.kubernetes.io~1eviction-in-progress"}`)
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got, err := f.KubeVirt.VirtualMachineInstances(vmi.Namespace).Get(context.Background(), vmi.Name, metav1.GetOptions{})
		return err == nil && evictionRequestShown(got), nil
	})
	if err != nil {
		t.Errorf("the VMI kept its EvictionRequested condition after the mark went")
	}
}
