package vmi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/shard"
)

// fixture is the VMI controller on the test kit; a test calls sync on one
// item and reads the actions the fakes recorded.
type fixture struct {
	*shardedtest.Fixture
	c *Controller
}

// newFixture starts the controller over fakes holding objects, status
// written at once.
func newFixture(t *testing.T, objects ...runtime.Object) *fixture {
	t.Helper()
	return startFixture(t, shardedtest.Cluster{Objects: objects})
}

// startFixture starts the controller on c, status written at once.
func startFixture(t *testing.T, c shardedtest.Cluster) *fixture {
	t.Helper()
	opts := Options{UrgentStatusWait: time.Millisecond, LazyStatusWait: time.Millisecond, BusyDepth: 1000}
	f, ctrl := shardedtest.StartController(t, "vmi", func(env *sharded.Env, rt *sharded.Runtime) (*Controller, *sharded.Controller, error) {
		ctrl := newController(env, rt, opts, nil, nil)
		return ctrl, ctrl.declare(), nil
	}, c)
	return &fixture{f, ctrl}
}

func (f *fixture) item(vmi *virtv1.VirtualMachineInstance) item {
	return item{Range: f.Ranges.Owner(vmi), Key: vmi.Namespace + "/" + vmi.Name}
}

func newVMI(name string) *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{Resources: virtv1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		}}},
	}
}

// runningLauncherPod is the pod the controller renders for vmi, created
// and running.
func runningLauncherPod(t *testing.T, vmi *virtv1.VirtualMachineInstance) *corev1.Pod {
	t.Helper()
	pod, err := template.Render(vmi, shardedtest.Ranges(t).Owner(vmi), template.DefaultOptions(), clusterconfig.DefaultConfig("amd64"), nil)
	if err != nil {
		t.Fatal(err)
	}
	pod.UID, pod.ResourceVersion = "pod-uid", "1"
	pod.Status.Phase = corev1.PodRunning
	return pod
}

func TestSyncCreatesTheLauncherPodOfAPendingVMI(t *testing.T) {
	vmi := newVMI("a")
	f := newFixture(t, vmi)
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	if got := kvfake.Writes(f.Kube.Actions()); !slices.Equal(got, []string{"create pods"}) {
		t.Fatalf("writes %q, want one pod create", got)
	}
	created := f.Kube.Actions()[0].(k8stesting.CreateAction).GetObject().(*corev1.Pod)
	if created.Labels[virtv1.CreatedByLabel] != string(vmi.UID) || created.Labels[shard.LabelRange] != fmt.Sprint(f.Ranges.Owner(vmi)) {
		t.Errorf("pod labels %v: want the VMI's UID and range", created.Labels)
	}
	// Syncs while the pod is on its way to the cache, and after, create
	// no second pod.
	f.Kube.ClearActions()
	for range 3 {
		if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
			t.Fatal(err)
		}
	}
	if got := kvfake.Writes(f.Kube.Actions()); slices.Contains(got, "create pods") {
		t.Errorf("later syncs wrote %q: a second pod", got)
	}
}

// A Pending VMI that moved here from another range (a VM adopted it) finds
// its launcher pod when its create is answered AlreadyExists, and brings
// the pod over instead of waiting for a pod it cannot see.
func TestSyncOfAPendingVMIBringsItsPodFromAnotherRange(t *testing.T) {
	vmi := newVMI("a")
	pod := runningLauncherPod(t, vmi)
	pod.Status.Phase = corev1.PodPending
	elsewhere := (shardedtest.Ranges(t).Owner(vmi) + 1) % shardedtest.Ranges(t).Count()
	shard.StampRange(pod, elsewhere)
	f := newFixture(t, vmi, pod)
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	if got := kvfake.Writes(f.Kube.Actions()); !slices.Equal(got, []string{"create pods", "patch pods"}) {
		t.Fatalf("writes %q, want the create answered AlreadyExists, then the pod relabelled", got)
	}
	moved, err := f.Kube.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := f.Ranges.Labelled(moved); !ok || got != f.item(vmi).Range {
		t.Errorf("pod range label %q, want the VMI's range %d", moved.Labels[shard.LabelRange], f.item(vmi).Range)
	}
	if events := f.Events(); !slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, ReasonRangeLabelRestored) }) {
		t.Errorf("events %q, want %s", events, ReasonRangeLabelRestored)
	}
}

func TestSyncOfARangeNoLongerHeldSendsNothing(t *testing.T) {
	vmi := newVMI("a")
	f := newFixture(t, vmi)
	f.Fence.Cut()
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil && !errors.Is(err, sharded.ErrNotHeld) {
		t.Fatalf("sync returned %v, want nothing or ErrNotHeld (the worker drops the item)", err)
	}
	if got := kvfake.Writes(f.Kube.Actions()); len(got) != 0 {
		t.Errorf("writes %q for a range not held", got)
	}
	if !f.c.expectations.Satisfied(f.item(vmi).Range, f.item(vmi).Key) {
		t.Error("an expectation was raised for a create never sent")
	}
}

func TestSyncRetriesAFailedCreateAndSaysWhy(t *testing.T) {
	vmi := newVMI("a")
	f := newFixture(t, vmi)
	f.Kube.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the API server is overloaded")
	})
	err := f.c.sync(context.Background(), f.item(vmi))
	if err == nil || !strings.Contains(err.Error(), "overloaded") {
		t.Fatalf("sync returned %v, want the create's error for a retry", err)
	}
	if !f.c.expectations.Satisfied(f.item(vmi).Range, f.item(vmi).Key) {
		t.Error("the expectation of a failed create is still raised: the retry would wait for it")
	}
	select {
	case e := <-f.Recorder.Events:
		if !strings.Contains(e, ReasonFailedCreate) {
			t.Errorf("event %q, want %s", e, ReasonFailedCreate)
		}
	default:
		t.Error("no event for the failed create")
	}
}

func TestSyncBlocksAVMIWithAnInvalidNetworkWithoutRetrying(t *testing.T) {
	vmi := newVMI("a")
	vmi.Spec.Networks = []virtv1.Network{{Name: "default", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}}
	// No interface for the network: KubeVirt's webhook and template refuse it.
	f := newFixture(t, vmi)
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
		t.Fatalf("sync returned %v: bad input must not be retried", err)
	}
	if got := kvfake.Writes(f.Kube.Actions()); len(got) != 0 {
		t.Errorf("writes %q for an invalid VMI", got)
	}
	f.WaitForKubeVirtWrites("patch virtualmachineinstances")
	patch := string(f.KubeVirt.Actions()[len(f.KubeVirt.Actions())-1].(k8stesting.PatchAction).GetPatch())
	if !strings.Contains(patch, ReasonInvalidNetwork) || !strings.Contains(patch, `"resourceVersion":"1"`) {
		t.Errorf("status patch %s: want the %s condition at the cached resourceVersion", patch, ReasonInvalidNetwork)
	}
}

func TestSyncFailsARunningVMIWhosePodIsGone(t *testing.T) {
	vmi := newVMI("a")
	vmi.Status.Phase = virtv1.Running
	vmi.Status.NodeName = "node-1"
	f := newFixture(t, vmi)
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	if got := kvfake.Writes(f.Kube.Actions()); len(got) != 0 {
		t.Errorf("kube writes %q: a launcher pod is never created again after Pending", got)
	}
	f.WaitForKubeVirtWrites("patch virtualmachineinstances")
	patch := string(f.KubeVirt.Actions()[len(f.KubeVirt.Actions())-1].(k8stesting.PatchAction).GetPatch())
	if !strings.Contains(patch, `"phase":"Failed"`) || strings.Contains(patch, string(virtv1.VirtualMachineInstanceSynchronized)) {
		t.Errorf("status patch %s: want Failed and, as KubeVirt's, no Synchronized condition", patch)
	}
	if len(f.Recorder.Events) != 0 {
		t.Errorf("event %q recorded; KubeVirt records none", <-f.Recorder.Events)
	}
}

// A final VMI whose pods are all gone says why it is not Ready and lets go
// of its finalizer and launcher image, as KubeVirt's IsFinal case does.
func TestSyncSettlesAFinalVMIWithoutPods(t *testing.T) {
	vmi := newVMI("a")
	vmi.Status.Phase = virtv1.Failed
	vmi.Finalizers = []string{virtv1.VirtualMachineInstanceFinalizer}
	vmi.Status.LauncherContainerImageVersion = "launcher:v1"
	f := newFixture(t, vmi)
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	f.WaitForKubeVirtWrites("patch virtualmachineinstances")
	patch := string(f.KubeVirt.Actions()[len(f.KubeVirt.Actions())-1].(k8stesting.PatchAction).GetPatch())
	for _, want := range []string{`"finalizers":null`, `"launcherContainerImageVersion":null`, virtv1.PodNotExistsReason} {
		if !strings.Contains(patch, want) {
			t.Errorf("status patch %s: want %s", patch, want)
		}
	}
}

// A launcher pod that ended fails its VMI only before the hand-off: a
// Scheduled or Running VMI's end is the node agent's to report (Succeeded
// after a shutdown), as KubeVirt's VMI controller leaves it, and the
// source pod of a migration ends before the VMI's move is seen.
func TestSyncFailsAVMIWithItsEndedPodOnlyBeforeTheHandoff(t *testing.T) {
	for _, tc := range []struct {
		name      string
		phase     virtv1.VirtualMachineInstancePhase
		pod       corev1.PodPhase
		migration *virtv1.VirtualMachineInstanceMigrationState
		wantFail  bool
	}{
		{name: "Scheduling, its pod failed", phase: virtv1.Scheduling, pod: corev1.PodFailed, wantFail: true},
		{name: "Running, its pod succeeded after a shutdown", phase: virtv1.Running, pod: corev1.PodSucceeded},
		{name: "Running, its pod failed", phase: virtv1.Running, pod: corev1.PodFailed},
		{name: "Scheduled, its pod failed", phase: virtv1.Scheduled, pod: corev1.PodFailed},
		{name: "a migration under way: the move to the target is on its way", phase: virtv1.Running, pod: corev1.PodSucceeded,
			migration: &virtv1.VirtualMachineInstanceMigrationState{TargetNodeDomainDetected: true}},
		{name: "a failed migration", phase: virtv1.Running, pod: corev1.PodSucceeded,
			migration: &virtv1.VirtualMachineInstanceMigrationState{TargetNodeDomainDetected: true, Failed: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := newVMI("a")
			vmi.Status.Phase = tc.phase
			pod := runningLauncherPod(t, vmi)
			pod.Status.Phase = tc.pod
			if tc.phase != virtv1.Scheduling {
				vmi.Status.NodeName = pod.Spec.NodeName
			}
			if m := tc.migration; m != nil {
				m.MigrationUID, m.SourcePod, m.StartTimestamp = "m-uid", pod.Name, &metav1.Time{Time: time.Now()}
				vmi.Status.MigrationState = m
			}
			f := newFixture(t, vmi, pod)
			if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
				t.Fatal(err)
			}
			if !tc.wantFail {
				// Nothing may be written, now or by the batcher later.
				if got := kvfake.Writes(f.KubeVirt.Actions()); len(got) != 0 {
					t.Errorf("writes %q, want none", got)
				}
				if f.c.batcher.Pending(f.item(vmi).Key, vmi.UID) {
					t.Error("a status intent is pending: the VMI would be failed")
				}
				return
			}
			f.WaitForKubeVirtWrites("patch virtualmachineinstances")
			patch := string(f.KubeVirt.Actions()[len(f.KubeVirt.Actions())-1].(k8stesting.PatchAction).GetPatch())
			if !strings.Contains(patch, `"phase":"Failed"`) || !strings.Contains(patch, ReasonPodFailed) {
				t.Errorf("status patch %s: want Failed for %s", patch, ReasonPodFailed)
			}
		})
	}
}

func TestSyncDeletesTheLauncherPodOfADeletedVMI(t *testing.T) {
	vmi := newVMI("a")
	vmi.Status.Phase = virtv1.Running
	vmi.Finalizers = []string{virtv1.VirtualMachineInstanceFinalizer}
	vmi.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	f := newFixture(t, vmi, runningLauncherPod(t, vmi))
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	actions := f.Kube.Actions()
	if got := kvfake.Writes(actions); !slices.Equal(got, []string{"delete pods"}) {
		t.Fatalf("writes %q, want the launcher pod deleted", got)
	}
	del := actions[len(actions)-1].(k8stesting.DeleteAction)
	if uid := del.GetDeleteOptions().Preconditions; uid == nil || uid.UID == nil || *uid.UID != "pod-uid" {
		t.Errorf("delete preconditions %+v: want the pod's UID", del.GetDeleteOptions().Preconditions)
	}
}

func TestSyncRestoresAnEditedRangeLabelInsteadOfFailingTheVMI(t *testing.T) {
	vmi := newVMI("a")
	vmi.Status.Phase = virtv1.Running
	vmi.Status.NodeName = "node-1"
	pod := runningLauncherPod(t, vmi)
	pod.Labels[shard.LabelRange] = "edited" // out of the range's cache
	f := newFixture(t, vmi, pod)
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	actions := f.Kube.Actions()
	if got := kvfake.Writes(actions); !slices.Equal(got, []string{"patch pods"}) {
		t.Fatalf("kube writes %q, want the range label patched back", got)
	}
	patch := string(actions[len(actions)-1].(k8stesting.PatchAction).GetPatch())
	want := fmt.Sprintf(`{"metadata":{"uid":"pod-uid","resourceVersion":"1","labels":{"%s":"%d"}}}`, shard.LabelRange, f.Ranges.Owner(vmi))
	if patch != want {
		t.Errorf("patch %s, want %s: the label, at the pod's UID and resourceVersion", patch, want)
	}
	if got := kvfake.Writes(f.KubeVirt.Actions()); len(got) != 0 {
		t.Errorf("KubeVirt writes %q: the VMI must not fail for an edited label", got)
	}
	if events := f.Events(); len(events) != 1 || !strings.HasPrefix(events[0], "Warning "+ReasonRangeLabelRestored) {
		t.Errorf("events %q, want the edit reported", events)
	}
}

// An orphan adopted by an owner on another range moves there, its pod
// after it: the pod's label is the orphan's own range, relabelled without
// a warning, for it is no one's mistake.
func TestSyncMovesTheLauncherPodOfAnAdoptedVMIQuietly(t *testing.T) {
	orphan := newVMI("a")
	ranges := shardedtest.Ranges(t)
	pod := runningLauncherPod(t, orphan) // rendered on the orphan's own range
	adopted := orphan.DeepCopy()
	adopted.Status.Phase = virtv1.Running
	adopted.Status.NodeName = "node-1"
	shard.StampRange(adopted, (ranges.Of(orphan)+1)%ranges.Count())
	f := newFixture(t, adopted, pod)
	if err := f.c.sync(context.Background(), f.item(adopted)); err != nil {
		t.Fatal(err)
	}
	if got := kvfake.Writes(f.Kube.Actions()); !slices.Equal(got, []string{"patch pods"}) {
		t.Fatalf("kube writes %q, want the pod moved to the VMI's range", got)
	}
	if events := f.Events(); len(events) != 0 {
		t.Errorf("events %q for a pod that followed its adopted VMI", events)
	}
}

// A replica that takes a range back with caches kept from before it was
// stopped may see a VMI's Running status before its launcher pod: the VMI
// must not fail for a pod the server has, and the sync is retried.
func TestSyncDoesNotFailAVMIWhosePodTheCacheHasNotSeenYet(t *testing.T) {
	vmi := newVMI("a")
	vmi.Status.Phase = virtv1.Running
	vmi.Status.NodeName = "node-1"
	pod := runningLauncherPod(t, vmi)
	f := newFixture(t, vmi) // the caches listed no pod
	f.Kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &corev1.PodList{Items: []corev1.Pod{*pod}}, nil // the server has it
	})
	err := f.c.sync(context.Background(), f.item(vmi))
	if err == nil || !strings.Contains(err.Error(), pod.Name) {
		t.Errorf("sync error %v: want one naming the uncached pod, for a retry", err)
	}
	if got := append(kvfake.Writes(f.Kube.Actions()), kvfake.Writes(f.KubeVirt.Actions())...); len(got) != 0 {
		t.Errorf("writes %q, want none", got)
	}
	if f.c.batcher.Pending(f.item(vmi).Key, vmi.UID) {
		t.Error("a status intent is pending: the VMI would be failed")
	}
}

// The cache holds the VMI's pod, but as it was before it was scheduled to
// the VMI's node: the cache lags, and the VMI is retried, not failed.
func TestSyncDoesNotFailAVMIWhosePodTheCacheHoldsAsItWas(t *testing.T) {
	vmi := newVMI("a")
	vmi.Status.Phase = virtv1.Running
	vmi.Status.NodeName = "node-1"
	pod := runningLauncherPod(t, vmi)
	stale := pod.DeepCopy()
	stale.Spec.NodeName, stale.Status.Phase = "", corev1.PodPending
	f := newFixture(t, vmi, stale) // the caches listed the pod unscheduled
	scheduled := pod.DeepCopy()
	scheduled.Spec.NodeName, scheduled.ResourceVersion = "node-1", "2"
	f.Kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &corev1.PodList{Items: []corev1.Pod{*scheduled}}, nil // the server has it on the node
	})
	err := f.c.sync(context.Background(), f.item(vmi))
	if err == nil || !strings.Contains(err.Error(), pod.Name) {
		t.Errorf("sync error %v: want one naming the pod the cache holds as it was, for a retry", err)
	}
	if f.c.batcher.Pending(f.item(vmi).Key, vmi.UID) {
		t.Error("a status intent is pending: the VMI would be failed")
	}
}

// dataVolume is a CDI DataVolume in phase, its claim bound.
func cdiDataVolume(name, phase string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
		"metadata": map[string]any{"name": name, "namespace": "default", "uid": "dv-uid", "resourceVersion": "1"},
		"status":   map[string]any{"phase": phase, "conditions": []any{map[string]any{"type": "Ready", "status": "False"}}},
	}}
}

func boundClaim(name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: "pvc-uid", ResourceVersion: "1"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}
}

func withDataVolume(vmi *virtv1.VirtualMachineInstance, name string) *virtv1.VirtualMachineInstance {
	vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, virtv1.Disk{Name: "data", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{}}})
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, virtv1.Volume{Name: "data", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: name}}})
	return vmi
}

// A DataVolume waiting for its first consumer gets a temporary pod, not
// the launcher pod, and the VMI says it is provisioning, as KubeVirt does;
// once the pod ran and the import started, the pod goes at once, by UID.
func TestSyncProvisionsADataVolumeWaitingForItsFirstConsumer(t *testing.T) {
	vmi := withDataVolume(newVMI("lazy"), "lazy")
	f := newFixture(t, vmi, boundClaim("lazy"), cdiDataVolume("lazy", "WaitForFirstConsumer"))
	if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	var created []*corev1.Pod
	for _, a := range f.Kube.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "pods" {
			created = append(created, c.GetObject().(*corev1.Pod))
		}
	}
	if len(created) != 1 || created[0].Name != template.ProvisioningPodName(vmi) ||
		created[0].Annotations[virtv1.EphemeralProvisioningObject] != "true" {
		t.Fatalf("pods created %v, want one temporary pod %s", created, template.ProvisioningPodName(vmi))
	}
	f.WaitForKubeVirtWrites("patch virtualmachineinstances")
	status := f.KubeVirt.Actions()[0].(k8stesting.PatchAction).GetPatch()
	if !strings.Contains(string(status), string(virtv1.VirtualMachineInstanceProvisioning)) {
		t.Errorf("status patch %s, want the Provisioning condition", status)
	}

	// The temporary pod runs, and CDI starts the import.
	temp := created[0].DeepCopy()
	temp.UID, temp.Status.Phase = "temp-uid", corev1.PodRunning
	ctx := context.Background()
	if _, err := f.Kube.CoreV1().Pods("default").Update(ctx, temp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	dv := cdiDataVolume("lazy", "ImportInProgress")
	if _, err := f.Dynamic.Resource(caches.DataVolumeGVR).Namespace("default").UpdateStatus(ctx, dv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		pods := kinds.PodsOf(f.Range(f.Ranges.Owner(vmi)), vmi)
		obj, _, _ := f.Env.Objects.DataVolumes.GetStore().GetByKey("default/lazy")
		phase := ""
		if obj != nil {
			phase, _, _ = unstructured.NestedString(obj.(*unstructured.Unstructured).Object, "status", "phase")
		}
		return len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning && phase == "ImportInProgress", nil
	})
	if err != nil {
		t.Fatal("the caches never showed the running temporary pod and the import")
	}
	f.Kube.ClearActions()
	if err := f.c.sync(ctx, f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	if got := kvfake.Writes(f.Kube.Actions()); !slices.Equal(got, []string{"delete pods"}) {
		t.Fatalf("kube writes %q, want only the temporary pod deleted (no launcher pod while the import runs)", got)
	}
	opts := f.Kube.Actions()[0].(k8stesting.DeleteAction).GetDeleteOptions()
	if opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != "temp-uid" ||
		opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 {
		t.Errorf("delete options %+v, want the pod's UID as precondition and no grace", opts)
	}
}

// A create decided by a replica just before it lost the range, and
// reaching the server after the range's next holder created the same pod,
// makes no second pod: the launcher pod's name follows from its VMI (the
// runtime's contract, sharded.ChildName).
func TestALateCreateAfterAHandoffMakesNoSecondLauncherPod(t *testing.T) {
	vmi := newVMI("a")
	old := newFixture(t, vmi)
	asked, release := old.Fence.HoldAsk(1) // the create's
	done := make(chan error, 1)
	go func() { done <- old.c.sync(context.Background(), old.item(vmi)) }()
	<-asked
	old.Fence.Drop(old.item(vmi).Range) // the handoff, after the old holder's check

	next := startFixture(t, shardedtest.Cluster{Replica: old.Fixture})
	if err := next.c.sync(context.Background(), next.item(vmi)); err != nil {
		t.Fatal(err)
	}
	release()
	if err := <-done; err != nil {
		t.Errorf("the old holder's sync: %v, want its late create taken as done", err)
	}
	creates := 0
	for _, a := range old.Kube.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "pods" {
			creates++
		}
	}
	if creates != 2 {
		t.Fatalf("%d pod creates sent, want both replicas' (the old holder's late)", creates)
	}
	pods, err := old.Kube.CoreV1().Pods(vmi.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Errorf("%d launcher pods, want one", len(pods.Items))
	}
}

// TestSyncGatesAPodOnceTheSchedulerAnswered: the readiness gate waits for
// the scheduler's answer; a pod with a node gets its kubevirt.io/nodeName
// label in the same pods/status patch, an unschedulable one its gate only.
func TestSyncGatesAPodOnceTheSchedulerAnswered(t *testing.T) {
	for _, tc := range []struct {
		name      string
		edit      func(*corev1.Pod)
		wantPatch bool
		wantLabel string
	}{
		{"not scheduled yet", func(*corev1.Pod) {}, false, ""},
		{"scheduled", func(p *corev1.Pod) { p.Spec.NodeName = "node-1" }, true, "node-1"},
		{"unschedulable", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := newVMI("a")
			vmi.Status.Phase = virtv1.Scheduling
			pod := runningLauncherPod(t, vmi)
			pod.Status.Phase = corev1.PodPending
			tc.edit(pod)
			f := newFixture(t, vmi, pod)
			if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
				t.Fatal(err)
			}
			var patches []string
			for _, a := range f.Kube.Actions() {
				if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "pods" && a.GetSubresource() == "status" {
					patches = append(patches, string(p.GetPatch()))
				}
			}
			if !tc.wantPatch {
				if len(patches) != 0 {
					t.Errorf("pod status patches %q before the scheduler answered", patches)
				}
				return
			}
			if len(patches) != 1 || !strings.Contains(patches[0], string(virtv1.VirtualMachineUnpaused)) {
				t.Fatalf("pod status patches %q, want one with the readiness gate", patches)
			}
			var body struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal([]byte(patches[0]), &body); err != nil {
				t.Fatal(err)
			}
			if got := body.Metadata.Labels[virtv1.NodeNameLabel]; got != tc.wantLabel {
				t.Errorf("label %s = %q in the gate's patch, want %q", virtv1.NodeNameLabel, got, tc.wantLabel)
			}
		})
	}
}

// TestSyncSendsAPodItsNodeLabelOnceWhileTheCacheLags: a running VMI's
// node label reaches its pod in one patch; syncs before the pod cache
// shows that patch send no second one, and a pod changed since (here
// someone removed the label again) is patched anew.
func TestSyncSendsAPodItsNodeLabelOnceWhileTheCacheLags(t *testing.T) {
	vmi := newVMI("a")
	vmi.Status.Phase = virtv1.Running
	vmi.Status.NodeName = "node-1"
	vmi.Labels = map[string]string{virtv1.NodeNameLabel: "node-1"}
	pod := runningLauncherPod(t, vmi)
	delete(pod.Labels, virtv1.NodeNameLabel) // rendered from the VMI's
	pod.Spec.NodeName = "node-1"
	pod.Status.Conditions = []corev1.PodCondition{{Type: virtv1.VirtualMachineUnpaused, Status: corev1.ConditionTrue}}
	f := newFixture(t, vmi, pod)
	// The server answers the patch; the tracker, and so the cache, does
	// not move: the informer lags.
	f.Kube.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		answered := pod.DeepCopy()
		answered.ResourceVersion = "2"
		answered.Labels[virtv1.NodeNameLabel] = "node-1"
		return true, answered, nil
	})
	labelPatches := func() int {
		n := 0
		for _, a := range f.Kube.Actions() {
			if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "pods" &&
				strings.Contains(string(p.GetPatch()), virtv1.NodeNameLabel) {
				n++
			}
		}
		return n
	}
	for range 3 {
		if err := f.c.sync(context.Background(), f.item(vmi)); err != nil {
			t.Fatal(err)
		}
	}
	if n := labelPatches(); n != 1 {
		t.Fatalf("%d label patches while the cache lagged, want 1: %q", n, f.KubeWrites())
	}
	// The pod moves on without the label: the cache shows a version our
	// patch did not start from, and the next sync patches it again.
	changed := pod.DeepCopy()
	changed.ResourceVersion = "3"
	if err := f.Kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), changed, changed.Namespace); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		cached, _ := kinds.LauncherPods.In(f.Range(f.item(vmi).Range)).ByIndex(kinds.ByVMIUID, string(vmi.UID))
		return len(cached) == 1 && cached[0].ResourceVersion == "3", nil
	})
	if err != nil {
		t.Fatal("the cache never showed the changed pod")
	}
	if err := f.c.sync(ctx, f.item(vmi)); err != nil {
		t.Fatal(err)
	}
	if n := labelPatches(); n != 2 {
		t.Errorf("%d label patches after the pod changed, want 2", n)
	}
}

// A VMI migrated away and back within one second has two pods on its node
// created in the same second: the first, completed, and the last target,
// running. The running one runs the VMI, in either order of the cache;
// otherwise the newer pod does.
func TestTheActivePodOfTwoOnTheNodeIsTheOneNotFinished(t *testing.T) {
	second := metav1.NewTime(time.Now().Truncate(time.Second))
	pod := func(name string, phase corev1.PodPhase, created metav1.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created},
			Spec: corev1.PodSpec{NodeName: "node-a"}, Status: corev1.PodStatus{Phase: phase}}
	}
	vmi := &virtv1.VirtualMachineInstance{Status: virtv1.VirtualMachineInstanceStatus{NodeName: "node-a"}}
	first, back := pod("first", corev1.PodSucceeded, second), pod("back", corev1.PodRunning, second)
	for _, pods := range [][]*corev1.Pod{{first, back}, {back, first}} {
		if got := activePod(vmi, pods); got != back {
			t.Errorf("active pod of %s and %s: %s, want the running one", pods[0].Name, pods[1].Name, got.Name)
		}
	}
	older, newer := pod("older", corev1.PodFailed, second), pod("newer", corev1.PodFailed, metav1.NewTime(second.Add(time.Second)))
	if got := activePod(vmi, []*corev1.Pod{newer, older}); got != newer {
		t.Errorf("active pod of two finished: %s, want the newer", got.Name)
	}
}
