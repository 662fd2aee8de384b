package template

import (
	"encoding/json"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

const (
	// HookSidecarsAnnotation lists a VMI's hook sidecars.
	HookSidecarsAnnotation = "hooks.kubevirt.io/hookSidecars"
	hookSocketsDir         = "/var/run/kubevirt-hooks"
	hookSocketsVolume      = "hook-sidecar-sockets"
	// networkInfoVolume carries the downward API's network device info.
	networkInfoVolume    = "network-info-annotation"
	networkInfoMountPath = "/etc/podinfo"
)

// hookSidecar is one entry of the hooks.kubevirt.io/hookSidecars
// annotation, in KubeVirt's JSON form, or a binding plugin's sidecar.
type hookSidecar struct {
	Image           string            `json:"image,omitempty"`
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy"`
	Command         []string          `json:"command,omitempty"`
	Args            []string          `json:"args,omitempty"`
	ConfigMap       *hookConfigMap    `json:"configMap,omitempty"`
	PVC             *hookPVC          `json:"pvc,omitempty"`
	// downwardAPI is a binding plugin's; never in the annotation.
	downwardAPI virtv1.NetworkBindingDownwardAPIType
}

type hookConfigMap struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	HookPath string `json:"hookPath"`
}

type hookPVC struct {
	Name              string `json:"name"`
	VolumePath        string `json:"volumePath"`
	SharedComputePath string `json:"sharedComputePath"`
}

// hookSidecars are the annotation's sidecars, then one per network binding
// plugin with a sidecar image. KubeVirt takes the plugins from a Go map, so
// with two or more its order is random; virtshard sorts them by name.
func hookSidecars(vmi *virtv1.VirtualMachineInstance, cfg *virtv1.KubeVirtConfiguration) ([]hookSidecar, error) {
	sidecars := []hookSidecar{}
	if raw, ok := vmi.Annotations[HookSidecarsAnnotation]; ok {
		if err := json.Unmarshal([]byte(raw), &sidecars); err != nil {
			return nil, err
		}
	}
	plugins := map[string]virtv1.InterfaceBindingPlugin{}
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.Binding == nil {
			continue
		}
		plugin, ok := bindingPlugins(cfg)[iface.Binding.Name]
		if !ok {
			return nil, fmt.Errorf("couldn't find configuration for network binding: %s", iface.Binding.Name)
		}
		plugins[iface.Binding.Name] = plugin
	}
	names := make([]string, 0, len(plugins))
	for name := range plugins {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if p := plugins[name]; p.SidecarImage != "" {
			sidecars = append(sidecars, hookSidecar{Image: p.SidecarImage, ImagePullPolicy: cfg.ImagePullPolicy, downwardAPI: p.DownwardAPI})
		}
	}
	return sidecars, nil
}

func bindingPlugins(cfg *virtv1.KubeVirtConfiguration) map[string]virtv1.InterfaceBindingPlugin {
	if cfg.NetworkConfiguration == nil {
		return nil
	}
	return cfg.NetworkConfiguration.Binding
}

// sidecarContainer renders hook sidecar i. An image-less hook runs the
// sidecar shim image virt-operator gives virt-controller.
func sidecarContainer(i int, s hookSidecar, vmi *virtv1.VirtualMachineInstance, resources corev1.ResourceRequirements, shimImage string) corev1.Container {
	name := fmt.Sprintf("hook-sidecar-%d", i)
	c := &container{
		name:       name,
		image:      s.Image,
		pullPolicy: s.ImagePullPolicy,
		resources:  resources,
		args:       s.Args,
		extraEnv:   []corev1.EnvVar{{Name: "CONTAINER_NAME", Value: name}},
		mounts:     []corev1.VolumeMount{{Name: hookSocketsVolume, MountPath: hookSocketsDir, SubPath: name}},
	}
	if c.image == "" {
		c.image = shimImage
	}
	if s.downwardAPI == virtv1.DeviceInfo {
		c.mounts = append(c.mounts, corev1.VolumeMount{Name: networkInfoVolume, MountPath: networkInfoMountPath})
	}
	if s.ConfigMap != nil {
		c.mounts = append(c.mounts, corev1.VolumeMount{Name: s.ConfigMap.Name, MountPath: s.ConfigMap.HookPath, SubPath: s.ConfigMap.Key})
	}
	if s.PVC != nil {
		c.mounts = append(c.mounts, corev1.VolumeMount{Name: s.PVC.Name, MountPath: s.PVC.VolumePath})
	}
	if isNonRoot(vmi) {
		c.uid = nonRootUID
		c.dropAll()
	}
	return c.render(s.Command)
}

// sidecarVolumes are the ConfigMaps and PVCs hook sidecars mount, and the
// compute container's mounts of shared PVCs. KubeVirt GETs each ConfigMap
// and fails the render when it is missing.
func sidecarVolumes(vmi *virtv1.VirtualMachineInstance, sidecars []hookSidecar, objects Objects) ([]corev1.Volume, []corev1.VolumeMount, error) {
	var volumes []corev1.Volume
	var computeMounts []corev1.VolumeMount
	for _, s := range sidecars {
		if s.ConfigMap != nil {
			cm, err := objects.ConfigMap(vmi.Namespace, s.ConfigMap.Name)
			if err != nil {
				return nil, nil, err
			}
			volumes = append(volumes, corev1.Volume{Name: cm.Name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name},
				DefaultMode:          ptr.To[int32](0o755),
			}}})
		}
		if s.PVC != nil {
			volumes = append(volumes, corev1.Volume{Name: s.PVC.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: s.PVC.Name},
			}})
			if s.PVC.SharedComputePath != "" {
				computeMounts = append(computeMounts, corev1.VolumeMount{Name: s.PVC.Name, MountPath: s.PVC.SharedComputePath})
			}
		}
	}
	return volumes, computeMounts, nil
}
