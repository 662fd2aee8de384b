package cluster_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/virtshard/virtshard/bench/cdi"
	"github.com/virtshard/virtshard/test/clustertest"
)

// The local cluster serves the CSI snapshot API (snapshot.storage.k8s.io/v1,
// the CRDs of the pinned external-snapshotter) with a default snapshot
// class for the simulated provisioner's driver, which is how KubeVirt picks
// a claim's class; the CRDs' own validation holds (a VolumeSnapshot must
// name exactly one source); and the simulated driver takes snapshots and
// restores claims from them.
func TestTheClusterServesVolumeSnapshots(t *testing.T) {
	ctx := context.Background()
	ns := clustertest.Namespace(t)
	dyn := dynamic.NewForConfigOrDie(clustertest.Config(t))
	snapshotAPI := schema.GroupVersion{Group: "snapshot.storage.k8s.io", Version: "v1"}

	class, err := dyn.Resource(snapshotAPI.WithResource("volumesnapshotclasses")).Get(ctx, "sim-snapshots", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the simulated provisioner's snapshot class: %v", err)
	}
	if driver, _, _ := unstructured.NestedString(class.Object, "driver"); driver != cdi.Provisioner {
		t.Errorf("snapshot class driver %q, want the provisioner of the simulated StorageClasses, %s", driver, cdi.Provisioner)
	}
	if class.GetAnnotations()["snapshot.storage.kubernetes.io/is-default-class"] != "true" {
		t.Errorf("snapshot class annotations %v: want it the default for its driver", class.GetAnnotations())
	}

	snapshots := dyn.Resource(snapshotAPI.WithResource("volumesnapshots")).Namespace(ns)
	snapshot := func(name string, source map[string]any) error {
		_, err := snapshots.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": snapshotAPI.String(), "kind": "VolumeSnapshot",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"volumeSnapshotClassName": "sim-snapshots", "source": source},
		}}, metav1.CreateOptions{})
		return err
	}
	err = snapshot("of-two-sources", map[string]any{"persistentVolumeClaimName": "data", "volumeSnapshotContentName": "content"})
	if !apierrors.IsInvalid(err) {
		t.Errorf("a snapshot naming two sources: %v, want it refused as invalid", err)
	}

	// The round trip on the simulated driver: a bound claim's snapshot is
	// ready with its content, a claim restored from it binds, and the
	// content goes with the snapshot.
	kube := kubernetes.NewForConfigOrDie(clustertest.Config(t))
	claim := func(name string, source *corev1.TypedLocalObjectReference) {
		t.Helper()
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ptr.To(cdi.StorageClassImmediate), DataSource: source,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if _, err := kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, ok func(ctx context.Context) bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return ok(ctx), nil
		}); err != nil {
			t.Fatalf("%s: not within a minute", what)
		}
	}
	bound := func(name string) func(ctx context.Context) bool {
		return func(ctx context.Context) bool {
			pvc, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && pvc.Status.Phase == corev1.ClaimBound
		}
	}
	claim("data", nil)
	if err := snapshot("of-a-claim", map[string]any{"persistentVolumeClaimName": "data"}); err != nil {
		t.Fatalf("a snapshot of a claim: %v", err)
	}
	var content string
	waitFor("the snapshot ready", func(ctx context.Context) bool {
		got, err := snapshots.Get(ctx, "of-a-claim", metav1.GetOptions{})
		if err != nil {
			return false
		}
		ready, _, _ := unstructured.NestedBool(got.Object, "status", "readyToUse")
		size, _, _ := unstructured.NestedString(got.Object, "status", "restoreSize")
		content, _, _ = unstructured.NestedString(got.Object, "status", "boundVolumeSnapshotContentName")
		return ready && size == "1Gi" && content != ""
	})
	claim("restored", &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotAPI.Group), Kind: "VolumeSnapshot", Name: "of-a-claim"})
	waitFor("the restored claim bound", bound("restored"))
	if err := snapshots.Delete(ctx, "of-a-claim", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the content deleted with its snapshot", func(ctx context.Context) bool {
		_, err := dyn.Resource(snapshotAPI.WithResource("volumesnapshotcontents")).Get(ctx, content, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
