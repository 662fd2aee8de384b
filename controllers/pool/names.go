package pool

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
	poolv1 "kubevirt.io/api/pool/v1beta1"
)

// vmName is the name of the pool's VM at index, KubeVirt's "<pool>-<index>".
func vmName(pool *poolv1.VirtualMachinePool, index int) string {
	return fmt.Sprintf("%s-%d", pool.Name, index)
}

// indexOf is the index in a pool VM's name, -1 if it has none.
func indexOf(name string) int {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// freeIndexes are the n lowest indexes whose VM name taken does not know,
// as KubeVirt fills a pool's gaps lowest first.
func freeIndexes(pool *poolv1.VirtualMachinePool, n int, taken func(name string) bool) []int {
	var out []int
	for index := 0; len(out) < n; index++ {
		if !taken(vmName(pool, index)) {
			out = append(out, index)
		}
	}
	return out
}

// indexedSpec is the pool's VM template spec for the VM at index: each
// DataVolume template named "<name>-<index>", and the volumes that use one
// renamed with it; with spec.nameGeneration, the ConfigMap and Secret
// references (cloud-init's secrets too) followed by "-<index>".
func indexedSpec(spec *poolv1.VirtualMachinePoolSpec, index int) *virtv1.VirtualMachineSpec {
	out := spec.VirtualMachineTemplate.Spec.DeepCopy()
	suffix := "-" + strconv.Itoa(index)
	renamed := map[string]string{}
	for i := range out.DataVolumeTemplates {
		dv := &out.DataVolumeTemplates[i]
		renamed[dv.Name] = dv.Name + suffix
		dv.Name += suffix
	}
	configMaps, secrets := false, false
	if g := spec.NameGeneration; g != nil {
		configMaps = g.AppendIndexToConfigMapRefs != nil && *g.AppendIndexToConfigMapRefs
		secrets = g.AppendIndexToSecretRefs != nil && *g.AppendIndexToSecretRefs
	}
	if out.Template == nil {
		return out
	}
	for i := range out.Template.Spec.Volumes {
		// One source per volume, in KubeVirt's order of looking.
		src := &out.Template.Spec.Volumes[i].VolumeSource
		switch {
		case src.PersistentVolumeClaim != nil:
			if name, ok := renamed[src.PersistentVolumeClaim.ClaimName]; ok {
				src.PersistentVolumeClaim.ClaimName = name
			}
		case src.DataVolume != nil:
			if name, ok := renamed[src.DataVolume.Name]; ok {
				src.DataVolume.Name = name
			}
		case src.ConfigMap != nil:
			if configMaps {
				src.ConfigMap.Name += suffix
			}
		case src.Secret != nil:
			if secrets {
				src.Secret.SecretName += suffix
			}
		case src.CloudInitNoCloud != nil:
			if secrets {
				appendToSecretRefs(suffix, src.CloudInitNoCloud.UserDataSecretRef, src.CloudInitNoCloud.NetworkDataSecretRef)
			}
		case src.CloudInitConfigDrive != nil:
			if secrets {
				appendToSecretRefs(suffix, src.CloudInitConfigDrive.UserDataSecretRef, src.CloudInitConfigDrive.NetworkDataSecretRef)
			}
		}
	}
	return out
}

// appendToSecretRefs appends suffix to the names of the references set.
func appendToSecretRefs(suffix string, refs ...*corev1.LocalObjectReference) {
	for _, ref := range refs {
		if ref != nil {
			ref.Name += suffix
		}
	}
}
