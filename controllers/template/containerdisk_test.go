package template

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// The cases below are KubeVirt v1.8.1's own (pkg/container-disk
// container-disk_test.go, pkg/virt-controller/services container_disk_test.go
// and template_test.go), with whole containers where those check fields.

// KubeVirt's support container resources for a cluster that configures
// none, and a VMI without dedicated CPUs or guaranteed QOS (resources.go
// computes them; its own tests cover the rest).
var (
	defaultContainerDiskResources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("1m"),
			corev1.ResourceMemory:           resource.MustParse("1M"),
			corev1.ResourceEphemeralStorage: resource.MustParse("50M"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("10m"),
			corev1.ResourceMemory: resource.MustParse("40M"),
		},
	}
	defaultVirtiofsResources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("1M")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("80M")},
	}
	defaultConsoleLogResources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("35M")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("15m"), corev1.ResourceMemory: resource.MustParse("60M")},
	}
)

// diskContainerWant is a container disk container as KubeVirt renders it
// for VMI UID 1234.
func diskContainerWant(name, image string, pullPolicy corev1.PullPolicy, args ...string) corev1.Container {
	return corev1.Container{
		Name:            name,
		Image:           image,
		ImagePullPolicy: pullPolicy,
		Command:         []string{"/usr/bin/container-disk"},
		Args:            args,
		VolumeMounts: []corev1.VolumeMount{
			{Name: "container-disks", MountPath: "/var/run/kubevirt-ephemeral-disks/container-disk-data/1234"},
			{Name: "virt-bin-share-dir", MountPath: "/usr/bin"},
		},
		Resources: defaultContainerDiskResources,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr.To[int64](107),
			RunAsNonRoot:             ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

func imageVolumeInitWant(name, image string) corev1.Container {
	c := diskContainerWant(name, image, "", "--no-op")
	c.Command = []string{"/container-disk-binary/usr/bin/container-disk"}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "launcher-volume", MountPath: "/container-disk-binary", ReadOnly: true}}
	return c
}

func withKernelBootImage(image string) func(*virtv1.VirtualMachineInstance) {
	return func(vmi *virtv1.VirtualMachineInstance) {
		vmi.Spec.Domain.Firmware = &virtv1.Firmware{KernelBoot: &virtv1.KernelBoot{Container: &virtv1.KernelBootContainer{Image: image}}}
	}
}

func withPullPolicy(v virtv1.Volume, p corev1.PullPolicy) virtv1.Volume {
	v.ContainerDisk.ImagePullPolicy = p
	return v
}

func TestContainerDiskContainers(t *testing.T) {
	const someImage = "someimage:v1.2.3.4"
	tests := []struct {
		name       string
		vmi        *virtv1.VirtualMachineInstance
		imageIDs   map[string]string
		wantInit   []corev1.Container
		wantMain   []corev1.Container
		wantKBInit *corev1.Container
		wantKB     *corev1.Container
	}{
		{
			name: "init containers pre-pull container disks in volume order and exit at once",
			vmi:  volumeTestVMI(withVolumes(containerDiskVolume("containerdisk1", "my-image-1"), containerDiskVolume("containerdisk2", "my-image-2"))),
			wantInit: []corev1.Container{
				diskContainerWant("volumecontainerdisk1-init", "my-image-1", "", "--no-op"),
				diskContainerWant("volumecontainerdisk2-init", "my-image-2", "", "--no-op"),
			},
			wantMain: []corev1.Container{
				diskContainerWant("volumecontainerdisk1", "my-image-1", "", "--copy-path", "/var/run/kubevirt-ephemeral-disks/container-disk-data/1234/disk_0"),
				diskContainerWant("volumecontainerdisk2", "my-image-2", "", "--copy-path", "/var/run/kubevirt-ephemeral-disks/container-disk-data/1234/disk_1"),
			},
		},
		{
			name: "a disk's copy path is numbered by its index among all volumes",
			vmi:  volumeTestVMI(withVolumes(containerDiskVolume("disk1", someImage), dataVolume("disk3", "some-data-volume"), containerDiskVolume("disk2", someImage))),
			wantInit: []corev1.Container{
				diskContainerWant("volumedisk1-init", someImage, "", "--no-op"),
				diskContainerWant("volumedisk2-init", someImage, "", "--no-op"),
			},
			wantMain: []corev1.Container{
				diskContainerWant("volumedisk1", someImage, "", "--copy-path", "/var/run/kubevirt-ephemeral-disks/container-disk-data/1234/disk_0"),
				diskContainerWant("volumedisk2", someImage, "", "--copy-path", "/var/run/kubevirt-ephemeral-disks/container-disk-data/1234/disk_2"),
			},
		},
		{
			name: "image pull policies Never and IfNotPresent pass through to the pod",
			vmi: volumeTestVMI(withVolumes(
				withPullPolicy(containerDiskVolume("test", "test@sha256:9c2b78e11c25b3fd0b24b0ed684a112052dff03eee4ca4bdcc4f3168f9a14396"), corev1.PullNever),
				withPullPolicy(containerDiskVolume("test2", "test:latest"), corev1.PullIfNotPresent),
			)),
			wantInit: []corev1.Container{
				diskContainerWant("volumetest-init", "test@sha256:9c2b78e11c25b3fd0b24b0ed684a112052dff03eee4ca4bdcc4f3168f9a14396", corev1.PullNever, "--no-op"),
				diskContainerWant("volumetest2-init", "test:latest", corev1.PullIfNotPresent, "--no-op"),
			},
			wantMain: []corev1.Container{
				diskContainerWant("volumetest", "test@sha256:9c2b78e11c25b3fd0b24b0ed684a112052dff03eee4ca4bdcc4f3168f9a14396", corev1.PullNever, "--copy-path", "/var/run/kubevirt-ephemeral-disks/container-disk-data/1234/disk_0"),
				diskContainerWant("volumetest2", "test:latest", corev1.PullIfNotPresent, "--copy-path", "/var/run/kubevirt-ephemeral-disks/container-disk-data/1234/disk_1"),
			},
		},
		{
			name:     "a new migration pod with a containerDisk and a kernel image runs the source's digests",
			vmi:      volumeTestVMI(withKernelBootImage(someImage), withVolumes(containerDiskVolume("disk1", someImage), dataVolume("disk3", "some-data-volume"))),
			imageIDs: map[string]string{"disk1": "someimage@sha256:0", "kernel-boot-volume": "someimage@sha256:bootcontainer"},
			wantInit: []corev1.Container{diskContainerWant("volumedisk1-init", "someimage@sha256:0", "", "--no-op")},
			wantMain: []corev1.Container{
				diskContainerWant("volumedisk1", "someimage@sha256:0", "", "--copy-path", "/var/run/kubevirt-ephemeral-disks/container-disk-data/1234/disk_0"),
			},
			wantKBInit: ptr.To(diskContainerWant("volumekernel-boot-volume-init", "someimage@sha256:bootcontainer", "", "--no-op")),
			wantKB:     ptr.To(diskContainerWant("volumekernel-boot-volume", "someimage@sha256:bootcontainer", "", "--copy-path", "/var/run/kubevirt-ephemeral-disks/container-disk-data/1234/kernel-boot")),
		},
		{
			name: "a kernel boot image is served as kernel-boot with its own pull policy",
			vmi: volumeTestVMI(func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Firmware = &virtv1.Firmware{KernelBoot: &virtv1.KernelBoot{Container: &virtv1.KernelBootContainer{
					Image: "kernel:v1", ImagePullPolicy: corev1.PullAlways, ImagePullSecret: "kernel-secret",
				}}}
			}),
			wantKBInit: ptr.To(diskContainerWant("volumekernel-boot-volume-init", "kernel:v1", corev1.PullAlways, "--no-op")),
			wantKB:     ptr.To(diskContainerWant("volumekernel-boot-volume", "kernel:v1", corev1.PullAlways, "--copy-path", "/var/run/kubevirt-ephemeral-disks/container-disk-data/1234/kernel-boot")),
		},
		{
			name: "a container disk named like the kernel boot volume gets no container",
			vmi:  volumeTestVMI(withVolumes(containerDiskVolume("kernel-boot-volume", someImage))),
		},
		{
			name: "a VMI without container disks or kernel boot image has no disk containers",
			vmi:  volumeTestVMI(withVolumes(dataVolume("dv", "dv"))),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cluster := volumeTestCluster{}
			for _, c := range []struct {
				what      string
				want, got any
			}{
				{"init containers", tc.wantInit, containerDiskInitContainers(tc.vmi, cluster, tc.imageIDs)},
				{"containers", tc.wantMain, containerDiskContainers(tc.vmi, cluster, tc.imageIDs)},
				{"kernel boot init container", tc.wantKBInit, kernelBootInitContainer(tc.vmi, cluster, tc.imageIDs)},
				{"kernel boot container", tc.wantKB, kernelBootContainer(tc.vmi, cluster, tc.imageIDs)},
			} {
				if diff := cmp.Diff(c.want, c.got, quantityComparer); diff != "" {
					t.Errorf("%s differ (-want +got):\n%s", c.what, diff)
				}
			}
		})
	}
}

func TestContainerDiskImageVolumeInitContainers(t *testing.T) {
	tests := []struct {
		name     string
		vmi      *virtv1.VirtualMachineInstance
		imageIDs map[string]string
		want     []corev1.Container
	}{
		{
			name: "a container disk gets a noop init container for digest exposure",
			vmi:  volumeTestVMI(withVolumes(containerDiskVolume("r0", "someImage"))),
			want: []corev1.Container{imageVolumeInitWant("volumer0", "someImage")},
		},
		{
			name: "a kernel boot image gets a noop init container for digest exposure",
			vmi:  volumeTestVMI(withKernelBootImage("someImage")),
			want: []corev1.Container{imageVolumeInitWant("volumekernel-boot-volume", "someImage")},
		},
		{
			name: "with both container disk and kernel boot the disks come first",
			vmi:  volumeTestVMI(withVolumes(containerDiskVolume("r0", "someImage")), withKernelBootImage("kernelImage")),
			want: []corev1.Container{imageVolumeInitWant("volumer0", "someImage"), imageVolumeInitWant("volumekernel-boot-volume", "kernelImage")},
		},
		{
			name:     "digests extracted from the source pod during migration avoid the init containers",
			vmi:      volumeTestVMI(withVolumes(containerDiskVolume("r0", "someImage")), withKernelBootImage("kernelImage")),
			imageIDs: map[string]string{"r0": "someImage@sha256:abcd1234567890", "kernel-boot-volume": "kernelImage@sha256:efgh5678901234"},
		},
		{
			name:     "an image ID without a digest still needs its init container, which pulls the VMI's image",
			vmi:      volumeTestVMI(withVolumes(containerDiskVolume("r0", "someImage"))),
			imageIDs: map[string]string{"r0": "someImage"},
			want:     []corev1.Container{imageVolumeInitWant("volumer0", "someImage")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := imageVolumeInitContainers(tc.vmi, volumeTestCluster{gates: []string{"ImageVolume"}}, tc.imageIDs)
			if diff := cmp.Diff(tc.want, got, quantityComparer); diff != "" {
				t.Errorf("init containers differ (-want +got):\n%s", diff)
			}
		})
	}
}

// migrationSourcePod is container-disk_test.go's createMigrationSourcePod:
// the disk containers' statuses with digests 0, 1, … and "bootcontainer".
func migrationSourcePod(vmi *virtv1.VirtualMachineInstance) *corev1.Pod {
	pod := &corev1.Pod{}
	for i, c := range containerDiskContainers(vmi, volumeTestCluster{}, nil) {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: fmt.Sprintf("finalimg@sha256:%v", i),
		})
	}
	if c := kernelBootContainer(vmi, volumeTestCluster{}, nil); c != nil {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "finalimg@sha256:bootcontainer",
		})
	}
	return pod
}

func imageVolumePod(volumes map[string]string, initStatuses map[string]string) *corev1.Pod {
	pod := &corev1.Pod{}
	for _, name := range []string{"disk1", "disk2", "r0", "kernel-boot-volume"} {
		if ref, ok := volumes[name]; ok {
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: ref}}})
		}
		if id, ok := initStatuses[name]; ok {
			pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, corev1.ContainerStatus{Name: "volume" + name, ImageID: id})
		}
	}
	return pod
}

func TestContainerDiskSourceImageIDs(t *testing.T) {
	const someImage = "someimage:v1.2.3.4"
	twoDisks := volumeTestVMI(withVolumes(containerDiskVolume("disk1", someImage), containerDiskVolume("disk2", "anotherimage:v2.0.0")))
	tests := []struct {
		name         string
		vmi          *virtv1.VirtualMachineInstance
		source       func(*virtv1.VirtualMachineInstance) *corev1.Pod
		imageVolumes bool
		want         map[string]string
	}{
		{
			name:   "a new migration pod with two containerDisks uses the right containerIDs",
			vmi:    volumeTestVMI(withVolumes(containerDiskVolume("disk1", someImage), dataVolume("disk3", "some-data-volume"), containerDiskVolume("disk2", someImage))),
			source: func(vmi *virtv1.VirtualMachineInstance) *corev1.Pod { return migrationSourcePod(vmi) },
			want:   map[string]string{"disk1": "someimage@sha256:0", "disk2": "someimage@sha256:1"},
		},
		{
			name:   "a new migration pod with a containerDisk and a kernel image uses the right containerIDs",
			vmi:    volumeTestVMI(withKernelBootImage(someImage), withVolumes(containerDiskVolume("disk1", someImage), dataVolume("disk3", "some-data-volume"))),
			source: func(vmi *virtv1.VirtualMachineInstance) *corev1.Pod { return migrationSourcePod(vmi) },
			want:   map[string]string{"disk1": "someimage@sha256:0", "kernel-boot-volume": "someimage@sha256:bootcontainer"},
		},
		{
			name: "with imageVolumeEnabled image IDs come from pod volumes with digest",
			vmi:  twoDisks,
			source: func(*virtv1.VirtualMachineInstance) *corev1.Pod {
				return imageVolumePod(map[string]string{"disk1": "someimage@sha256:testdigest1", "disk2": "anotherimage@sha256:testdigest2"}, nil)
			},
			imageVolumes: true,
			want:         map[string]string{"disk1": "someimage@sha256:testdigest1", "disk2": "anotherimage@sha256:testdigest2"},
		},
		{
			name: "with imageVolumeEnabled image IDs come from init containers when volumes don't have digests",
			vmi:  twoDisks,
			source: func(*virtv1.VirtualMachineInstance) *corev1.Pod {
				return imageVolumePod(map[string]string{"disk1": someImage, "disk2": "anotherimage:v2.0.0"},
					map[string]string{"disk1": "someimage@sha256:testdigest1", "disk2": "anotherimage@sha256:testdigest2"})
			},
			imageVolumes: true,
			want:         map[string]string{"disk1": "someimage@sha256:testdigest1", "disk2": "anotherimage@sha256:testdigest2"},
		},
		{
			name: "with imageVolumeEnabled digests are used when both volume and init digests are present",
			vmi:  twoDisks,
			source: func(*virtv1.VirtualMachineInstance) *corev1.Pod {
				return imageVolumePod(map[string]string{"disk1": "someimage@sha256:testdigest1", "disk2": "anotherimage@sha256:testdigest2"},
					map[string]string{"disk1": "someimage@sha256:testdigest1", "disk2": "anotherimage@sha256:testdigest2"})
			},
			imageVolumes: true,
			want:         map[string]string{"disk1": "someimage@sha256:testdigest1", "disk2": "anotherimage@sha256:testdigest2"},
		},
		{
			name: "with imageVolumeEnabled and kernel boot containers the kernel's digest comes from its init container",
			vmi:  volumeTestVMI(withKernelBootImage(someImage), withVolumes(containerDiskVolume("disk1", "anotherimage:v2.0.0"))),
			source: func(*virtv1.VirtualMachineInstance) *corev1.Pod {
				return imageVolumePod(map[string]string{"disk1": "anotherimage@sha256:testdigest1"}, map[string]string{"kernel-boot-volume": "someimage@sha256:kerneldigest"})
			},
			imageVolumes: true,
			want:         map[string]string{"disk1": "anotherimage@sha256:testdigest1", "kernel-boot-volume": "someimage@sha256:kerneldigest"},
		},
		{
			name: "with imageVolumeEnabled a container disk's digest comes from docker's init container image ID",
			vmi:  volumeTestVMI(withVolumes(containerDiskVolume("r0", "someImage"))),
			source: func(*virtv1.VirtualMachineInstance) *corev1.Pod {
				return imageVolumePod(nil, map[string]string{"r0": "docker://sha256:abcd1234567890"})
			},
			imageVolumes: true,
			want:         map[string]string{"r0": "someImage@sha256:abcd1234567890"},
		},
		{
			name: "without imageVolumeEnabled init container statuses are ignored",
			vmi:  volumeTestVMI(withVolumes(containerDiskVolume("r0", "someImage"))),
			source: func(*virtv1.VirtualMachineInstance) *corev1.Pod {
				return imageVolumePod(nil, map[string]string{"r0": "docker://sha256:abcd1234567890"})
			},
			want: map[string]string{"r0": "someImage"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sourceImageIDs(tc.vmi, tc.source(tc.vmi), tc.imageVolumes)
			if err != nil {
				t.Fatalf("sourceImageIDs: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("image IDs differ (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("it should fail if it can't detect a reproducible imageID", func(t *testing.T) {
		vmi := volumeTestVMI(withVolumes(containerDiskVolume("disk1", someImage)))
		pod := migrationSourcePod(vmi)
		pod.Status.ContainerStatuses[0].ImageID = "rubbish"
		_, err := sourceImageIDs(vmi, pod, false)
		const want = `failed to identify image digest for container "someimage:v1.2.3.4" with id "rubbish"`
		if err == nil || err.Error() != want {
			t.Errorf("error = %v, want %s", err, want)
		}
	})
}

func TestContainerDiskImageWithDigest(t *testing.T) {
	for _, tc := range []struct{ name, image, imageID, want string }{
		{"it detects the image ID from docker", "myregistry.io/myimage", "docker://sha256:4gjffGJlg4", "myregistry.io/myimage@sha256:4gjffGJlg4"},
		{"it detects the image ID from containerd", "myregistry.io/myimage", "sha256:4gjffGJlg4", "myregistry.io/myimage@sha256:4gjffGJlg4"},
		{"it detects the image ID from cri-o", "myregistry.io/myimage", "myregistry/myimage@sha256:4gjffGJlg4", "myregistry.io/myimage@sha256:4gjffGJlg4"},
		{"it detects the base image with registry and tag", "myregistry.io/myimage:latest", "docker://sha256:4gjffGJlg4", "myregistry.io/myimage@sha256:4gjffGJlg4"},
		{"it detects the base image with registry and shasum", "myregistry.io/myimage@sha256:123534", "docker://sha256:4gjffGJlg4", "myregistry.io/myimage@sha256:4gjffGJlg4"},
		{"it detects the base image with registry, no tag and custom port", "myregistry.io:5000/myimage", "docker://sha256:4gjffGJlg4", "myregistry.io:5000/myimage@sha256:4gjffGJlg4"},
		{"it detects the base image with registry, tag and custom port", "myregistry.io:5000/myimage:latest", "docker://sha256:4gjffGJlg4", "myregistry.io:5000/myimage@sha256:4gjffGJlg4"},
		{"it detects the base image with registry, shasum and custom port", "myregistry.io:5000/myimage@sha256:123534", "docker://sha256:4gjffGJlg4", "myregistry.io:5000/myimage@sha256:4gjffGJlg4"},
		{"it detects the base image with registry, shasum, custom port and group", "myregistry.io:5000/mygroup/myimage@sha256:123534", "docker://sha256:4gjffGJlg4", "myregistry.io:5000/mygroup/myimage@sha256:4gjffGJlg4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := imageWithDigest(tc.image, tc.imageID)
			if err != nil || got != tc.want {
				t.Errorf("imageWithDigest(%q, %q) = %q, %v; want %q", tc.image, tc.imageID, got, err, tc.want)
			}
		})
	}
}
