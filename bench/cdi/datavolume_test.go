package cdi

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

func importDV(annotations map[string]string) *cdiv1.DataVolume {
	return &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "disk", UID: "dv-uid", Annotations: annotations},
		Spec:       cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "http://example.invalid/disk.img"}}},
	}
}

func claim(phase corev1.PersistentVolumeClaimPhase, annotations map[string]string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "disk", Annotations: annotations},
		Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}
}

var wffc = &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: StorageClassWaitForFirstConsumer}, Provisioner: Provisioner,
	VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}

func condition(st cdiv1.DataVolumeStatus, t cdiv1.DataVolumeConditionType) cdiv1.DataVolumeCondition {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c
		}
	}
	return cdiv1.DataVolumeCondition{}
}

// A DataVolume goes through the phases KubeVirt acts on, with CDI's
// conditions, as its claim binds and its transfer runs.
func TestADataVolumeMovesThroughCDIsPhases(t *testing.T) {
	took := 4 * time.Second
	upload := importDV(nil)
	upload.Spec.Source = &cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}}
	clone := importDV(nil)
	clone.Spec.Source = nil
	clone.Spec.SourceRef = &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Name: "golden"}
	for _, c := range []struct {
		name     string
		dv       *cdiv1.DataVolume
		o        observed
		phase    cdiv1.DataVolumePhase
		progress cdiv1.DataVolumeProgress
		bound    corev1.ConditionStatus
		running  corev1.ConditionStatus
		ready    corev1.ConditionStatus
		again    bool
	}{
		{"no claim yet", importDV(nil), observed{}, cdiv1.Pending, progressNone, "", "", "", true},
		{"claim pending", importDV(nil), observed{claim: claim(corev1.ClaimPending, nil)},
			cdiv1.Pending, progressNone, corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionFalse, true},
		{"waiting for its first consumer", importDV(nil), observed{claim: claim(corev1.ClaimPending, nil), class: wffc},
			cdiv1.WaitForFirstConsumer, progressNone, corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionFalse, true},
		{"its consumer's node chosen", importDV(nil), observed{claim: claim(corev1.ClaimPending, map[string]string{annSelectedNode: "n"}), class: wffc},
			cdiv1.Pending, progressNone, corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionFalse, true},
		{"bound", importDV(nil), observed{claim: claim(corev1.ClaimBound, nil), took: took},
			cdiv1.ImportScheduled, progressNone, corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionFalse, true},
		{"importing", importDV(nil), observed{claim: claim(corev1.ClaimBound, nil), took: took, boundFor: 2 * time.Second},
			cdiv1.ImportInProgress, "33.33%", corev1.ConditionTrue, corev1.ConditionTrue, corev1.ConditionFalse, true},
		{"imported", importDV(nil), observed{claim: claim(corev1.ClaimBound, nil), took: took, boundFor: took},
			cdiv1.Succeeded, progressDone, corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionTrue, false},
		{"cloning", clone, observed{claim: claim(corev1.ClaimBound, nil), took: took, boundFor: 3 * time.Second},
			cdiv1.CloneInProgress, "66.67%", corev1.ConditionTrue, corev1.ConditionTrue, corev1.ConditionFalse, true},
		{"held half way", importDV(map[string]string{HeldAnnotation: ""}), observed{claim: claim(corev1.ClaimBound, nil), took: took, boundFor: time.Hour},
			cdiv1.ImportInProgress, "50.00%", corev1.ConditionTrue, corev1.ConditionTrue, corev1.ConditionFalse, true},
		{"an upload waits for its client", upload, observed{claim: claim(corev1.ClaimBound, nil), took: took, boundFor: time.Hour},
			cdiv1.UploadReady, progressNone, corev1.ConditionTrue, corev1.ConditionTrue, corev1.ConditionFalse, false},
		{"told its import fails", importDV(map[string]string{ImportErrorAnnotation: "unreachable"}),
			observed{claim: claim(corev1.ClaimBound, nil), took: took, boundFor: time.Hour, restarts: 3},
			cdiv1.ImportInProgress, progressNone, corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionFalse, true},
		{"told it failed", importDV(map[string]string{FailedAnnotation: "lost"}), observed{claim: claim(corev1.ClaimBound, nil)},
			cdiv1.Failed, progressNone, "", corev1.ConditionFalse, corev1.ConditionFalse, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, again := statusOf(c.dv, c.o)
			if st.Phase != c.phase || st.Progress != c.progress || again != c.again || st.ClaimName != "disk" {
				t.Errorf("phase %s, progress %s, claim %q, again %v; want %s, %s, disk, %v", st.Phase, st.Progress, st.ClaimName, again,
					c.phase, c.progress, c.again)
			}
			for ct, want := range map[cdiv1.DataVolumeConditionType]corev1.ConditionStatus{
				cdiv1.DataVolumeBound: c.bound, cdiv1.DataVolumeRunning: c.running, cdiv1.DataVolumeReady: c.ready} {
				if got := condition(st, ct).Status; got != want {
					t.Errorf("%s %q, want %q", ct, got, want)
				}
			}
		})
	}
}

// KubeVirt reports a DataVolume's importer error from its Running
// condition (reason Error) and the restart count.
func TestAFailingImportSaysWhyAndCountsRestarts(t *testing.T) {
	dv := importDV(map[string]string{ImportErrorAnnotation: "Unable to connect to http data source"})
	st, _ := statusOf(dv, observed{claim: claim(corev1.ClaimBound, nil), took: time.Second, restarts: 2})
	running := condition(st, cdiv1.DataVolumeRunning)
	if running.Reason != reasonError || running.Message != "Unable to connect to http data source" || st.RestartCount != 2 {
		t.Errorf("Running %+v, restarts %d: want reason Error with the message, 2 restarts", running, st.RestartCount)
	}
}

// A condition's transition time moves only with its status; its
// heartbeat with any change.
func TestConditionsKeepTheirTransitionTime(t *testing.T) {
	t0, t1 := metav1.Unix(100, 0), metav1.Unix(200, 0)
	conds := setCondition(nil, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "", t0)
	conds = setCondition(conds, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", reasonTransferRunning, t1)
	if c := conds[0]; !c.LastTransitionTime.Equal(&t0) || !c.LastHeartbeatTime.Equal(&t1) {
		t.Errorf("after a reason change: %+v, want transition at %v, heartbeat at %v", c, t0, t1)
	}
	conds = setCondition(conds, cdiv1.DataVolumeReady, corev1.ConditionTrue, "", "", t1)
	if c := conds[0]; !c.LastTransitionTime.Equal(&t1) || len(conds) != 1 {
		t.Errorf("after a status change: %+v", conds)
	}
}

// The claim CDI makes: the DataVolume's name, owned by it, its storage
// section's gaps filled in, the default class.
func TestTheClaimIsTheDataVolumes(t *testing.T) {
	dv := importDV(nil)
	dv.Spec.Storage = &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")}}}
	pvc := claimFor(dv, StorageClassImmediate)
	ref := metav1.GetControllerOf(pvc)
	if pvc.Name != "disk" || pvc.Namespace != "ns" || ref == nil || ref.Kind != "DataVolume" || ref.UID != "dv-uid" {
		t.Errorf("claim %s/%s owned by %+v, want ns/disk controlled by the DataVolume", pvc.Namespace, pvc.Name, ref)
	}
	if ptr.Deref(pvc.Spec.StorageClassName, "") != StorageClassImmediate || len(pvc.Spec.AccessModes) != 1 ||
		ptr.Deref(pvc.Spec.VolumeMode, "") != corev1.PersistentVolumeFilesystem {
		t.Errorf("claim spec %+v: want the default class, one access mode, Filesystem", pvc.Spec)
	}
	if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "5Gi" {
		t.Errorf("claim size %s, want 5Gi", got.String())
	}
}
