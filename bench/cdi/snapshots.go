package cdi

import (
	"context"
	"fmt"
	"strings"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// The CSI snapshot API's resources (the CRDs in bench/csi/crds).
var (
	VolumeSnapshots        = snapshotv1.SchemeGroupVersion.WithResource("volumesnapshots")
	VolumeSnapshotContents = snapshotv1.SchemeGroupVersion.WithResource("volumesnapshotcontents")
	VolumeSnapshotClasses  = snapshotv1.SchemeGroupVersion.WithResource("volumesnapshotclasses")
)

// annDefaultSnapshotClass marks the snapshot class a driver's snapshots
// take when they name none.
const annDefaultSnapshotClass = "snapshot.storage.kubernetes.io/is-default-class"

// contentKey prefixes the snapshot queue's keys of contents, which are
// cluster-scoped: a content whose snapshot is gone is deleted by its
// policy.
const contentKey = "content/"

// syncSnapshot plays the CSI snapshot controller and the driver's
// snapshotter for a VolumeSnapshot of a claim on the provisioner's
// volumes: the snapshot's content (snapcontent-<snapshot UID>, its handle
// the volume's) is made and is ready at once, restoring to the volume's
// capacity, and the snapshot is bound to it and ready. A claim not yet
// bound leaves an error on the snapshot saying so, and its events
// bring the snapshot back. A snapshot of another driver's volume, or of a
// pre-provisioned content, is left alone. Unlike the real controllers it
// puts no finalizers on the snapshot, its content or the claim: a
// content whose snapshot is gone is deleted by its policy instead.
func (s *Sim) syncSnapshot(ctx context.Context, key string) error {
	if name, ok := strings.CutPrefix(key, contentKey); ok {
		return s.syncContent(ctx, name)
	}
	obj, exists, err := s.snapshots.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	vs := &snapshotv1.VolumeSnapshot{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, vs); err != nil {
		return fmt.Errorf("read VolumeSnapshot %s: %w", key, err)
	}
	claimName := ptr.Deref(vs.Spec.Source.PersistentVolumeClaimName, "")
	status := ptr.Deref(vs.Status, snapshotv1.VolumeSnapshotStatus{})
	if vs.DeletionTimestamp != nil || claimName == "" || ptr.Deref(status.ReadyToUse, false) {
		return nil
	}
	cached, ok, _ := s.claims.GetIndexer().GetByKey(vs.Namespace + "/" + claimName)
	var pv *corev1.PersistentVolume
	if ok {
		if claim := cached.(*corev1.PersistentVolumeClaim); claim.Status.Phase == corev1.ClaimBound {
			if v, ok, _ := s.volumes.GetIndexer().GetByKey(claim.Spec.VolumeName); ok {
				pv = v.(*corev1.PersistentVolume)
			}
		}
	}
	switch {
	case pv == nil:
		status.Error = &snapshotv1.VolumeSnapshotError{Time: ptr.To(metav1.NewTime(s.opts.Clock.Now())),
			Message: ptr.To(fmt.Sprintf("the PVC %s not yet bound to a PV, will not attempt to take a snapshot yet", claimName))}
		if vs.Status != nil && vs.Status.Error != nil && ptr.Deref(vs.Status.Error.Message, "") == *status.Error.Message {
			return nil
		}
		return s.writeSnapshotStatus(ctx, vs, status)
	case pv.Spec.CSI == nil || pv.Spec.CSI.Driver != Provisioner:
		return nil
	}
	class := ptr.Deref(vs.Spec.VolumeSnapshotClassName, s.defaultSnapshotClass())
	if class == "" {
		return nil
	}
	content, err := s.ensureContent(ctx, vs, pv, class)
	if err != nil {
		return err
	}
	status.BoundVolumeSnapshotContentName = ptr.To(content.Name)
	status.CreationTime = ptr.To(metav1.NewTime(metav1.Unix(0, *content.Status.CreationTime).Time))
	status.RestoreSize = resource.NewQuantity(*content.Status.RestoreSize, resource.BinarySI)
	status.ReadyToUse = ptr.To(true)
	status.Error = nil
	return s.writeSnapshotStatus(ctx, vs, status)
}

// ensureContent makes vs's content, ready, unless it is made.
func (s *Sim) ensureContent(ctx context.Context, vs *snapshotv1.VolumeSnapshot, pv *corev1.PersistentVolume, class string) (*snapshotv1.VolumeSnapshotContent, error) {
	name := "snapcontent-" + string(vs.UID)
	content := &snapshotv1.VolumeSnapshotContent{}
	if obj, ok, _ := s.contents.GetIndexer().GetByKey(name); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, content); err != nil {
			return nil, fmt.Errorf("read VolumeSnapshotContent %s: %w", name, err)
		}
		if content.Status != nil && content.Status.ReadyToUse != nil {
			return content, nil
		}
	} else {
		content = &snapshotv1.VolumeSnapshotContent{
			TypeMeta:   metav1.TypeMeta{APIVersion: snapshotv1.SchemeGroupVersion.String(), Kind: "VolumeSnapshotContent"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: snapshotv1.VolumeSnapshotContentSpec{
				VolumeSnapshotRef: corev1.ObjectReference{APIVersion: snapshotv1.SchemeGroupVersion.String(), Kind: "VolumeSnapshot",
					Namespace: vs.Namespace, Name: vs.Name, UID: vs.UID},
				DeletionPolicy:          s.snapshotDeletionPolicy(class),
				Driver:                  Provisioner,
				VolumeSnapshotClassName: ptr.To(class),
				Source:                  snapshotv1.VolumeSnapshotContentSource{VolumeHandle: ptr.To(pv.Spec.CSI.VolumeHandle)},
				SourceVolumeMode:        pv.Spec.VolumeMode,
			},
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(content)
		if err != nil {
			return nil, err
		}
		created, err := s.opts.Dynamic.Resource(VolumeSnapshotContents).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
		if err != nil {
			// Already made: the cache is behind, and its event brings the snapshot back.
			return nil, fmt.Errorf("create VolumeSnapshotContent %s: %w", name, err)
		}
		content.ResourceVersion = created.GetResourceVersion()
	}
	size := pv.Spec.Capacity[corev1.ResourceStorage]
	content.Status = &snapshotv1.VolumeSnapshotContentStatus{SnapshotHandle: ptr.To("snapshot-" + string(vs.UID)),
		CreationTime: ptr.To(s.opts.Clock.Now().UnixNano()), RestoreSize: ptr.To(size.Value()), ReadyToUse: ptr.To(true)}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(content)
	if err != nil {
		return nil, err
	}
	if _, err := s.opts.Dynamic.Resource(VolumeSnapshotContents).UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{}); err != nil {
		return nil, fmt.Errorf("write the status of VolumeSnapshotContent %s: %w", name, err)
	}
	return content, nil
}

// syncContent deletes a content of the provisioner's whose snapshot is
// gone, when its policy says so.
func (s *Sim) syncContent(ctx context.Context, name string) error {
	obj, ok, _ := s.contents.GetIndexer().GetByKey(name)
	if !ok {
		return nil
	}
	content := &snapshotv1.VolumeSnapshotContent{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, content); err != nil {
		return fmt.Errorf("read VolumeSnapshotContent %s: %w", name, err)
	}
	ref := content.Spec.VolumeSnapshotRef
	if content.Spec.Driver != Provisioner || content.Spec.DeletionPolicy != snapshotv1.VolumeSnapshotContentDelete || content.DeletionTimestamp != nil {
		return nil
	}
	if vs, ok, _ := s.snapshots.GetIndexer().GetByKey(ref.Namespace + "/" + ref.Name); ok && vs.(metav1.Object).GetUID() == ref.UID {
		return nil
	}
	// The cache may lag a snapshot just made: ask the API server.
	vs, err := s.opts.Dynamic.Resource(VolumeSnapshots).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case err == nil && vs.GetUID() == ref.UID:
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	err = s.opts.Dynamic.Resource(VolumeSnapshotContents).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &content.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete VolumeSnapshotContent %s: %w", name, err)
	}
	return nil
}

func (s *Sim) writeSnapshotStatus(ctx context.Context, vs *snapshotv1.VolumeSnapshot, status snapshotv1.VolumeSnapshotStatus) error {
	if vs.Status != nil && apiequality.Semantic.DeepEqual(*vs.Status, status) {
		return nil
	}
	vs = vs.DeepCopy()
	vs.Status = &status
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(vs)
	if err != nil {
		return err
	}
	if _, err := s.opts.Dynamic.Resource(VolumeSnapshots).Namespace(vs.Namespace).UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("write the status of VolumeSnapshot %s/%s: %w", vs.Namespace, vs.Name, err)
	}
	return nil
}

// defaultSnapshotClass is the provisioner's driver's default snapshot
// class, or "".
func (s *Sim) defaultSnapshotClass() string {
	for _, obj := range s.snapshotClasses.GetIndexer().List() {
		u := obj.(*unstructured.Unstructured)
		if driver, _, _ := unstructured.NestedString(u.Object, "driver"); driver == Provisioner && u.GetAnnotations()[annDefaultSnapshotClass] == "true" {
			return u.GetName()
		}
	}
	return ""
}

// snapshotDeletionPolicy is class's deletion policy, Delete if unknown.
func (s *Sim) snapshotDeletionPolicy(class string) snapshotv1.DeletionPolicy {
	if obj, ok, _ := s.snapshotClasses.GetIndexer().GetByKey(class); ok {
		if policy, _, _ := unstructured.NestedString(obj.(*unstructured.Unstructured).Object, "deletionPolicy"); policy != "" {
			return snapshotv1.DeletionPolicy(policy)
		}
	}
	return snapshotv1.VolumeSnapshotContentDelete
}

// snapshotReady says whether the VolumeSnapshot ns/name is ready to
// restore from.
func (s *Sim) snapshotReady(ns, name string) bool {
	obj, ok, _ := s.snapshots.GetIndexer().GetByKey(ns + "/" + name)
	if !ok {
		return false
	}
	ready, _, _ := unstructured.NestedBool(obj.(*unstructured.Unstructured).Object, "status", "readyToUse")
	return ready
}

// eachSnapshotOf calls add with the key of each VolumeSnapshot of pvc.
func (s *Sim) eachSnapshotOf(pvc *corev1.PersistentVolumeClaim, add func(string)) {
	list, _ := s.snapshots.GetIndexer().ByIndex(cache.NamespaceIndex, pvc.Namespace)
	for _, obj := range list {
		u := obj.(*unstructured.Unstructured)
		if claim, _, _ := unstructured.NestedString(u.Object, "spec", "source", "persistentVolumeClaimName"); claim == pvc.Name {
			add(pvc.Namespace + "/" + u.GetName())
		}
	}
}

// eachClaimFrom calls add with the key of each claim restored from the
// VolumeSnapshot vs.
func (s *Sim) eachClaimFrom(vs *unstructured.Unstructured, add func(string)) {
	list, _ := s.claims.GetIndexer().ByIndex(cache.NamespaceIndex, vs.GetNamespace())
	for _, obj := range list {
		pvc := obj.(*corev1.PersistentVolumeClaim)
		if src := pvc.Spec.DataSource; src != nil && src.Kind == "VolumeSnapshot" && src.Name == vs.GetName() {
			add(pvc.Namespace + "/" + pvc.Name)
		}
	}
}

// deletedObject is obj, or the object a deletion tombstone holds.
func deletedObject(obj any) any {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return tombstone.Obj
	}
	return obj
}
