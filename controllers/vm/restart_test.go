package vm

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
)

// TestNeedsRestart holds the judgement against the cases KubeVirt's
// syncRestartRequired tells apart: fields that change live under the
// LiveUpdate rollout (and only under it), hotplugged volumes, network
// changes the running VMI can or cannot take, and a persisted firmware
// UUID.
func TestNeedsRestart(t *testing.T) {
	live := liveSettings{rollout: true}
	hotplugPVC := virtv1.Volume{Name: "hp", VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "hp"}, Hotpluggable: true}}}
	pvc := func(name, claim string) virtv1.Volume {
		return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	}
	podNet := virtv1.Network{Name: "default", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}
	masquerade := virtv1.Interface{Name: "default", InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}}}
	multus := func(name, nad string) virtv1.Network {
		return virtv1.Network{Name: name, NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{NetworkName: nad}}}
	}
	bridge := func(name string) virtv1.Interface {
		return virtv1.Interface{Name: name, InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Bridge: &virtv1.InterfaceBridge{}}}
	}
	withNets := func(s *virtv1.VirtualMachineInstanceSpec) {
		s.Networks = []virtv1.Network{podNet, multus("blue", "nad-a")}
		s.Domain.Devices.Interfaces = []virtv1.Interface{masquerade, bridge("blue")}
	}

	for _, tc := range []struct {
		name string
		// before shapes the started template (and the running VMI), change the current one.
		before, change func(*virtv1.VirtualMachineInstanceSpec)
		live           liveSettings
		want           bool
	}{
		{name: "no change", change: func(*virtv1.VirtualMachineInstanceSpec) {}, live: live},
		{name: "memory request", change: func(s *virtv1.VirtualMachineInstanceSpec) {
			s.Domain.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("128Mi")
		}, live: live, want: true},
		{name: "node selector, live", change: func(s *virtv1.VirtualMachineInstanceSpec) { s.NodeSelector = map[string]string{"a": "b"} }, live: live},
		{name: "node selector, staged rollout", change: func(s *virtv1.VirtualMachineInstanceSpec) { s.NodeSelector = map[string]string{"a": "b"} }, want: true},
		{name: "tolerations, live", change: func(s *virtv1.VirtualMachineInstanceSpec) {
			s.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}
		}, live: live},
		{name: "CPU sockets, live", before: func(s *virtv1.VirtualMachineInstanceSpec) { s.Domain.CPU = &virtv1.CPU{Sockets: 1} },
			change: func(s *virtv1.VirtualMachineInstanceSpec) { s.Domain.CPU.Sockets = 2 }, live: live},
		{name: "CPU cores", before: func(s *virtv1.VirtualMachineInstanceSpec) { s.Domain.CPU = &virtv1.CPU{Cores: 1} },
			change: func(s *virtv1.VirtualMachineInstanceSpec) { s.Domain.CPU.Cores = 2 }, live: live, want: true},
		{name: "CPU added", change: func(s *virtv1.VirtualMachineInstanceSpec) { s.Domain.CPU = &virtv1.CPU{Sockets: 2} }, live: live, want: true},
		{name: "guest memory added, live", change: func(s *virtv1.VirtualMachineInstanceSpec) {
			s.Domain.Memory = &virtv1.Memory{Guest: ptr.To(resource.MustParse("1Gi"))}
		}, live: live},
		{name: "hotplugged volume added", change: func(s *virtv1.VirtualMachineInstanceSpec) { s.Volumes = append(s.Volumes, hotplugPVC) }, live: live},
		{name: "hotplugged volume removed", before: func(s *virtv1.VirtualMachineInstanceSpec) { s.Volumes = []virtv1.Volume{hotplugPVC} },
			change: func(s *virtv1.VirtualMachineInstanceSpec) { s.Volumes = nil }, live: live},
		{name: "volume added", change: func(s *virtv1.VirtualMachineInstanceSpec) { s.Volumes = append(s.Volumes, pvc("data", "data")) }, live: live, want: true},
		{name: "volume's claim changed", before: func(s *virtv1.VirtualMachineInstanceSpec) { s.Volumes = []virtv1.Volume{pvc("data", "a")} },
			change: func(s *virtv1.VirtualMachineInstanceSpec) { s.Volumes[0] = pvc("data", "b") }, live: live, want: true},
		{name: "CD-ROM removed", before: func(s *virtv1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Disks = []virtv1.Disk{{Name: "cd", DiskDevice: virtv1.DiskDevice{CDRom: &virtv1.CDRomTarget{}}}}
		}, change: func(s *virtv1.VirtualMachineInstanceSpec) { s.Domain.Devices.Disks = nil }, live: live, want: true},
		{name: "interface added", before: withNets, change: func(s *virtv1.VirtualMachineInstanceSpec) {
			s.Networks = append(s.Networks, multus("red", "nad-r"))
			s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces, bridge("red"))
		}, live: live},
		{name: "interface removed", before: withNets, change: func(s *virtv1.VirtualMachineInstanceSpec) {
			s.Networks, s.Domain.Devices.Interfaces = s.Networks[:1], s.Domain.Devices.Interfaces[:1]
		}, live: live, want: true},
		{name: "interface unplugged", before: withNets, change: func(s *virtv1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[1].State = virtv1.InterfaceStateAbsent
		}, live: live},
		{name: "attachment renamed", before: withNets, change: func(s *virtv1.VirtualMachineInstanceSpec) { s.Networks[1] = multus("blue", "nad-b") },
			live: live, want: true},
		{name: "attachment renamed, LiveUpdateNADRef", before: withNets, change: func(s *virtv1.VirtualMachineInstanceSpec) {
			s.Networks[1] = multus("blue", "nad-b")
		}, live: liveSettings{rollout: true, nadRef: true}},
		{name: "firmware UUID persisted", change: func(s *virtv1.VirtualMachineInstanceSpec) {
			s.Domain.Firmware = &virtv1.Firmware{UUID: "running-uuid"}
		}, live: live},
		{name: "firmware UUID changed", change: func(s *virtv1.VirtualMachineInstanceSpec) {
			s.Domain.Firmware = &virtv1.Firmware{UUID: "another-uuid"}
		}, live: live, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := newVM(virtv1.RunStrategyAlways)
			if tc.before != nil {
				tc.before(&vm.Spec.Template.Spec)
			}
			started := vm.Spec.DeepCopy()
			vmi := vmiOf(t, vm, 0)
			vmi.Spec.Domain.Firmware = &virtv1.Firmware{UUID: "running-uuid"}
			tc.change(&vm.Spec.Template.Spec)
			if got := needsRestart(started, vm, vmi, tc.live); got != tc.want {
				t.Errorf("needsRestart = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSyncSetsRestartRequiredAndBumpsTheGenerationOnlyForTheTemplate: a
// change of the template that needs a restart sets RestartRequired and
// leaves the VMI's generation; a change outside the template moves the
// VMI's generation annotation on and the VM's observedGeneration with it.
func TestSyncSetsRestartRequiredAndBumpsTheGenerationOnlyForTheTemplate(t *testing.T) {
	for _, tc := range []struct {
		name        string
		change      func(*virtv1.VirtualMachine)
		restart     bool
		annotations bool
	}{
		{name: "template", change: func(vm *virtv1.VirtualMachine) {
			vm.Spec.Template.Spec.Domain.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("128Mi")
		}, restart: true},
		{name: "outside the template", change: func(vm *virtv1.VirtualMachine) {
			vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyRerunOnFailure)
		}, annotations: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := newVM(virtv1.RunStrategyAlways)
			vm.Generation = 1
			vmi, rev := started(t, vm)
			tc.change(vm)
			vm.Generation = 2
			f := newFixture(t, vm, vmi, rev)
			f.sync(t, vm)

			patches, status := f.written()
			annotated := slices.Contains(patches, `{"metadata":{"annotations":{"kubevirt.io/vm-generation":"2"},"uid":"vmi-uid"}}`)
			if annotated != tc.annotations {
				t.Errorf("VMI's generation annotated: %v, want %v (%v)", annotated, tc.annotations, f.KubeVirt.Actions())
			}
			if status == nil {
				t.Fatal("no status update")
			}
			restart := slices.ContainsFunc(status.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
				return c.Type == virtv1.VirtualMachineRestartRequired && c.Status == corev1.ConditionTrue && c.Message == restartMessage
			})
			if restart != tc.restart {
				t.Errorf("RestartRequired %v, want %v: %+v", restart, tc.restart, status.Status.Conditions)
			}
			wantObserved := int64(1)
			if tc.annotations {
				wantObserved = 2
			}
			if status.Status.ObservedGeneration != wantObserved || status.Status.DesiredGeneration != 2 {
				t.Errorf("observed/desired generation %d/%d, want %d/2", status.Status.ObservedGeneration, status.Status.DesiredGeneration, wantObserved)
			}
		})
	}
}

// started is vm's running VMI and the start revision it names, as a start
// of vm at its current generation leaves them.
func started(t *testing.T, vm *virtv1.VirtualMachine) (*virtv1.VirtualMachineInstance, *appsv1.ControllerRevision) {
	t.Helper()
	rng := shardedtest.Ranges(t).Of(vm)
	rev, err := newStartRevision(vm, rng)
	if err != nil {
		t.Fatal(err)
	}
	vmi := vmiOf(t, vm, rng)
	vmi.Status.VirtualMachineRevisionName = rev.Name
	return vmi, rev
}

// written is what the fixture's syncs sent to KubeVirt: the bodies of the
// VMI patches, and the VM's last status update (nil without one).
func (f *fixture) written() (vmiPatches []string, status *virtv1.VirtualMachine) {
	for _, a := range f.KubeVirt.Actions() {
		switch a := a.(type) {
		case k8stesting.PatchAction:
			if a.GetResource().Resource == "virtualmachineinstances" {
				vmiPatches = append(vmiPatches, string(a.GetPatch()))
			}
		case k8stesting.UpdateAction:
			if a.GetSubresource() == "status" {
				status = a.GetObject().(*virtv1.VirtualMachine)
			}
		}
	}
	return vmiPatches, status
}
