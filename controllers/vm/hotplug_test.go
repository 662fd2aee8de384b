package vm

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// hotplugCase is a running VM whose template changes after the start, and
// what its sync must write: the VMI patch (empty for none), the
// RestartRequired message (empty for none) and the Failure reason (empty
// for none).
type hotplugCase struct {
	name           string
	vmi            func(*virtv1.VirtualMachineInstance)
	change         func(*virtv1.VirtualMachineInstanceSpec)
	patch, restart string
	failure        string
}

func runHotplugCases(t *testing.T, start func(*virtv1.VirtualMachineInstanceSpec), cases []hotplugCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vm := newVM(virtv1.RunStrategyAlways)
			vm.Generation = 1
			start(&vm.Spec.Template.Spec)
			vmi, rev := started(t, vm)
			if tc.vmi != nil {
				tc.vmi(vmi)
			}
			tc.change(&vm.Spec.Template.Spec)
			vm.Generation = 2
			f := newFixture(t, vm, vmi, rev)
			f.sync(t, vm)

			patches, status := f.written()
			patch := ""
			if len(patches) > 0 {
				patch = patches[len(patches)-1]
			}
			if patch != tc.patch {
				t.Errorf("VMI patch\n%s\nwant\n%s", patch, tc.patch)
			}
			if status == nil {
				t.Fatal("no status update")
			}
			restart, failure := "", ""
			for _, c := range status.Status.Conditions {
				switch {
				case c.Type == virtv1.VirtualMachineRestartRequired:
					restart = c.Message
				case c.Type == virtv1.VirtualMachineFailure && c.Status == corev1.ConditionTrue:
					failure = c.Reason
				}
			}
			if restart != tc.restart || failure != tc.failure {
				t.Errorf("RestartRequired %q, Failure %q; want %q, %q", restart, failure, tc.restart, tc.failure)
			}
			if events := f.Events(); len(events) > 0 {
				t.Errorf("events %q, want none", events)
			}
		})
	}
}

// TestSyncHotplugsCPUSockets: more sockets in a running VM's template
// reach the VMI with its CPU request and limit grown by what the CPU
// allocation ratio (10 by default) makes of each added vCPU; fewer
// sockets, more than the VMI's maximum, or an ARM VM ask for a restart;
// a hotplug under way or a migration hold the change back.
func TestSyncHotplugsCPUSockets(t *testing.T) {
	start := func(s *virtv1.VirtualMachineInstanceSpec) {
		s.Domain.CPU = &virtv1.CPU{Sockets: 2, Cores: 2, Threads: 1}
		s.Domain.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("400m")
		s.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}
	}
	running := func(v *virtv1.VirtualMachineInstance) { v.Spec.Domain.CPU.MaxSockets = 8 }
	sockets := func(n uint32) func(*virtv1.VirtualMachineInstanceSpec) {
		return func(s *virtv1.VirtualMachineInstanceSpec) { s.Domain.CPU.Sockets = n }
	}
	runHotplugCases(t, start, []hotplugCase{{
		name: "more sockets", vmi: running, change: sockets(3),
		patch: `[{"op":"test","path":"/spec/domain/cpu/sockets","value":2},{"op":"replace","path":"/spec/domain/cpu/sockets","value":3},` +
			`{"op":"test","path":"/spec/domain/resources/requests/cpu","value":"400m"},{"op":"replace","path":"/spec/domain/resources/requests/cpu","value":"600m"},` +
			`{"op":"test","path":"/spec/domain/resources/limits/cpu","value":"4"},{"op":"replace","path":"/spec/domain/resources/limits/cpu","value":"4200m"}]`,
	}, {
		name: "above the maximum", vmi: running, change: sockets(9),
		restart: "CPU sockets updated in template spec to a value higher than what's available",
	}, {
		name: "fewer sockets", vmi: running, change: sockets(1),
		restart: "Reduction of CPU socket count requires a restart",
	}, {
		name: "another architecture", vmi: running,
		change: func(s *virtv1.VirtualMachineInstanceSpec) { s.Domain.CPU.Sockets, s.Architecture = 3, "arm64" },
		// The architecture itself is no live field.
		restart: restartMessage,
	}, {
		name: "hotplug under way", change: sockets(3),
		vmi: func(v *virtv1.VirtualMachineInstance) {
			running(v)
			v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: corev1.ConditionTrue})
		},
		failure: ReasonHotplugCPU,
	}})
	arm := func(s *virtv1.VirtualMachineInstanceSpec) {
		start(s)
		s.Architecture = "arm64"
	}
	runHotplugCases(t, arm, []hotplugCase{{
		name: "arm64", vmi: running, change: sockets(3),
		restart: "ARM doesn't support CPU hotplug",
	}})
}

// TestSyncHotplugsMemory: more guest memory in a running, migratable VM's
// template reaches the VMI with its memory request grown by the difference
// to the memory the guest has; what the VMI cannot take asks for a
// restart in KubeVirt's words, and a failed hotplug keeps asking.
func TestSyncHotplugsMemory(t *testing.T) {
	gi := func(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }
	start := func(s *virtv1.VirtualMachineInstanceSpec) {
		s.Architecture = "amd64"
		s.Domain.Memory = &virtv1.Memory{Guest: gi("2Gi")}
		s.Domain.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("2Gi")
	}
	running := func(v *virtv1.VirtualMachineInstance) {
		v.Spec.Domain.Memory.MaxGuest = gi("8Gi")
		v.Status.Memory = &virtv1.MemoryStatus{GuestAtBoot: gi("2Gi"), GuestCurrent: gi("2Gi"), GuestRequested: gi("2Gi")}
		v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue})
	}
	guest := func(q string) func(*virtv1.VirtualMachineInstanceSpec) {
		return func(s *virtv1.VirtualMachineInstanceSpec) { s.Domain.Memory.Guest = gi(q) }
	}
	runHotplugCases(t, start, []hotplugCase{{
		name: "more memory", vmi: running, change: guest("3Gi"),
		patch: `[{"op":"test","path":"/spec/domain/memory/guest","value":"2Gi"},{"op":"replace","path":"/spec/domain/memory/guest","value":"3Gi"},` +
			`{"op":"test","path":"/spec/domain/resources/requests/memory","value":"2Gi"},{"op":"replace","path":"/spec/domain/resources/requests/memory","value":"3Gi"}]`,
	}, {
		name: "not migratable", change: guest("3Gi"),
		vmi: func(v *virtv1.VirtualMachineInstance) {
			running(v)
			v.Status.Conditions = nil
		},
		restart: "memory updated in template spec. Memory-hotplug is only available for migratable VMs",
	}, {
		name: "above the maximum", vmi: running, change: guest("10Gi"),
		restart: "memory hotplug not supported, Guest memory is greater than the configured maxGuest memory",
	}, {
		name: "below the boot size", vmi: running, change: guest("1Gi"),
		restart: "memory updated in template spec to a value lower than what the VM started with",
	}, {
		name: "unaligned", vmi: running, change: guest("3073Mi"),
		restart: "memory hotplug not supported, Guest memory must be 2Mi aligned",
	}, {
		name: "failed before", change: guest("3Gi"),
		vmi: func(v *virtv1.VirtualMachineInstance) {
			running(v)
			v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceMemoryChange, Status: corev1.ConditionFalse})
		},
		restart: "memory updated in template spec. Memory-hotplug failed and is not available for this VM configuration",
	}, {
		name: "hotplug under way", change: guest("3Gi"),
		vmi: func(v *virtv1.VirtualMachineInstance) {
			running(v)
			v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceMemoryChange, Status: corev1.ConditionTrue})
		},
		failure: ReasonHotplugMemory,
	}})
}

// TestHotplugRestartKeepsItsMessage: a hotplug's RestartRequired follows
// the latest reason, and the general condition keeps whatever message it
// has, as KubeVirt's UpdateCondition does.
func TestHotplugRestartKeepsItsMessage(t *testing.T) {
	had := []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue, Message: "Reduction of CPU socket count requires a restart"}}
	for _, tc := range []struct{ why, want string }{
		{"", "Reduction of CPU socket count requires a restart"},
		{"ARM doesn't support CPU hotplug", "ARM doesn't support CPU hotplug"},
	} {
		vm := newVM(virtv1.RunStrategyAlways)
		vm.Status.Conditions = slices.Clone(had)
		f := newFixture(t, vm)
		status := f.c.status(observed{vm: vm, restart: restartRequired, restartWhy: tc.why}, nil)
		i := slices.IndexFunc(status.Conditions, isRestartRequired)
		if i < 0 || status.Conditions[i].Message != tc.want {
			t.Errorf("restartWhy %q: conditions %+v, want RestartRequired %q", tc.why, status.Conditions, tc.want)
		}
	}
}
