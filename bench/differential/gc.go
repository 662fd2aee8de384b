package differential

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	virtv1 "kubevirt.io/api/core/v1"
)

// gcProbeNamespace holds the probe waitGarbageCollector makes.
const gcProbeNamespace = "diff-gc-probe"

// waitGarbageCollector waits until the cluster's garbage collector deletes
// a VM whose owner, a VM pool, does not exist. A fresh cluster's collector
// learns KubeVirt's kinds at its next discovery, up to half a minute after
// the CRDs are installed; until then it deletes no VM of a pool deleted
// and no revision of a VM deleted, and the run under the first controller
// would see them linger where the second's does not.
func (h *harness) waitGarbageCollector(ctx context.Context) error {
	begin := time.Now()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gcProbeNamespace}}
	if _, err := h.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", gcProbeNamespace, err)
	}
	defer func() {
		_ = h.kube.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), gcProbeNamespace, metav1.DeleteOptions{})
	}()
	vms := h.dyn.Resource(virtv1.SchemeGroupVersion.WithResource("virtualmachines")).Namespace(gcProbeNamespace)
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": "gc-probe", "ownerReferences": []any{map[string]any{
			"apiVersion": "pool.kubevirt.io/v1beta1", "kind": "VirtualMachinePool", "name": "no-such-pool",
			"uid": "00000000-0000-0000-0000-000000000000"}}},
		"spec": map[string]any{"runStrategy": "Halted", "template": map[string]any{"spec": map[string]any{
			"domain": map[string]any{"devices": map[string]any{}}}}},
	}}
	if _, err := vms.Create(ctx, probe, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the garbage collector's probe: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := vms.Get(ctx, "gc-probe", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("the garbage collector did not delete a VM of a pool that does not exist: %w", err)
	}
	h.opts.Logf("the garbage collector knows KubeVirt's kinds (%s)", time.Since(begin).Round(time.Second))
	return nil
}
