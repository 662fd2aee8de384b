package template

import (
	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// Cluster is what the renderer reads of the cluster configuration: the
// KubeVirt CR's spec.configuration with KubeVirt's defaults filled in, and
// feature gates with KubeVirt's semantics (GA gates are always on).
// *clusterconfig.Config implements it.
type Cluster interface {
	Configuration() *virtv1.KubeVirtConfiguration
	FeatureGateEnabled(name string) bool
}

// Objects are the other objects a launcher pod depends on, read from
// caches: KubeVirt's template service reads the same ones from its
// informers or, for NetworkAttachmentDefinitions and hook ConfigMaps, with
// a GET per render.
type Objects interface {
	// PVC returns a claim, or false when the cache has none of that name.
	PVC(namespace, name string) (*corev1.PersistentVolumeClaim, bool)
	// PVCs returns the namespace's claims.
	PVCs(namespace string) []*corev1.PersistentVolumeClaim
	// NetworkResourceName returns the device-plugin resource of a
	// NetworkAttachmentDefinition (its k8s.v1.cni.cncf.io/resourceName
	// annotation, "" when it has none), or an error when it does not exist.
	NetworkResourceName(namespace, name string) (string, error)
	// ConfigMap returns a ConfigMap, or an error when it does not exist.
	ConfigMap(namespace, name string) (*corev1.ConfigMap, error)
	// Namespace returns a namespace, or false when the cache has none.
	Namespace(name string) (*corev1.Namespace, bool)
	// ResourceQuotas returns the namespace's quotas.
	ResourceQuotas(namespace string) []*corev1.ResourceQuota
}
