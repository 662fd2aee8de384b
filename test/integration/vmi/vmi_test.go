package vmi_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// env is one test's namespace with its replicas.
type env struct {
	t    *testing.T
	ns   string
	kube kubernetes.Interface
	kv   *kubevirt.Clientset
	// replicas by identity.
	replicas map[string]*controllertest.Replica
}

func newEnv(t *testing.T, replicas int) *env {
	t.Helper()
	ns, kube, kv := controllertest.Clients(t)
	e := &env{t: t, ns: ns, kube: kube, kv: kv}
	e.replicas = controllertest.StartN(t, e.ns, replicas, nil)
	return e
}

func (e *env) create(vmi *virtv1.VirtualMachineInstance) *virtv1.VirtualMachineInstance {
	e.t.Helper()
	created, err := e.kv.VirtualMachineInstances(e.ns).Create(context.Background(), vmi, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create VMI: %v", err)
	}
	return created
}

// waitVMI waits until cond holds for the VMI, returning it.
func (e *env) waitVMI(name string, timeout time.Duration, what string, cond func(*virtv1.VirtualMachineInstance) bool) *virtv1.VirtualMachineInstance {
	e.t.Helper()
	var vmi *virtv1.VirtualMachineInstance
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		vmi, err = e.kv.VirtualMachineInstances(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return cond(vmi), nil
	})
	if err != nil {
		e.t.Fatalf("VMI %s: %s not reached within %s; last status: %+v", name, what, timeout, statusOf(vmi))
	}
	return vmi
}

func statusOf(vmi *virtv1.VirtualMachineInstance) any {
	if vmi == nil {
		return nil
	}
	return vmi.Status
}

func (e *env) launcherPods(vmi *virtv1.VirtualMachineInstance) []corev1.Pod {
	e.t.Helper()
	pods, err := e.kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: virtv1.CreatedByLabel + "=" + string(vmi.UID),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return pods.Items
}

func (e *env) events(vmi *virtv1.VirtualMachineInstance, reason string) []corev1.Event {
	e.t.Helper()
	events, err := e.kube.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(vmi.UID) + ",reason=" + reason,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return events.Items
}

func phases(vmi *virtv1.VirtualMachineInstance) []virtv1.VirtualMachineInstancePhase {
	var out []virtv1.VirtualMachineInstancePhase
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		out = append(out, t.Phase)
	}
	return out
}

func TestVMIRunsAndIsDeletedWithTwoReplicas(t *testing.T) {
	e := newEnv(t, 2)
	created := e.create(workload.VMI("lifecycle"))
	vmi := e.waitVMI("lifecycle", time.Minute, "Running", func(v *virtv1.VirtualMachineInstance) bool {
		return v.Status.Phase == virtv1.Running
	})

	want := []virtv1.VirtualMachineInstancePhase{virtv1.Pending, virtv1.Scheduling, virtv1.Scheduled, virtv1.Running}
	if got := phases(vmi); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("phase transitions %v, want %v", got, want)
	}
	ts := vmi.Status.PhaseTransitionTimestamps
	for i := 1; i < len(ts); i++ {
		if ts[i].PhaseTransitionTimestamp.Before(&ts[i-1].PhaseTransitionTimestamp) {
			t.Errorf("%s recorded at %s, before %s at %s", ts[i].Phase, ts[i].PhaseTransitionTimestamp, ts[i-1].Phase, ts[i-1].PhaseTransitionTimestamp)
		}
	}
	if vmi.Status.NodeName == "" || vmi.Labels[virtv1.NodeNameLabel] != vmi.Status.NodeName {
		t.Errorf("handoff incomplete: nodeName %q, label %q", vmi.Status.NodeName, vmi.Labels[virtv1.NodeNameLabel])
	}
	pods := e.launcherPods(created)
	if len(pods) != 1 {
		t.Fatalf("%d launcher pods, want 1", len(pods))
	}
	pod := pods[0]
	if pod.Name != template.PodName(created) || pod.Spec.NodeName != vmi.Status.NodeName || pod.Spec.Containers[0].Name != "compute" {
		t.Errorf("launcher pod %s on %s (container %s), want %s on %s with compute first",
			pod.Name, pod.Spec.NodeName, pod.Spec.Containers[0].Name, template.PodName(created), vmi.Status.NodeName)
	}
	if _, ok := vmi.Status.ActivePods[pod.UID]; !ok {
		t.Errorf("activePods %v lacks the launcher pod %s", vmi.Status.ActivePods, pod.UID)
	}
	if len(e.events(created, "SuccessfulCreate")) != 1 {
		t.Error("no SuccessfulCreate event")
	}
	found := false
	for _, f := range vmi.Finalizers {
		found = found || f == virtv1.VirtualMachineInstanceFinalizer
	}
	if !found {
		t.Errorf("finalizers %v lack %s", vmi.Finalizers, virtv1.VirtualMachineInstanceFinalizer)
	}

	// The replicas' metrics saw it: the queue, the reconciles, the phases
	// (once the holder's informer has delivered the Running update, which
	// may come after the API answered Running to the test).
	var adds, reconciles, runningObserved float64
	_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		adds, reconciles, runningObserved = 0, 0, 0
		for _, r := range e.replicas {
			families, err := r.Registry.Gather()
			if err != nil {
				return false, err
			}
			for _, f := range families {
				for _, m := range f.GetMetric() {
					switch f.GetName() {
					case "virtshard_workqueue_adds_total":
						adds += m.GetCounter().GetValue()
					case "virtshard_controller_reconcile_duration_seconds":
						reconciles += float64(m.GetHistogram().GetSampleCount())
					case "kubevirt_vmi_phase_transition_time_from_creation_seconds":
						if m.GetLabel()[0].GetValue() == "Running" {
							runningObserved += float64(m.GetHistogram().GetSampleCount())
						}
					}
				}
			}
		}
		return runningObserved >= 1, nil
	})
	if adds == 0 || reconciles == 0 || runningObserved != 1 {
		t.Errorf("metrics: %v queue adds, %v reconciles, %v Running transitions observed; want some, some, 1", adds, reconciles, runningObserved)
	}

	if err := e.kv.VirtualMachineInstances(e.ns).Delete(context.Background(), "lifecycle", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, "lifecycle", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && len(e.launcherPods(created)) == 0, nil
	}); err != nil {
		t.Fatalf("VMI or its launcher pod still there a minute after deletion")
	}
}

func TestDeletedLauncherPodFailsTheVMIForGood(t *testing.T) {
	e := newEnv(t, 2)
	created := e.create(workload.VMI("orphan"))
	e.waitVMI("orphan", time.Minute, "Running", func(v *virtv1.VirtualMachineInstance) bool { return v.Status.Phase == virtv1.Running })
	pods := e.launcherPods(created)
	if len(pods) != 1 {
		t.Fatalf("%d launcher pods, want 1", len(pods))
	}
	if err := e.kube.CoreV1().Pods(e.ns).Delete(context.Background(), pods[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	vmi := e.waitVMI("orphan", time.Minute, "Failed", func(v *virtv1.VirtualMachineInstance) bool { return v.Status.Phase == virtv1.Failed })
	if got := phases(vmi); got[len(got)-1] != virtv1.Failed {
		t.Errorf("phase transitions %v do not end with Failed", got)
	}
	// Give a wrongly re-created pod time to show up, then check none did.
	time.Sleep(2 * time.Second)
	if pods := e.launcherPods(created); len(pods) != 0 {
		t.Errorf("%d launcher pods after the VMI failed, want none (never re-created after Pending)", len(pods))
	}
}

func TestMissingPVCWaitsThenProceeds(t *testing.T) {
	e := newEnv(t, 1)
	vmi := workload.VMI("needs-disk")
	vmi.Spec.Domain.Devices.Disks = []virtv1.Disk{{Name: "data", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{}}}}
	vmi.Spec.Volumes = []virtv1.Volume{{Name: "data", VolumeSource: virtv1.VolumeSource{
		PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}},
	}}}
	created := e.create(vmi)
	blocked := e.waitVMI("needs-disk", time.Minute, "Synchronized=False FailedPvcNotFound", func(v *virtv1.VirtualMachineInstance) bool {
		c := condition(v, virtv1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == "FailedPvcNotFound"
	})
	if blocked.Status.Phase != virtv1.Pending {
		t.Errorf("blocked VMI in phase %s, want Pending", blocked.Status.Phase)
	}
	waitEvents(t, e, created, "FailedPvcNotFound", corev1.EventTypeNormal)
	if pods := e.launcherPods(created); len(pods) != 0 {
		t.Fatalf("%d launcher pods without the PVC, want none", len(pods))
	}

	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := e.kube.CoreV1().PersistentVolumeClaims(e.ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitVMI("needs-disk", time.Minute, "a launcher pod once the PVC exists", func(v *virtv1.VirtualMachineInstance) bool {
		return len(e.launcherPods(created)) == 1
	})
}

func TestInvalidNetworkIsReportedOnceWithoutRetrying(t *testing.T) {
	e := newEnv(t, 1)
	vmi := workload.VMI("bad-net")
	vmi.Spec.Domain.Devices.Interfaces = []virtv1.Interface{{Name: "default", InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}}}}
	vmi.Spec.Networks = []virtv1.Network{{Name: "other", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}}
	created := e.create(vmi)
	e.waitVMI("bad-net", time.Minute, "Synchronized=False InvalidNetworkSpec", func(v *virtv1.VirtualMachineInstance) bool {
		c := condition(v, virtv1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == "InvalidNetworkSpec"
	})
	waitEvents(t, e, created, "InvalidNetworkSpec", corev1.EventTypeWarning)
	// A hot loop would keep reconciling and re-reporting: after a while
	// there must still be one event and no pod.
	time.Sleep(3 * time.Second)
	events := e.events(created, "InvalidNetworkSpec")
	if len(events) != 1 || events[0].Count > 1 {
		count := int32(0)
		for _, ev := range events {
			count += ev.Count
		}
		t.Errorf("%d InvalidNetworkSpec events seen %d times, want one, reported once", len(events), count)
	}
	if pods := e.launcherPods(created); len(pods) != 0 {
		t.Errorf("%d launcher pods for an invalid network spec, want none", len(pods))
	}
}

func waitEvents(t *testing.T, e *env, vmi *virtv1.VirtualMachineInstance, reason, eventType string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		events := e.events(vmi, reason)
		return len(events) > 0 && events[0].Type == eventType, nil
	}); err != nil {
		t.Fatalf("no %s event %s for %s", eventType, reason, vmi.Name)
	}
}

func condition(v *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType) *virtv1.VirtualMachineInstanceCondition {
	for i := range v.Status.Conditions {
		if v.Status.Conditions[i].Type == t {
			return &v.Status.Conditions[i]
		}
	}
	return nil
}

// Without CDI in the cluster, a DataVolume volume is judged by the PVC CDI
// would have made (same name): the missing CRD breaks nothing. It also shows
// an unschedulable launcher pod's PodScheduled=False copied to the VMI.
func TestDataVolumeWithoutCDIIsJudgedByItsPVC(t *testing.T) {
	e := newEnv(t, 1)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "root-dv"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := e.kube.CoreV1().PersistentVolumeClaims(e.ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vmi := workload.VMI("from-dv")
	vmi.Spec.Domain.Devices.Disks = []virtv1.Disk{{Name: "root", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{}}}}
	vmi.Spec.Volumes = []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: "root-dv"}}}}
	created := e.create(vmi)
	// The claim has no volume behind it on this cluster, so the scheduler
	// keeps the pod Pending: the VMI is Scheduling, and says why.
	e.waitVMI("from-dv", time.Minute, "Scheduling with PodScheduled=False", func(v *virtv1.VirtualMachineInstance) bool {
		c := condition(v, virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
		return v.Status.Phase == virtv1.Scheduling && c != nil && c.Status == corev1.ConditionFalse
	})
	pods := e.launcherPods(created)
	mounts := func(pod corev1.Pod) bool {
		for _, v := range pod.Spec.Volumes {
			if v.Name == "root" && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "root-dv" {
				return true
			}
		}
		return false
	}
	if len(pods) != 1 || !mounts(pods[0]) {
		t.Errorf("launcher pods %d; want one mounting claim root-dv as volume root", len(pods))
	}
}
