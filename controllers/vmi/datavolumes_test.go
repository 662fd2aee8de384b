package vmi

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// The expected conditions are what KubeVirt v1.8.1's
// aggregateDataVolumesConditions computes for the same DataVolumes.
func TestSetDataVolumesReady(t *testing.T) {
	dv := func(ready corev1.ConditionStatus) dataVolume { return dataVolume{name: "dv", ready: ready} }
	cond := func(status corev1.ConditionStatus, reason, message string) *virtv1.VirtualMachineInstanceCondition {
		return &virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceDataVolumesReady, Status: status, Reason: reason, Message: message}
	}
	allReady := cond(corev1.ConditionTrue, "AllDVsReady", msgAllDVsReady)
	for _, tc := range []struct {
		name   string
		dvs    []dataVolume
		before *virtv1.VirtualMachineInstanceCondition
		want   *virtv1.VirtualMachineInstanceCondition
	}{
		{name: "no DataVolumes"},
		{name: "all Ready", dvs: []dataVolume{dv(corev1.ConditionTrue), dv(corev1.ConditionTrue)}, want: allReady},
		{name: "one without a Ready condition", dvs: []dataVolume{dv(corev1.ConditionTrue), dv(corev1.ConditionUnknown)},
			want: cond(corev1.ConditionUnknown, "NotAllDVsReady", msgNotAllDVsReady)},
		{name: "False wins over Unknown", dvs: []dataVolume{dv(corev1.ConditionUnknown), dv(corev1.ConditionFalse), dv(corev1.ConditionUnknown)},
			want: cond(corev1.ConditionFalse, "NotAllDVsReady", msgNotAllDVsReady)},
		{name: "same status and reason: kept as it was", dvs: []dataVolume{dv(corev1.ConditionTrue)},
			before: cond(corev1.ConditionTrue, "AllDVsReady", "an older message"), want: cond(corev1.ConditionTrue, "AllDVsReady", "an older message")},
		{name: "changed status: replaced", dvs: []dataVolume{dv(corev1.ConditionTrue)},
			before: cond(corev1.ConditionFalse, "NotAllDVsReady", msgNotAllDVsReady), want: allReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &virtv1.VirtualMachineInstance{}
			if tc.before != nil {
				v.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{*tc.before}
			}
			setDataVolumesReady(v, tc.dvs)
			if diff := cmp.Diff(tc.want, vmistatus.Condition(v, virtv1.VirtualMachineInstanceDataVolumesReady)); diff != "" {
				t.Errorf("DataVolumesReady (-want +got):\n%s", diff)
			}
		})
	}
}

// What the cache keeps of a DataVolume (caches.TrimDataVolume) reads back
// as the full one does.
func TestTrimmedDataVolumeReadsAsTheFullOne(t *testing.T) {
	full := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
		"metadata": map[string]any{"name": "root", "namespace": "ns", "uid": "u", "resourceVersion": "7",
			"annotations": map[string]any{"big": "annotation"}},
		"spec": map[string]any{"source": map[string]any{"http": map[string]any{"url": "http://example/disk.img"}}},
		"status": map[string]any{"phase": "ImportInProgress", "progress": "42%", "conditions": []any{
			map[string]any{"type": "Bound", "status": "True"},
			map[string]any{"type": "Ready", "status": "False", "reason": "TransferRunning", "message": "Import in progress"},
		}},
	}}
	obj, err := caches.TrimDataVolume(full)
	if err != nil {
		t.Fatal(err)
	}
	kept := obj.(*unstructured.Unstructured)
	if _, found := kept.Object["spec"]; found || len(kept.GetAnnotations()) != 0 {
		t.Errorf("kept %v, want no spec and no annotations", kept.Object)
	}
	want := dataVolume{name: "root", phase: "ImportInProgress", ready: corev1.ConditionFalse}
	if got := dataVolumeFrom(kept); got != want {
		t.Errorf("read back %+v, want %+v", got, want)
	}
	bare := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "new", "namespace": "ns"}}}
	obj, _ = caches.TrimDataVolume(bare)
	if got := dataVolumeFrom(obj.(*unstructured.Unstructured)); got != (dataVolume{name: "new", ready: corev1.ConditionUnknown}) {
		t.Errorf("a DataVolume with no status read back as %+v, want no phase, Ready Unknown", got)
	}
}

// A VMI without a pod waits for a DataVolume CDI still imports, and fails
// on one that failed; a populated one or one waiting for its first
// consumer lets it start (KubeVirt's areDataVolumesReady and
// HasFailedDataVolumes).
func TestWaitForDataVolumes(t *testing.T) {
	for _, tc := range []struct {
		phases       []string
		wantFailed   bool
		wantWaiting  bool
		wantPhase    virtv1.VirtualMachineInstancePhase
		wantDVsReady corev1.ConditionStatus
	}{
		{phases: []string{"Succeeded", "PendingPopulation", "WaitForFirstConsumer"}},
		{phases: []string{"Succeeded", "ImportInProgress"}, wantWaiting: true, wantPhase: virtv1.Pending, wantDVsReady: corev1.ConditionUnknown},
		{phases: []string{"Failed"}, wantFailed: true, wantWaiting: true, wantPhase: virtv1.Failed, wantDVsReady: corev1.ConditionUnknown},
	} {
		var dvs []dataVolume
		for _, p := range tc.phases {
			dvs = append(dvs, dataVolume{name: p, phase: p, ready: corev1.ConditionUnknown})
		}
		state := stateOf(dvs)
		if state.failed != tc.wantFailed || state.importing != tc.wantWaiting {
			t.Errorf("%v: failed %v, importing %v; want failed %v, importing %v", tc.phases, state.failed, state.importing, tc.wantFailed, tc.wantWaiting)
		}
		if want := slices.Contains(tc.phases, dvWaitFirstConsumer); state.firstConsumer != want {
			t.Errorf("%v: waits for its first consumer %v, want %v", tc.phases, state.firstConsumer, want)
		}
		if !state.failed && !state.importing {
			continue
		}
		v := testVMI("")
		if !waitForDataVolumes(dvs, nil, nil, t1)(v) {
			t.Fatalf("%v: nothing changed", tc.phases)
		}
		if v.Status.Phase != tc.wantPhase {
			t.Errorf("%v: phase %s, want %s", tc.phases, v.Status.Phase, tc.wantPhase)
		}
		if c := vmistatus.Condition(v, virtv1.VirtualMachineInstanceDataVolumesReady); c == nil || c.Status != tc.wantDVsReady {
			t.Errorf("%v: DataVolumesReady %+v, want %s", tc.phases, c, tc.wantDVsReady)
		}
		if c := vmistatus.Condition(v, virtv1.VirtualMachineInstanceReady); c == nil || c.Reason != virtv1.PodNotExistsReason {
			t.Errorf("%v: Ready %+v, want False PodNotExists", tc.phases, c)
		}
		if c := vmistatus.Condition(v, virtv1.VirtualMachineInstanceSynchronized); c != nil {
			t.Errorf("%v: Synchronized %+v, want none (KubeVirt sets none)", tc.phases, c)
		}
		if waitForDataVolumes(dvs, nil, nil, t2)(v) {
			t.Errorf("%v: a second write with nothing new changed the status", tc.phases)
		}
	}
	deleted := testVMI(virtv1.Pending)
	deleted.DeletionTimestamp = &metav1.Time{Time: t1.Time}
	if waitForDataVolumes([]dataVolume{{phase: "Failed"}}, nil, nil, t1)(deleted) {
		t.Error("a deleted VMI was written")
	}
}

// A VMI whose DataVolume waits for its first consumer stays Pending with
// Provisioning=True, takes PodScheduled=False from the temporary pod, and
// fails when that pod fails (KubeVirt's updateStatus, IsUnprocessed).
func TestProvisioningStatus(t *testing.T) {
	wffc := []dataVolume{{name: "disk", phase: dvWaitFirstConsumer, ready: corev1.ConditionFalse}}
	temp := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "temp-uid"}, Spec: corev1.PodSpec{NodeName: ""}}
	temp.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available"}}

	v := testVMI("")
	temp.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(v, virtv1.VirtualMachineInstanceGroupVersionKind)}
	if !waitForDataVolumes(wffc, nil, nil, t1)(v) {
		t.Fatal("nothing changed before the temporary pod")
	}
	if c := vmistatus.Condition(v, virtv1.VirtualMachineInstanceProvisioning); v.Status.Phase != virtv1.Pending || c == nil ||
		c.Status != corev1.ConditionTrue || c.Reason != "" || !c.LastTransitionTime.IsZero() {
		t.Errorf("phase %s, Provisioning %+v; want Pending, True with no reason or time", v.Status.Phase, c)
	}
	if !waitForDataVolumes(wffc, []*corev1.Pod{temp}, temp, t2)(v) {
		t.Fatal("the temporary pod changed nothing")
	}
	if c := vmistatus.Condition(v, virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); c == nil || c.Message != "0/3 nodes are available" {
		t.Errorf("PodScheduled %+v, want the temporary pod's", c)
	}
	if _, ok := v.Status.ActivePods["temp-uid"]; !ok || len(v.Status.ActivePods) != 1 {
		t.Errorf("activePods %v, want the temporary pod's UID", v.Status.ActivePods)
	}
	if n := len(v.Status.Conditions); n != 4 || waitForDataVolumes(wffc, []*corev1.Pod{temp}, temp, t2)(v) {
		t.Errorf("%d conditions (want Ready, DataVolumesReady, Provisioning, PodScheduled), or a second write changed them", n)
	}

	temp.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	temp.Status.Phase = corev1.PodFailed
	if !waitForDataVolumes(wffc, []*corev1.Pod{temp}, temp, t2)(v) || v.Status.Phase != virtv1.Failed {
		t.Errorf("phase %s with a failed temporary pod, want Failed", v.Status.Phase)
	}
	if c := vmistatus.Condition(v, virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); c != nil {
		t.Errorf("PodScheduled %+v once the temporary pod was scheduled, want none", c)
	}

	failed := testVMI("")
	both := append([]dataVolume{{name: "broken", phase: dvFailed}}, wffc...)
	if !waitForDataVolumes(both, nil, nil, t1)(failed) || failed.Status.Phase != virtv1.Failed ||
		vmistatus.Condition(failed, virtv1.VirtualMachineInstanceProvisioning) != nil {
		t.Errorf("phase %s, conditions %+v with a failed DataVolume; want Failed, no Provisioning", failed.Status.Phase, failed.Status.Conditions)
	}
}

// TestDataVolumesOf: the DataVolumes a VMI's volumes name, or that control
// the claims its PVC volumes name, in volume order; those missing are left
// out, and none are listed without CDI.
func TestDataVolumesOf(t *testing.T) {
	owned := claim("imported", func(pvc *corev1.PersistentVolumeClaim) {
		pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "cdi.kubevirt.io/v1beta1", Kind: "DataVolume", Name: "dv-b", UID: "dv-b-uid", Controller: ptr.To(true)}}
	})
	plain := claim("plain")
	claims := claimsOf(owned, plain)
	dvs := fakeDataVolumes{
		"ns/dv-a": {name: "dv-a", phase: dvSucceeded, ready: corev1.ConditionTrue},
		"ns/dv-b": {name: "dv-b", phase: dvPendingPopulation, ready: corev1.ConditionFalse},
	}
	v := testVMI(virtv1.Pending,
		pvcVolume("disk-b", "imported"), dvVolume("disk-a", "dv-a"), pvcVolume("disk-c", "plain"),
		dvVolume("disk-d", "missing"), pvcVolume("disk-e", "no-such-claim"))
	var names []string
	for _, d := range dataVolumesOf(v, claims, dvs) {
		names = append(names, d.name)
	}
	if diff := cmp.Diff([]string{"dv-b", "dv-a"}, names); diff != "" {
		t.Errorf("DataVolumes (-want +got):\n%s", diff)
	}
	if got := dataVolumesOf(v, claims, nil); got != nil {
		t.Errorf("without CDI: %v, want none", got)
	}
}
