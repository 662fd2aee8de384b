package template

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

const consoleLogContainerName = "guest-console-log"

// consoleLogContainer tails the guest's first serial console log into the
// pod's log, nil when the log is off (generateSerialConsoleLogContainer).
// It is a sidecar: an init container that restarts always, so it runs
// from before virt-launcher starts until the pod ends.
func consoleLogContainer(vmi *virtv1.VirtualMachineInstance, launcherImage string, cluster Cluster, launcherVerbosity uint) *corev1.Container {
	if !serialConsoleLogged(vmi, cluster.Configuration()) {
		return nil
	}
	const serialPort = 0
	return &corev1.Container{
		Name:            consoleLogContainerName,
		Image:           launcherImage,
		ImagePullPolicy: cluster.Configuration().ImagePullPolicy,
		Command:         []string{"/usr/bin/virt-tail"},
		Args:            []string{"--logfile", fmt.Sprintf("%s/%s/virt-serial%d-log", virtPrivateDir, vmi.UID, serialPort)},
		VolumeMounts:    []corev1.VolumeMount{readOnlyMount(privateVolume, virtPrivateDir)},
		Resources:       consoleLogResources(vmi, cluster),
		SecurityContext: supportContainerSecurityContext(),
		RestartPolicy:   ptr.To(corev1.ContainerRestartPolicyAlways),
		Env: []corev1.EnvVar{{
			Name:  "VIRT_LAUNCHER_LOG_VERBOSITY",
			Value: strconv.FormatUint(uint64(launcherVerbosity), 10),
		}},
	}
}

// serialConsoleLogged: the VMI's logSerialConsole, else the cluster's
// default (on unless virtualMachineOptions.disableSerialConsoleLog is set);
// never without an auto-attached serial console.
func serialConsoleLogged(vmi *virtv1.VirtualMachineInstance, cfg *virtv1.KubeVirtConfiguration) bool {
	devices := vmi.Spec.Domain.Devices
	if devices.AutoattachSerialConsole != nil && !*devices.AutoattachSerialConsole {
		return false
	}
	if devices.LogSerialConsole != nil {
		return *devices.LogSerialConsole
	}
	return cfg.VirtualMachineOptions == nil || cfg.VirtualMachineOptions.DisableSerialConsoleLog == nil
}
