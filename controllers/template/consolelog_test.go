package template

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// The cases below are KubeVirt v1.8.1's template_test.go "check for
// guest-console-log container", with the whole container and the cluster
// default added.

func TestConsoleLogContainer(t *testing.T) {
	want := &corev1.Container{
		Name:            "guest-console-log",
		Image:           "kubevirt/virt-launcher",
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"/usr/bin/virt-tail"},
		Args:            []string{"--logfile", "/var/run/kubevirt-private/1234/virt-serial0-log"},
		VolumeMounts:    []corev1.VolumeMount{{Name: "private", MountPath: "/var/run/kubevirt-private", ReadOnly: true}},
		Resources:       defaultConsoleLogResources,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr.To[int64](107),
			RunAsNonRoot:             ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Env:           []corev1.EnvVar{{Name: "VIRT_LAUNCHER_LOG_VERBOSITY", Value: "2"}},
	}
	serialConsole := func(autoattach, log *bool) func(*virtv1.VirtualMachineInstance) {
		return func(vmi *virtv1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.AutoattachSerialConsole = autoattach
			vmi.Spec.Domain.Devices.LogSerialConsole = log
		}
	}
	disabled := virtv1.KubeVirtConfiguration{
		ImagePullPolicy:       corev1.PullIfNotPresent,
		VirtualMachineOptions: &virtv1.VirtualMachineOptions{DisableSerialConsoleLog: &virtv1.DisableSerialConsoleLog{}},
	}
	tests := []struct {
		name string
		vmi  *virtv1.VirtualMachineInstance
		cfg  virtv1.KubeVirtConfiguration
		want *corev1.Container
	}{
		{name: "with AutoattachSerialConsole and LogSerialConsole", vmi: volumeTestVMI(serialConsole(ptr.To(true), ptr.To(true))), want: want},
		{name: "with AutoattachSerialConsole but not LogSerialConsole", vmi: volumeTestVMI(serialConsole(ptr.To(true), ptr.To(false)))},
		{name: "without AutoattachSerialConsole but with LogSerialConsole", vmi: volumeTestVMI(serialConsole(ptr.To(false), ptr.To(true)))},
		{name: "without AutoattachSerialConsole and without LogSerialConsole", vmi: volumeTestVMI(serialConsole(ptr.To(false), ptr.To(false)))},
		{name: "neither set follows the cluster, which logs by default", vmi: volumeTestVMI(), want: want},
		{name: "neither set follows the cluster's disableSerialConsoleLog", vmi: volumeTestVMI(), cfg: disabled},
		{name: "the VMI's LogSerialConsole overrides the cluster's disableSerialConsoleLog", vmi: volumeTestVMI(serialConsole(nil, ptr.To(true))), cfg: disabled, want: want},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.ImagePullPolicy = corev1.PullIfNotPresent
			got := consoleLogContainer(tc.vmi, "kubevirt/virt-launcher", volumeTestCluster{cfg: tc.cfg}, 2)
			if diff := cmp.Diff(tc.want, got, quantityComparer); diff != "" {
				t.Errorf("guest-console-log container differs (-want +got):\n%s", diff)
			}
		})
	}
}
