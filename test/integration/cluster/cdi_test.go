package cluster_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/virtshard/virtshard/bench/cdi"
	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/test/clustertest"
)

// The local cluster's simulated CDI, with the cluster's own
// PersistentVolume controller and scheduler: a DataVolume's claim is
// provisioned and bound and the import succeeds; on a WaitForFirstConsumer
// class it waits until a pod using the claim is scheduled; one told to
// fail fails; a deleted one takes its claim and volume with it.
func TestTheSimulatedCDIImportsOnTheClustersVolumes(t *testing.T) {
	ctx := context.Background()
	ns := clustertest.Namespace(t)
	cfg := clustertest.Config(t)
	kube := kubernetes.NewForConfigOrDie(cfg)
	dv := dynamic.NewForConfigOrDie(cfg).Resource(cdi.DataVolumes).Namespace(ns)

	create := func(name, class string, annotations map[string]string) {
		t.Helper()
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{"source": map[string]any{"blank": map[string]any{}},
				"storage": map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}},
		}}
		if class != "" {
			_ = unstructured.SetNestedField(obj.Object, class, "spec", "storage", "storageClassName")
		}
		obj.SetAnnotations(annotations)
		if _, err := dv.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create DataVolume %s: %v", name, err)
		}
	}
	waitPhase := func(name, phase string) {
		t.Helper()
		var last string
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := dv.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last, _, _ = unstructured.NestedString(got.Object, "status", "phase")
			return last == phase, nil
		}); err != nil {
			t.Fatalf("DataVolume %s in phase %q, want %s within a minute", name, last, phase)
		}
	}

	create("imported", "", nil)
	waitPhase("imported", "Succeeded")
	pvc, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "imported", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || ptr.Deref(pvc.Spec.StorageClassName, "") != cdi.StorageClassImmediate {
		t.Errorf("claim of an imported DataVolume %s of class %v, want Bound, %s", pvc.Status.Phase, pvc.Spec.StorageClassName, cdi.StorageClassImmediate)
	}
	pv, err := kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		t.Fatalf("the claim's volume %q: %v, want one bound to the claim", pvc.Spec.VolumeName, err)
	}

	create("lazy", cdi.StorageClassWaitForFirstConsumer, nil)
	waitPhase("lazy", "WaitForFirstConsumer")
	consumer := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "consumer"},
		Spec: corev1.PodSpec{
			Containers:   []corev1.Container{{Name: "c", Image: "consumer"}},
			NodeSelector: map[string]string{cluster.KwokNodeTypeLabel: cluster.KwokNodeType},
			Tolerations:  []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Volumes: []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "lazy"}}}},
		},
	}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, consumer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase("lazy", "Succeeded")

	create("broken", "", map[string]string{cdi.FailedAnnotation: "the source is gone"})
	waitPhase("broken", "Failed")

	if err := dv.Delete(ctx, "imported", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("the volume %s of a deleted DataVolume is still there after a minute", pv.Name)
	}
}
