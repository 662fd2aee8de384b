package cdi

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// ImportErrorAnnotation on a DataVolume makes its importer fail, with the
// annotation's value as the message, over and over, as CDI's does when it
// cannot read the source: the phase stays ImportInProgress, Running turns
// False with reason Error and the restart count grows.
const ImportErrorAnnotation = "virtshard.io/import-error"

// HeldAnnotation on a DataVolume holds its transfer half way, in
// progress, until the annotation goes: a test's window on an import that
// has started and not finished.
const HeldAnnotation = "virtshard.io/transfer-held"

// FailedAnnotation on a DataVolume puts it in phase Failed, with the
// annotation's value as the message of its Running condition.
const FailedAnnotation = "virtshard.io/datavolume-failed"

// CDI's condition reasons and progress texts (v1.64.0,
// pkg/controller/datavolume/conditions.go and the importer's).
const (
	reasonBound           = "Bound"
	reasonPending         = "Pending"
	reasonTransferRunning = "TransferRunning"
	reasonCompleted       = "Completed"
	reasonError           = "Error"
	progressNone          = "N/A"
	progressDone          = "100.0%"
)

// transfer is how a DataVolume's data arrives, which names its phases.
type transfer struct {
	scheduled, inProgress cdiv1.DataVolumePhase
	// waits: an upload waits for its client, never finishing by itself.
	waits bool
}

func transferOf(dv *cdiv1.DataVolume) transfer {
	switch {
	case dv.Spec.SourceRef != nil, dv.Spec.Source != nil && (dv.Spec.Source.PVC != nil || dv.Spec.Source.Snapshot != nil):
		return transfer{scheduled: cdiv1.CloneScheduled, inProgress: cdiv1.CloneInProgress}
	case dv.Spec.Source != nil && dv.Spec.Source.Upload != nil:
		return transfer{scheduled: cdiv1.UploadScheduled, inProgress: cdiv1.UploadReady, waits: true}
	default:
		return transfer{scheduled: cdiv1.ImportScheduled, inProgress: cdiv1.ImportInProgress}
	}
}

// observed is what one sync of a DataVolume sees besides the DataVolume.
type observed struct {
	// claim is its PVC; nil before it exists.
	claim *corev1.PersistentVolumeClaim
	// class is the claim's StorageClass; nil when unknown.
	class *storagev1.StorageClass
	// boundFor is how long the claim has been seen Bound.
	boundFor time.Duration
	// took is how long the transfer takes once the claim is Bound.
	took time.Duration
	// restarts is how many times a failing importer restarted.
	restarts int32
	now      metav1.Time
}

// statusOf is the DataVolume's status as CDI would write it now, and
// whether the DataVolume is still on its way (to be looked at again).
func statusOf(dv *cdiv1.DataVolume, o observed) (cdiv1.DataVolumeStatus, bool) {
	st := *dv.Status.DeepCopy()
	st.ClaimName = dv.Name
	if st.Progress == "" {
		st.Progress = progressNone
	}
	if msg, ok := dv.Annotations[FailedAnnotation]; ok {
		st.Phase = cdiv1.Failed
		st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionFalse, msg, reasonError, o.now)
		st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "", o.now)
		return st, false
	}
	claim := o.claim
	switch {
	case claim == nil:
		st.Phase = cdiv1.Pending
		return st, true
	case claim.Status.Phase != corev1.ClaimBound:
		st.Phase = cdiv1.Pending
		if waitsForConsumer(o.class) && claim.Annotations[annSelectedNode] == "" {
			st.Phase = cdiv1.WaitForFirstConsumer
		}
		st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeBound, corev1.ConditionFalse, fmt.Sprintf("PVC %s Pending", claim.Name), reasonPending, o.now)
		st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "", o.now)
		st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionFalse, "", "", o.now)
		return st, true
	}
	st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeBound, corev1.ConditionTrue, fmt.Sprintf("PVC %s Bound", claim.Name), reasonBound, o.now)
	t := transferOf(dv)
	if msg, ok := dv.Annotations[ImportErrorAnnotation]; ok {
		st.Phase, st.RestartCount = t.inProgress, o.restarts
		st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionFalse, msg, reasonError, o.now)
		st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", reasonTransferRunning, o.now)
		return st, true
	}
	scheduledFor := o.took / 4
	if _, held := dv.Annotations[HeldAnnotation]; held && o.boundFor >= scheduledFor {
		o.boundFor = min(o.boundFor, scheduledFor+(o.took-scheduledFor)/2)
	}
	switch {
	case o.boundFor < scheduledFor:
		st.Phase = t.scheduled
		st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionFalse, "", "", o.now)
		st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", "", o.now)
		return st, true
	case o.boundFor < o.took || t.waits:
		st.Phase = t.inProgress
		if !t.waits {
			done := float64(o.boundFor-scheduledFor) / float64(o.took-scheduledFor) * 100
			st.Progress = cdiv1.DataVolumeProgress(fmt.Sprintf("%.2f%%", done))
		}
		st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionTrue, "", "Pod is running", o.now)
		st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeReady, corev1.ConditionFalse, "", reasonTransferRunning, o.now)
		return st, !t.waits
	}
	st.Phase, st.Progress = cdiv1.Succeeded, progressDone
	st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Import Complete", reasonCompleted, o.now)
	st.Conditions = setCondition(st.Conditions, cdiv1.DataVolumeReady, corev1.ConditionTrue, "", "", o.now)
	return st, false
}

// setCondition sets a condition as CDI does: the transition time moves
// with the status, the heartbeat with any change.
func setCondition(conds []cdiv1.DataVolumeCondition, t cdiv1.DataVolumeConditionType, status corev1.ConditionStatus, message, reason string, now metav1.Time) []cdiv1.DataVolumeCondition {
	for i := range conds {
		c := &conds[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime, c.LastHeartbeatTime = now, now
		} else if c.Message != message || c.Reason != reason {
			c.LastHeartbeatTime = now
		}
		c.Status, c.Message, c.Reason = status, message, reason
		return conds
	}
	return append(conds, cdiv1.DataVolumeCondition{Type: t, Status: status, Message: message, Reason: reason,
		LastTransitionTime: now, LastHeartbeatTime: now})
}

// annSelectedNode is where the scheduler puts the node it chose for a
// claim of a WaitForFirstConsumer class.
const annSelectedNode = "volume.kubernetes.io/selected-node"

func waitsForConsumer(class *storagev1.StorageClass) bool {
	return class != nil && class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
}

// claimFor is the PVC CDI makes for dv: its name, owned by it, with the
// spec of its pvc or storage section (storage's gaps filled from the
// class's StorageProfile as CDI does: one access mode, Filesystem).
func claimFor(dv *cdiv1.DataVolume, defaultClass string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: dv.Name, Namespace: dv.Namespace,
			Labels: map[string]string{"app": "containerized-data-importer", "app.kubernetes.io/component": "storage",
				"app.kubernetes.io/managed-by": "cdi-controller"},
			Annotations:     map[string]string{"cdi.kubevirt.io/storage.contentType": string(contentType(dv))},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dv, cdiv1.SchemeGroupVersion.WithKind("DataVolume"))},
		},
	}
	switch {
	case dv.Spec.PVC != nil:
		pvc.Spec = *dv.Spec.PVC.DeepCopy()
	case dv.Spec.Storage != nil:
		s := dv.Spec.Storage
		pvc.Spec = corev1.PersistentVolumeClaimSpec{AccessModes: s.AccessModes, Selector: s.Selector, Resources: s.Resources,
			VolumeName: s.VolumeName, StorageClassName: s.StorageClassName, VolumeMode: s.VolumeMode,
			DataSource: s.DataSource, DataSourceRef: s.DataSourceRef}
	}
	if len(pvc.Spec.AccessModes) == 0 {
		pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	if pvc.Spec.VolumeMode == nil {
		fs := corev1.PersistentVolumeFilesystem
		pvc.Spec.VolumeMode = &fs
	}
	if pvc.Spec.StorageClassName == nil && defaultClass != "" {
		pvc.Spec.StorageClassName = &defaultClass
	}
	if _, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
		// A clone's size is its source's; the simulation has no data.
		pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	}
	return pvc
}

func contentType(dv *cdiv1.DataVolume) cdiv1.DataVolumeContentType {
	if dv.Spec.ContentType == "" {
		return cdiv1.DataVolumeKubeVirt
	}
	return dv.Spec.ContentType
}
