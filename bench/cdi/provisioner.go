package cdi

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	sdkapi "kubevirt.io/controller-lifecycle-operator-sdk/api"
)

// releasedKey prefixes the queue key of a released volume to delete.
const releasedKey = "released:"

// annProvisionedBy is the PersistentVolume controller's mark of the
// provisioner that made a volume, which it leaves the deleting to.
const annProvisionedBy = "pv.kubernetes.io/provisioned-by"

// syncClaim provisions a claim's volume, or deletes a released one.
func (s *Sim) syncClaim(ctx context.Context, key string) (time.Duration, error) {
	if name, ok := strings.CutPrefix(key, releasedKey); ok {
		return 0, s.deleteReleased(ctx, name)
	}
	obj, exists, err := s.claims.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return 0, err
	}
	pvc := obj.(*corev1.PersistentVolumeClaim)
	var class *storagev1.StorageClass
	if pvc.Spec.StorageClassName != nil {
		if c, ok, _ := s.classes.GetIndexer().GetByKey(*pvc.Spec.StorageClassName); ok {
			class = c.(*storagev1.StorageClass)
		}
	}
	if !s.provisions(pvc, class) {
		return 0, nil
	}
	pv := volumeFor(pvc)
	if _, err := s.opts.Kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, fmt.Errorf("provision the volume of claim %s: %w", key, err)
	}
	return 0, nil
}

// annStorageProvisioner is the PersistentVolume controller's hand-off of
// a claim to an external provisioner. A provisioner that acted before it
// raced the controller's own write of the claim, which then recorded a
// ProvisioningFailed event ("Error saving claim") on one run and not the next.
const annStorageProvisioner = "volume.kubernetes.io/storage-provisioner"

// provisions says whether pvc is to get a volume now: a claim of one of
// the provisioner's classes that the PersistentVolume controller handed
// to it, as an external provisioner waits for, not bound nor being
// deleted, whose class lets it (at once, or once the scheduler chose its
// node), whose volume is not made yet, and whose dataSource, a claim or a
// VolumeSnapshot, is bound or ready.
func (s *Sim) provisions(pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) bool {
	switch {
	case class == nil || class.Provisioner != Provisioner, pvc.Annotations[annStorageProvisioner] != Provisioner,
		pvc.Spec.VolumeName != "", pvc.DeletionTimestamp != nil,
		waitsForConsumer(class) && pvc.Annotations[annSelectedNode] == "":
		return false
	}
	if _, made, _ := s.volumes.GetIndexer().GetByKey(volumeName(pvc)); made {
		return false
	}
	if src := pvc.Spec.DataSource; src != nil && src.Kind == "PersistentVolumeClaim" {
		obj, ok, _ := s.claims.GetIndexer().GetByKey(pvc.Namespace + "/" + src.Name)
		if !ok || obj.(*corev1.PersistentVolumeClaim).Status.Phase != corev1.ClaimBound {
			return false // its source's events bring it back
		}
	}
	if src := pvc.Spec.DataSource; src != nil && src.Kind == "VolumeSnapshot" && !s.snapshotReady(pvc.Namespace, src.Name) {
		return false // its snapshot's events bring it back
	}
	return true
}

func volumeName(pvc *corev1.PersistentVolumeClaim) string { return "pvc-" + string(pvc.UID) }

// volumeFor is the volume a CSI provisioner makes for pvc: named after
// its UID, bound to it by claimRef, of its size, modes and class,
// deleted with it.
func volumeFor(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: volumeName(pvc), Annotations: map[string]string{annProvisionedBy: Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes: pvc.Spec.AccessModes,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace,
				Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              ptr.Deref(pvc.Spec.StorageClassName, ""),
			VolumeMode:                    pvc.Spec.VolumeMode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: Provisioner, VolumeHandle: volumeName(pvc)}},
		},
	}
}

// deleteReleased deletes a volume of the provisioner's whose claim is
// gone, as the PersistentVolume controller leaves to it.
func (s *Sim) deleteReleased(ctx context.Context, name string) error {
	obj, exists, err := s.volumes.GetIndexer().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	pv := obj.(*corev1.PersistentVolume)
	if pv.Annotations[annProvisionedBy] != Provisioner || pv.Status.Phase != corev1.VolumeReleased ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return nil
	}
	err = s.opts.Kube.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete released volume %s: %w", name, err)
	}
	return nil
}

// ensureProfile writes the StorageProfile CDI keeps for each StorageClass:
// the class, its provisioner, and the claim properties its storage
// section is filled from.
func (s *Sim) ensureProfile(ctx context.Context, class *storagev1.StorageClass) error {
	profile := &cdiv1.StorageProfile{
		TypeMeta:   metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "StorageProfile"},
		ObjectMeta: metav1.ObjectMeta{Name: class.Name},
	}
	fs := corev1.PersistentVolumeFilesystem
	status := cdiv1.StorageProfileStatus{StorageClass: ptr.To(class.Name), Provisioner: ptr.To(class.Provisioner)}
	if class.Provisioner == Provisioner {
		status.CloneStrategy = ptr.To(cdiv1.CloneStrategyCsiClone)
		status.ClaimPropertySets = []cdiv1.ClaimPropertySet{{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: &fs}}
	}
	return s.createOrKeep(ctx, StorageProfile, profile, &status)
}

// ensureSingletons writes CDI's own resource and its CDIConfig, which
// KubeVirt's VMI controller reads the filesystem overhead from.
func (s *Sim) ensureSingletons(ctx context.Context) error {
	cdi := &cdiv1.CDI{TypeMeta: metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "CDI"},
		ObjectMeta: metav1.ObjectMeta{Name: "cdi"}}
	if err := s.createOrKeep(ctx, CDIs, cdi, &cdiv1.CDIStatus{Status: sdkapi.Status{Phase: sdkapi.PhaseDeployed}}); err != nil {
		return err
	}
	config := &cdiv1.CDIConfig{TypeMeta: metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "CDIConfig"},
		ObjectMeta: metav1.ObjectMeta{Name: "config"}}
	return s.createOrKeep(ctx, CDIConfigs, config, &cdiv1.CDIConfigStatus{
		ScratchSpaceStorageClass: s.defaultClass(),
		FilesystemOverhead:       &cdiv1.FilesystemOverhead{Global: "0.06"},
	})
}
