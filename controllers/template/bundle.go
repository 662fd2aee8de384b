package template

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
	"sigs.k8s.io/yaml"
)

// Bundle is a VMI with the objects its launcher pod depends on, as written
// in one multi-document YAML file: the input of virtshard-render and of the
// conformance suite.
type Bundle struct {
	VMI *virtv1.VirtualMachineInstance
	// KubeVirt is the cluster's KubeVirt CR, nil for none.
	KubeVirt *virtv1.KubeVirt
	// Migration, with SourcePod, asks for a migration target pod.
	Migration *virtv1.VirtualMachineInstanceMigration
	SourcePod *corev1.Pod
	Objects   *StaticObjects
	// Instancetype and Preference (from namespaced or cluster-wide
	// objects) make the VMI a VM's: they are applied to it before it is
	// rendered, as the VM controller applies them before creating it.
	Instancetype *v1beta1.VirtualMachineInstancetypeSpec
	Preference   *v1beta1.VirtualMachinePreferenceSpec
}

// StaticObjects implements Objects over a fixed set of objects.
type StaticObjects struct {
	Claims      []*corev1.PersistentVolumeClaim
	ConfigMaps  []*corev1.ConfigMap
	Namespaces  []*corev1.Namespace
	Quotas      []*corev1.ResourceQuota
	DataVolumes []*metav1.PartialObjectMetadata
	// NADs are NetworkAttachmentDefinitions; only their metadata matters.
	NADs []*metav1.PartialObjectMetadata
}

var _ Objects = (*StaticObjects)(nil)

func (s *StaticObjects) PVC(namespace, name string) (*corev1.PersistentVolumeClaim, bool) {
	for _, o := range s.Claims {
		if o.Namespace == namespace && o.Name == name {
			return o, true
		}
	}
	return nil, false
}

func (s *StaticObjects) PVCs(namespace string) []*corev1.PersistentVolumeClaim {
	var out []*corev1.PersistentVolumeClaim
	for _, o := range s.Claims {
		if o.Namespace == namespace {
			out = append(out, o)
		}
	}
	return out
}

func (s *StaticObjects) NetworkResourceName(namespace, name string) (string, error) {
	for _, o := range s.NADs {
		if o.Namespace == namespace && o.Name == name {
			return o.Annotations[NetworkResourceNameAnnotation], nil
		}
	}
	return "", fmt.Errorf("networkattachmentdefinition %s/%s not found", namespace, name)
}

func (s *StaticObjects) ConfigMap(namespace, name string) (*corev1.ConfigMap, error) {
	for _, o := range s.ConfigMaps {
		if o.Namespace == namespace && o.Name == name {
			return o, nil
		}
	}
	return nil, fmt.Errorf("configmap %s/%s not found", namespace, name)
}

func (s *StaticObjects) Namespace(name string) (*corev1.Namespace, bool) {
	for _, o := range s.Namespaces {
		if o.Name == name {
			return o, true
		}
	}
	return nil, false
}

func (s *StaticObjects) ResourceQuotas(namespace string) []*corev1.ResourceQuota {
	var out []*corev1.ResourceQuota
	for _, o := range s.Quotas {
		if o.Namespace == namespace {
			out = append(out, o)
		}
	}
	return out
}

// DecodeBundle reads a multi-document YAML bundle. A VMI without a
// namespace is in "default", and other objects without one in the VMI's.
func DecodeBundle(r io.Reader) (*Bundle, error) {
	b := &Bundle{Objects: &StaticObjects{}}
	var namespaced []*metav1.ObjectMeta
	reader := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read document: %w", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("read kind: %w", err)
		}
		into, meta, err := b.slot(tm)
		if err != nil {
			return nil, err
		}
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			return nil, fmt.Errorf("decode %s: %w", tm.Kind, err)
		}
		if meta != nil {
			namespaced = append(namespaced, meta())
		}
	}
	if b.VMI == nil {
		return nil, errors.New("no VirtualMachineInstance in the input")
	}
	if b.VMI.Namespace == "" {
		b.VMI.Namespace = metav1.NamespaceDefault // as kubectl would create it
	}
	for _, m := range namespaced {
		if m.Namespace == "" {
			m.Namespace = b.VMI.Namespace
		}
	}
	return b, nil
}

// slot returns where a document of kind tm decodes to, and for namespaced
// kinds but the VMI its metadata.
func (b *Bundle) slot(tm metav1.TypeMeta) (any, func() *metav1.ObjectMeta, error) {
	o := b.Objects
	switch tm.APIVersion + " " + tm.Kind {
	case "kubevirt.io/v1 VirtualMachineInstance":
		if b.VMI != nil {
			return nil, nil, errors.New("more than one VirtualMachineInstance")
		}
		b.VMI = &virtv1.VirtualMachineInstance{}
		return b.VMI, nil, nil
	case "kubevirt.io/v1 KubeVirt":
		b.KubeVirt = &virtv1.KubeVirt{}
		return b.KubeVirt, nil, nil
	case "kubevirt.io/v1 VirtualMachineInstanceMigration":
		b.Migration = &virtv1.VirtualMachineInstanceMigration{}
		return b.Migration, func() *metav1.ObjectMeta { return &b.Migration.ObjectMeta }, nil
	case "instancetype.kubevirt.io/v1beta1 VirtualMachineInstancetype", "instancetype.kubevirt.io/v1beta1 VirtualMachineClusterInstancetype":
		if b.Instancetype != nil {
			return nil, nil, errors.New("more than one instance type")
		}
		it := &v1beta1.VirtualMachineInstancetype{}
		b.Instancetype = &it.Spec
		return it, nil, nil
	case "instancetype.kubevirt.io/v1beta1 VirtualMachinePreference", "instancetype.kubevirt.io/v1beta1 VirtualMachineClusterPreference":
		if b.Preference != nil {
			return nil, nil, errors.New("more than one preference")
		}
		pref := &v1beta1.VirtualMachinePreference{}
		b.Preference = &pref.Spec
		return pref, nil, nil
	case "v1 Pod":
		b.SourcePod = &corev1.Pod{}
		return b.SourcePod, func() *metav1.ObjectMeta { return &b.SourcePod.ObjectMeta }, nil
	case "v1 PersistentVolumeClaim":
		p := &corev1.PersistentVolumeClaim{}
		o.Claims = append(o.Claims, p)
		return p, func() *metav1.ObjectMeta { return &p.ObjectMeta }, nil
	case "v1 ConfigMap":
		c := &corev1.ConfigMap{}
		o.ConfigMaps = append(o.ConfigMaps, c)
		return c, func() *metav1.ObjectMeta { return &c.ObjectMeta }, nil
	case "v1 ResourceQuota":
		q := &corev1.ResourceQuota{}
		o.Quotas = append(o.Quotas, q)
		return q, func() *metav1.ObjectMeta { return &q.ObjectMeta }, nil
	case "v1 Namespace":
		n := &corev1.Namespace{}
		o.Namespaces = append(o.Namespaces, n)
		return n, nil, nil
	case "cdi.kubevirt.io/v1beta1 DataVolume":
		d := &partialObject{}
		o.DataVolumes = append(o.DataVolumes, &d.PartialObjectMetadata)
		return d, func() *metav1.ObjectMeta { return &d.ObjectMeta }, nil
	case "k8s.cni.cncf.io/v1 NetworkAttachmentDefinition":
		d := &partialObject{}
		o.NADs = append(o.NADs, &d.PartialObjectMetadata)
		return d, func() *metav1.ObjectMeta { return &d.ObjectMeta }, nil
	}
	return nil, nil, fmt.Errorf("unsupported kind %s %s", tm.APIVersion, tm.Kind)
}

// partialObject decodes an object of a type virtshard does not import,
// keeping its metadata and tolerating its spec and status.
type partialObject struct {
	metav1.PartialObjectMetadata `json:",inline"`
	Spec                         any `json:"spec,omitempty"`
	Status                       any `json:"status,omitempty"`
}
