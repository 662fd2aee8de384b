package vmi

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// The expected values below are what KubeVirt v1.8.1's VMI controller
// writes (pkg/virt-controller/watch/vmi: lifecycle.go updateStatus and the
// functions named in each case, storage.go updateVolumeStatus).

const launcherImage = "quay.io/kubevirt/virt-launcher:v1.8.1"

var (
	t0 = metav1.NewTime(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Second))
	t2 = metav1.NewTime(t0.Add(2 * time.Second))
)

// fakeClaims is the PVC cache.
type fakeClaims map[string]*corev1.PersistentVolumeClaim

func (f fakeClaims) PVC(namespace, name string) (*corev1.PersistentVolumeClaim, bool) {
	pvc, ok := f[namespace+"/"+name]
	return pvc, ok
}

func (f fakeClaims) PVCs(namespace string) []*corev1.PersistentVolumeClaim {
	var out []*corev1.PersistentVolumeClaim
	for _, pvc := range f {
		if pvc.Namespace == namespace {
			out = append(out, pvc)
		}
	}
	return out
}

func claim(name string, mutate ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:  ptr.To(corev1.PersistentVolumeFilesystem),
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	for _, m := range mutate {
		m(pvc)
	}
	return pvc
}

func bound(pvc *corev1.PersistentVolumeClaim) {
	pvc.Status.Phase = corev1.ClaimBound
	pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")}
}

func claimsOf(pvcs ...*corev1.PersistentVolumeClaim) fakeClaims {
	f := fakeClaims{}
	for _, p := range pvcs {
		f[p.Namespace+"/"+p.Name] = p
	}
	return f
}

func testVMI(phase virtv1.VirtualMachineInstancePhase, volumes ...virtv1.Volume) *virtv1.VirtualMachineInstance {
	v := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "vmi-uid", CreationTimestamp: t0},
		Spec:       virtv1.VirtualMachineInstanceSpec{Volumes: volumes},
	}
	v.Status.Phase = phase
	return v
}

func pvcVolume(name, claim string) virtv1.Volume {
	return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}}}
}

func dvVolume(name, dv string) virtv1.Volume {
	return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: dv}}}
}

// launcherPod is a pod of testVMI: scheduled on node-1, running and ready
// when ready is set, with a pod volume per VMI volume named.
func launcherPod(ready bool, volumes ...string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "virt-launcher-vm-abcde", UID: "pod-uid", CreationTimestamp: t1,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance", Name: "vm", UID: "vmi-uid", Controller: ptr.To(true)}},
			Annotations: map[string]string{
				virtv1.MigrationTransportUnixAnnotation: "true",
				virtv1.MemoryOverheadAnnotationBytes:    "237592576",
			},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute", Image: launcherImage}}},
		Status: corev1.PodStatus{
			Phase:    corev1.PodPending,
			QOSClass: corev1.PodQOSBurstable,
		},
	}
	for _, v := range volumes {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: v})
	}
	if ready {
		pod.Spec.NodeName = "node-1"
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t1},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastProbeTime: t2, LastTransitionTime: t2},
		}
	}
	return pod
}

func observedOf(pod *corev1.Pod, claims fakeClaims, pods ...*corev1.Pod) observed {
	if claims == nil {
		claims = fakeClaims{}
	}
	return observed{pod: pod, pods: append([]*corev1.Pod{pod}, pods...), claims: claims, launcherImage: launcherImage, memoryOverhead: true}
}

// fakeDataVolumes are DataVolumes by namespace/name.
type fakeDataVolumes map[string]dataVolume

func (f fakeDataVolumes) DataVolume(namespace, name string) (dataVolume, bool) {
	d, ok := f[namespace+"/"+name]
	return d, ok
}

var equateQuantities = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

func cond(v *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstanceCondition {
	return vmistatus.Condition(v, t)
}

func podScheduledType() virtv1.VirtualMachineInstanceConditionType {
	return virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)
}

// TestToScheduled holds the status of the handoff patch against what
// KubeVirt has written by the time the VMI is Scheduled.
func TestToScheduled(t *testing.T) {
	quantity := func(s string) resource.Quantity { return resource.MustParse(s) }
	fs := ptr.To(corev1.PersistentVolumeFilesystem)
	overhead := ptr.To(defaultFilesystemOverhead)
	tests := []struct {
		name   string
		vmi    *virtv1.VirtualMachineInstance
		pod    *corev1.Pod
		claims fakeClaims
		cdi    bool
		// gateOff turns VmiMemoryOverheadReport off.
		gateOff bool
		// others are more pods the VMI has.
		others []*corev1.Pod
		check  func(t *testing.T, v *virtv1.VirtualMachineInstance)
	}{{
		name: "the node, its label, QoS class, launcher image and migration transport come from the pod",
		vmi:  testVMI(virtv1.Scheduling),
		pod:  launcherPod(true),
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			// updateStatus, Scheduling with a ready pod; setLauncherContainerInfo;
			// shouldSetMigrationTransport.
			if v.Status.Phase != virtv1.Scheduled || v.Status.NodeName != "node-1" || v.Labels[virtv1.NodeNameLabel] != "node-1" {
				t.Errorf("phase %s, node %q, label %q; want Scheduled on node-1", v.Status.Phase, v.Status.NodeName, v.Labels[virtv1.NodeNameLabel])
			}
			if v.Status.QOSClass == nil || *v.Status.QOSClass != corev1.PodQOSBurstable {
				t.Errorf("qosClass %v, want Burstable", v.Status.QOSClass)
			}
			if v.Status.LauncherContainerImageVersion != launcherImage {
				t.Errorf("launcherContainerImageVersion %q, want %q", v.Status.LauncherContainerImageVersion, launcherImage)
			}
			if _, outdated := v.Labels[virtv1.OutdatedLauncherImageLabel]; outdated {
				t.Errorf("outdated-launcher label on a VMI running the current launcher")
			}
			if v.Status.MigrationTransport != virtv1.MigrationTransportUnix {
				t.Errorf("migrationTransport %q, want Unix", v.Status.MigrationTransport)
			}
		},
	}, {
		name: "a pod without the migration-transport annotation leaves the transport unset",
		vmi:  testVMI(virtv1.Scheduling),
		pod: func() *corev1.Pod {
			p := launcherPod(true)
			delete(p.Annotations, virtv1.MigrationTransportUnixAnnotation)
			return p
		}(),
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			if v.Status.MigrationTransport != "" {
				t.Errorf("migrationTransport %q, want none", v.Status.MigrationTransport)
			}
		},
	}, {
		name: "a launcher image other than the current one is labelled outdated",
		vmi:  testVMI(virtv1.Scheduling),
		pod: func() *corev1.Pod {
			p := launcherPod(true)
			p.Spec.Containers[0].Image = "quay.io/kubevirt/virt-launcher:v1.7.0"
			return p
		}(),
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			// setLauncherContainerInfo.
			if _, ok := v.Labels[virtv1.OutdatedLauncherImageLabel]; !ok || v.Status.LauncherContainerImageVersion != "quay.io/kubevirt/virt-launcher:v1.7.0" {
				t.Errorf("labels %v, image %q; want the outdated label and the pod's image", v.Labels, v.Status.LauncherContainerImageVersion)
			}
		},
	}, {
		name: "activePods lists every pod the VMI controls, with its node, and drops those gone",
		vmi: func() *virtv1.VirtualMachineInstance {
			v := testVMI(virtv1.Scheduling)
			v.Status.ActivePods = map[types.UID]string{"gone": ""}
			return v
		}(),
		pod:    launcherPod(true),
		others: []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: "not-controlled"}}},
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			// setActivePods: controlled pods only, the map replaced.
			if want := map[types.UID]string{"pod-uid": "node-1"}; !cmp.Equal(v.Status.ActivePods, want) {
				t.Errorf("activePods %v, want %v", v.Status.ActivePods, want)
			}
		},
	}, {
		name: "Ready is the pod's, probe time included, and PodScheduled, Synchronized and Provisioning go",
		vmi: func() *virtv1.VirtualMachineInstance {
			v := testVMI(virtv1.Scheduling)
			v.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{
				{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: virtv1.GuestNotRunningReason, Message: msgGuestNotRunning, LastProbeTime: t1, LastTransitionTime: t1},
				{Type: podScheduledType(), Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable},
				{Type: virtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse, Reason: ReasonFailedCreate},
				{Type: virtv1.VirtualMachineInstanceProvisioning, Status: corev1.ConditionTrue},
			}
			return v
		}(),
		pod: launcherPod(true),
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			// syncReadyConditionFromPod (the Running branch: see toScheduled),
			// the Scheduling case (PodScheduled, Provisioning) and CheckFailure.
			want := []virtv1.VirtualMachineInstanceCondition{{
				Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue, LastProbeTime: t2, LastTransitionTime: t2,
			}}
			if diff := cmp.Diff(want, v.Status.Conditions); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "the memory overhead is the pod's annotation while VmiMemoryOverheadReport is on",
		vmi:  testVMI(virtv1.Scheduling),
		pod:  launcherPod(true),
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			// updateMemoryOverheadStatusFromPod.
			want := resource.NewQuantity(237592576, resource.BinarySI)
			if v.Status.Memory == nil || v.Status.Memory.MemoryOverhead == nil || v.Status.Memory.MemoryOverhead.Cmp(*want) != 0 {
				t.Errorf("memory status %+v, want memoryOverhead %s", v.Status.Memory, want)
			}
		},
	}, {
		name:    "no memory overhead is reported while the gate is off",
		vmi:     testVMI(virtv1.Scheduling),
		pod:     launcherPod(true),
		gateOff: true,
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			if v.Status.Memory != nil {
				t.Errorf("memory status %+v, want none", v.Status.Memory)
			}
		},
	}, {
		name: "a PVC volume gets its claim's info, a Pending claim without capacity as KubeVirt reports it",
		vmi:  testVMI(virtv1.Scheduling, pvcVolume("data", "data-pvc"), dvVolume("root", "root-dv"), virtv1.Volume{Name: "empty", VolumeSource: virtv1.VolumeSource{EmptyDisk: &virtv1.EmptyDiskSource{Capacity: quantity("1Gi")}}}),
		pod:  launcherPod(true, "data", "root", "empty"),
		claims: claimsOf(
			claim("data-pvc"),
			claim("root-dv", bound, func(p *corev1.PersistentVolumeClaim) {
				p.Annotations = map[string]string{"cdi.kubevirt.io/storage.preallocation": "true"}
			}),
		),
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			// updateVolumeStatus and processPVCInfo: every volume, sorted by
			// name; claim volumes (PVC or DataVolume) with the claim;
			// getFilesystemOverhead without CDI: 5.5%.
			want := []virtv1.VolumeStatus{{
				Name: "data",
				PersistentVolumeClaimInfo: &virtv1.PersistentVolumeClaimInfo{
					ClaimName: "data-pvc", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: fs,
					Requests: corev1.ResourceList{corev1.ResourceStorage: quantity("1Gi")}, FilesystemOverhead: overhead,
				},
			}, {
				Name: "empty",
			}, {
				Name: "root",
				PersistentVolumeClaimInfo: &virtv1.PersistentVolumeClaimInfo{
					ClaimName: "root-dv", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: fs,
					Capacity: corev1.ResourceList{corev1.ResourceStorage: quantity("2Gi")},
					Requests: corev1.ResourceList{corev1.ResourceStorage: quantity("1Gi")}, FilesystemOverhead: overhead, Preallocated: true,
				},
			}}
			if diff := cmp.Diff(want, v.Status.VolumeStatus, equateQuantities); diff != "" {
				t.Errorf("volumeStatus (-want +got):\n%s", diff)
			}
		},
	}, {
		name:   "with CDI a block claim has no filesystem overhead",
		vmi:    testVMI(virtv1.Scheduling, pvcVolume("data", "blk")),
		pod:    launcherPod(true, "data"),
		claims: claimsOf(claim("blk", func(p *corev1.PersistentVolumeClaim) { p.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock) })),
		cdi:    true,
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			// storagetypes.GetFilesystemOverhead.
			if got := v.Status.VolumeStatus[0].PersistentVolumeClaimInfo.FilesystemOverhead; got == nil || *got != "0" {
				t.Errorf("filesystemOverhead %v, want 0", got)
			}
		},
	}, {
		name: "with CDI a filesystem claim has the overhead CDIConfig gives its class, else the global one",
		vmi:  testVMI(virtv1.Scheduling, pvcVolume("a", "thin-pvc"), pvcVolume("b", "other-pvc")),
		pod:  launcherPod(true, "a", "b"),
		claims: claimsOf(claim("thin-pvc", func(p *corev1.PersistentVolumeClaim) { p.Spec.StorageClassName = ptr.To("thin") }),
			claim("other-pvc", func(p *corev1.PersistentVolumeClaim) { p.Spec.StorageClassName = ptr.To("thick") })),
		cdi: true,
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			// storagetypes.GetFilesystemOverhead.
			for i, want := range []virtv1.Percent{"0.1", "0.06"} {
				if got := v.Status.VolumeStatus[i].PersistentVolumeClaimInfo.FilesystemOverhead; got == nil || *got != want {
					t.Errorf("%s: filesystemOverhead %v, want %s", v.Status.VolumeStatus[i].Name, got, want)
				}
			}
		},
	}, {
		name: "a hotpluggable claim the pod lacks gets its claim's phase, and one not yet there says so",
		vmi: func() *virtv1.VirtualMachineInstance {
			hot := pvcVolume("hot", "hot-pvc")
			hot.PersistentVolumeClaim.Hotpluggable = true
			return testVMI(virtv1.Scheduling, hot, dvVolume("later", "later-dv"))
		}(),
		pod:    launcherPod(true),
		claims: claimsOf(claim("hot-pvc", bound)),
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			// processHotplugVolumeStatus without an attachment pod and
			// getVolumePhaseMessageReason.
			got := map[string]virtv1.VolumeStatus{}
			for _, s := range v.Status.VolumeStatus {
				got[s.Name] = s
			}
			if s := got["hot"]; s.HotplugVolume == nil || s.Phase != virtv1.VolumeBound || s.Reason != "PVCNotReady" || s.Message != "PVC is in phase Bound" || s.PersistentVolumeClaimInfo == nil {
				t.Errorf("hot volume status %+v, want Bound, PVCNotReady, with the claim's info", s)
			}
			if s := got["later"]; s.HotplugVolume == nil || s.Phase != virtv1.VolumePending || s.Reason != ReasonFailedPVCNotFound || s.Message != "PVC later-dv not found" || s.PersistentVolumeClaimInfo != nil {
				t.Errorf("later volume status %+v, want Pending, FailedPvcNotFound, no claim info", s)
			}
		},
	}, {
		name:   "the backend-storage claim is listed under its own name with its access modes",
		vmi:    testVMI(virtv1.Scheduling, pvcVolume("data", "data-pvc")),
		pod:    launcherPod(true, "data"),
		claims: claimsOf(claim("data-pvc"), claim("persistent-state-for-vm-x1y2z", func(p *corev1.PersistentVolumeClaim) { p.Labels = map[string]string{"persistent-state-for": "vm"} })),
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			// BackendStorage.UpdateVolumeStatus, kept by updateVolumeStatus.
			if len(v.Status.VolumeStatus) != 2 {
				t.Fatalf("volumeStatus %+v, want data and the backend-storage claim", v.Status.VolumeStatus)
			}
			s := v.Status.VolumeStatus[1]
			want := &virtv1.PersistentVolumeClaimInfo{ClaimName: "persistent-state-for-vm-x1y2z", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}
			if s.Name != "persistent-state-for-vm-x1y2z" || !cmp.Equal(s.PersistentVolumeClaimInfo, want) {
				t.Errorf("backend-storage volume status %+v, want %+v", s, want)
			}
		},
	}, {
		name: "a VMI already Scheduled is left alone",
		vmi: func() *virtv1.VirtualMachineInstance {
			v := testVMI(virtv1.Running)
			v.Status.NodeName = "node-0"
			return v
		}(),
		pod: launcherPod(true),
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			if v.Status.NodeName != "node-0" || v.Status.QOSClass != nil {
				t.Errorf("a Running VMI was rewritten: %+v", v.Status)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := observedOf(tt.pod, tt.claims, tt.others...)
			o.memoryOverhead = !tt.gateOff
			if tt.cdi {
				o.dataVolumes = fakeDataVolumes{}
				o.cdi = oneCDI{global: "0.06", perClass: map[string]string{"thin": "0.1"}}
			}
			v := tt.vmi.DeepCopy()
			toScheduled(o, t2)(v)
			tt.check(t, v)
		})
	}
}

// TestToScheduling holds the Scheduling patch against KubeVirt's status
// after the sync that follows the pod's creation.
func TestToScheduling(t *testing.T) {
	unschedulable := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/3 nodes are available", LastProbeTime: t1, LastTransitionTime: t1}
	tests := []struct {
		name  string
		vmi   *virtv1.VirtualMachineInstance
		pod   *corev1.Pod
		check func(t *testing.T, v *virtv1.VirtualMachineInstance)
	}{{
		name: "a just-created pod makes the VMI Scheduling, not ready, with the pod's image, QoS class and no node",
		vmi:  testVMI(""),
		pod:  launcherPod(false),
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			// updateStatus (IsUnprocessed with a pod, then IsScheduling);
			// syncReadyConditionFromPod: !vmi.IsRunning().
			if v.Status.Phase != virtv1.Scheduling || v.Status.LauncherContainerImageVersion != launcherImage ||
				v.Status.QOSClass == nil || *v.Status.QOSClass != corev1.PodQOSBurstable {
				t.Errorf("status %+v; want Scheduling with the launcher image and Burstable", v.Status)
			}
			if want := map[types.UID]string{"pod-uid": ""}; !cmp.Equal(v.Status.ActivePods, want) {
				t.Errorf("activePods %v, want %v", v.Status.ActivePods, want)
			}
			want := []virtv1.VirtualMachineInstanceCondition{{
				Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: virtv1.GuestNotRunningReason,
				Message: "Guest VM is not reported as running", LastProbeTime: t1, LastTransitionTime: t1,
			}}
			if diff := cmp.Diff(want, v.Status.Conditions); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if v.Status.NodeName != "" || v.Status.VolumeStatus != nil || v.Status.MigrationTransport != "" {
				t.Errorf("handoff fields set before the pod is ready: %+v", v.Status)
			}
		},
	}, {
		name: "an unschedulable pod's PodScheduled=False is copied, and the PVC's stale one is dropped only when the pod has none",
		vmi: func() *virtv1.VirtualMachineInstance {
			v := testVMI(virtv1.Pending)
			v.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{
				{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: virtv1.PodNotExistsReason, Message: msgPodNotExists, LastProbeTime: t0, LastTransitionTime: t0},
				{Type: virtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse, Reason: ReasonFailedPVCNotFound},
			}
			return v
		}(),
		pod: func() *corev1.Pod {
			p := launcherPod(false)
			p.Status.Conditions = []corev1.PodCondition{unschedulable}
			return p
		}(),
		check: func(t *testing.T, v *virtv1.VirtualMachineInstance) {
			// AddPodCondition; CheckFailure removes Synchronized; Ready's
			// reason changes, so UpdateCondition replaces it.
			want := []virtv1.VirtualMachineInstanceCondition{{
				Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: virtv1.GuestNotRunningReason,
				Message: msgGuestNotRunning, LastProbeTime: t1, LastTransitionTime: t1,
			}, {
				Type: podScheduledType(), Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/3 nodes are available", LastProbeTime: t1, LastTransitionTime: t1,
			}}
			if diff := cmp.Diff(want, v.Status.Conditions); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.vmi.DeepCopy()
			if !toScheduling(observedOf(tt.pod, nil), t1)(v) {
				t.Fatal("toScheduling did not apply")
			}
			tt.check(t, v)
		})
	}
}

func TestCopyPodScheduled(t *testing.T) {
	first := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "first", LastProbeTime: t1, LastTransitionTime: t1}
	later := first
	later.Message = "later"
	tests := []struct {
		name        string
		conditions  []virtv1.VirtualMachineInstanceCondition
		wantApplied bool
		wantMessage string
	}{
		{name: "the first unschedulable condition is copied with its times", wantApplied: true, wantMessage: "first"},
		{
			name:        "a later message is not written again, as AddPodCondition keeps the first",
			conditions:  []virtv1.VirtualMachineInstanceCondition{{Type: podScheduledType(), Status: corev1.ConditionFalse, Message: "first"}},
			wantMessage: "first",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := testVMI(virtv1.Scheduling)
			v.Status.Conditions = tt.conditions
			c := first
			if tt.conditions != nil {
				c = later
			}
			if applied := copyPodScheduled(c)(v); applied != tt.wantApplied {
				t.Errorf("applied %v, want %v", applied, tt.wantApplied)
			}
			got := cond(v, podScheduledType())
			if got == nil || got.Message != tt.wantMessage {
				t.Errorf("PodScheduled %+v, want message %q", got, tt.wantMessage)
			}
			if tt.wantApplied && (got.LastProbeTime != t1 || got.LastTransitionTime != t1) {
				t.Errorf("PodScheduled times %s/%s, want the pod's %s", got.LastProbeTime, got.LastTransitionTime, t1)
			}
		})
	}
}

func TestNotSynchronized(t *testing.T) {
	const missing = "PVC ns/data does not exist, waiting for it to appear"
	tests := []struct {
		name   string
		reason string
		want   []virtv1.VirtualMachineInstanceCondition
	}{{
		name:   "a missing PVC makes the pod unschedulable in advance and the VMI not ready",
		reason: ReasonFailedPVCNotFound,
		// updateStatus, Pending without a pod: syncReadyConditionFromPod
		// (PodNotExists), the FailedPvcNotFound PodScheduled, CheckFailure.
		want: []virtv1.VirtualMachineInstanceCondition{
			{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: virtv1.PodNotExistsReason, Message: msgPodNotExists, LastProbeTime: t1, LastTransitionTime: t1},
			{Type: podScheduledType(), Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: missing},
			{Type: virtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse, Reason: ReasonFailedPVCNotFound, Message: missing, LastTransitionTime: t1},
		},
	}, {
		name:   "an invalid spec makes the VMI not ready, without PodScheduled",
		reason: ReasonInvalidSpec,
		want: []virtv1.VirtualMachineInstanceCondition{
			{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: virtv1.PodNotExistsReason, Message: msgPodNotExists, LastProbeTime: t1, LastTransitionTime: t1},
			{Type: virtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse, Reason: ReasonInvalidSpec, Message: missing, LastTransitionTime: t1},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := testVMI("")
			if !notSynchronized(tt.reason, missing, t1)(v) {
				t.Fatal("not applied")
			}
			if diff := cmp.Diff(tt.want, v.Status.Conditions); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if v.Status.Phase != virtv1.Pending {
				t.Errorf("phase %s, want Pending", v.Status.Phase)
			}
			// The same intent again, as after a conflict, changes nothing.
			if notSynchronized(tt.reason, missing, t2)(v) {
				t.Error("a repeated intent changed the VMI")
			}
		})
	}
}

// TestSchedulingAndScheduledInOnePatch: under load both intents are applied
// to one copy and sent as one patch; the result is the Scheduled status.
func TestSchedulingAndScheduledInOnePatch(t *testing.T) {
	claims := claimsOf(claim("data-pvc"))
	created := launcherPod(false, "data")
	ready := launcherPod(true, "data")
	v := testVMI("", pvcVolume("data", "data-pvc"))
	toScheduling(observedOf(created, claims), t1)(v)
	toScheduled(observedOf(ready, claims), t2)(v)

	alone := testVMI("", pvcVolume("data", "data-pvc"))
	toScheduled(observedOf(ready, claims), t2)(alone)
	if diff := cmp.Diff(alone.Status, v.Status, equateQuantities); diff != "" {
		t.Errorf("Scheduling then Scheduled differs from Scheduled alone (-alone +both):\n%s", diff)
	}
	want := []virtv1.VirtualMachineInstancePhase{virtv1.Pending, virtv1.Scheduling, virtv1.Scheduled}
	var got []virtv1.VirtualMachineInstancePhase
	for _, p := range v.Status.PhaseTransitionTimestamps {
		got = append(got, p.Phase)
	}
	if !cmp.Equal(got, want) {
		t.Errorf("phases %v, want %v", got, want)
	}
}

// TestToFailed: a VMI past Pending whose pod is gone or failed fails once,
// with Synchronized=False saying why; a final VMI is left alone.
func TestToFailed(t *testing.T) {
	for _, tt := range []struct {
		phase virtv1.VirtualMachineInstancePhase
		want  bool
	}{
		{virtv1.Scheduling, true},
		{virtv1.Scheduled, true},
		{virtv1.Running, true},
		{virtv1.Failed, false},
		{virtv1.Succeeded, false},
	} {
		v := testVMI(tt.phase)
		if got := toFailed(ReasonPodFailed, "launcher pod is Failed", t1)(v); got != tt.want {
			t.Errorf("%s: applied %v, want %v", tt.phase, got, tt.want)
		}
		if !tt.want {
			if len(v.Status.Conditions) != 0 || v.Status.Phase != tt.phase {
				t.Errorf("%s: a final VMI was rewritten: %+v", tt.phase, v.Status)
			}
			continue
		}
		want := &virtv1.VirtualMachineInstanceCondition{
			Type: virtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse,
			LastTransitionTime: t1, Reason: ReasonPodFailed, Message: "launcher pod is Failed",
		}
		if diff := cmp.Diff(want, vmistatus.Condition(v, virtv1.VirtualMachineInstanceSynchronized)); v.Status.Phase != virtv1.Failed || diff != "" {
			t.Errorf("%s: phase %s, Synchronized (-want +got):\n%s", tt.phase, v.Status.Phase, diff)
		}
		if toFailed(ReasonPodFailed, "again", t2)(v) {
			t.Errorf("%s: a failed VMI failed twice", tt.phase)
		}
	}
}

// TestFinalizer: the intents add virtshard's finalizer once, and finalize
// removes only it.
func TestFinalizer(t *testing.T) {
	v := testVMI("")
	v.Finalizers = []string{"other"}
	ensureFinalizer(v)
	ensureFinalizer(v)
	if diff := cmp.Diff([]string{"other", virtv1.VirtualMachineInstanceFinalizer}, v.Finalizers); diff != "" {
		t.Errorf("finalizers (-want +got):\n%s", diff)
	}
	if !finalize(v) || finalize(v) {
		t.Error("finalize did not remove the finalizer exactly once")
	}
	if diff := cmp.Diff([]string{"other"}, v.Finalizers); diff != "" {
		t.Errorf("finalizers after finalize (-want +got):\n%s", diff)
	}
}

// TestFollowingPod: a Running VMI follows its pods as KubeVirt's
// updateStatus does on every sync (setActivePods, setLauncherContainerInfo):
// a migration target joins activePods, and after the handoff, in which
// virt-handler cleared the launcher image, the target pod's image is set
// again. A VMI that already says so is not written.
func TestFollowingPod(t *testing.T) {
	source := launcherPod(true)
	target := launcherPod(true)
	target.Name, target.UID, target.Spec.NodeName = "virt-launcher-vm-target", "target-uid", "node-2"
	target.Spec.Containers[0].Image = "quay.io/kubevirt/virt-launcher:v1.8.0"

	v := testVMI(virtv1.Running)
	v.Status.NodeName = "node-1"
	observedOf(source, nil).fromPod(v) // as the Scheduled write left it
	if podStale(v, source, []*corev1.Pod{source}) {
		t.Fatal("podStale: a VMI that lists its one pod and its image is stale")
	}
	if followingPod(observedOf(source, nil))(v) {
		t.Fatal("followingPod changed a VMI that says what its pods do")
	}

	if !podStale(v, source, []*corev1.Pod{source, target}) {
		t.Fatal("podStale: a migration target pod that activePods lacks is not seen")
	}
	if !followingPod(observedOf(source, nil, target))(v) {
		t.Fatal("followingPod did not add the target pod")
	}
	want := map[types.UID]string{"pod-uid": "node-1", "target-uid": "node-2"}
	if diff := cmp.Diff(want, v.Status.ActivePods); diff != "" {
		t.Errorf("activePods (-want +got):\n%s", diff)
	}

	// The handoff: virt-handler moved the VMI and cleared the image.
	v.Status.NodeName, v.Status.LauncherContainerImageVersion = "node-2", ""
	if !podStale(v, target, []*corev1.Pod{source, target}) {
		t.Fatal("podStale: a cleared launcher image is not seen")
	}
	if !followingPod(observedOf(target, nil, source))(v) {
		t.Fatal("followingPod did not set the target's image")
	}
	if got := v.Status.LauncherContainerImageVersion; got != target.Spec.Containers[0].Image {
		t.Errorf("launcherContainerImageVersion = %q, want the target pod's %q", got, target.Spec.Containers[0].Image)
	}
	if _, outdated := v.Labels[virtv1.OutdatedLauncherImageLabel]; !outdated {
		t.Error("a target pod on an older launcher image does not mark the VMI outdated")
	}

	final := testVMI(virtv1.Succeeded)
	if followingPod(observedOf(source, nil, target))(final) {
		t.Error("followingPod wrote a final VMI")
	}
}

// oneCDI is one installed CDI whose config gives global and, by class,
// perClass filesystem overheads.
type oneCDI struct {
	global   string
	perClass map[string]string
}

func (c oneCDI) FilesystemOverhead(class *string) (string, bool) {
	if class != nil {
		if o, ok := c.perClass[*class]; ok {
			return o, true
		}
	}
	return c.global, true
}
