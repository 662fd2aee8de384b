package template

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/shard"
)

const (
	// LauncherLabelValue is the value of kubevirt.io on launcher pods.
	LauncherLabelValue = "virt-launcher"
	// ComputeContainer is the launcher pod's first container.
	ComputeContainer = "compute"

	// gracePeriodPadding is added to the VMI's grace period, twice: virt-handler
	// should shut the guest down before virt-launcher's termination does.
	gracePeriodPadding int64 = 15
	// qemuTimeoutJitter spreads launchers' QEMU timeouts over this many
	// seconds above the base.
	qemuTimeoutJitter = 120
	// defaultLauncherVerbosity is virt-launcher's log level unless the
	// KubeVirt CR or the VMI's logVerbosity label sets another.
	defaultLauncherVerbosity = 2
	// extLogVerbosityThreshold turns on libvirt's and virtiofsd's debug
	// logs above it.
	extLogVerbosityThreshold = 5
)

// Options are virt-controller's command-line settings that shape launcher
// pods, and virtshard's range label.
type Options struct {
	// LauncherImage is the virt-launcher image (--launcher-image).
	LauncherImage string
	// QEMUTimeout is the base of virt-launcher's --qemu-timeout
	// (--launcher-qemu-timeout).
	QEMUTimeout time.Duration
	// ImagePullSecret is added to every launcher pod (--image-pull-secret).
	ImagePullSecret string
	// SidecarShimImage runs hook sidecars that name no image
	// (virt-operator's SIDECAR_SHIM_IMAGE).
	SidecarShimImage string
	// DefaultArchitecture is set on VMIs without one.
	DefaultArchitecture string
	// SyncedLabels and SyncedAnnotations are keys that follow from a VM's
	// template to its VMI and from the VMI to its launcher pod for as long
	// as they live, besides KubeVirt's own
	// (--additional-launcher-labels-sync, --additional-launcher-annotations-sync).
	SyncedLabels, SyncedAnnotations []string
}

// DefaultOptions are virt-controller v1.8.1's defaults, with the images of
// a v1.8.1 install.
func DefaultOptions() Options {
	return Options{
		LauncherImage:       "quay.io/kubevirt/virt-launcher:v1.8.1",
		QEMUTimeout:         240 * time.Second,
		SidecarShimImage:    "quay.io/kubevirt/sidecar-shim:v1.8.1",
		DefaultArchitecture: "amd64",
	}
}

// Render returns vmi's launcher pod for shard range rng: KubeVirt's
// TemplateService.RenderLaunchManifest, with the differences listed in
// docs/controller.md. vmi is as virt-api stored it (defaulted).
func Render(vmi *virtv1.VirtualMachineInstance, rng int, opts Options, cluster Cluster, objects Objects) (*corev1.Pod, error) {
	return render(vmi, rng, opts, cluster, objects, nil, backendStoragePVC(vmi, objects), false)
}

// RenderProvisioning returns the temporary pod that lets vmi's
// WaitForFirstConsumer DataVolumes bind (KubeVirt's
// RenderLaunchManifestNoVm): the launcher pod, marked
// kubevirt.io/ephemeral-provisioning, whose compute container only has to
// be scheduled with the claims mounted and exits at once. It has its own
// deterministic name, ProvisioningPodName.
func RenderProvisioning(vmi *virtv1.VirtualMachineInstance, rng int, opts Options, cluster Cluster, objects Objects) (*corev1.Pod, error) {
	return render(vmi, rng, opts, cluster, objects, nil, backendStoragePVC(vmi, objects), true)
}

// RenderMigrationTarget returns the launcher pod a migration of vmi starts
// on its target node (KubeVirt's RenderMigrationManifest): the same pod,
// with the source's container-disk image digests, so the target runs the
// very images the source runs, and the source's interface naming.
func RenderMigrationTarget(vmi *virtv1.VirtualMachineInstance, m *virtv1.VirtualMachineInstanceMigration, source *corev1.Pod, rng int, opts Options, cluster Cluster, objects Objects) (*corev1.Pod, error) {
	if source == nil {
		return nil, errors.New("can not render a migration target without the source pod")
	}
	imageIDs, err := sourceImageIDs(vmi, source, cluster.FeatureGateEnabled(gateImageVolume))
	if err != nil {
		return nil, fmt.Errorf("can not proceed with the migration when no reproducible image digest can be detected: %w", err)
	}
	pod, err := render(vmi, rng, opts, cluster, objects, imageIDs, migrationBackendStoragePVC(vmi, m, objects), false)
	if err != nil {
		return nil, err
	}
	annotations, err := migrationTargetAnnotations(vmi, source, cluster, bindingPlugins(cluster.Configuration()))
	if err != nil {
		return nil, err
	}
	maps.Copy(pod.Annotations, annotations)
	return pod, nil
}

func render(vmi *virtv1.VirtualMachineInstance, rng int, opts Options, cluster Cluster, objects Objects, imageIDs map[string]string, backendStoragePVC string, provisioning bool) (*corev1.Pod, error) {
	cfg := cluster.Configuration()
	uid := runtimeUID(vmi)
	nonRoot := isNonRoot(vmi)
	imageVolumes := cluster.FeatureGateEnabled(gateImageVolume)

	gracePeriod := ptr.Deref(vmi.Spec.TerminationGracePeriodSeconds, virtv1.DefaultGracePeriodSeconds) + gracePeriodPadding

	pullSecrets := imagePullSecrets(vmi)
	if fw := vmi.Spec.Domain.Firmware; fw != nil && fw.KernelBoot != nil && fw.KernelBoot.Container != nil && fw.KernelBoot.Container.ImagePullSecret != "" {
		pullSecrets = appendPullSecret(pullSecrets, fw.KernelBoot.Container.ImagePullSecret)
	}
	if opts.ImagePullSecret != "" {
		pullSecrets = appendPullSecret(pullSecrets, opts.ImagePullSecret)
	}

	var networkResources map[string]string
	if !cluster.FeatureGateEnabled(gateExternalNetResourceInjection) {
		var err error
		if networkResources, err = networkResourceNames(vmi, objects); err != nil {
			return nil, err
		}
	}
	overhead := MemoryOverhead(vmi, cluster)
	resources, err := computeResources(vmi, cluster, objects, networkResources, overhead)
	if err != nil {
		return nil, err
	}

	sidecars, err := hookSidecars(vmi, cfg)
	if err != nil {
		return nil, err
	}

	// KubeVirt's temporary pod runs `bash -c echo` (its first word is
	// bash's only command), then exits.
	command := []string{"/bin/bash", "-c", "echo", "bound PVCs"}
	if !provisioning {
		command = []string{"/usr/bin/virt-launcher-monitor",
			"--qemu-timeout", qemuTimeout(vmi, opts.QEMUTimeout),
			"--name", vmi.Name,
			"--uid", string(vmi.UID),
			"--namespace", vmi.Namespace,
			"--kubevirt-share-dir", virtShareDir,
			"--ephemeral-disk-dir", ephemeralDiskDir,
			"--container-disk-dir", containerDiskDir,
			"--grace-period-seconds", strconv.FormatInt(gracePeriod, 10),
			"--hook-sidecars", strconv.Itoa(len(sidecars)),
			"--ovmf-path", ovmfPath(cfg, vmi.Spec.Architecture),
			"--disk-memory-limit", strconv.FormatInt(diskMemoryLimit(cfg), 10),
			"--hypervisor", hypervisorName(cluster),
		}
		if nonRoot {
			command = append(command, "--run-as-nonroot")
		}
		if imageVolumes {
			command = append(command, "--image-volume")
		}
		if cluster.FeatureGateEnabled(gateLibvirtHooksServerAndClient) {
			command = append(command, "--libvirt-hook-server-and-client")
		}
		if cluster.FeatureGateEnabled(gatePodSecondaryInterfaceNamingUpgrade) {
			command = append(command, "--upgrade-ordinal-ifaces")
		}
		if filters, ok := vmi.Annotations[virtv1.CustomLibvirtLogFiltersAnnotation]; ok {
			command = append(command, "--libvirt-log-filters", filters)
		}
	}
	if cfg.DeveloperConfiguration != nil && cfg.DeveloperConfiguration.UseEmulation {
		command = append(command, "--allow-emulation")
	}
	if keepAfterFailure(vmi) {
		command = append(command, "--keep-after-failure")
	}
	if _, ok := vmi.Annotations[virtv1.FuncTestLauncherFailFastAnnotation]; ok {
		command = append(command, "--simulate-crash")
	}

	vols, err := renderVolumes(vmi, cluster, objects, volumeInputs{
		launcherImage:     opts.LauncherImage,
		imageIDs:          imageIDs,
		backendStoragePVC: backendStoragePVC,
		hookSidecars:      len(sidecars) > 0,
	})
	if err != nil {
		return nil, err
	}

	compute := &container{
		name:              ComputeContainer,
		image:             opts.LauncherImage,
		pullPolicy:        cfg.ImagePullPolicy,
		devices:           vols.Devices,
		mounts:            vols.Mounts,
		sharedFilesystems: vols.SharedFilesystemPaths,
		resources:         resources,
		ports:             containerPorts(vmi),
		capabilities:      &corev1.Capabilities{Add: computeCapabilities(vmi)},
	}
	if nonRoot {
		compute.uid = uid
		compute.dropAll()
	}
	if vmi.Spec.ReadinessProbe != nil {
		compute.readiness = probe(vmi, vmi.Spec.ReadinessProbe)
	}
	if vmi.Spec.LivenessProbe != nil {
		compute.liveness = probe(vmi, vmi.Spec.LivenessProbe)
	}
	computeContainer := compute.render(command)
	verbosity, env, err := launcherLogEnv(vmi, cfg)
	if err != nil {
		return nil, err
	}
	computeContainer.Env = append(computeContainer.Env, env...)
	computeContainer.Env = append(computeContainer.Env, corev1.EnvVar{Name: "POD_NAME",
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})

	// compute stays first: the SR-IOV operator's webhook adds its resources
	// to the first container.
	containers := []corev1.Container{computeContainer}
	if !imageVolumes {
		containers = append(containers, containerDiskContainers(vmi, cluster, imageIDs)...)
		if c := kernelBootContainer(vmi, cluster, imageIDs); c != nil {
			containers = append(containers, *c)
		}
	}
	containers = append(containers, virtiofsContainers(vmi, opts.LauncherImage, cluster)...)

	extraVolumes, sharedMounts, err := sidecarVolumes(vmi, sidecars, objects)
	if err != nil {
		return nil, err
	}
	containers[0].VolumeMounts = append(containers[0].VolumeMounts, sharedMounts...)
	for i, s := range sidecars {
		containers = append(containers, sidecarContainer(i, s, vmi, sidecarContainerResources(vmi, cluster), opts.SidecarShimImage))
	}

	annotations, err := podAnnotations(vmi, bindingPlugins(cfg))
	if err != nil {
		return nil, err
	}
	if cluster.FeatureGateEnabled(gateVMIMemoryOverheadReport) {
		annotations[virtv1.MemoryOverheadAnnotationBytes] = strconv.FormatInt(overhead.Value(), 10)
	}
	name := PodName(vmi)
	if provisioning {
		annotations[virtv1.EphemeralProvisioningObject] = "true"
		name = ProvisioningPodName(vmi)
	}

	var initContainers []corev1.Container
	if c := consoleLogContainer(vmi, opts.LauncherImage, cluster, verbosity); c != nil {
		initContainers = append(initContainers, *c)
	}
	switch {
	case !imageVolumes && (hasContainerDisk(vmi) || hasKernelBootImage(vmi)):
		binary := &container{
			name:         "container-disk-binary",
			image:        opts.LauncherImage,
			pullPolicy:   cfg.ImagePullPolicy,
			mounts:       []corev1.VolumeMount{{Name: virtBinDirVolume, MountPath: "/init/usr/bin"}},
			resources:    containerDiskBinaryResources(vmi, cluster),
			capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
		if nonRoot {
			binary.uid = uid
		}
		initContainers = append(initContainers, binary.render([]string{"/usr/bin/cp", "--preserve=all",
			"/usr/bin/container-disk", "/init/usr/bin/container-disk"}))
		// Pulls the disks' images before virt-launcher starts.
		initContainers = append(initContainers, containerDiskInitContainers(vmi, cluster, imageIDs)...)
		if c := kernelBootInitContainer(vmi, cluster, imageIDs); c != nil {
			initContainers = append(initContainers, *c)
		}
	case imageVolumes:
		initContainers = append(initContainers, imageVolumeInitContainers(vmi, cluster, imageIDs)...)
	}

	host := hostname(vmi)
	labels := podLabels(vmi, host)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			GenerateName:    launcherGenerateName(vmi), // KubeVirt's, kept as a record beside the derived name
			Namespace:       vmi.Namespace,
			Labels:          labels,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi, virtv1.VirtualMachineInstanceGroupVersionKind)},
		},
		Spec: corev1.PodSpec{
			Hostname:                      host,
			Subdomain:                     vmi.Spec.Subdomain,
			SecurityContext:               podSecurityContext(vmi, seccompProfile(cfg)),
			TerminationGracePeriodSeconds: ptr.To(gracePeriod + gracePeriodPadding),
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers:                    containers,
			InitContainers:                initContainers,
			NodeSelector:                  nodeSelector(vmi, cluster),
			Volumes:                       vols.Volumes,
			ImagePullSecrets:              pullSecrets,
			DNSConfig:                     vmi.Spec.DNSConfig,
			DNSPolicy:                     vmi.Spec.DNSPolicy,
			ReadinessGates:                []corev1.PodReadinessGate{{ConditionType: virtv1.VirtualMachineUnpaused}},
			EnableServiceLinks:            ptr.To(false),
			SchedulerName:                 vmi.Spec.SchedulerName,
			Tolerations:                   vmi.Spec.Tolerations,
			TopologySpreadConstraints:     vmi.Spec.TopologySpreadConstraints,
			ResourceClaims:                vmi.Spec.ResourceClaims,
			PriorityClassName:             vmi.Spec.PriorityClassName,
			Affinity:                      affinity(vmi),
		},
	}
	alignSELinux(pod, cfg.SELinuxLauncherType, cluster.FeatureGateEnabled(gateDockerSELinuxMCSWorkaround))
	if cfg.DefaultRuntimeClass != "" {
		pod.Spec.RuntimeClassName = ptr.To(cfg.DefaultRuntimeClass)
	}
	if sa := serviceAccountName(vmi); sa != "" {
		pod.Spec.ServiceAccountName = sa
		pod.Spec.AutomountServiceAccountToken = ptr.To(true)
	} else {
		pod.Spec.AutomountServiceAccountToken = ptr.To(strings.EqualFold(vmi.Annotations[istioInjectSidecar], "true"))
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, extraVolumes...)
	// On its VMI's range, so that the replica holding the VMI caches it.
	shard.StampRange(pod, rng)
	return pod, nil
}

// qemuTimeout is base plus a jitter below 120 s, so that launchers started
// together do not time out together. KubeVirt draws the jitter at random;
// virtshard derives it from the VMI's UID, so that a pod rendered twice is
// the same pod.
func qemuTimeout(vmi *virtv1.VirtualMachineInstance, base time.Duration) string {
	sum := sha256.Sum256([]byte(vmi.UID))
	jitter := binary.BigEndian.Uint64(sum[:8]) % qemuTimeoutJitter
	return fmt.Sprintf("%ds", int64(base/time.Second)+int64(jitter))
}

// launcherLogEnv sets virt-launcher's verbosity when the VMI's
// logVerbosity label or the KubeVirt CR asks for other than the default,
// and libvirt's and virtiofsd's debug logs on request or above level 5.
func launcherLogEnv(vmi *virtv1.VirtualMachineInstance, cfg *virtv1.KubeVirtConfiguration) (uint, []corev1.EnvVar, error) {
	verbosity := uint(defaultLauncherVerbosity)
	if dc := cfg.DeveloperConfiguration; dc != nil && dc.LogVerbosity != nil {
		verbosity = dc.LogVerbosity.VirtLauncher
	}
	var env []corev1.EnvVar
	label, labelled := vmi.Labels[logVerbosityLabel]
	if labelled || verbosity != defaultLauncherVerbosity {
		value := strconv.FormatUint(uint64(verbosity), 10)
		if labelled {
			n, err := strconv.Atoi(label)
			if err != nil {
				return 0, nil, fmt.Errorf("verbosity %s cannot cast to int: %w", label, err)
			}
			value, verbosity = label, uint(n)
		}
		env = append(env, corev1.EnvVar{Name: "VIRT_LAUNCHER_LOG_VERBOSITY", Value: value})
	}
	if v, ok := vmi.Labels[debugLogsLabel]; (ok && strings.EqualFold(v, "true")) || verbosity > extLogVerbosityThreshold {
		env = append(env, corev1.EnvVar{Name: "LIBVIRT_DEBUG_LOGS", Value: "1"})
	}
	if v, ok := vmi.Labels[virtiofsDebugLogsLabel]; (ok && strings.EqualFold(v, "true")) || verbosity > extLogVerbosityThreshold {
		env = append(env, corev1.EnvVar{Name: "VIRTIOFSD_DEBUG_LOGS", Value: "1"})
	}
	return verbosity, env, nil
}

// keepAfterFailure: an annotation kubevirt.io/keep-launcher-alive-after-failure*
// that is empty or starts with "true".
func keepAfterFailure(vmi *virtv1.VirtualMachineInstance) bool {
	for k, v := range vmi.Annotations {
		if strings.HasPrefix(k, virtv1.KeepLauncherAfterFailureAnnotation) && (v == "" || strings.HasPrefix(v, "true")) {
			return true
		}
	}
	return false
}

// networkResourceNames maps each Multus network to its
// NetworkAttachmentDefinition's device-plugin resource ("" for none).
func networkResourceNames(vmi *virtv1.VirtualMachineInstance, objects Objects) (map[string]string, error) {
	out := map[string]string{}
	for _, n := range vmi.Spec.Networks {
		if n.Multus == nil {
			continue
		}
		ns, name := splitNetworkName(vmi.Namespace, n.Multus.NetworkName)
		resourceName, err := objects.NetworkResourceName(ns, name)
		if err != nil {
			return nil, fmt.Errorf("failed to locate network attachment definition %s/%s", ns, name)
		}
		out[n.Name] = resourceName
	}
	return out, nil
}

func appendPullSecret(secrets []corev1.LocalObjectReference, name string) []corev1.LocalObjectReference {
	for _, s := range secrets {
		if s.Name == name {
			return secrets
		}
	}
	return append(secrets, corev1.LocalObjectReference{Name: name})
}

func ovmfPath(cfg *virtv1.KubeVirtConfiguration, arch string) string {
	if cfg.OVMFPath != "" { // deprecated, still honoured by KubeVirt
		return cfg.OVMFPath
	}
	return clusterconfig.ArchConfiguration(cfg, arch).OVMFPath
}

func diskMemoryLimit(cfg *virtv1.KubeVirtConfiguration) int64 {
	if dc := cfg.DeveloperConfiguration; dc != nil && dc.DiskVerification != nil && dc.DiskVerification.MemoryLimit != nil {
		return dc.DiskVerification.MemoryLimit.Value()
	}
	return 0
}

// hypervisorName is the first configured hypervisor with the
// ConfigurableHypervisor gate, else KVM.
func hypervisorName(cluster Cluster) string {
	if cfg := cluster.Configuration(); cluster.FeatureGateEnabled(gateConfigurableHypervisor) && len(cfg.Hypervisors) > 0 {
		return cfg.Hypervisors[0].Name
	}
	return virtv1.KvmHypervisorName
}

// podSecurityContext: fsGroup 107 always (virtiofsd runs unprivileged even
// in a root pod), the runtime user, and the CR's seccomp profile.
func podSecurityContext(vmi *virtv1.VirtualMachineInstance, seccomp *corev1.SeccompProfile) *corev1.PodSecurityContext {
	sc := &corev1.PodSecurityContext{FSGroup: ptr.To(nonRootUID), SeccompProfile: seccomp}
	if isNonRoot(vmi) {
		sc.RunAsUser, sc.RunAsGroup, sc.RunAsNonRoot = ptr.To(nonRootUID), ptr.To(nonRootUID), ptr.To(true)
	} else {
		sc.RunAsUser = ptr.To(rootUID)
	}
	return sc
}

func seccompProfile(cfg *virtv1.KubeVirtConfiguration) *corev1.SeccompProfile {
	sc := cfg.SeccompConfiguration
	if sc == nil || sc.VirtualMachineInstanceProfile == nil || sc.VirtualMachineInstanceProfile.CustomProfile == nil {
		return nil
	}
	custom := sc.VirtualMachineInstanceProfile.CustomProfile
	switch {
	case custom.LocalhostProfile != nil:
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: custom.LocalhostProfile}
	case custom.RuntimeDefaultProfile:
		return &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	return nil
}

// alignSELinux sets the CR's SELinux type on the pod and, with Docker's
// MCS workaround, level s0 on every container but compute
// (kubernetes/kubernetes#90759).
func alignSELinux(pod *corev1.Pod, selinuxType string, dockerWorkaround bool) {
	if selinuxType != "" {
		if pod.Spec.SecurityContext == nil {
			pod.Spec.SecurityContext = &corev1.PodSecurityContext{}
		}
		pod.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: selinuxType}
	}
	if !dockerWorkaround {
		return
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name == ComputeContainer {
			continue
		}
		if c.SecurityContext == nil {
			c.SecurityContext = &corev1.SecurityContext{}
		}
		if c.SecurityContext.SELinuxOptions == nil {
			c.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{}
		}
		c.SecurityContext.SELinuxOptions.Type = selinuxType
		c.SecurityContext.SELinuxOptions.Level = "s0"
	}
}
