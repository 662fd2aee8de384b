package template

import (
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// virtiofsSocketDir holds the virtiofsd sockets that the virtiofs
// containers share with compute (KubeVirt's pkg/virtiofs).
const virtiofsSocketDir = virtShareDir + "/" + virtiofsVolume

// virtiofsRequested: some filesystem is shared with virtiofs
// (util.IsVMIVirtiofsEnabled), which gives compute the socket directory.
func virtiofsRequested(vmi *virtv1.VirtualMachineInstance) bool {
	for _, fs := range vmi.Spec.Domain.Devices.Filesystems {
		if fs.Virtiofs != nil {
			return true
		}
	}
	return false
}

// virtiofsContainers run an unprivileged virtiofsd, from the launcher image,
// for every volume a filesystem device shares, in volume order
// (generateVirtioFSContainers). ContainerPath volumes get none: external
// mutators inject their volumes after the pod is created, so KubeVirt's pod
// mutating webhook adds their containers.
func virtiofsContainers(vmi *virtv1.VirtualMachineInstance, launcherImage string, cluster Cluster) []corev1.Container {
	shared := map[string]bool{}
	for _, fs := range vmi.Spec.Domain.Devices.Filesystems {
		shared[fs.Name] = true
	}
	var out []corev1.Container
	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		if !shared[v.Name] || v.ContainerPath != nil {
			continue
		}
		out = append(out, virtiofsContainer(v, launcherImage, virtiofsResources(vmi, cluster)))
	}
	return out
}

func virtiofsContainer(v *virtv1.Volume, image string, resources corev1.ResourceRequirements) corev1.Container {
	source := virtiofsSharedDir(v)
	mounts := []corev1.VolumeMount{{Name: virtiofsVolume, MountPath: virtiofsSocketDir}}
	// A service account's token is mounted by kubelet
	// (automountServiceAccountToken), not by a volume of this pod.
	if v.ServiceAccount == nil {
		mounts = append(mounts, corev1.VolumeMount{Name: v.Name, MountPath: source})
	}
	return corev1.Container{
		Name:            "virtiofs-" + v.Name,
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent, // KubeVirt ignores the CR's policy here
		Command:         []string{"/usr/libexec/virtiofsd"},
		Args: []string{
			fmt.Sprintf("--socket-path=%s", filepath.Join(virtiofsSocketDir, v.Name+".sock")),
			fmt.Sprintf("--shared-dir=%s", source),
			"--sandbox=none",
			"--cache=auto",
			// Files that cannot migrate become errors in the guest instead
			// of failing the migration.
			"--migration-on-error=guest-error",
			// Finds migrated files' paths through /proc/self/fd, which needs
			// no privilege.
			"--migration-mode=find-paths",
		},
		VolumeMounts: mounts,
		Resources:    resources,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr.To(nonRootUID),
			RunAsGroup:               ptr.To(nonRootUID),
			RunAsNonRoot:             ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

// virtiofsSharedDir is where the virtiofs container sees the shared volume.
func virtiofsSharedDir(v *virtv1.Volume) string {
	switch {
	case v.ConfigMap != nil:
		return filepath.Join(configMapSourceDir, v.Name)
	case v.Secret != nil:
		return filepath.Join(secretSourceDir, v.Name)
	case v.ServiceAccount != nil:
		return serviceAccountTokenDir
	case v.DownwardAPI != nil:
		return filepath.Join(downwardAPISourceDir, v.Name)
	}
	return "/" + v.Name
}
