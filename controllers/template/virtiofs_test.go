package template

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// The cases below are KubeVirt v1.8.1's pkg/virt-controller/services
// virtiofs_test.go, with whole containers where it checks fields.

func virtiofsWant(volume, sharedDir string, mountVolume bool) corev1.Container {
	mounts := []corev1.VolumeMount{{Name: "virtiofs-containers", MountPath: "/var/run/kubevirt/virtiofs-containers"}}
	if mountVolume {
		mounts = append(mounts, corev1.VolumeMount{Name: volume, MountPath: sharedDir})
	}
	return corev1.Container{
		Name:            "virtiofs-" + volume,
		Image:           "virtiofs-container",
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"/usr/libexec/virtiofsd"},
		Args: []string{
			"--socket-path=/var/run/kubevirt/virtiofs-containers/" + volume + ".sock",
			"--shared-dir=" + sharedDir,
			"--sandbox=none",
			"--cache=auto",
			"--migration-on-error=guest-error",
			"--migration-mode=find-paths",
		},
		VolumeMounts: mounts,
		Resources:    defaultVirtiofsResources,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr.To[int64](107),
			RunAsGroup:               ptr.To[int64](107),
			RunAsNonRoot:             ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

func withFilesystems(names ...string) func(*virtv1.VirtualMachineInstance) {
	return func(vmi *virtv1.VirtualMachineInstance) {
		for _, n := range names {
			vmi.Spec.Domain.Devices.Filesystems = append(vmi.Spec.Domain.Devices.Filesystems, virtv1.Filesystem{Name: n, Virtiofs: &virtv1.FilesystemVirtiofs{}})
		}
	}
}

func TestVirtiofsContainers(t *testing.T) {
	secret := virtv1.Volume{Name: "secret-volume", VolumeSource: virtv1.VolumeSource{Secret: &virtv1.SecretVolumeSource{SecretName: "test-secret"}}}
	tests := []struct {
		name string
		vmi  *virtv1.VirtualMachineInstance
		want []corev1.Container
	}{
		{
			name: "PVC and secret filesystems get unprivileged containers only, in volume order",
			vmi:  volumeTestVMI(withVolumes(pvcVolume("sharedtestdisk", "testclaim"), secret), withFilesystems("secret-volume", "sharedtestdisk")),
			want: []corev1.Container{
				virtiofsWant("sharedtestdisk", "/sharedtestdisk", true),
				virtiofsWant("secret-volume", "/var/run/kubevirt-private/secret/secret-volume", true),
			},
		},
		{
			name: "ContainerPath volumes are skipped",
			vmi: volumeTestVMI(withVolumes(pvcVolume("pvc-volume", "testclaim"), virtv1.Volume{Name: "token-volume", VolumeSource: virtv1.VolumeSource{
				ContainerPath: &virtv1.ContainerPathVolumeSource{Path: "/var/run/secrets/token"},
			}}), withFilesystems("pvc-volume", "token-volume")),
			want: []corev1.Container{virtiofsWant("pvc-volume", "/pvc-volume", true)},
		},
		{
			name: "ConfigMap and downward API volumes are shared from where compute would mount them",
			vmi: volumeTestVMI(withVolumes(
				virtv1.Volume{Name: "cm", VolumeSource: virtv1.VolumeSource{ConfigMap: &virtv1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}}},
				virtv1.Volume{Name: "dapi", VolumeSource: virtv1.VolumeSource{DownwardAPI: &virtv1.DownwardAPIVolumeSource{}}},
			), withFilesystems("cm", "dapi")),
			want: []corev1.Container{
				virtiofsWant("cm", "/var/run/kubevirt-private/config-map/cm", true),
				virtiofsWant("dapi", "/var/run/kubevirt-private/downwardapi/dapi", true),
			},
		},
		{
			name: "a service account is shared from kubelet's automounted token, without a mount of its own",
			vmi: volumeTestVMI(withVolumes(virtv1.Volume{Name: "sa", VolumeSource: virtv1.VolumeSource{
				ServiceAccount: &virtv1.ServiceAccountVolumeSource{ServiceAccountName: "default"},
			}}), withFilesystems("sa")),
			want: []corev1.Container{virtiofsWant("sa", "/var/run/secrets/kubernetes.io/serviceaccount/", false)},
		},
		{
			name: "a VMI without filesystems has no virtiofs containers",
			vmi:  volumeTestVMI(withVolumes(secret)),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := virtiofsContainers(tc.vmi, "virtiofs-container", volumeTestCluster{})
			if diff := cmp.Diff(tc.want, got, quantityComparer); diff != "" {
				t.Errorf("virtiofs containers differ (-want +got):\n%s", diff)
			}
		})
	}
}
