package template

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// Container disks (KubeVirt's pkg/container-disk). Without the ImageVolume
// gate each container disk, and the kernel boot image, runs in a container
// of its own image: an init container pulls the image before virt-launcher
// starts, and a long-running one serves the disk to virt-handler, which
// copies it under containerDiskDataDir. With the gate kubelet mounts the
// images as volumes (addImageVolumes) and init containers only report the
// images' digests, for migrations to run the very same images.
const (
	containerDiskBinary = "/usr/bin/container-disk"
	// containerDiskBinaryDir is where image-volume init containers find
	// the launcher image's container-disk binary.
	containerDiskBinaryDir = "/container-disk-binary"
	// diskContainerPrefix prefixes a volume's name to name its containers;
	// sourceImageIDs finds them by it.
	diskContainerPrefix = "volume"
	kernelBootDiskName  = "kernel-boot"
)

func hasContainerDisk(vmi *virtv1.VirtualMachineInstance) bool {
	return slices.ContainsFunc(vmi.Spec.Volumes, func(v virtv1.Volume) bool { return v.ContainerDisk != nil })
}

func hasKernelBootImage(vmi *virtv1.VirtualMachineInstance) bool {
	fw := vmi.Spec.Domain.Firmware
	return fw != nil && fw.KernelBoot != nil && fw.KernelBoot.Container != nil
}

// containerDiskMountDir is where a VMI's disk containers put their disks
// (containerdisk.GetVolumeMountDirOnGuest).
func containerDiskMountDir(vmi *virtv1.VirtualMachineInstance) string {
	return path.Join(containerDiskDataDir, string(vmi.UID))
}

// containerDiskContainers are the long-running containers serving the
// VMI's container disks, in volume order (containerdisk.GenerateContainers).
// imageIDs replace the images of a migration target.
func containerDiskContainers(vmi *virtv1.VirtualMachineInstance, cluster Cluster, imageIDs map[string]string) []corev1.Container {
	return diskContainers(vmi, cluster, imageIDs, false)
}

// containerDiskInitContainers pull the container disks' images before
// virt-launcher starts (containerdisk.GenerateInitContainers).
func containerDiskInitContainers(vmi *virtv1.VirtualMachineInstance, cluster Cluster, imageIDs map[string]string) []corev1.Container {
	return diskContainers(vmi, cluster, imageIDs, true)
}

func diskContainers(vmi *virtv1.VirtualMachineInstance, cluster Cluster, imageIDs map[string]string, init bool) []corev1.Container {
	var out []corev1.Container
	for i, v := range vmi.Spec.Volumes {
		// The kernel boot image has its own container, whose volume name
		// no disk may take.
		if v.Name == kernelBootVolume || v.ContainerDisk == nil {
			continue
		}
		image := imageOrID(imageIDs, v.Name, v.ContainerDisk.Image)
		out = append(out, diskContainer(vmi, cluster, v.Name, image, v.ContainerDisk.ImagePullPolicy, "disk_"+strconv.Itoa(i), init))
	}
	return out
}

// kernelBootContainer serves the kernel boot image's kernel and initrd, nil
// without one (containerdisk.GenerateKernelBootContainer).
func kernelBootContainer(vmi *virtv1.VirtualMachineInstance, cluster Cluster, imageIDs map[string]string) *corev1.Container {
	return kernelBootDiskContainer(vmi, cluster, imageIDs, false)
}

// kernelBootInitContainer pulls the kernel boot image, nil without one
// (containerdisk.GenerateKernelBootInitContainer).
func kernelBootInitContainer(vmi *virtv1.VirtualMachineInstance, cluster Cluster, imageIDs map[string]string) *corev1.Container {
	return kernelBootDiskContainer(vmi, cluster, imageIDs, true)
}

func kernelBootDiskContainer(vmi *virtv1.VirtualMachineInstance, cluster Cluster, imageIDs map[string]string, init bool) *corev1.Container {
	if !hasKernelBootImage(vmi) {
		return nil
	}
	kb := vmi.Spec.Domain.Firmware.KernelBoot.Container
	c := diskContainer(vmi, cluster, kernelBootVolume, imageOrID(imageIDs, kernelBootVolume, kb.Image), kb.ImagePullPolicy, kernelBootDiskName, init)
	return &c
}

// diskContainer runs the container-disk binary, which virt-bin-share-dir
// receives from the container-disk-binary init container, in a disk's
// image: as an init container it exits at once (the pull was the point),
// otherwise it serves the disk as diskName.
func diskContainer(vmi *virtv1.VirtualMachineInstance, cluster Cluster, volume, image string, pullPolicy corev1.PullPolicy, diskName string, init bool) corev1.Container {
	mountDir := containerDiskMountDir(vmi)
	name := diskContainerPrefix + volume
	args := []string{"--copy-path", path.Join(mountDir, diskName)}
	if init {
		name += "-init"
		args = []string{"--no-op"}
	}
	return corev1.Container{
		Name:            name,
		Image:           image,
		ImagePullPolicy: pullPolicy,
		Command:         []string{containerDiskBinary},
		Args:            args,
		VolumeMounts: []corev1.VolumeMount{
			{Name: containerDisksVolume, MountPath: mountDir},
			{Name: virtBinDirVolume, MountPath: "/usr/bin"},
		},
		Resources:       containerDiskResources(vmi, cluster),
		SecurityContext: supportContainerSecurityContext(),
	}
}

// imageVolumeInitContainers report, with the ImageVolume gate, the digests
// of the container disks' and the kernel boot image that imageIDs does not
// know yet: kubelet records an init container's image ID in the pod's
// status, where sourceImageIDs reads it when the VMI migrates. (The
// else-branch of renderLaunchManifest's init containers.)
func imageVolumeInitContainers(vmi *virtv1.VirtualMachineInstance, cluster Cluster, imageIDs map[string]string) []corev1.Container {
	var out []corev1.Container
	for _, v := range vmi.Spec.Volumes {
		if v.ContainerDisk == nil || strings.Contains(imageIDs[v.Name], imageDigestMarker) {
			continue
		}
		out = append(out, imageVolumeInitContainer(vmi, cluster, v.Name, v.ContainerDisk.Image, v.ContainerDisk.ImagePullPolicy))
	}
	if hasKernelBootImage(vmi) && !strings.Contains(imageIDs[kernelBootVolume], imageDigestMarker) {
		kb := vmi.Spec.Domain.Firmware.KernelBoot.Container
		out = append(out, imageVolumeInitContainer(vmi, cluster, kernelBootVolume, kb.Image, kb.ImagePullPolicy))
	}
	return out
}

// imageVolumeInitContainer runs the launcher image's container-disk binary,
// from the launcher-volume image volume, in image
// (containerdisk.CreateImageVolumeInitContainer).
func imageVolumeInitContainer(vmi *virtv1.VirtualMachineInstance, cluster Cluster, volume, image string, pullPolicy corev1.PullPolicy) corev1.Container {
	return corev1.Container{
		Name:            diskContainerPrefix + volume,
		Image:           image,
		ImagePullPolicy: pullPolicy,
		Command:         []string{path.Join(containerDiskBinaryDir, containerDiskBinary)},
		Args:            []string{"--no-op"},
		Resources:       containerDiskResources(vmi, cluster),
		SecurityContext: supportContainerSecurityContext(),
		VolumeMounts:    []corev1.VolumeMount{readOnlyMount(launcherBinaryVolume, containerDiskBinaryDir)},
	}
}

// supportContainerSecurityContext is what every helper container of the
// launcher pod runs with: qemu, no privilege escalation, no capabilities.
func supportContainerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser:                ptr.To(nonRootUID),
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// sourceImageIDs are the exact images a migration source runs its
// container disks and kernel boot image from, by volume name
// (containerdisk.ExtractImageIDsFromSourcePod): the VMI's images, with the
// digest kubelet reported for each disk's container. With image volumes
// the digest is in the source pod's volumes once a first migration put it
// there, else in its init containers' statuses.
func sourceImageIDs(vmi *virtv1.VirtualMachineInstance, source *corev1.Pod, imageVolumes bool) (map[string]string, error) {
	ids := map[string]string{}
	for _, v := range vmi.Spec.Volumes {
		if v.ContainerDisk != nil {
			ids[v.Name] = v.ContainerDisk.Image
		}
	}
	if hasKernelBootImage(vmi) {
		ids[kernelBootVolume] = vmi.Spec.Domain.Firmware.KernelBoot.Container.Image
	}

	statuses := slices.Clone(source.Status.ContainerStatuses)
	if imageVolumes {
		statuses = append(statuses, source.Status.InitContainerStatuses...)
		for _, v := range source.Spec.Volumes {
			if _, isDisk := ids[v.Name]; isDisk && v.Image != nil && strings.Contains(v.Image.Reference, imageDigestMarker) {
				ids[v.Name] = v.Image.Reference
			}
		}
	}

	for _, s := range statuses {
		volume, ok := strings.CutPrefix(s.Name, diskContainerPrefix)
		if !ok {
			continue
		}
		image, isDisk := ids[volume]
		if !isDisk {
			continue
		}
		id, err := imageWithDigest(image, s.ImageID)
		if err != nil {
			return nil, err
		}
		ids[volume] = id
	}
	return ids, nil
}

var imageDigest = regexp.MustCompile(`sha256:([a-zA-Z0-9]+)`)

// imageWithDigest is image, without its tag or digest, at the digest of a
// container status's imageID, whichever of docker's, containerd's or
// CRI-O's forms that takes.
func imageWithDigest(image, imageID string) (string, error) {
	base := image
	if before, _, found := strings.Cut(image, imageDigestMarker); found {
		base = before
	} else if colon := strings.LastIndex(image, ":"); colon > strings.LastIndex(image, "/") {
		base = image[:colon] // a tag, not a registry's port
	}
	m := imageDigest.FindStringSubmatch(imageID)
	if len(m) < 2 {
		return "", fmt.Errorf("failed to identify image digest for container %q with id %q", image, imageID)
	}
	return base + imageDigestMarker + m[1], nil
}
