package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	networkv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	k8sv1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	v1 "kubevirt.io/api/core/v1"
	instancetypev1beta1 "kubevirt.io/api/instancetype/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// corpusCase is one corpus file: the VMI a user submits and the cluster
// objects around it that the render reads.
type corpusCase struct {
	VMI       *v1.VirtualMachineInstance
	KubeVirt  *v1.KubeVirt // nil: a KubeVirt CR with an empty configuration
	Migration *v1.VirtualMachineInstanceMigration

	PVCs           []*k8sv1.PersistentVolumeClaim
	DataVolumes    []*cdiv1.DataVolume // documentation only: the render reads the DataVolume's PVC
	NADs           []*networkv1.NetworkAttachmentDefinition
	ConfigMaps     []*k8sv1.ConfigMap
	Namespaces     []*k8sv1.Namespace
	ResourceQuotas []*k8sv1.ResourceQuota

	// An instance type and a preference (namespaced or cluster-wide) stand
	// for a VM's: the VMI is the one the VM's template makes, and KubeVirt's
	// VM controller applies them to it before creating it.
	Instancetype *instancetypev1beta1.VirtualMachineInstancetypeSpec
	Preference   *instancetypev1beta1.VirtualMachinePreferenceSpec
}

// readCorpusFile decodes the multi-document YAML file at path by apiVersion
// and kind. Decoding is strict, so a misspelt field in the corpus fails here
// instead of being silently dropped.
func readCorpusFile(path string) (*corpusCase, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := &corpusCase{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("split documents: %w", err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		if err := c.add(doc); err != nil {
			return nil, err
		}
	}
	if c.VMI == nil {
		return nil, errors.New("no VirtualMachineInstance in file")
	}
	c.defaultNamespaces()
	return c, nil
}

// defaultNamespaces puts namespaced objects that name no namespace where
// kubectl would: the VMI in "default", the rest beside the VMI.
func (c *corpusCase) defaultNamespaces() {
	if c.VMI.Namespace == "" {
		c.VMI.Namespace = metav1.NamespaceDefault
	}
	objects := []metav1.Object{}
	if c.Migration != nil {
		objects = append(objects, c.Migration)
	}
	for _, o := range c.PVCs {
		objects = append(objects, o)
	}
	for _, o := range c.DataVolumes {
		objects = append(objects, o)
	}
	for _, o := range c.NADs {
		objects = append(objects, o)
	}
	for _, o := range c.ConfigMaps {
		objects = append(objects, o)
	}
	for _, o := range c.ResourceQuotas {
		objects = append(objects, o)
	}
	for _, o := range objects {
		if o.GetNamespace() == "" {
			o.SetNamespace(c.VMI.Namespace)
		}
	}
}

func (c *corpusCase) add(doc []byte) error {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return fmt.Errorf("read kind: %w", err)
	}
	switch meta.APIVersion + " " + meta.Kind {
	case "kubevirt.io/v1 VirtualMachineInstance":
		if c.VMI != nil {
			return errors.New("more than one VirtualMachineInstance")
		}
		c.VMI = &v1.VirtualMachineInstance{}
		return decodeStrict(doc, c.VMI)
	case "kubevirt.io/v1 KubeVirt":
		if c.KubeVirt != nil {
			return errors.New("more than one KubeVirt")
		}
		c.KubeVirt = &v1.KubeVirt{}
		return decodeStrict(doc, c.KubeVirt)
	case "kubevirt.io/v1 VirtualMachineInstanceMigration":
		if c.Migration != nil {
			return errors.New("more than one VirtualMachineInstanceMigration")
		}
		c.Migration = &v1.VirtualMachineInstanceMigration{}
		return decodeStrict(doc, c.Migration)
	case "v1 PersistentVolumeClaim":
		return decodeAppend(doc, &c.PVCs)
	case "cdi.kubevirt.io/v1beta1 DataVolume":
		return decodeAppend(doc, &c.DataVolumes)
	case "k8s.cni.cncf.io/v1 NetworkAttachmentDefinition":
		return decodeAppend(doc, &c.NADs)
	case "v1 ConfigMap":
		return decodeAppend(doc, &c.ConfigMaps)
	case "v1 Namespace":
		return decodeAppend(doc, &c.Namespaces)
	case "v1 ResourceQuota":
		return decodeAppend(doc, &c.ResourceQuotas)
	case "instancetype.kubevirt.io/v1beta1 VirtualMachineInstancetype", "instancetype.kubevirt.io/v1beta1 VirtualMachineClusterInstancetype":
		var it instancetypev1beta1.VirtualMachineInstancetype
		if c.Instancetype != nil {
			return errors.New("more than one instance type")
		}
		if err := decodeStrict(doc, &it); err != nil {
			return err
		}
		c.Instancetype = &it.Spec
		return nil
	case "instancetype.kubevirt.io/v1beta1 VirtualMachinePreference", "instancetype.kubevirt.io/v1beta1 VirtualMachineClusterPreference":
		var pref instancetypev1beta1.VirtualMachinePreference
		if c.Preference != nil {
			return errors.New("more than one preference")
		}
		if err := decodeStrict(doc, &pref); err != nil {
			return err
		}
		c.Preference = &pref.Spec
		return nil
	default:
		return fmt.Errorf("unsupported document %s %s", meta.APIVersion, meta.Kind)
	}
}

func decodeAppend[T any](doc []byte, list *[]*T) error {
	obj := new(T)
	if err := decodeStrict(doc, obj); err != nil {
		return err
	}
	*list = append(*list, obj)
	return nil
}

// decodeStrict decodes doc into obj and fails on fields obj does not know.
// UnmarshalStrict alone is not enough: types with their own UnmarshalJSON
// (VirtualMachineInstanceSpec among them) drop unknown fields silently, so
// every key of doc must also survive a round trip through obj.
func decodeStrict(doc []byte, obj any) error {
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return fmt.Errorf("decode %T: %w", obj, err)
	}
	var in, out any
	if err := yaml.Unmarshal(doc, &in); err != nil {
		return err
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return err
	}
	if path := lostKey(in, out, ""); path != "" {
		return fmt.Errorf("decode %T: unknown field %s", obj, path)
	}
	return nil
}

// lostKey returns the path of the first map key in in that out lacks.
func lostKey(in, out any, path string) string {
	switch in := in.(type) {
	case map[string]any:
		outMap, _ := out.(map[string]any)
		for _, key := range slices.Sorted(maps.Keys(in)) {
			value, ok := outMap[key]
			if !ok {
				return path + "." + key
			}
			if lost := lostKey(in[key], value, path+"."+key); lost != "" {
				return lost
			}
		}
	case []any:
		outList, _ := out.([]any)
		for i := range in {
			if i >= len(outList) {
				return fmt.Sprintf("%s[%d]", path, i)
			}
			if lost := lostKey(in[i], outList[i], fmt.Sprintf("%s[%d]", path, i)); lost != "" {
				return lost
			}
		}
	}
	return ""
}
