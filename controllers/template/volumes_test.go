package template

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// The cases below are KubeVirt v1.8.1's own (pkg/virt-controller/services
// rendervolumes_test.go and template_test.go), with virt-controller's
// default directories where those tests pass others, and the whole
// expected value written out where they check a part.

// volumeTestCluster is a Cluster over a literal configuration and gates.
type volumeTestCluster struct {
	cfg   virtv1.KubeVirtConfiguration
	gates []string
}

func (c volumeTestCluster) Configuration() *virtv1.KubeVirtConfiguration { return &c.cfg }

func (c volumeTestCluster) FeatureGateEnabled(name string) bool {
	for _, g := range c.gates {
		if g == name {
			return true
		}
	}
	return false
}

// quantityComparer compares quantities by value and by how they print.
var quantityComparer = cmp.Comparer(func(a, b resource.Quantity) bool {
	return a.Cmp(b) == 0 && a.String() == b.String()
})

func claim(name string, mode corev1.PersistentVolumeMode, access ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeMode: &mode, AccessModes: access},
	}
}

// volumeTestVMI is a VMI in namespace default, without hotplug support
// unless an option turns it on, as most of KubeVirt's cases have it.
func volumeTestVMI(opts ...func(*virtv1.VirtualMachineInstance)) *virtv1.VirtualMachineInstance {
	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "testvmi", Namespace: "default", UID: "1234"},
	}
	vmi.Spec.Domain.Devices.DisableHotplug = true
	for _, o := range opts {
		o(vmi)
	}
	return vmi
}

func withVolumes(vols ...virtv1.Volume) func(*virtv1.VirtualMachineInstance) {
	return func(vmi *virtv1.VirtualMachineInstance) { vmi.Spec.Volumes = append(vmi.Spec.Volumes, vols...) }
}

func withDisks(names ...string) func(*virtv1.VirtualMachineInstance) {
	return func(vmi *virtv1.VirtualMachineInstance) {
		for _, n := range names {
			vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, virtv1.Disk{Name: n})
		}
	}
}

func withHotplug(vmi *virtv1.VirtualMachineInstance) { vmi.Spec.Domain.Devices.DisableHotplug = false }

func withNonRoot(vmi *virtv1.VirtualMachineInstance) { vmi.Status.RuntimeUser = 107 }

func pvcVolume(name, claimName string) virtv1.Volume {
	return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName},
	}}}
}

func dataVolume(name, dvName string) virtv1.Volume {
	return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: dvName}}}
}

func containerDiskVolume(name, image string) virtv1.Volume {
	return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{Image: image}}}
}

func claimVolume(name, claimName string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}}
}

func emptyDirVol(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
}

// launcherVolumes are rendervolumes_test.go's defaultVolumes, then extra.
func launcherVolumes(extra ...corev1.Volume) []corev1.Volume {
	return append([]corev1.Volume{
		emptyDirVol("private"),
		emptyDirVol("public"),
		emptyDirVol("sockets"),
		emptyDirVol("virt-bin-share-dir"),
		emptyDirVol("libvirt-runtime"),
		emptyDirVol("ephemeral-disks"),
		emptyDirVol("container-disks"),
	}, extra...)
}

// launcherMounts are rendervolumes_test.go's defaultVolumeMounts in
// VolumeRenderer.Mounts' order, with virt-controller's directories.
func launcherMounts(extra ...corev1.VolumeMount) []corev1.VolumeMount {
	return append([]corev1.VolumeMount{
		{Name: "private", MountPath: "/var/run/kubevirt-private"},
		{Name: "public", MountPath: "/var/run/kubevirt"},
		{Name: "ephemeral-disks", MountPath: "/var/run/kubevirt-ephemeral-disks"},
		{Name: "libvirt-runtime", MountPath: "/var/run/libvirt"},
		{Name: "sockets", MountPath: "/var/run/kubevirt/sockets"},
		{Name: "container-disks", MountPath: "/var/run/kubevirt/container-disks", MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)},
	}, extra...)
}

// Without the ImageVolume gate's container-disks volume and mount.
func imageVolumeLauncherVolumes(extra ...corev1.Volume) []corev1.Volume {
	return append(launcherVolumes()[:6], extra...)
}

func imageVolumeLauncherMounts(extra ...corev1.VolumeMount) []corev1.VolumeMount {
	return append(launcherMounts()[:5], extra...)
}

var (
	hotplugDisksVol   = emptyDirVol("hotplug-disks")
	hotplugDisksMount = corev1.VolumeMount{Name: "hotplug-disks", MountPath: "/var/run/kubevirt/hotplug-disks", MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)}
)

func TestRenderVolumes(t *testing.T) {
	const backendPVC = "vm-state-pvc"
	networkInfoVol := corev1.Volume{Name: "network-info-annotation", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{{Path: "network-info", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['kubevirt.io/network-info']"}}},
	}}}
	networkInfoMount := corev1.VolumeMount{Name: "network-info-annotation", MountPath: "/etc/podinfo"}
	deviceInfoPlugins := virtv1.KubeVirtConfiguration{NetworkConfiguration: &virtv1.NetworkConfiguration{Binding: map[string]virtv1.InterfaceBindingPlugin{
		"deviceinfo":    {DownwardAPI: virtv1.DeviceInfo},
		"no_deviceinfo": {},
	}}}
	iface := func(name string, binding *virtv1.PluginBinding, sriov bool) virtv1.Interface {
		i := virtv1.Interface{Name: name, Binding: binding}
		if sriov {
			i.SRIOV = &virtv1.InterfaceSRIOV{}
		}
		return i
	}
	withInterfaces := func(ifaces ...virtv1.Interface) func(*virtv1.VirtualMachineInstance) {
		return func(vmi *virtv1.VirtualMachineInstance) { vmi.Spec.Domain.Devices.Interfaces = ifaces }
	}
	persistentTPM := func(vmi *virtv1.VirtualMachineInstance) {
		vmi.Spec.Domain.Devices.TPM = &virtv1.TPMDevice{Persistent: ptr.To(true)}
	}
	persistentEFI := func(vmi *virtv1.VirtualMachineInstance) {
		vmi.Spec.Domain.Firmware = &virtv1.Firmware{Bootloader: &virtv1.Bootloader{EFI: &virtv1.EFI{Persistent: ptr.To(true)}}}
	}
	kernelBoot := func(image string) func(*virtv1.VirtualMachineInstance) {
		return func(vmi *virtv1.VirtualMachineInstance) {
			vmi.Spec.Domain.Firmware = &virtv1.Firmware{KernelBoot: &virtv1.KernelBoot{Container: &virtv1.KernelBootContainer{Image: image}}}
		}
	}
	hostPathDirOrCreate := corev1.HostPathDirectoryOrCreate

	tests := []struct {
		name    string
		vmi     *virtv1.VirtualMachineInstance
		cluster volumeTestCluster
		pvcs    []*corev1.PersistentVolumeClaim
		in      volumeInputs
		want    podVolumes
	}{
		{
			name: "without any options the pod has the private, public, sockets, virt-bin-share-dir, libvirt-runtime, ephemeral and container disk volumes and no devices",
			vmi:  volumeTestVMI(),
			want: podVolumes{Volumes: launcherVolumes(), Mounts: launcherMounts()},
		},
		{
			name: "an ephemeral volume is mounted under vmi-disks and backed by its claim",
			vmi: volumeTestVMI(withVolumes(virtv1.Volume{Name: "evn", VolumeSource: virtv1.VolumeSource{Ephemeral: &virtv1.EphemeralVolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "ephemeral-claim"},
			}}})),
			pvcs: []*corev1.PersistentVolumeClaim{claim("ephemeral-claim", corev1.PersistentVolumeFilesystem)},
			want: podVolumes{
				Volumes: launcherVolumes(claimVolume("evn", "ephemeral-claim")),
				Mounts:  launcherMounts(corev1.VolumeMount{Name: "evn", MountPath: "/var/run/kubevirt-private/vmi-disks/evn"}),
			},
		},
		{
			name: "a host disk mounts the directory of its image, created if missing",
			vmi: volumeTestVMI(withVolumes(virtv1.Volume{Name: "tiny-winy-disk", VolumeSource: virtv1.VolumeSource{HostDisk: &virtv1.HostDisk{
				Path: "/little-bit/to/the/left", Type: virtv1.HostDiskExistsOrCreate,
			}}})),
			want: podVolumes{
				Volumes: launcherVolumes(corev1.Volume{Name: "tiny-winy-disk", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: "/little-bit/to/the", Type: &hostPathDirOrCreate,
				}}}),
				Mounts: launcherMounts(corev1.VolumeMount{Name: "tiny-winy-disk", MountPath: "/var/run/kubevirt-private/vmi-disks/tiny-winy-disk"}),
			},
		},
		{
			name: "a cloud-init config drive mounts its user and network data secrets under both spellings of each key",
			vmi: volumeTestVMI(withVolumes(virtv1.Volume{Name: "pepitos-drive", VolumeSource: virtv1.VolumeSource{CloudInitConfigDrive: &virtv1.CloudInitConfigDriveSource{
				UserDataSecretRef:    &corev1.LocalObjectReference{Name: "break-dancing-flamingo"},
				NetworkDataSecretRef: &corev1.LocalObjectReference{Name: "hoooonk.hooooonk"},
			}}})),
			want: podVolumes{
				Volumes: launcherVolumes(
					corev1.Volume{Name: "pepitos-drive-udata", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "break-dancing-flamingo"}}},
					corev1.Volume{Name: "pepitos-drive-ndata", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "hoooonk.hooooonk"}}},
				),
				Mounts: launcherMounts(
					corev1.VolumeMount{Name: "pepitos-drive-udata", ReadOnly: true, MountPath: "/var/run/kubevirt-private/secret/pepitos-drive/userdata", SubPath: "userdata"},
					corev1.VolumeMount{Name: "pepitos-drive-udata", ReadOnly: true, MountPath: "/var/run/kubevirt-private/secret/pepitos-drive/userData", SubPath: "userData"},
					corev1.VolumeMount{Name: "pepitos-drive-ndata", ReadOnly: true, MountPath: "/var/run/kubevirt-private/secret/pepitos-drive/networkdata", SubPath: "networkdata"},
					corev1.VolumeMount{Name: "pepitos-drive-ndata", ReadOnly: true, MountPath: "/var/run/kubevirt-private/secret/pepitos-drive/networkData", SubPath: "networkData"},
				),
			},
		},
		{
			name: "a cloud-init NoCloud user data secret is mounted like a config drive's",
			vmi: volumeTestVMI(withVolumes(virtv1.Volume{Name: "cloud-init-user-data-secret-ref", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{
				UserDataSecretRef: &corev1.LocalObjectReference{Name: "some-secret"},
			}}})),
			want: podVolumes{
				Volumes: launcherVolumes(corev1.Volume{Name: "cloud-init-user-data-secret-ref-udata", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "some-secret"}}}),
				Mounts: launcherMounts(
					corev1.VolumeMount{Name: "cloud-init-user-data-secret-ref-udata", ReadOnly: true, MountPath: "/var/run/kubevirt-private/secret/cloud-init-user-data-secret-ref/userdata", SubPath: "userdata"},
					corev1.VolumeMount{Name: "cloud-init-user-data-secret-ref-udata", ReadOnly: true, MountPath: "/var/run/kubevirt-private/secret/cloud-init-user-data-secret-ref/userData", SubPath: "userData"},
				),
			},
		},
		{
			name: "a DataVolume is mounted under vmi-disks and backed by the claim of its name",
			vmi:  volumeTestVMI(withVolumes(dataVolume("dv1", "dv1"))),
			pvcs: []*corev1.PersistentVolumeClaim{claim("dv1", corev1.PersistentVolumeFilesystem)},
			want: podVolumes{
				Volumes: launcherVolumes(claimVolume("dv1", "dv1")),
				Mounts:  launcherMounts(corev1.VolumeMount{Name: "dv1", MountPath: "/var/run/kubevirt-private/vmi-disks/dv1"}),
			},
		},
		{
			name: "a downward API volume a disk uses is mounted read-only under downwardapi",
			vmi: volumeTestVMI(withDisks("downward-then-upward"), withVolumes(virtv1.Volume{Name: "downward-then-upward", VolumeSource: virtv1.VolumeSource{
				DownwardAPI: &virtv1.DownwardAPIVolumeSource{},
			}})),
			want: podVolumes{
				Volumes: launcherVolumes(corev1.Volume{Name: "downward-then-upward", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}}),
				Mounts:  launcherMounts(corev1.VolumeMount{Name: "downward-then-upward", ReadOnly: true, MountPath: "/var/run/kubevirt-private/downwardapi/downward-then-upward"}),
			},
		},
		{
			name: "without changed block tracking the backend-storage claim is not mounted",
			vmi:  volumeTestVMI(),
			in:   volumeInputs{backendStoragePVC: backendPVC},
			want: podVolumes{Volumes: launcherVolumes(), Mounts: launcherMounts()},
		},
		{
			name: "changed block tracking being initializing mounts the vm state volume's meta and cbt subpaths",
			vmi: volumeTestVMI(func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Status.ChangedBlockTracking = &virtv1.ChangedBlockTrackingStatus{State: virtv1.ChangedBlockTrackingInitializing}
			}),
			in: volumeInputs{backendStoragePVC: backendPVC},
			want: podVolumes{
				Volumes: launcherVolumes(claimVolume("vm-state", backendPVC)),
				Mounts: launcherMounts(
					corev1.VolumeMount{Name: "vm-state", MountPath: "/run/kubevirt-private/backend-storage-meta", SubPath: "meta"},
					corev1.VolumeMount{Name: "vm-state", MountPath: "/var/lib/libvirt/qemu/cbt", SubPath: "cbt"},
				),
			},
		},
		{
			name: "a persistent TPM of a root VMI keeps swtpm's state and local CA on the backend-storage claim",
			vmi:  volumeTestVMI(persistentTPM),
			in:   volumeInputs{backendStoragePVC: "persistent-state-for-testvmi12345"},
			want: podVolumes{
				Volumes: launcherVolumes(claimVolume("vm-state", "persistent-state-for-testvmi12345")),
				Mounts: launcherMounts(
					corev1.VolumeMount{Name: "vm-state", MountPath: "/run/kubevirt-private/backend-storage-meta", SubPath: "meta"},
					corev1.VolumeMount{Name: "vm-state", MountPath: "/var/lib/libvirt/swtpm", SubPath: "swtpm"},
					corev1.VolumeMount{Name: "vm-state", MountPath: "/var/lib/swtpm-localca", SubPath: "swtpm-localca"},
				),
			},
		},
		{
			name: "a persistent EFI of a non-root VMI gets an emptyDir per private libvirt directory and its NVRAM on the claim",
			vmi:  volumeTestVMI(persistentEFI, withNonRoot),
			in:   volumeInputs{backendStoragePVC: backendPVC},
			want: podVolumes{
				Volumes: launcherVolumes(claimVolume("vm-state", backendPVC), emptyDirVol("private-libvirt"), emptyDirVol("private-libvirt-qemu")),
				Mounts: launcherMounts(
					corev1.VolumeMount{Name: "vm-state", MountPath: "/run/kubevirt-private/backend-storage-meta", SubPath: "meta"},
					corev1.VolumeMount{Name: "private-libvirt", MountPath: "/var/run/kubevirt-private/libvirt"},
					corev1.VolumeMount{Name: "private-libvirt-qemu", MountPath: "/var/run/kubevirt-private/libvirt/qemu"},
					corev1.VolumeMount{Name: "vm-state", MountPath: "/var/run/kubevirt-private/libvirt/qemu/nvram", SubPath: "nvram"},
				),
			},
		},
		{
			name: "a file mode PVC source is the seventh mount and the eighth volume",
			vmi:  volumeTestVMI(withVolumes(pvcVolume("pvc-volume", "pvcFile"))),
			pvcs: []*corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pvcFile"}}},
			want: podVolumes{
				Volumes: launcherVolumes(claimVolume("pvc-volume", "pvcFile")),
				Mounts:  launcherMounts(corev1.VolumeMount{Name: "pvc-volume", MountPath: "/var/run/kubevirt-private/vmi-disks/pvc-volume"}),
			},
		},
		{
			name: "blockdevice mode PVC and ephemeral sources become devices in volume order",
			vmi: volumeTestVMI(withVolumes(pvcVolume("pvc-volume", "pvcDevice"), virtv1.Volume{Name: "ephemeral-volume", VolumeSource: virtv1.VolumeSource{
				Ephemeral: &virtv1.EphemeralVolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "pvcDevice"}},
			}})),
			pvcs: []*corev1.PersistentVolumeClaim{claim("pvcDevice", corev1.PersistentVolumeBlock)},
			want: podVolumes{
				Volumes: launcherVolumes(claimVolume("pvc-volume", "pvcDevice"), claimVolume("ephemeral-volume", "pvcDevice")),
				Mounts:  launcherMounts(),
				Devices: []corev1.VolumeDevice{{Name: "pvc-volume", DevicePath: "/dev/pvc-volume"}, {Name: "ephemeral-volume", DevicePath: "/dev/ephemeral-volume"}},
			},
		},
		{
			name: "volumes listed as hotplugged in volumeStatus or having the Hotpluggable flag are left out",
			vmi: volumeTestVMI(withHotplug, withVolumes(
				virtv1.Volume{Name: "hotplug-from-spec", VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
					PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "hotplug-from-spec"}, Hotpluggable: true,
				}}},
				pvcVolume("hotplug-from-status", "hotplug-from-status"),
				pvcVolume("permanent-vol", "permanent-vol"),
			), func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Status.VolumeStatus = []virtv1.VolumeStatus{{Name: "hotplug-from-status", HotplugVolume: &virtv1.HotplugVolumeStatus{}}}
			}),
			pvcs: []*corev1.PersistentVolumeClaim{
				claim("hotplug-from-spec", corev1.PersistentVolumeFilesystem),
				claim("hotplug-from-status", corev1.PersistentVolumeFilesystem),
				claim("permanent-vol", corev1.PersistentVolumeFilesystem),
			},
			want: podVolumes{
				Volumes: launcherVolumes(claimVolume("permanent-vol", "permanent-vol"), hotplugDisksVol),
				Mounts:  launcherMounts(corev1.VolumeMount{Name: "permanent-vol", MountPath: "/var/run/kubevirt-private/vmi-disks/permanent-vol"}, hotplugDisksMount),
			},
		},
		{
			name: "a downwardMetrics volume is a 1Mi emptyDir backed by memory, mounted seventh",
			vmi: volumeTestVMI(withVolumes(virtv1.Volume{Name: "downardMetrics", VolumeSource: virtv1.VolumeSource{
				DownwardMetrics: &virtv1.DownwardMetricsVolumeSource{},
			}})),
			want: podVolumes{
				Volumes: launcherVolumes(corev1.Volume{Name: "downardMetrics", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi")),
				}}}),
				Mounts: launcherMounts(corev1.VolumeMount{Name: "downardMetrics", MountPath: "/var/run/kubevirt-private/downwardmetric-disk"}),
			},
		},
		{
			name: "a configMap volume source no disk uses is a volume without a mount",
			vmi: volumeTestVMI(withVolumes(virtv1.Volume{Name: "configmap-volume", VolumeSource: virtv1.VolumeSource{ConfigMap: &virtv1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "test-configmap"},
			}}})),
			want: podVolumes{
				Volumes: launcherVolumes(corev1.Volume{Name: "configmap-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "test-configmap"},
				}}}),
				Mounts: launcherMounts(),
			},
		},
		{
			name: "a secret volume source a disk uses is mounted read-only under secret, optional as the VMI says",
			vmi: volumeTestVMI(withDisks("secret-volume"), withVolumes(virtv1.Volume{Name: "secret-volume", VolumeSource: virtv1.VolumeSource{Secret: &virtv1.SecretVolumeSource{
				SecretName: "test-secret", Optional: ptr.To(true),
			}}})),
			want: podVolumes{
				Volumes: launcherVolumes(corev1.Volume{Name: "secret-volume", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: "test-secret", Optional: ptr.To(true),
				}}}),
				Mounts: launcherMounts(corev1.VolumeMount{Name: "secret-volume", ReadOnly: true, MountPath: "/var/run/kubevirt-private/secret/secret-volume"}),
			},
		},
		{
			name: "config volumes get their volumes in volume order and their mounts in disk order",
			vmi: volumeTestVMI(withDisks("cm", "sec"), withVolumes(
				virtv1.Volume{Name: "sec", VolumeSource: virtv1.VolumeSource{Secret: &virtv1.SecretVolumeSource{SecretName: "s"}}},
				virtv1.Volume{Name: "cm", VolumeSource: virtv1.VolumeSource{ConfigMap: &virtv1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}},
			)),
			want: podVolumes{
				Volumes: launcherVolumes(
					corev1.Volume{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
					corev1.Volume{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}},
				),
				Mounts: launcherMounts(
					corev1.VolumeMount{Name: "cm", ReadOnly: true, MountPath: "/var/run/kubevirt-private/config-map/cm"},
					corev1.VolumeMount{Name: "sec", ReadOnly: true, MountPath: "/var/run/kubevirt-private/secret/sec"},
				),
			},
		},
		{
			name: "a Sysprep ConfigMap is mounted read-only under sysprep, the ninth volume with hotplug support",
			vmi: volumeTestVMI(withHotplug, withVolumes(virtv1.Volume{Name: "sysprep-configmap-volume", VolumeSource: virtv1.VolumeSource{Sysprep: &virtv1.SysprepSource{
				ConfigMap: &corev1.LocalObjectReference{Name: "test-sysprep-configmap"},
			}}})),
			want: podVolumes{
				Volumes: launcherVolumes(corev1.Volume{Name: "sysprep-configmap-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "test-sysprep-configmap"},
				}}}, hotplugDisksVol),
				Mounts: launcherMounts(corev1.VolumeMount{Name: "sysprep-configmap-volume", ReadOnly: true, MountPath: "/var/run/kubevirt-private/sysprep/sysprep-configmap-volume"}, hotplugDisksMount),
			},
		},
		{
			name: "a Sysprep SecretRef is mounted read-only under sysprep",
			vmi: volumeTestVMI(withVolumes(virtv1.Volume{Name: "sysprep-configmap-volume", VolumeSource: virtv1.VolumeSource{Sysprep: &virtv1.SysprepSource{
				Secret: &corev1.LocalObjectReference{Name: "test-sysprep-secret"},
			}}})),
			want: podVolumes{
				Volumes: launcherVolumes(corev1.Volume{Name: "sysprep-configmap-volume", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "test-sysprep-secret"}}}),
				Mounts:  launcherMounts(corev1.VolumeMount{Name: "sysprep-configmap-volume", ReadOnly: true, MountPath: "/var/run/kubevirt-private/sysprep/sysprep-configmap-volume"}),
			},
		},
		{
			name: "the secrets of an SSH key and a user/password access credential are mounted read-only, a config drive's user data adding none",
			vmi: volumeTestVMI(
				withVolumes(virtv1.Volume{Name: "cloud-init-user-data-secret-ref", VolumeSource: virtv1.VolumeSource{CloudInitConfigDrive: &virtv1.CloudInitConfigDriveSource{UserData: "somedata"}}}),
				func(vmi *virtv1.VirtualMachineInstance) {
					vmi.Spec.AccessCredentials = []virtv1.AccessCredential{
						{SSHPublicKey: &virtv1.SSHPublicKeyAccessCredential{
							Source:            virtv1.SSHPublicKeyAccessCredentialSource{Secret: &virtv1.AccessCredentialSecretSource{SecretName: "my-pkey"}},
							PropagationMethod: virtv1.SSHPublicKeyAccessCredentialPropagationMethod{ConfigDrive: &virtv1.ConfigDriveSSHPublicKeyAccessCredentialPropagation{}},
						}},
						{UserPassword: &virtv1.UserPasswordAccessCredential{
							Source:            virtv1.UserPasswordAccessCredentialSource{Secret: &virtv1.AccessCredentialSecretSource{SecretName: "my-password"}},
							PropagationMethod: virtv1.UserPasswordAccessCredentialPropagationMethod{QemuGuestAgent: &virtv1.QemuGuestAgentUserPasswordAccessCredentialPropagation{}},
						}},
					}
				}),
			want: podVolumes{
				Volumes: launcherVolumes(
					corev1.Volume{Name: "my-pkey-access-cred", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "my-pkey"}}},
					corev1.Volume{Name: "my-password-access-cred", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "my-password"}}},
				),
				Mounts: launcherMounts(
					corev1.VolumeMount{Name: "my-pkey-access-cred", ReadOnly: true, MountPath: "/var/run/kubevirt-private/secret/my-pkey-access-cred"},
					corev1.VolumeMount{Name: "my-password-access-cred", ReadOnly: true, MountPath: "/var/run/kubevirt-private/secret/my-password-access-cred"},
				),
			},
		},
		{
			name: "a mixture of RWX/RWO DV and PVC disks picks up the ReadWriteMany ones as shared filesystems",
			vmi: volumeTestVMI(withVolumes(
				dataVolume("disk0", "dv-disk0"),
				pvcVolume("disk1", "dv-disk1"),
				dataVolume("disk2", "dv-disk2"),
			)),
			pvcs: []*corev1.PersistentVolumeClaim{
				claim("dv-disk0", corev1.PersistentVolumeFilesystem, corev1.ReadWriteMany),
				claim("dv-disk1", corev1.PersistentVolumeFilesystem, corev1.ReadWriteMany),
				claim("dv-disk2", corev1.PersistentVolumeFilesystem, corev1.ReadWriteOnce),
			},
			want: podVolumes{
				Volumes: launcherVolumes(claimVolume("disk0", "dv-disk0"), claimVolume("disk1", "dv-disk1"), claimVolume("disk2", "dv-disk2")),
				Mounts: launcherMounts(
					corev1.VolumeMount{Name: "disk0", MountPath: "/var/run/kubevirt-private/vmi-disks/disk0"},
					corev1.VolumeMount{Name: "disk1", MountPath: "/var/run/kubevirt-private/vmi-disks/disk1"},
					corev1.VolumeMount{Name: "disk2", MountPath: "/var/run/kubevirt-private/vmi-disks/disk2"},
				),
				SharedFilesystemPaths: []string{"/var/run/kubevirt-private/vmi-disks/disk0", "/var/run/kubevirt-private/vmi-disks/disk1"},
			},
		},
		{
			name:    "an SR-IOV interface gets the network-info annotation through the downward API",
			vmi:     volumeTestVMI(withInterfaces(iface("network1", nil, true))),
			cluster: volumeTestCluster{cfg: deviceInfoPlugins},
			want:    podVolumes{Volumes: launcherVolumes(networkInfoVol), Mounts: launcherMounts(networkInfoMount)},
		},
		{
			name:    "binding plugin device-info and SR-IOV interfaces share a single network-info volume and mount",
			vmi:     volumeTestVMI(withInterfaces(iface("network1", nil, true), iface("network2", &virtv1.PluginBinding{Name: "deviceinfo"}, false))),
			cluster: volumeTestCluster{cfg: deviceInfoPlugins},
			want:    podVolumes{Volumes: launcherVolumes(networkInfoVol), Mounts: launcherMounts(networkInfoMount)},
		},
		{
			name:    "a binding plugin without device info gets no network-info volume",
			vmi:     volumeTestVMI(withInterfaces(iface("default", nil, false), iface("network1", &virtv1.PluginBinding{Name: "no_deviceinfo"}, false))),
			cluster: volumeTestCluster{cfg: deviceInfoPlugins},
			want:    podVolumes{Volumes: launcherVolumes(), Mounts: launcherMounts()},
		},
		{
			name:    "with ImageVolume a container disk is an image volume mounted read-only as disk_N and the launcher image brings the binary",
			vmi:     volumeTestVMI(withDisks("r0"), withVolumes(containerDiskVolume("r0", "someImage"))),
			cluster: volumeTestCluster{cfg: virtv1.KubeVirtConfiguration{ImagePullPolicy: corev1.PullIfNotPresent}, gates: []string{"ImageVolume"}},
			in:      volumeInputs{launcherImage: "kubevirt/virt-launcher"},
			want: podVolumes{
				Volumes: imageVolumeLauncherVolumes(
					corev1.Volume{Name: "r0", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "someImage"}}},
					corev1.Volume{Name: "launcher-volume", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "kubevirt/virt-launcher", PullPolicy: corev1.PullIfNotPresent}}},
				),
				Mounts: imageVolumeLauncherMounts(corev1.VolumeMount{Name: "r0", MountPath: "/var/run/kubevirt-image-volume/disk_0", ReadOnly: true}),
			},
		},
		{
			name:    "with ImageVolume a kernel boot image is an image volume mounted read-only at the kernel boot directory",
			vmi:     volumeTestVMI(kernelBoot("someImage")),
			cluster: volumeTestCluster{gates: []string{"ImageVolume"}},
			in:      volumeInputs{launcherImage: "kubevirt/virt-launcher"},
			want: podVolumes{
				Volumes: imageVolumeLauncherVolumes(
					corev1.Volume{Name: "kernel-boot-volume", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "someImage"}}},
					corev1.Volume{Name: "launcher-volume", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "kubevirt/virt-launcher"}}},
				),
				Mounts: imageVolumeLauncherMounts(corev1.VolumeMount{Name: "kernel-boot-volume", MountPath: "/var/run/kubevirt-kernel-boot", ReadOnly: true}),
			},
		},
		{
			name:    "with ImageVolume a migration target uses the digests extracted from the source pod and needs no launcher binary volume",
			vmi:     volumeTestVMI(withDisks("r0"), withVolumes(containerDiskVolume("r0", "someImage")), kernelBoot("kernelImage")),
			cluster: volumeTestCluster{gates: []string{"ImageVolume"}},
			in: volumeInputs{launcherImage: "kubevirt/virt-launcher", imageIDs: map[string]string{
				"r0": "someImage@sha256:abcd1234567890", "kernel-boot-volume": "kernelImage@sha256:efgh5678901234",
			}},
			want: podVolumes{
				Volumes: imageVolumeLauncherVolumes(
					corev1.Volume{Name: "r0", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "someImage@sha256:abcd1234567890"}}},
					corev1.Volume{Name: "kernel-boot-volume", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "kernelImage@sha256:efgh5678901234"}}},
				),
				Mounts: imageVolumeLauncherMounts(
					corev1.VolumeMount{Name: "r0", MountPath: "/var/run/kubevirt-image-volume/disk_0", ReadOnly: true},
					corev1.VolumeMount{Name: "kernel-boot-volume", MountPath: "/var/run/kubevirt-kernel-boot", ReadOnly: true},
				),
			},
		},
		{
			name: "without ImageVolume a container disk adds no volume of its own",
			vmi:  volumeTestVMI(withDisks("r0"), withVolumes(containerDiskVolume("r0", "someImage"))),
			want: podVolumes{Volumes: launcherVolumes(), Mounts: launcherMounts()},
		},
		{
			name: "hugepages get a hugepages-backed emptyDir and libvirt's hugetlbfs directory",
			vmi: volumeTestVMI(func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Memory = &virtv1.Memory{Hugepages: &virtv1.Hugepages{PageSize: "2Mi"}}
			}),
			want: podVolumes{
				Volumes: launcherVolumes(
					corev1.Volume{Name: "hugepages", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumHugePages}}},
					emptyDirVol("hugetblfs-dir"),
				),
				Mounts: launcherMounts(
					corev1.VolumeMount{Name: "hugepages", MountPath: "/dev/hugepages"},
					corev1.VolumeMount{Name: "hugetblfs-dir", MountPath: "/dev/hugepages/libvirt/qemu"},
				),
			},
		},
		{
			name: "hook sidecars share the hook sockets directory with compute",
			vmi:  volumeTestVMI(),
			in:   volumeInputs{hookSidecars: true},
			want: podVolumes{
				Volumes: launcherVolumes(emptyDirVol("hook-sidecar-sockets")),
				Mounts:  launcherMounts(corev1.VolumeMount{Name: "hook-sidecar-sockets", MountPath: "/var/run/kubevirt-hooks"}),
			},
		},
		{
			name: "a virtiofs filesystem gives compute the virtiofs socket directory, last",
			vmi: volumeTestVMI(withHotplug, withVolumes(virtv1.Volume{Name: "secret-volume", VolumeSource: virtv1.VolumeSource{Secret: &virtv1.SecretVolumeSource{SecretName: "test-secret"}}}),
				func(vmi *virtv1.VirtualMachineInstance) {
					vmi.Spec.Domain.Devices.Filesystems = []virtv1.Filesystem{{Name: "secret-volume", Virtiofs: &virtv1.FilesystemVirtiofs{}}}
				}),
			want: podVolumes{
				Volumes: launcherVolumes(
					corev1.Volume{Name: "secret-volume", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "test-secret"}}},
					hotplugDisksVol,
					emptyDirVol("virtiofs-containers"),
				),
				Mounts: launcherMounts(hotplugDisksMount, corev1.VolumeMount{Name: "virtiofs-containers", MountPath: "/var/run/kubevirt/virtiofs-containers"}),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := renderVolumes(tc.vmi, tc.cluster, &StaticObjects{Claims: tc.pvcs}, tc.in)
			if err != nil {
				t.Fatalf("renderVolumes: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, quantityComparer); diff != "" {
				t.Errorf("volumes differ (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRenderVolumesErrors(t *testing.T) {
	tests := []struct {
		name  string
		vmi   *virtv1.VirtualMachineInstance
		check func(error) bool
	}{
		{
			name: "a non existing pvc source results in a PVCNotFoundError",
			vmi:  volumeTestVMI(withVolumes(pvcVolume("pvc-volume", "pvcNotExisting"))),
			check: func(err error) bool {
				var nf PVCNotFoundError
				return errors.As(err, &nf) && nf.Name == "pvcNotExisting"
			},
		},
		{
			name:  "a DataVolume without its claim yet results in a PVCNotFoundError",
			vmi:   volumeTestVMI(withVolumes(dataVolume("dv", "not-imported-yet"))),
			check: func(err error) bool { var nf PVCNotFoundError; return errors.As(err, &nf) },
		},
		{
			name:  "a Sysprep volume with neither a Secret nor a ConfigMap is an error",
			vmi:   volumeTestVMI(withVolumes(virtv1.Volume{Name: "sysprep", VolumeSource: virtv1.VolumeSource{Sysprep: &virtv1.SysprepSource{}}})),
			check: func(err error) bool { return err != nil },
		},
		{
			name: "a persistent TPM without a backend-storage claim waits for the claim",
			vmi: volumeTestVMI(func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.TPM = &virtv1.TPMDevice{Persistent: ptr.To(true)}
			}),
			check: func(err error) bool { return errors.Is(err, ErrNoBackendStoragePVC) },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderVolumes(tc.vmi, volumeTestCluster{}, &StaticObjects{}, volumeInputs{})
			if !tc.check(err) {
				t.Errorf("unexpected error %v", err)
			}
		})
	}
}

func TestVolumeImagePullSecrets(t *testing.T) {
	withSecret := func(v virtv1.Volume, secret string) virtv1.Volume {
		v.ContainerDisk.ImagePullSecret = secret
		return v
	}
	tests := []struct {
		name string
		vmi  *virtv1.VirtualMachineInstance
		want []corev1.LocalObjectReference
	}{
		{
			name: "a VMI without container disks has no pull secrets of its own",
			vmi:  volumeTestVMI(withVolumes(dataVolume("dv", "dv"))),
		},
		{
			name: "container disk pull secrets come in volume order",
			vmi: volumeTestVMI(withVolumes(
				withSecret(containerDiskVolume("containerdisk1", "my-image-1"), "pull-secret-2"),
				containerDiskVolume("containerdisk2", "my-image-2"),
				withSecret(containerDiskVolume("containerdisk3", "my-image-3"), "pull-secret-1"),
			)),
			want: []corev1.LocalObjectReference{{Name: "pull-secret-2"}, {Name: "pull-secret-1"}},
		},
		{
			name: "identical secrets are deduplicated",
			vmi: volumeTestVMI(withVolumes(
				withSecret(containerDiskVolume("containerdisk1", "my-image-1"), "pull-secret-2"),
				withSecret(containerDiskVolume("containerdisk2", "my-image-2"), "pull-secret-2"),
			)),
			want: []corev1.LocalObjectReference{{Name: "pull-secret-2"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, imagePullSecrets(tc.vmi)); diff != "" {
				t.Errorf("pull secrets differ (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVolumeServiceAccountName(t *testing.T) {
	sa := func(name, account string) virtv1.Volume {
		return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{ServiceAccount: &virtv1.ServiceAccountVolumeSource{ServiceAccountName: account}}}
	}
	tests := []struct {
		name string
		vmi  *virtv1.VirtualMachineInstance
		want string
	}{
		{name: "a service account volume's account is the pod's", vmi: volumeTestVMI(withVolumes(dataVolume("dv", "dv"), sa("serviceaccount-volume", "testAccount"))), want: "testAccount"},
		{name: "the first of two service account volumes wins", vmi: volumeTestVMI(withVolumes(sa("a", "first"), sa("b", "second"))), want: "first"},
		{name: "without a service account volume the pod has none", vmi: volumeTestVMI(withVolumes(dataVolume("dv", "dv")))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := serviceAccountName(tc.vmi); got != tc.want {
				t.Errorf("serviceAccountName = %q, want %q", got, tc.want)
			}
		})
	}
}
