package caches

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/shard"
)

// nadGVR is Multus' NetworkAttachmentDefinition; only its resourceName
// annotation is read.
var nadGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// configMapTimeout bounds the GET of a hook sidecar's ConfigMap.
const configMapTimeout = 10 * time.Second

// TemplateObjects are the cluster-wide caches the launcher-pod renderer
// reads, as KubeVirt's template service reads them: PVCs (block or
// filesystem), namespaces and resource quotas (automatic limits), and
// NetworkAttachmentDefinitions (SR-IOV resources), which KubeVirt GETs on
// every render and virtshard caches, metadata only. Hook sidecars'
// ConfigMaps are rare and read with a GET, as KubeVirt does.
type TemplateObjects struct {
	kube              kubernetes.Interface
	metadata          metadata.Interface
	namespace         string
	PVCInformer       cache.SharedIndexInformer
	NamespaceInformer cache.SharedIndexInformer
	QuotaInformer     cache.SharedIndexInformer
	// NADInformer is nil when the cluster does not serve Multus' CRD.
	NADInformer cache.SharedIndexInformer
	// DataVolumes are CDI's DataVolumes, trimmed to their phase and Ready
	// condition (TrimDataVolume); nil when the cluster does not serve them.
	DataVolumes cache.SharedIndexInformer
	// CDIs and CDIConfigs are CDI's own resources and its config, trimmed
	// to the filesystem overhead, which the VMI controller reports; nil
	// when the cluster does not serve DataVolumes.
	CDIs, CDIConfigs cache.SharedIndexInformer
	// Instancetypes are the instance types and preferences, namespaced and
	// cluster-wide, by resource (InstancetypeGVRs), whole but for managed
	// fields: a VM controller reads them as KubeVirt's does, from a cache
	// with a GET when it misses. Empty when the cluster does not serve them.
	Instancetypes map[schema.GroupVersionResource]cache.SharedIndexInformer

	dynamic dynamic.Interface
}

// The instance type and preference resources (instancetype.kubevirt.io).
var (
	InstancetypeGVR        = schema.GroupVersionResource{Group: "instancetype.kubevirt.io", Version: "v1beta1", Resource: "virtualmachineinstancetypes"}
	ClusterInstancetypeGVR = InstancetypeGVR.GroupVersion().WithResource("virtualmachineclusterinstancetypes")
	PreferenceGVR          = InstancetypeGVR.GroupVersion().WithResource("virtualmachinepreferences")
	ClusterPreferenceGVR   = InstancetypeGVR.GroupVersion().WithResource("virtualmachineclusterpreferences")
)

// DataVolumeGVR is CDI's DataVolume; only its phase and Ready condition are
// read, which every version CDI serves has alike.
var DataVolumeGVR = schema.GroupVersionResource{Group: "cdi.kubevirt.io", Version: "v1beta1", Resource: "datavolumes"}

// CDI's own resource and its config.
var (
	cdiGVR       = DataVolumeGVR.GroupVersion().WithResource("cdis")
	cdiConfigGVR = DataVolumeGVR.GroupVersion().WithResource("cdiconfigs")
)

var _ template.Objects = (*TemplateObjects)(nil)

// NewTemplateObjects returns the caches; Run starts them. namespace ""
// watches all; dyn reads DataVolumes, and may be nil for none.
func NewTemplateObjects(kube kubernetes.Interface, md metadata.Interface, dyn dynamic.Interface, namespace string) *TemplateObjects {
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(namespace))
	t := &TemplateObjects{
		kube:              kube,
		metadata:          md,
		dynamic:           dyn,
		namespace:         namespace,
		PVCInformer:       factory.Core().V1().PersistentVolumeClaims().Informer(),
		QuotaInformer:     factory.Core().V1().ResourceQuotas().Informer(),
		NamespaceInformer: metadatainformer.NewFilteredMetadataInformer(md, corev1.SchemeGroupVersion.WithResource("namespaces"), "", 0, cache.Indexers{}, nil).Informer(),
	}
	// SetTransform fails only on a started informer; these are new.
	_ = t.PVCInformer.SetTransform(trimPVC)
	_ = t.QuotaInformer.SetTransform(shard.TrimForCache)
	_ = t.NamespaceInformer.SetTransform(shard.TrimForCache)
	return t
}

// trimPVC keeps what the controllers read of a claim: metadata (less
// managed fields), volume mode, access modes, phase and capacity.
func trimPVC(obj any) (any, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return obj, nil
	}
	pvc.ManagedFields = nil
	pvc.Spec = corev1.PersistentVolumeClaimSpec{
		VolumeMode:       pvc.Spec.VolumeMode,
		AccessModes:      pvc.Spec.AccessModes,
		Resources:        pvc.Spec.Resources,
		StorageClassName: pvc.Spec.StorageClassName,
	}
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: pvc.Status.Phase, Capacity: pvc.Status.Capacity, AccessModes: pvc.Status.AccessModes}
	return pvc, nil
}

// Run starts the caches, with the NADs' and the DataVolumes' only if the
// cluster serves them, and waits until they synced. Event handlers are
// added before Run.
func (t *TemplateObjects) Run(ctx context.Context) error {
	if served, err := serves(t.kube, nadGVR); err != nil {
		return err
	} else if served {
		t.NADInformer = metadatainformer.NewFilteredMetadataInformer(t.metadata, nadGVR, t.namespace, 0, cache.Indexers{}, nil).Informer()
		_ = t.NADInformer.SetTransform(shard.TrimForCache)
	}
	if t.dynamic != nil {
		if served, err := serves(t.kube, DataVolumeGVR); err != nil {
			return err
		} else if served {
			t.DataVolumes = dynamicinformer.NewFilteredDynamicInformer(t.dynamic, DataVolumeGVR, t.namespace, 0, cache.Indexers{}, nil).Informer()
			_ = t.DataVolumes.SetTransform(TrimDataVolume)
			t.CDIs = dynamicinformer.NewFilteredDynamicInformer(t.dynamic, cdiGVR, "", 0, cache.Indexers{}, nil).Informer()
			_ = t.CDIs.SetTransform(trimCDIConfig)
			t.CDIConfigs = dynamicinformer.NewFilteredDynamicInformer(t.dynamic, cdiConfigGVR, "", 0, cache.Indexers{}, nil).Informer()
			_ = t.CDIConfigs.SetTransform(trimCDIConfig)
		}
	}
	if t.dynamic != nil {
		if served, err := serves(t.kube, InstancetypeGVR); err != nil {
			return err
		} else if served {
			t.Instancetypes = map[schema.GroupVersionResource]cache.SharedIndexInformer{}
			for gvr, namespace := range map[schema.GroupVersionResource]string{InstancetypeGVR: t.namespace, PreferenceGVR: t.namespace,
				ClusterInstancetypeGVR: "", ClusterPreferenceGVR: ""} {
				i := dynamicinformer.NewFilteredDynamicInformer(t.dynamic, gvr, namespace, 0, cache.Indexers{}, nil).Informer()
				_ = i.SetTransform(dropManagedFields)
				t.Instancetypes[gvr] = i
			}
		}
	}
	informers := []cache.SharedIndexInformer{t.PVCInformer, t.QuotaInformer, t.NamespaceInformer, t.NADInformer, t.DataVolumes, t.CDIs, t.CDIConfigs}
	for _, i := range t.Instancetypes {
		informers = append(informers, i)
	}
	var synced []cache.InformerSynced
	for _, i := range informers {
		if i != nil {
			go i.RunWithContext(ctx)
			synced = append(synced, i.HasSynced)
		}
	}
	if !cache.WaitForNamedCacheSync("template-objects", ctx.Done(), synced...) {
		return fmt.Errorf("template caches did not sync: %w", ctx.Err())
	}
	return nil
}

func dropManagedFields(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// TrimDataVolume keeps a DataVolume's name, namespace, UID,
// resourceVersion and controller, its phase, and the status, reason and
// message of its Ready, Running and Bound conditions: what a VMI waits on
// and a VM's printable status reads.
func TrimDataVolume(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	status := map[string]any{}
	if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase != "" {
		status["phase"] = phase
	}
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var kept []any
	for _, c := range conditions {
		m, ok := c.(map[string]any)
		if !ok || (m["type"] != "Ready" && m["type"] != "Running" && m["type"] != "Bound") {
			continue
		}
		trimmed := map[string]any{}
		for _, field := range []string{"type", "status", "reason", "message"} {
			if v, ok := m[field].(string); ok {
				trimmed[field] = v
			}
		}
		kept = append(kept, trimmed)
	}
	if kept != nil {
		status["conditions"] = kept
	}
	metadata := map[string]any{"name": u.GetName(), "namespace": u.GetNamespace(),
		"uid": string(u.GetUID()), "resourceVersion": u.GetResourceVersion()}
	if ref := metav1.GetControllerOf(u); ref != nil {
		metadata["ownerReferences"] = []any{map[string]any{"apiVersion": ref.APIVersion, "kind": ref.Kind,
			"name": ref.Name, "uid": string(ref.UID), "controller": true}}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": metadata, "status": status,
	}}, nil
}

// trimCDIConfig keeps a CDI resource's or CDIConfig's name and
// resourceVersion and the filesystem overhead of its status.
func trimCDIConfig(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(),
		"metadata": map[string]any{"name": u.GetName(), "resourceVersion": u.GetResourceVersion()},
	}}
	if overhead, ok, _ := unstructured.NestedMap(u.Object, "status", "filesystemOverhead"); ok {
		out.Object["status"] = map[string]any{"filesystemOverhead": overhead}
	}
	return out, nil
}

// FilesystemOverhead is what CDI's config gives a claim of class (nil for
// none), as KubeVirt reads it (storagetypes.GetFilesystemOverhead): the
// class's own overhead, else the global one. installed is false unless
// exactly one CDI resource exists, when KubeVirt reads no config; overhead
// is "" when the config has none yet.
func (t *TemplateObjects) FilesystemOverhead(class *string) (overhead string, installed bool) {
	if t.CDIs == nil || len(t.CDIs.GetStore().List()) != 1 {
		return "", false
	}
	obj, ok, _ := t.CDIConfigs.GetStore().GetByKey("config")
	if !ok {
		return "", true
	}
	status := obj.(*unstructured.Unstructured).Object
	if class != nil {
		if perClass, ok, _ := unstructured.NestedString(status, "status", "filesystemOverhead", "storageClass", *class); ok {
			return perClass, true
		}
	}
	global, _, _ := unstructured.NestedString(status, "status", "filesystemOverhead", "global")
	return global, true
}

// serves tells whether the API server serves gvr, through discovery.
func serves(kube kubernetes.Interface, gvr schema.GroupVersionResource) (bool, error) {
	resources, err := kube.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", gvr.GroupVersion(), err)
	}
	for _, r := range resources.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

// PVC implements template.Objects.
func (t *TemplateObjects) PVC(namespace, name string) (*corev1.PersistentVolumeClaim, bool) {
	obj, exists, _ := t.PVCInformer.GetStore().GetByKey(namespace + "/" + name)
	if !exists {
		return nil, false
	}
	return obj.(*corev1.PersistentVolumeClaim), true
}

// PVCs implements template.Objects.
func (t *TemplateObjects) PVCs(namespace string) []*corev1.PersistentVolumeClaim {
	objs, _ := t.PVCInformer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	out := make([]*corev1.PersistentVolumeClaim, 0, len(objs))
	for _, obj := range objs {
		out = append(out, obj.(*corev1.PersistentVolumeClaim))
	}
	return out
}

// NetworkResourceName implements template.Objects.
func (t *TemplateObjects) NetworkResourceName(namespace, name string) (string, error) {
	if t.NADInformer == nil {
		return "", fmt.Errorf("networkattachmentdefinition %s/%s: the cluster serves no NetworkAttachmentDefinitions", namespace, name)
	}
	obj, exists, _ := t.NADInformer.GetStore().GetByKey(namespace + "/" + name)
	if !exists {
		return "", apierrors.NewNotFound(nadGVR.GroupResource(), name)
	}
	return obj.(*metav1.PartialObjectMetadata).Annotations[template.NetworkResourceNameAnnotation], nil
}

// ConfigMap implements template.Objects.
func (t *TemplateObjects) ConfigMap(namespace, name string) (*corev1.ConfigMap, error) {
	ctx, cancel := context.WithTimeout(context.Background(), configMapTimeout)
	defer cancel()
	return t.kube.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

// Namespace implements template.Objects.
func (t *TemplateObjects) Namespace(name string) (*corev1.Namespace, bool) {
	obj, exists, _ := t.NamespaceInformer.GetStore().GetByKey(name)
	if !exists {
		return nil, false
	}
	return &corev1.Namespace{ObjectMeta: obj.(*metav1.PartialObjectMetadata).ObjectMeta}, true
}

// ResourceQuotas implements template.Objects.
func (t *TemplateObjects) ResourceQuotas(namespace string) []*corev1.ResourceQuota {
	objs, _ := t.QuotaInformer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	out := make([]*corev1.ResourceQuota, 0, len(objs))
	for _, obj := range objs {
		out = append(out, obj.(*corev1.ResourceQuota))
	}
	return out
}
