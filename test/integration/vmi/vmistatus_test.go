package vmi_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/cdi"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

// recordVMIs keeps every version of the namespace's VMIs the API server
// sends, so that a test can look at the Scheduled VMI as virtshard wrote
// it: kwok plays virt-handler and moves it to Running at once, rewriting
// Ready as it goes.
type recordVMIs struct {
	mu       sync.Mutex
	versions []*virtv1.VirtualMachineInstance
}

func (e *env) recordVMIs() *recordVMIs {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	w, err := e.kv.VirtualMachineInstances(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	r := &recordVMIs{}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if v, ok := ev.Object.(*virtv1.VirtualMachineInstance); ok {
				r.mu.Lock()
				r.versions = append(r.versions, v)
				r.mu.Unlock()
			}
		}
	}()
	return r
}

// first returns the first version of VMI name in phase, waiting up to 10 s
// for the watch to deliver it (the API may answer with a later version
// first), or nil.
func (r *recordVMIs) first(name string, phase virtv1.VirtualMachineInstancePhase) *virtv1.VirtualMachineInstance {
	var found *virtv1.VirtualMachineInstance
	_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, v := range r.versions {
			if v.Name == name && v.Status.Phase == phase {
				found = v
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// boundClaim creates a PVC bound to a hostPath PV of its own (the local
// cluster has no provisioner: an unbound claim keeps the pod unscheduled)
// and waits until the PV controller has bound it.
func (e *env) boundClaim(name string) *corev1.PersistentVolumeClaim {
	e.t.Helper()
	ctx := context.Background()
	pvName := e.ns + "-" + name
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + pvName}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: e.ns, Name: name},
		},
	}
	if _, err := e.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = e.kube.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(""),
			VolumeName:       pvName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := e.kube.CoreV1().PersistentVolumeClaims(e.ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	var got *corev1.PersistentVolumeClaim
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = e.kube.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.ClaimBound, nil
	}); err != nil {
		e.t.Fatalf("PVC %s not bound to %s within a minute: %+v", name, pvName, got)
	}
	return got
}

func claimVolume(name, claim string) (virtv1.Disk, virtv1.Volume) {
	return virtv1.Disk{Name: name, DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{}}},
		virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}}}
}

// The status virtshard writes on the way to Scheduled is KubeVirt's (see
// status_test.go for each field's source): a VMI with a PVC, a DataVolume
// the simulated CDI imported and an empty disk, on a bound claim, and one
// whose claim stays Pending, which renders and stays Scheduling.
func TestScheduledStatusIsKubeVirts(t *testing.T) {
	e := newEnv(t, 1)
	versions := e.recordVMIs()
	data := e.boundClaim("data")
	dyn := dynamic.NewForConfigOrDie(clustertest.Config(t))
	e.dataVolume(dyn, "root-dv", "", nil)
	e.waitDataVolume(dyn, "root-dv", "Succeeded")

	vmi := workload.VMI("with-disks")
	disk, vol := claimVolume("data", "data")
	vmi.Spec.Domain.Devices.Disks = []virtv1.Disk{disk,
		{Name: "root", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{}}},
		{Name: "scratch", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{}}}}
	vmi.Spec.Volumes = []virtv1.Volume{vol,
		{Name: "root", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: "root-dv"}}},
		{Name: "scratch", VolumeSource: virtv1.VolumeSource{EmptyDisk: &virtv1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}}}
	created := e.create(vmi)

	// The claim of this one stays Pending: KubeVirt renders the pod all the
	// same (the claim exists), and the scheduler keeps it.
	pending := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "pending"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := e.kube.CoreV1().PersistentVolumeClaims(e.ns).Create(context.Background(), pending, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waiting := workload.VMI("on-pending-claim")
	disk, vol = claimVolume("data", "pending")
	waiting.Spec.Domain.Devices.Disks = []virtv1.Disk{disk}
	waiting.Spec.Volumes = []virtv1.Volume{vol}
	createdWaiting := e.create(waiting)

	running := e.waitVMI("with-disks", time.Minute, "Running", func(v *virtv1.VirtualMachineInstance) bool { return v.Status.Phase == virtv1.Running })
	pods := e.launcherPods(created)
	if len(pods) != 1 {
		t.Fatalf("%d launcher pods, want 1", len(pods))
	}
	pod := pods[0]
	scheduled := versions.first("with-disks", virtv1.Scheduled)
	if scheduled == nil {
		t.Fatal("the watch saw no Scheduled version of the VMI")
	}

	// What virtshard wrote at Scheduled, and what the Running VMI kept.
	for _, v := range []*virtv1.VirtualMachineInstance{scheduled, running} {
		s := v.Status
		if s.QOSClass == nil || *s.QOSClass != pod.Status.QOSClass || pod.Status.QOSClass == "" {
			t.Errorf("%s: qosClass %v, want the pod's %q", s.Phase, s.QOSClass, pod.Status.QOSClass)
		}
		if s.LauncherContainerImageVersion != pod.Spec.Containers[0].Image || pod.Spec.Containers[0].Name != template.ComputeContainer {
			t.Errorf("%s: launcherContainerImageVersion %q, want compute's %q", s.Phase, s.LauncherContainerImageVersion, pod.Spec.Containers[0].Image)
		}
		if len(s.ActivePods) != 1 || s.ActivePods[pod.UID] != pod.Spec.NodeName {
			t.Errorf("%s: activePods %v, want {%s: %s}", s.Phase, s.ActivePods, pod.UID, pod.Spec.NodeName)
		}
		if _, unix := pod.Annotations[virtv1.MigrationTransportUnixAnnotation]; !unix || s.MigrationTransport != virtv1.MigrationTransportUnix {
			t.Errorf("%s: migrationTransport %q (pod annotated: %v), want Unix", s.Phase, s.MigrationTransport, unix)
		}
		var names []string
		for _, vs := range s.VolumeStatus {
			names = append(names, vs.Name)
		}
		if len(s.VolumeStatus) != 3 || names[0] != "data" || names[1] != "root" || names[2] != "scratch" {
			t.Fatalf("%s: volumeStatus for %v, want data, root, scratch", s.Phase, names)
		}
		if info := s.VolumeStatus[0].PersistentVolumeClaimInfo; info == nil || info.ClaimName != "data" ||
			info.Capacity.Storage().Cmp(resource.MustParse("2Gi")) != 0 || info.Requests.Storage().Cmp(resource.MustParse("1Gi")) != 0 ||
			len(info.AccessModes) != 1 || info.AccessModes[0] != corev1.ReadWriteOnce ||
			info.VolumeMode == nil || *info.VolumeMode != *data.Spec.VolumeMode ||
			info.FilesystemOverhead == nil || *info.FilesystemOverhead != "0.06" || info.Preallocated {
			t.Errorf("%s: data volume's claim info %+v, want the bound claim's: 2Gi of 1Gi, RWO, Filesystem, CDIConfig's 6%%", s.Phase, info)
		}
		if info := s.VolumeStatus[1].PersistentVolumeClaimInfo; info == nil || info.ClaimName != "root-dv" {
			t.Errorf("%s: DataVolume volume's claim info %+v, want claim root-dv", s.Phase, info)
		}
		if s.VolumeStatus[2].PersistentVolumeClaimInfo != nil {
			t.Errorf("%s: the empty disk has claim info %+v", s.Phase, s.VolumeStatus[2].PersistentVolumeClaimInfo)
		}
		for _, c := range []virtv1.VirtualMachineInstanceConditionType{virtv1.VirtualMachineInstanceSynchronized,
			virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), virtv1.VirtualMachineInstanceProvisioning} {
			if got := condition(v, c); got != nil {
				t.Errorf("%s: condition %+v, want none", s.Phase, got)
			}
		}
	}
	// The pod network's interface, as KubeVirt names it with no Multus.
	if ifaces := scheduled.Status.Interfaces; len(ifaces) != 1 || ifaces[0].Name != "default" || ifaces[0].PodInterfaceName != "eth0" {
		t.Errorf("Scheduled VMI's interfaces %+v, want default on eth0", ifaces)
	}
	// Ready as virtshard wrote it is the pod's, to the probe time.
	podReady := podConditionOf(&pod, corev1.PodReady)
	ready := condition(scheduled, virtv1.VirtualMachineInstanceReady)
	if podReady == nil || ready == nil || ready.Status != podReady.Status || ready.Reason != podReady.Reason ||
		!ready.LastProbeTime.Equal(&podReady.LastProbeTime) || !ready.LastTransitionTime.Equal(&podReady.LastTransitionTime) {
		t.Errorf("Scheduled VMI's Ready %+v, want the pod's %+v", ready, podReady)
	}

	// The VMI on the Pending claim: Scheduling, with what KubeVirt has set
	// by then, and the scheduler's reason.
	w := e.waitVMI("on-pending-claim", time.Minute, "Scheduling with PodScheduled=False", func(v *virtv1.VirtualMachineInstance) bool {
		c := condition(v, virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
		return v.Status.Phase == virtv1.Scheduling && c != nil && c.Status == corev1.ConditionFalse
	})
	waitingPods := e.launcherPods(createdWaiting)
	if len(waitingPods) != 1 {
		t.Fatalf("%d launcher pods on the Pending claim, want 1 (KubeVirt renders once the claim exists)", len(waitingPods))
	}
	wp := waitingPods[0]
	// The readiness gate as the VMI controller patches it (syncUnpaused):
	// on this pod, which no node ever runs, kwok cannot have set it first
	// (it sets gates True with no reason when it starts a pod).
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pod, err := e.kube.CoreV1().Pods(e.ns).Get(ctx, wp.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		wp = *pod
		c := podConditionOf(pod, virtv1.VirtualMachineUnpaused)
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == "NotPaused", nil
	}); err != nil {
		t.Errorf("launcher pod's %s condition %+v a minute on, want True with reason NotPaused", virtv1.VirtualMachineUnpaused,
			podConditionOf(&wp, virtv1.VirtualMachineUnpaused))
	}
	if w.Status.QOSClass == nil || *w.Status.QOSClass != wp.Status.QOSClass || w.Status.LauncherContainerImageVersion != wp.Spec.Containers[0].Image {
		t.Errorf("Scheduling VMI: qosClass %v, image %q; want the pod's %q, %q", w.Status.QOSClass, w.Status.LauncherContainerImageVersion, wp.Status.QOSClass, wp.Spec.Containers[0].Image)
	}
	if len(w.Status.ActivePods) != 1 || w.Status.ActivePods[wp.UID] != "" {
		t.Errorf("Scheduling VMI: activePods %v, want {%s: \"\"}", w.Status.ActivePods, wp.UID)
	}
	if r := condition(w, virtv1.VirtualMachineInstanceReady); r == nil || r.Status != corev1.ConditionFalse || r.Reason != virtv1.GuestNotRunningReason {
		t.Errorf("Scheduling VMI: Ready %+v, want False, GuestNotRunning", r)
	}
	if w.Status.NodeName != "" || w.Status.VolumeStatus != nil || w.Status.MigrationTransport != "" {
		t.Errorf("Scheduling VMI has handoff fields: node %q, volumes %+v, transport %q", w.Status.NodeName, w.Status.VolumeStatus, w.Status.MigrationTransport)
	}
}

func podConditionOf(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// dataVolume creates DataVolume name, a blank import of 1Gi, of class
// (the simulated CDI's Immediate class when ""), with annotations that
// steer the simulated CDI (bench/cdi).
func (e *env) dataVolume(dyn dynamic.Interface, name, class string, annotations map[string]string) {
	e.t.Helper()
	dv := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"source": map[string]any{"blank": map[string]any{}},
			"storage": map[string]any{"resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}},
	}}
	if class != "" {
		_ = unstructured.SetNestedField(dv.Object, class, "spec", "storage", "storageClassName")
	}
	dv.SetAnnotations(annotations)
	if _, err := dyn.Resource(cdi.DataVolumes).Namespace(e.ns).Create(context.Background(), dv, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// waitDataVolume waits until DataVolume name is in phase.
func (e *env) waitDataVolume(dyn dynamic.Interface, name, phase string) {
	e.t.Helper()
	var last string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		dv, err := dyn.Resource(cdi.DataVolumes).Namespace(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last, _, _ = unstructured.NestedString(dv.Object, "status", "phase")
		return last == phase, nil
	}); err != nil {
		e.t.Fatalf("DataVolume %s in phase %q a minute on, want %s", name, last, phase)
	}
}

// releaseDataVolume lets the simulated CDI finish the transfer it holds.
func (e *env) releaseDataVolume(dyn dynamic.Interface, name string) {
	e.t.Helper()
	body := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, cdi.HeldAnnotation)
	if _, err := dyn.Resource(cdi.DataVolumes).Namespace(e.ns).Patch(context.Background(), name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// With CDI's DataVolumes served (by the simulated CDI), a VMI waits, with no
// pod, for a DataVolume CDI still imports and says so in DataVolumesReady;
// it starts once the import succeeded, and a failed import fails a VMI
// before it has a pod. A DataVolume waiting for its first consumer gets a
// temporary pod, which the scheduler places and the provisioner follows;
// it is deleted once the import starts.
func TestDataVolumesAsKubeVirtReadsThem(t *testing.T) {
	ns, kube, kv := controllertest.Clients(t)
	dyn := dynamic.NewForConfigOrDie(clustertest.Config(t))
	e := &env{t: t, ns: ns, kube: kube, kv: kv}
	e.replicas = controllertest.StartN(t, e.ns, 1, nil)
	versions := e.recordVMIs()
	held := map[string]string{cdi.HeldAnnotation: ""}

	e.dataVolume(dyn, "imported", "", held)
	e.waitDataVolume(dyn, "imported", "ImportInProgress")
	created := e.create(withDataVolume(workload.VMI("on-import"), "imported"))

	waiting := e.waitVMI("on-import", time.Minute, "Pending with DataVolumesReady=False", func(v *virtv1.VirtualMachineInstance) bool {
		c := condition(v, virtv1.VirtualMachineInstanceDataVolumesReady)
		return c != nil && c.Status == corev1.ConditionFalse
	})
	if c := condition(waiting, virtv1.VirtualMachineInstanceDataVolumesReady); waiting.Status.Phase != virtv1.Pending ||
		c.Reason != virtv1.VirtualMachineInstanceReasonNotAllDVsReady || c.Message != "Not all of the VMI's DVs are ready" {
		t.Errorf("waiting VMI in phase %s with DataVolumesReady %+v, want Pending, NotAllDVsReady", waiting.Status.Phase, c)
	}
	if c := condition(waiting, virtv1.VirtualMachineInstanceSynchronized); c != nil {
		t.Errorf("waiting VMI has Synchronized %+v; KubeVirt sets none while a DataVolume imports", c)
	}
	if pods := e.launcherPods(created); len(pods) != 0 {
		t.Errorf("%d launcher pods while the DataVolume imports, want none", len(pods))
	}

	e.releaseDataVolume(dyn, "imported")
	e.waitVMI("on-import", time.Minute, "Running once the import succeeded", func(v *virtv1.VirtualMachineInstance) bool {
		return v.Status.Phase == virtv1.Running
	})
	scheduled := versions.first("on-import", virtv1.Scheduled)
	if scheduled == nil {
		t.Fatal("the watch saw no Scheduled version of the VMI")
	}
	if c := condition(scheduled, virtv1.VirtualMachineInstanceDataVolumesReady); c == nil || c.Status != corev1.ConditionTrue ||
		c.Reason != virtv1.VirtualMachineInstanceReasonAllDVsReady || c.Message != "All of the VMI's DVs are bound and ready" {
		t.Errorf("Scheduled VMI's DataVolumesReady %+v, want True, AllDVsReady", c)
	}

	e.dataVolume(dyn, "broken", "", map[string]string{cdi.FailedAnnotation: "the source is gone"})
	e.waitDataVolume(dyn, "broken", "Failed")
	createdDoomed := e.create(withDataVolume(workload.VMI("on-failed-import"), "broken"))
	e.waitVMI("on-failed-import", time.Minute, "Failed", func(v *virtv1.VirtualMachineInstance) bool { return v.Status.Phase == virtv1.Failed })
	if pods := e.launcherPods(createdDoomed); len(pods) != 0 {
		t.Errorf("%d launcher pods for a VMI on a failed import, want none", len(pods))
	}

	// WaitForFirstConsumer: a temporary pod first, which the scheduler
	// places and the provisioner follows; deleted once the import starts,
	// then the launcher pod once it succeeded.
	e.dataVolume(dyn, "lazy", cdi.StorageClassWaitForFirstConsumer, held)
	e.waitDataVolume(dyn, "lazy", "WaitForFirstConsumer")
	createdLazy := e.create(withDataVolume(workload.VMI("on-first-consumer"), "lazy"))
	provisioning := e.waitVMI("on-first-consumer", time.Minute, "Provisioning=True", func(v *virtv1.VirtualMachineInstance) bool {
		return condition(v, virtv1.VirtualMachineInstanceProvisioning) != nil
	})
	if c := condition(provisioning, virtv1.VirtualMachineInstanceProvisioning); provisioning.Status.Phase != virtv1.Pending || c.Status != corev1.ConditionTrue {
		t.Errorf("provisioning VMI in phase %s with Provisioning %+v, want Pending, True", provisioning.Status.Phase, c)
	}
	temps := e.launcherPods(createdLazy)
	if len(temps) != 1 || temps[0].Annotations[virtv1.EphemeralProvisioningObject] != "true" ||
		temps[0].Name != template.ProvisioningPodName(createdLazy) || temps[0].Spec.Containers[0].Command[0] != "/bin/bash" {
		t.Fatalf("pods while the DataVolume waits for its first consumer: %v, want one temporary pod", podNames(temps))
	}
	e.waitDataVolume(dyn, "lazy", "ImportInProgress")
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return len(e.launcherPods(createdLazy)) == 0, nil
	}); err != nil {
		t.Fatalf("the temporary pod was not deleted within a minute of the import's start: %v", podNames(e.launcherPods(createdLazy)))
	}
	// The recorder writes events on its own goroutine: the deletion's may
	// come a moment after the pod is gone.
	var ev []corev1.Event
	_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		ev = e.events(createdLazy, "SuccessfulDelete")
		return len(ev) > 0, nil
	})
	if len(ev) != 1 || ev[0].Message != "Deleted WaitForFirstConsumer temporary pod "+temps[0].Name {
		t.Errorf("SuccessfulDelete events %v, want one for the temporary pod", ev)
	}
	e.releaseDataVolume(dyn, "lazy")
	e.waitVMI("on-first-consumer", time.Minute, "Running once the import succeeded", func(v *virtv1.VirtualMachineInstance) bool {
		return v.Status.Phase == virtv1.Running
	})
	if c := condition(versions.first("on-first-consumer", virtv1.Scheduled), virtv1.VirtualMachineInstanceProvisioning); c != nil {
		t.Errorf("Scheduled VMI has Provisioning %+v; KubeVirt removes it at Scheduling", c)
	}
	if pods := e.launcherPods(createdLazy); len(pods) != 1 || pods[0].Name != template.PodName(createdLazy) {
		t.Errorf("pods of the started VMI: %v, want its launcher pod only", podNames(pods))
	}
}

// withDataVolume adds a disk on DataVolume name to vmi.
func withDataVolume(vmi *virtv1.VirtualMachineInstance, name string) *virtv1.VirtualMachineInstance {
	vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, virtv1.Disk{Name: "data", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{}}})
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, virtv1.Volume{Name: "data", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: name}}})
	return vmi
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}
