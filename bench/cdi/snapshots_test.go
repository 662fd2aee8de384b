package cdi

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// A VolumeSnapshot of a claim on the provisioner's volumes: while the
// claim is unbound the snapshot says so; once it is bound the snapshot
// gets its content (the volume's handle, the class's policy) and is ready,
// restoring to the volume's size; a claim restored from it is provisioned
// only then; deleting the snapshot deletes its content.
func TestASnapshotIsTakenOnceItsClaimIsBound(t *testing.T) {
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: StorageClassImmediate},
		Provisioner: Provisioner, VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "disk", UID: "disk-uid"},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(StorageClassImmediate),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}}}}
	pv := volumeFor(pvc)
	kube := kubefake.NewClientset(class, pvc, pv)
	snapshotClass := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
		"metadata": map[string]any{"name": "sim-snapshots", "annotations": map[string]any{annDefaultSnapshotClass: "true"}},
		"driver":   Provisioner, "deletionPolicy": "Delete"}}
	snapshot := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"namespace": "ns", "name": "snap", "uid": "snap-uid"},
		"spec":     map[string]any{"source": map[string]any{"persistentVolumeClaimName": "disk"}}}}
	dyn := fakeDynamic(snapshotClass, snapshot)
	runSim(t, Options{Kube: kube, Dynamic: dyn})
	ctx := context.Background()
	snapshots := dyn.Resource(VolumeSnapshots).Namespace("ns")
	status := func(field ...string) any {
		got, err := snapshots.Get(ctx, "snap", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		v, _, _ := unstructured.NestedFieldNoCopy(got.Object, append([]string{"status"}, field...)...)
		return v
	}
	eventually(t, "the snapshot saying its claim is unbound", func() bool {
		msg, _ := status("error", "message").(string)
		return msg == "the PVC disk not yet bound to a PV, will not attempt to take a snapshot yet"
	})

	// A claim restored from it waits for it.
	restored := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "restored", UID: "restored-uid",
		Annotations: map[string]string{annStorageProvisioner: Provisioner}},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(StorageClassImmediate),
			DataSource: &corev1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "snap"},
			Resources:  corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}}}}
	if _, err := kube.CoreV1().PersistentVolumeClaims("ns").Create(ctx, restored, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // time for its event to reach the provisioner
	if _, err := kube.CoreV1().PersistentVolumes().Get(ctx, volumeName(restored), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a claim restored from a snapshot not ready was provisioned: %v", err)
	}

	pvc.Spec.VolumeName, pvc.Status.Phase = pv.Name, corev1.ClaimBound
	if _, err := kube.CoreV1().PersistentVolumeClaims("ns").Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the snapshot ready", func() bool { return status("readyToUse") == true })
	if got := status("restoreSize"); got != "2Gi" {
		t.Errorf("restoreSize %v, want the volume's 2Gi", got)
	}
	if got := status("error"); got != nil {
		t.Errorf("error %v left on a ready snapshot", got)
	}
	content, err := dyn.Resource(VolumeSnapshotContents).Get(ctx, "snapcontent-snap-uid", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the snapshot's content: %v", err)
	}
	if bound := status("boundVolumeSnapshotContentName"); bound != content.GetName() {
		t.Errorf("bound to %v, want %s", bound, content.GetName())
	}
	handle, _, _ := unstructured.NestedString(content.Object, "spec", "source", "volumeHandle")
	policy, _, _ := unstructured.NestedString(content.Object, "spec", "deletionPolicy")
	className, _, _ := unstructured.NestedString(content.Object, "spec", "volumeSnapshotClassName")
	if handle != pv.Spec.CSI.VolumeHandle || policy != "Delete" || className != "sim-snapshots" {
		t.Errorf("content of volume %q, policy %q, class %q; want %q, Delete, sim-snapshots", handle, policy, className, pv.Spec.CSI.VolumeHandle)
	}
	eventually(t, "the restored claim's volume", func() bool {
		_, err := kube.CoreV1().PersistentVolumes().Get(ctx, volumeName(restored), metav1.GetOptions{})
		return err == nil
	})

	if err := snapshots.Delete(ctx, "snap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the content deleted with its snapshot", func() bool {
		_, err := dyn.Resource(VolumeSnapshotContents).Get(ctx, content.GetName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
