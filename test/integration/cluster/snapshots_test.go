package cluster_test

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/virtshard/virtshard/bench/cdi"
	"github.com/virtshard/virtshard/test/clustertest"
)

// The local cluster serves the CSI snapshot API (snapshot.storage.k8s.io/v1,
// the CRDs of the pinned external-snapshotter) with a default snapshot
// class for the simulated provisioner's driver, which is how KubeVirt picks
// a claim's class; the CRDs' own validation holds (a VolumeSnapshot must
// name exactly one source).
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
	if err := snapshot("of-a-claim", map[string]any{"persistentVolumeClaimName": "data"}); err != nil {
		t.Errorf("a snapshot of a claim: %v", err)
	}
	err = snapshot("of-two-sources", map[string]any{"persistentVolumeClaimName": "data", "volumeSnapshotContentName": "content"})
	if !apierrors.IsInvalid(err) {
		t.Errorf("a snapshot naming two sources: %v, want it refused as invalid", err)
	}
}
