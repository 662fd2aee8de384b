package vmi

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/template"
)

// followedReadyPod is vmi's ready launcher pod with everything the VMI
// follows from it already in the VMI's status (its active pods, the
// launcher image), so that a sync writes only what the test is about.
func followedReadyPod(t *testing.T, vmi *virtv1.VirtualMachineInstance) *corev1.Pod {
	t.Helper()
	pod := runningLauncherPod(t, vmi)
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	vmi.Status.ActivePods = map[types.UID]string{pod.UID: pod.Spec.NodeName}
	for _, c := range pod.Spec.Containers {
		if c.Name == template.ComputeContainer {
			vmi.Status.LauncherContainerImageVersion = c.Image
		}
	}
	return pod
}

// A running VMI whose spec asks for more sockets or guest memory than it
// runs with is marked VCPUChange and MemoryChange (True, as KubeVirt
// writes them: no time), the marks the workload updater migrates it for;
// one that runs what it asks for is not.
func TestSyncMarksAnAskedHotplug(t *testing.T) {
	for _, asked := range []bool{true, false} {
		t.Run(map[bool]string{true: "asked", false: "running what it asks"}[asked], func(t *testing.T) {
			vmi := newVMI("a")
			vmi.Status.Phase = virtv1.Running
			vmi.Spec.Domain.CPU = &virtv1.CPU{Sockets: 2, Cores: 1, Threads: 1, MaxSockets: 4}
			vmi.Spec.Domain.Memory = &virtv1.Memory{Guest: ptr.To(resource.MustParse("2Gi")), MaxGuest: ptr.To(resource.MustParse("8Gi"))}
			vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: 2, Cores: 1, Threads: 1}
			vmi.Status.Memory = &virtv1.MemoryStatus{GuestRequested: ptr.To(resource.MustParse("2Gi"))}
			if asked {
				vmi.Status.CurrentCPUTopology.Sockets = 1
				vmi.Status.Memory.GuestRequested = ptr.To(resource.MustParse("1Gi"))
			}
			pod := followedReadyPod(t, vmi)
			f := newFixture(t, vmi, pod)
			if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
				t.Fatal(err)
			}
			if !asked {
				// The sync enqueues what it writes before it returns.
				if f.c.batcher.Pending(f.item(vmi).Key, vmi.UID) {
					t.Error("a status write is pending for a VMI that runs what it asks for")
				}
				return
			}
			f.WaitForKubeVirtWrites("patch virtualmachineinstances")
			patch := string(f.KubeVirt.Actions()[len(f.KubeVirt.Actions())-1].(k8stesting.PatchAction).GetPatch())
			for _, want := range []string{`"lastTransitionTime":null,"status":"True","type":"HotVCPUChange"}`, `"lastTransitionTime":null,"status":"True","type":"HotMemoryChange"}`} {
				if !strings.Contains(patch, want) {
					t.Errorf("patch %s: want %s", patch, want)
				}
			}
		})
	}
}

// A running VMI whose spec took the destination claims of the moves its
// status.migratedVolumes lists is marked VolumesChange ("migrate
// volumes", True), the mark the workload updater migrates it for; one
// whose spec still names the sources is not.
func TestSyncMarksAVolumeMove(t *testing.T) {
	for _, moved := range []bool{true, false} {
		t.Run(map[bool]string{true: "spec moved", false: "spec not moved yet"}[moved], func(t *testing.T) {
			vmi := newVMI("a")
			vmi.Status.Phase = virtv1.Running
			claim := "old"
			if moved {
				claim = "new"
			}
			pod := followedReadyPod(t, vmi)
			// The volumes after the pod, which the test does not render with claims.
			vmi.Spec.Domain.Devices.Disks = []virtv1.Disk{{Name: "data"}}
			vmi.Spec.Volumes = []virtv1.Volume{{Name: "data", VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}
			vmi.Status.MigratedVolumes = []virtv1.StorageMigratedVolumeInfo{{VolumeName: "data",
				SourcePVCInfo: &virtv1.PersistentVolumeClaimInfo{ClaimName: "old"}, DestinationPVCInfo: &virtv1.PersistentVolumeClaimInfo{ClaimName: "new"}}}
			if !volumesMoveUnmarked(vmi) == moved {
				t.Fatalf("volumesMoveUnmarked = %t, want %t", !moved, moved)
			}
			f := newFixture(t, vmi, pod)
			if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
				t.Fatal(err)
			}
			if !moved {
				if f.c.batcher.Pending(f.item(vmi).Key, vmi.UID) {
					t.Error("a status write is pending for a VMI whose spec still names the sources")
				}
				return
			}
			f.WaitForKubeVirtWrites("patch virtualmachineinstances")
			patch := string(f.KubeVirt.Actions()[len(f.KubeVirt.Actions())-1].(k8stesting.PatchAction).GetPatch())
			if want := `"message":"migrate volumes","status":"True","type":"VolumesChange"}`; !strings.Contains(patch, want) {
				t.Errorf("patch %s: want %s", patch, want)
			}
		})
	}
}
