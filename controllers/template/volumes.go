package template

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// virt-controller's directories: the defaults of its flags
// (pkg/virt-controller/watch/application.go), which virt-operator does not
// override.
const (
	virtShareDir     = "/var/run/kubevirt"
	ephemeralDiskDir = virtShareDir + "-ephemeral-disks"
	containerDiskDir = virtShareDir + "/container-disks"
	hotplugDiskDir   = virtShareDir + "/hotplug-disks"
	// containerDiskDataDir is where container-disk containers copy their
	// disks: virt-controller calls containerdisk.SetLocalDirectoryOnly with
	// it at start.
	containerDiskDataDir = ephemeralDiskDir + "/container-disk-data"
)

// Directories inside the launcher pod that virt-launcher expects
// (KubeVirt's pkg/util, pkg/config, pkg/host-disk).
const (
	imageVolumeDir         = "/var/run/kubevirt-image-volume"
	kernelBootVolumeDir    = "/var/run/kubevirt-kernel-boot"
	libvirtRuntimeDir      = "/var/run/libvirt"
	hostDiskDir            = virtPrivateDir + "/vmi-disks"
	secretSourceDir        = virtPrivateDir + "/secret"
	configMapSourceDir     = virtPrivateDir + "/config-map"
	downwardAPISourceDir   = virtPrivateDir + "/downwardapi"
	sysprepSourceDir       = virtPrivateDir + "/sysprep"
	downwardMetricsDir     = virtPrivateDir + "/downwardmetric-disk"
	serviceAccountTokenDir = "/var/run/secrets/kubernetes.io/serviceaccount/"
	backendStorageMetaDir  = "/run/kubevirt-private/backend-storage-meta" // sic, not under /var
	hugepagesDir           = "/dev/hugepages"
)

// Names of the launcher pod's volumes.
const (
	privateVolume         = "private"
	publicVolume          = "public"
	socketsVolume         = "sockets"
	virtBinDirVolume      = "virt-bin-share-dir"
	libvirtRuntimeVolume  = "libvirt-runtime"
	ephemeralDisksVolume  = "ephemeral-disks"
	containerDisksVolume  = "container-disks"
	hotplugDisksVolume    = "hotplug-disks"
	vmStateVolume         = "vm-state"
	virtiofsVolume        = "virtiofs-containers"
	launcherBinaryVolume  = "launcher-volume"
	kernelBootVolume      = "kernel-boot-volume"
	hugepagesVolume       = "hugepages"
	hugetlbfsDirVolume    = "hugetblfs-dir" // sic, KubeVirt's spelling
	networkInfoVolumePath = "network-info"
	networkInfoAnnotation = "kubevirt.io/network-info"
	imageDigestMarker     = "@sha256:"
)

// ErrNoBackendStoragePVC is returned for a VMI that needs backend storage
// (persistent TPM or EFI, CBT) before its claim exists; KubeVirt waits for
// the claim with the same error.
var ErrNoBackendStoragePVC = errors.New("can't generate manifest without backend-storage PVC, waiting for the PVC to be created")

// PVCNotFoundError is returned when a volume's claim is not in the cache
// (KubeVirt's storagetypes.PvcNotFoundError): the VMI controller reports
// it on the VMI and waits for the claim instead of failing.
type PVCNotFoundError struct {
	Namespace, Name string
}

func (e PVCNotFoundError) Error() string {
	return fmt.Sprintf("didn't find PVC %s/%s", e.Namespace, e.Name)
}

// podVolumes is the volume side of a launcher pod: the pod's volumes and
// the compute container's mounts, devices and shared filesystem paths, each
// in KubeVirt's order.
type podVolumes struct {
	Volumes               []corev1.Volume
	Mounts                []corev1.VolumeMount
	Devices               []corev1.VolumeDevice
	SharedFilesystemPaths []string
}

// volumeInputs are what renderVolumes needs beyond the VMI and the cluster.
type volumeInputs struct {
	// launcherImage backs the launcher-volume image volume.
	launcherImage string
	// imageIDs are a migration source's image digests by volume name
	// (sourceImageIDs); nil for a new VMI.
	imageIDs map[string]string
	// backendStoragePVC is the claim holding persistent TPM/EFI/CBT state;
	// "" when none was found.
	backendStoragePVC string
	// hookSidecars tells whether the pod runs hook sidecars.
	hookSidecars bool
}

// renderVolumes mirrors KubeVirt's VolumeRenderer as
// TemplateService.newVolumeRenderer configures it: the fixed volumes every
// launcher pod has, then, in this order, config volumes, storage volumes,
// access credentials, backend storage, image volumes, hook sockets,
// hugepages, hotplug, network device info and virtiofs sockets.
func renderVolumes(vmi *virtv1.VirtualMachineInstance, cluster Cluster, objects Objects, in volumeInputs) (podVolumes, error) {
	imageVolumes := cluster.FeatureGateEnabled(gateImageVolume)
	if needsBackendStorage(vmi) && in.backendStoragePVC == "" {
		return podVolumes{}, ErrNoBackendStoragePVC
	}

	r := &volumeRenderer{namespace: vmi.Namespace, objects: objects}
	r.addConfigVolumes(vmi.Spec.Domain.Devices.Disks, vmi.Spec.Volumes)
	if err := r.addStorageVolumes(vmi.Spec.Volumes, vmi.Status.VolumeStatus); err != nil {
		return podVolumes{}, err
	}
	r.addAccessCredentials(vmi.Spec.AccessCredentials)
	if needsBackendStorage(vmi) {
		r.addBackendStorage(vmi, in.backendStoragePVC)
	}
	if imageVolumes {
		r.addImageVolumes(vmi, in.imageIDs, in.launcherImage, cluster.Configuration().ImagePullPolicy)
	}
	if in.hookSidecars {
		r.add(emptyDir(hookSocketsVolume), corev1.VolumeMount{Name: hookSocketsVolume, MountPath: hookSocketsDir})
	}
	if vmi.Spec.Domain.Memory != nil && vmi.Spec.Domain.Memory.Hugepages != nil {
		r.addHugepages()
	}
	if !vmi.Spec.Domain.Devices.DisableHotplug {
		r.mounts = append(r.mounts, corev1.VolumeMount{Name: hotplugDisksVolume, MountPath: hotplugDiskDir,
			MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)})
		r.volumes = append(r.volumes, emptyDir(hotplugDisksVolume))
	}
	if needsNetworkDeviceInfo(vmi, bindingPlugins(cluster.Configuration())) {
		r.mounts = append(r.mounts, corev1.VolumeMount{Name: networkInfoVolume, MountPath: networkInfoMountPath})
		r.volumes = append(r.volumes, networkInfoDownwardAPIVolume())
	}
	if virtiofsRequested(vmi) {
		r.add(emptyDir(virtiofsVolume), corev1.VolumeMount{Name: virtiofsVolume, MountPath: virtiofsSocketDir})
	}

	return podVolumes{
		Volumes:               append(fixedVolumes(imageVolumes), r.volumes...),
		Mounts:                append(fixedMounts(imageVolumes), r.mounts...),
		Devices:               r.devices,
		SharedFilesystemPaths: r.sharedPaths,
	}, nil
}

// fixedVolumes are the volumes of every launcher pod (VolumeRenderer.Volumes);
// container-disks is replaced by image volumes with the ImageVolume gate.
func fixedVolumes(imageVolumes bool) []corev1.Volume {
	vols := []corev1.Volume{
		emptyDir(privateVolume),
		emptyDir(publicVolume),
		emptyDir(socketsVolume),
		emptyDir(virtBinDirVolume),
		emptyDir(libvirtRuntimeVolume),
		emptyDir(ephemeralDisksVolume),
	}
	if !imageVolumes {
		vols = append(vols, emptyDir(containerDisksVolume))
	}
	return vols
}

// fixedMounts are the compute container's mounts of fixedVolumes
// (VolumeRenderer.Mounts), in KubeVirt's order, which is not the volumes'.
func fixedMounts(imageVolumes bool) []corev1.VolumeMount {
	mounts := []corev1.VolumeMount{
		{Name: privateVolume, MountPath: virtPrivateDir},
		{Name: publicVolume, MountPath: virtShareDir},
		{Name: ephemeralDisksVolume, MountPath: ephemeralDiskDir},
		{Name: libvirtRuntimeVolume, MountPath: libvirtRuntimeDir},
		{Name: socketsVolume, MountPath: filepath.Join(virtShareDir, "sockets")},
	}
	if !imageVolumes {
		mounts = append(mounts, corev1.VolumeMount{Name: containerDisksVolume, MountPath: containerDiskDir,
			MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)})
	}
	return mounts
}

// volumeRenderer accumulates the VMI-dependent volumes.
type volumeRenderer struct {
	namespace   string
	objects     Objects
	volumes     []corev1.Volume
	mounts      []corev1.VolumeMount
	devices     []corev1.VolumeDevice
	sharedPaths []string
}

func (r *volumeRenderer) add(v corev1.Volume, mounts ...corev1.VolumeMount) {
	r.volumes = append(r.volumes, v)
	r.mounts = append(r.mounts, mounts...)
}

// addConfigVolumes mirrors withVMIConfigVolumes: a pod volume for every
// secret, ConfigMap and downward API volume, but a mount only for those a
// disk uses, in the disks' order. Filesystem (virtiofs) users mount them in
// their own container.
func (r *volumeRenderer) addConfigVolumes(disks []virtv1.Disk, volumes []virtv1.Volume) {
	byName := make(map[string]virtv1.Volume, len(volumes))
	for _, v := range volumes {
		byName[v.Name] = v
		if v.Secret != nil {
			r.volumes = append(r.volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: v.Secret.SecretName, Optional: v.Secret.Optional},
			}})
		}
		if v.ConfigMap != nil {
			r.volumes = append(r.volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: v.ConfigMap.LocalObjectReference, Optional: v.ConfigMap.Optional},
			}})
		}
		if v.DownwardAPI != nil {
			r.volumes = append(r.volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: v.DownwardAPI.Fields},
			}})
		}
	}
	for _, d := range disks {
		v, ok := byName[d.Name]
		if !ok {
			continue
		}
		if v.Secret != nil {
			r.mounts = append(r.mounts, readOnlyMount(v.Name, filepath.Join(secretSourceDir, v.Name)))
		}
		if v.ConfigMap != nil {
			r.mounts = append(r.mounts, readOnlyMount(v.Name, filepath.Join(configMapSourceDir, v.Name)))
		}
		if v.DownwardAPI != nil {
			r.mounts = append(r.mounts, readOnlyMount(v.Name, filepath.Join(downwardAPISourceDir, v.Name)))
		}
	}
}

// addStorageVolumes mirrors withVMIVolumes. Hotplugged volumes are left
// out: virt-handler attaches them through the hotplug attachment pod.
func (r *volumeRenderer) addStorageVolumes(volumes []virtv1.Volume, statuses []virtv1.VolumeStatus) error {
	hotplugged := hotpluggedVolumes(volumes, statuses)
	for _, v := range volumes {
		if hotplugged[v.Name] {
			continue
		}
		if pvc := v.PersistentVolumeClaim; pvc != nil {
			if err := r.addClaim(v.Name, pvc.ClaimName); err != nil {
				return err
			}
			r.volumes = append(r.volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.ClaimName, ReadOnly: pvc.ReadOnly},
			}})
		}
		if v.Ephemeral != nil {
			if v.Ephemeral.PersistentVolumeClaim == nil {
				// KubeVirt dereferences it; virt-api rejects such a VMI.
				return fmt.Errorf("ephemeral volume %s has no persistentVolumeClaim", v.Name)
			}
			if err := r.addClaim(v.Name, v.Ephemeral.PersistentVolumeClaim.ClaimName); err != nil {
				return err
			}
			r.volumes = append(r.volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: v.Ephemeral.PersistentVolumeClaim.DeepCopy(),
			}})
		}
		if v.HostDisk != nil {
			r.addHostDisk(v)
		}
		if dv := v.DataVolume; dv != nil {
			if err := r.addClaim(v.Name, dv.Name); err != nil {
				return err
			}
			r.volumes = append(r.volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: dv.Name},
			}})
		}
		if v.DownwardMetrics != nil {
			r.add(corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				Medium:    corev1.StorageMediumMemory,
				SizeLimit: ptr.To(resource.MustParse("1Mi")),
			}}}, corev1.VolumeMount{Name: v.Name, MountPath: downwardMetricsDir})
		}
		if ci := v.CloudInitNoCloud; ci != nil {
			r.addCloudInitSecrets(v.Name, ci.UserDataSecretRef, ci.NetworkDataSecretRef)
		}
		if v.Sysprep != nil {
			source, err := sysprepSource(*v.Sysprep)
			if err != nil {
				return err
			}
			r.add(corev1.Volume{Name: v.Name, VolumeSource: source},
				readOnlyMount(v.Name, filepath.Join(sysprepSourceDir, v.Name)))
		}
		if ci := v.CloudInitConfigDrive; ci != nil {
			r.addCloudInitSecrets(v.Name, ci.UserDataSecretRef, ci.NetworkDataSecretRef)
		}
	}
	return nil
}

// hotpluggedVolumes are those volumeStatus marks as hotplugged, and, for a
// VMI that started but is not ready yet, hotpluggable PVCs and DataVolumes.
func hotpluggedVolumes(volumes []virtv1.Volume, statuses []virtv1.VolumeStatus) map[string]bool {
	out := map[string]bool{}
	for _, s := range statuses {
		if s.HotplugVolume != nil {
			out[s.Name] = true
		}
	}
	for _, v := range volumes {
		if (v.DataVolume != nil && v.DataVolume.Hotpluggable) || (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.Hotpluggable) {
			out[v.Name] = true
		}
	}
	return out
}

// addClaim makes a claim's volume a block device of compute (/dev/<volume>)
// or a mount under vmi-disks, a shared one when the claim is ReadWriteMany
// (addPVCToLaunchManifest).
func (r *volumeRenderer) addClaim(volume, claim string) error {
	pvc, ok := r.objects.PVC(r.namespace, claim)
	if !ok {
		return PVCNotFoundError{Namespace: r.namespace, Name: claim}
	}
	if mode := pvc.Spec.VolumeMode; mode != nil && *mode == corev1.PersistentVolumeBlock {
		r.devices = append(r.devices, corev1.VolumeDevice{Name: volume, DevicePath: filepath.Join("/dev", volume)})
		return nil
	}
	path := filepath.Join(hostDiskDir, volume)
	r.mounts = append(r.mounts, corev1.VolumeMount{Name: volume, MountPath: path})
	if slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteMany) {
		r.sharedPaths = append(r.sharedPaths, path)
	}
	return nil
}

// addHostDisk mounts the directory of the host disk's image.
func (r *volumeRenderer) addHostDisk(v virtv1.Volume) {
	var pathType corev1.HostPathType // "" unless one of the two below
	switch v.HostDisk.Type {
	case virtv1.HostDiskExists:
		pathType = corev1.HostPathDirectory
	case virtv1.HostDiskExistsOrCreate:
		pathType = corev1.HostPathDirectoryOrCreate
	}
	r.mounts = append(r.mounts, corev1.VolumeMount{Name: v.Name, MountPath: filepath.Join(hostDiskDir, v.Name)})
	r.volumes = append(r.volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: filepath.Dir(v.HostDisk.Path), Type: &pathType},
	}})
}

// addCloudInitSecrets mounts cloud-init's user and network data secrets
// under both spellings of each key that cloud-init accepts.
func (r *volumeRenderer) addCloudInitSecrets(volume string, userData, networkData *corev1.LocalObjectReference) {
	for _, ref := range []struct {
		secret       *corev1.LocalObjectReference
		suffix, key  string
		camelCaseKey string
	}{
		{userData, "-udata", "userdata", "userData"},
		{networkData, "-ndata", "networkdata", "networkData"},
	} {
		if ref.secret == nil {
			continue
		}
		name := volume + ref.suffix
		r.add(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: ref.secret.Name}}},
			corev1.VolumeMount{Name: name, MountPath: filepath.Join(secretSourceDir, volume, ref.key), SubPath: ref.key, ReadOnly: true},
			corev1.VolumeMount{Name: name, MountPath: filepath.Join(secretSourceDir, volume, ref.camelCaseKey), SubPath: ref.camelCaseKey, ReadOnly: true},
		)
	}
}

func sysprepSource(s virtv1.SysprepSource) (corev1.VolumeSource, error) {
	switch {
	case s.Secret != nil:
		return corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: s.Secret.Name}}, nil
	case s.ConfigMap != nil:
		return corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: s.ConfigMap.Name},
		}}, nil
	}
	return corev1.VolumeSource{}, fmt.Errorf("sysprep must have Secret or ConfigMap reference set %v", s)
}

// addAccessCredentials mounts the secret of every SSH key and user/password
// credential.
func (r *volumeRenderer) addAccessCredentials(creds []virtv1.AccessCredential) {
	for _, c := range creds {
		var secret string
		switch {
		case c.SSHPublicKey != nil && c.SSHPublicKey.Source.Secret != nil:
			secret = c.SSHPublicKey.Source.Secret.SecretName
		case c.UserPassword != nil && c.UserPassword.Source.Secret != nil:
			secret = c.UserPassword.Source.Secret.SecretName
		}
		if secret == "" {
			continue
		}
		name := secret + "-access-cred"
		r.add(corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}},
			readOnlyMount(name, filepath.Join(secretSourceDir, name)))
	}
}

// needsBackendStorage: a persistent TPM or EFI, or changed block tracking
// that is enabled or initializing (backendstorage.IsBackendStorageNeeded).
func needsBackendStorage(vmi *virtv1.VirtualMachineInstance) bool {
	return persistentTPM(vmi) || persistentEFI(vmi) || cbtEnabled(vmi)
}

func persistentTPM(vmi *virtv1.VirtualMachineInstance) bool {
	tpm := vmi.Spec.Domain.Devices.TPM
	return tpm != nil && (tpm.Enabled == nil || *tpm.Enabled) && tpm.Persistent != nil && *tpm.Persistent
}

func persistentEFI(vmi *virtv1.VirtualMachineInstance) bool {
	fw := vmi.Spec.Domain.Firmware
	return fw != nil && fw.Bootloader != nil && fw.Bootloader.EFI != nil && ptr.Deref(fw.Bootloader.EFI.Persistent, false)
}

func cbtEnabled(vmi *virtv1.VirtualMachineInstance) bool {
	s := vmi.Status.ChangedBlockTracking
	return s != nil && (s.State == virtv1.ChangedBlockTrackingInitializing || s.State == virtv1.ChangedBlockTrackingEnabled)
}

// addBackendStorage mounts subdirectories of the backend-storage claim where
// swtpm, the EFI NVRAM and CBT keep their state (withBackendStorage).
func (r *volumeRenderer) addBackendStorage(vmi *virtv1.VirtualMachineInstance, claim string) {
	r.add(corev1.Volume{Name: vmStateVolume, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}}, corev1.VolumeMount{Name: vmStateVolume, MountPath: backendStorageMetaDir, SubPath: "meta"})

	nonRoot := isNonRoot(vmi)
	if nonRoot {
		// The state lives under the private emptyDir; kubelet would create
		// the intermediate directories root-owned and 0755, which qemu
		// cannot write. An emptyDir per level gets fsGroup 107 instead.
		r.add(emptyDir("private-libvirt"))
		r.add(emptyDir("private-libvirt-qemu"),
			corev1.VolumeMount{Name: "private-libvirt", MountPath: filepath.Join(virtPrivateDir, "libvirt")},
			corev1.VolumeMount{Name: "private-libvirt-qemu", MountPath: filepath.Join(virtPrivateDir, "libvirt", "qemu")})
	}
	statePath := func(rootPath string, nonRootPath ...string) string {
		if nonRoot {
			return filepath.Join(append([]string{virtPrivateDir}, nonRootPath...)...)
		}
		return rootPath
	}
	if persistentTPM(vmi) {
		r.mounts = append(r.mounts,
			corev1.VolumeMount{Name: vmStateVolume, MountPath: statePath("/var/lib/libvirt/swtpm", "libvirt", "qemu", "swtpm"), SubPath: "swtpm"},
			corev1.VolumeMount{Name: vmStateVolume, MountPath: statePath("/var/lib/swtpm-localca", "var", "lib", "swtpm-localca"), SubPath: "swtpm-localca"})
	}
	if persistentEFI(vmi) {
		r.mounts = append(r.mounts, corev1.VolumeMount{Name: vmStateVolume, MountPath: statePath("/var/lib/libvirt/qemu/nvram", "libvirt", "qemu", "nvram"), SubPath: "nvram"})
	}
	if cbtEnabled(vmi) {
		r.mounts = append(r.mounts, corev1.VolumeMount{Name: vmStateVolume, MountPath: statePath("/var/lib/libvirt/qemu/cbt", "libvirt", "qemu", "cbt"), SubPath: "cbt"})
	}
}

// addImageVolumes mirrors withImageVolumes: with the ImageVolume gate,
// kubelet mounts container disks and the kernel boot image as image
// volumes, and the launcher image too while some digest is unknown (its
// container-disk binary runs the digest-reporting init containers).
func (r *volumeRenderer) addImageVolumes(vmi *virtv1.VirtualMachineInstance, imageIDs map[string]string, launcherImage string, pullPolicy corev1.PullPolicy) {
	for i, v := range vmi.Spec.Volumes {
		if v.ContainerDisk == nil {
			continue
		}
		r.add(imageVolume(v.Name, imageOrID(imageIDs, v.Name, v.ContainerDisk.Image), v.ContainerDisk.ImagePullPolicy),
			readOnlyMount(v.Name, filepath.Join(imageVolumeDir, fmt.Sprintf("disk_%d", i))))
	}
	if hasKernelBootImage(vmi) {
		kb := vmi.Spec.Domain.Firmware.KernelBoot.Container
		r.add(imageVolume(kernelBootVolume, imageOrID(imageIDs, kernelBootVolume, kb.Image), kb.ImagePullPolicy),
			readOnlyMount(kernelBootVolume, kernelBootVolumeDir))
	}
	if digestsMissing(vmi, imageIDs) {
		r.volumes = append(r.volumes, imageVolume(launcherBinaryVolume, launcherImage, pullPolicy))
	}
}

// digestsMissing: some container disk or the kernel boot image has no
// digest yet (shouldAddLauncherBinaryVolume).
func digestsMissing(vmi *virtv1.VirtualMachineInstance, imageIDs map[string]string) bool {
	for _, v := range vmi.Spec.Volumes {
		if v.ContainerDisk != nil && !strings.Contains(imageIDs[v.Name], imageDigestMarker) {
			return true
		}
	}
	return hasKernelBootImage(vmi) && !strings.Contains(imageIDs[kernelBootVolume], imageDigestMarker)
}

func imageVolume(name, reference string, pullPolicy corev1.PullPolicy) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: reference, PullPolicy: pullPolicy},
	}}
}

// imageOrID is the migration source's digest of a volume's image, if known.
func imageOrID(imageIDs map[string]string, volume, image string) string {
	if id, ok := imageIDs[volume]; ok {
		return id
	}
	return image
}

func (r *volumeRenderer) addHugepages() {
	r.add(corev1.Volume{Name: hugepagesVolume, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumHugePages},
	}}, corev1.VolumeMount{Name: hugepagesVolume, MountPath: hugepagesDir})
	r.add(emptyDir(hugetlbfsDirVolume), corev1.VolumeMount{Name: hugetlbfsDirVolume, MountPath: filepath.Join(hugepagesDir, "libvirt/qemu")})
}

// needsNetworkDeviceInfo: an SR-IOV interface, or one bound by a plugin that
// asks for device info through the downward API.
func needsNetworkDeviceInfo(vmi *virtv1.VirtualMachineInstance, plugins map[string]virtv1.InterfaceBindingPlugin) bool {
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.SRIOV != nil {
			return true
		}
		if iface.Binding != nil {
			if p, ok := plugins[iface.Binding.Name]; ok && p.DownwardAPI == virtv1.DeviceInfo {
				return true
			}
		}
	}
	return false
}

// networkInfoDownwardAPIVolume exposes the pod's network-info annotation,
// which virt-handler's network setup fills in, as a file.
func networkInfoDownwardAPIVolume() corev1.Volume {
	return corev1.Volume{Name: networkInfoVolume, VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{{
			Path:     networkInfoVolumePath,
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: fmt.Sprintf("metadata.annotations['%s']", networkInfoAnnotation)},
		}},
	}}}
}

func emptyDir(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
}

func readOnlyMount(name, path string) corev1.VolumeMount {
	return corev1.VolumeMount{Name: name, MountPath: path, ReadOnly: true}
}

// imagePullSecrets are the container disks' pull secrets, each once, in
// volume order (imgPullSecrets). The caller adds the kernel boot image's
// and virt-controller's own.
func imagePullSecrets(vmi *virtv1.VirtualMachineInstance) []corev1.LocalObjectReference {
	var out []corev1.LocalObjectReference
	for _, v := range vmi.Spec.Volumes {
		if v.ContainerDisk == nil || v.ContainerDisk.ImagePullSecret == "" {
			continue
		}
		ref := corev1.LocalObjectReference{Name: v.ContainerDisk.ImagePullSecret}
		if !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	return out
}

// serviceAccountName is the first serviceAccount volume's account, "" when
// the VMI has none.
func serviceAccountName(vmi *virtv1.VirtualMachineInstance) string {
	for _, v := range vmi.Spec.Volumes {
		if v.ServiceAccount != nil {
			return v.ServiceAccount.ServiceAccountName
		}
	}
	return ""
}

// backendStoragePrefix names (and labels) the PVC of a VMI's persistent
// TPM/EFI state: persistent-state-for-<vm>.
const backendStoragePrefix = "persistent-state-for"

// backendStoragePVC finds the VMI's backend-storage PVC as KubeVirt does:
// the one labelled with the VMI's name, else the legacy one named after
// it; "" when the VM controller has not created it yet.
func backendStoragePVC(vmi *virtv1.VirtualMachineInstance, objects Objects) string {
	if !needsBackendStorage(vmi) {
		return "" // no need to list the namespace's claims on every render
	}
	legacy := ""
	for _, pvc := range objects.PVCs(vmi.Namespace) {
		if pvc.DeletionTimestamp != nil {
			continue
		}
		if name, ok := pvc.Labels[backendStoragePrefix]; ok && name == vmi.Name {
			return pvc.Name
		}
		if pvc.Name == backendStoragePrefix+"-"+vmi.Name {
			legacy = pvc.Name
		}
	}
	return legacy
}

// migrationBackendStoragePVC is the migration target's backend-storage
// PVC: the one the migration's state names, else the one labelled with the
// migration's name.
func migrationBackendStoragePVC(vmi *virtv1.VirtualMachineInstance, m *virtv1.VirtualMachineInstanceMigration, objects Objects) string {
	if !needsBackendStorage(vmi) {
		return ""
	}
	if s := m.Status.MigrationState; s != nil && s.TargetPersistentStatePVCName != "" {
		if _, ok := objects.PVC(m.Namespace, s.TargetPersistentStatePVCName); ok {
			return s.TargetPersistentStatePVCName
		}
		return ""
	}
	for _, pvc := range objects.PVCs(m.Namespace) {
		if name, ok := pvc.Labels[virtv1.MigrationNameLabel]; ok && name == m.Name {
			return pvc.Name
		}
	}
	return ""
}
