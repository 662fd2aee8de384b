package cdi

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// The simulation on fake clients: a DataVolume gets its claim, the claim
// its volume once the PersistentVolume controller handed it over, and once the claim is bound (the cluster's PersistentVolume
// controller does it; here the test) the DataVolume succeeds. CDI's
// singletons and the class's StorageProfile are written.
func TestADataVolumeIsImportedOnItsProvisionedVolume(t *testing.T) {
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: StorageClassImmediate},
		Provisioner: Provisioner, VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	kube := kubefake.NewClientset(class)
	dv := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
		"metadata": map[string]any{"namespace": "ns", "name": "disk", "uid": "dv-uid"},
		"spec":     map[string]any{"source": map[string]any{"blank": map[string]any{}}, "storage": map[string]any{}},
	}}
	dyn := fakeDynamic(dv)
	runSim(t, Options{Kube: kube, Dynamic: dyn, TransferDuration: 100 * time.Millisecond})
	ctx := context.Background()

	var pvc *corev1.PersistentVolumeClaim
	var err error
	eventually(t, "the DataVolume's claim", func() bool {
		pvc, err = kube.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "disk", metav1.GetOptions{})
		return err == nil
	})
	if ref := metav1.GetControllerOf(pvc); ref == nil || ref.UID != "dv-uid" || ptr.Deref(pvc.Spec.StorageClassName, "") != StorageClassImmediate {
		t.Errorf("claim owned by %+v of class %v, want the DataVolume's, of the provisioner's Immediate class", ref, pvc.Spec.StorageClassName)
	}
	// The cluster's PersistentVolume controller hands the claim to the
	// provisioner; nothing is provisioned before (here the test does it).
	time.Sleep(200 * time.Millisecond)
	if _, err := kube.CoreV1().PersistentVolumes().Get(ctx, volumeName(pvc), metav1.GetOptions{}); err == nil {
		t.Fatal("a volume was provisioned before the PersistentVolume controller handed the claim over")
	}
	pvc.Annotations = map[string]string{annStorageProvisioner: Provisioner}
	if pvc, err = kube.CoreV1().PersistentVolumeClaims("ns").Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the claim's volume", func() bool {
		pv, err := kube.CoreV1().PersistentVolumes().Get(ctx, volumeName(pvc), metav1.GetOptions{})
		return err == nil && pv.Spec.ClaimRef.UID == pvc.UID && pv.Annotations[annProvisionedBy] == Provisioner
	})
	phase := func() string {
		got, err := dyn.Resource(DataVolumes).Namespace("ns").Get(ctx, "disk", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		p, _, _ := unstructured.NestedString(got.Object, "status", "phase")
		return p
	}
	eventually(t, "phase Pending while the claim is", func() bool { return phase() == string(cdiv1.Pending) })

	pvc.Spec.VolumeName, pvc.Status.Phase = volumeName(pvc), corev1.ClaimBound
	if _, err := kube.CoreV1().PersistentVolumeClaims("ns").Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "phase Succeeded", func() bool { return phase() == string(cdiv1.Succeeded) })

	for _, want := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{{StorageProfile, StorageClassImmediate}, {CDIConfigs, "config"}, {CDIs, "cdi"}} {
		got, err := dyn.Resource(want.gvr).Get(ctx, want.name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s %s: %v", want.gvr.Resource, want.name, err)
			continue
		}
		if _, ok := got.Object["status"]; !ok {
			t.Errorf("%s %s has no status", want.gvr.Resource, want.name)
		}
	}
}

// fakeDynamic is a fake dynamic client of the kinds the simulation reads,
// holding objs.
func fakeDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	listKinds := map[schema.GroupVersionResource]string{}
	for gvr, kind := range map[schema.GroupVersionResource]string{DataVolumes: "DataVolume", DataSources: "DataSource",
		StorageProfile: "StorageProfile", CDIConfigs: "CDIConfig", CDIs: "CDI", VolumeSnapshots: "VolumeSnapshot",
		VolumeSnapshotContents: "VolumeSnapshotContent", VolumeSnapshotClasses: "VolumeSnapshotClass"} {
		listKinds[gvr] = kind + "List"
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, objs...)
}

// runSim runs a simulation of opts until the test ends.
func runSim(t *testing.T, opts Options) {
	t.Helper()
	sim, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- sim.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%s: not within 30 s", what)
	}
}

// A failing importer's restarts follow the time, one per 10 s, however
// often the DataVolume is synced (its own status writes bring syncs).
func TestRestartsFollowTheClockNotTheSyncs(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	sim, err := New(Options{Kube: kubefake.NewClientset(), Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{UID: "dv", Annotations: map[string]string{ImportErrorAnnotation: "unreachable"}}}
	bound := &corev1.PersistentVolumeClaim{Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	for range 5 {
		if _, restarts := sim.progress(dv, bound); restarts != 0 {
			t.Fatalf("%d restarts at once, want 0", restarts)
		}
	}
	clk.Step(25 * time.Second)
	if _, restarts := sim.progress(dv, bound); restarts != 2 {
		t.Errorf("%d restarts after 25 s, want 2", restarts)
	}
}
