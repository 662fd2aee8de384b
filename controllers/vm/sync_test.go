package vm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
	"github.com/virtshard/virtshard/shard"
)

// fixture is the VM controller on the test kit.
type fixture struct {
	*shardedtest.Fixture
	c *Controller
}

func newFixture(t *testing.T, objects ...runtime.Object) *fixture {
	t.Helper()
	return newFixtureOn(t, shardedtest.Cluster{Objects: objects})
}

func newFixtureOn(t *testing.T, cluster shardedtest.Cluster) *fixture {
	t.Helper()
	f, c := shardedtest.StartController(t, "vm", func(env *sharded.Env, rt *sharded.Runtime) (*Controller, *sharded.Controller, error) {
		c := newController(env, rt, DefaultOptions())
		return c, c.declare(), nil
	}, cluster)
	return &fixture{f, c}
}

func (f *fixture) sync(t *testing.T, vm *virtv1.VirtualMachine) {
	t.Helper()
	if _, err := f.c.sync(context.Background(), item{Range: f.Ranges.Of(vm), Key: vm.Namespace + "/" + vm.Name}); err != nil {
		t.Fatal(err)
	}
}

func newVM(strategy virtv1.VirtualMachineRunStrategy) *virtv1.VirtualMachine {
	return &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vm", UID: "vm-uid", ResourceVersion: "5",
			Finalizers: []string{virtv1.VirtualMachineControllerFinalizer}, Annotations: map[string]string{
				virtv1.ControllerAPILatestVersionObservedAnnotation: virtv1.ApiLatestVersion, virtv1.ControllerAPIStorageVersionObservedAnnotation: virtv1.ApiStorageVersion}},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(strategy), Template: &virtv1.VirtualMachineInstanceTemplateSpec{
			// The firmware UUID virt-api gives a VM.
			Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{Resources: virtv1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
			}, Firmware: &virtv1.Firmware{UUID: "firmware-uuid"}}},
		}},
	}
}

// vmiOf is the VMI the VM controller created for vm, running.
func vmiOf(t *testing.T, vm *virtv1.VirtualMachine, rng int) *virtv1.VirtualMachineInstance {
	vmi, err := newVMI(vm, rng, nil)
	if err != nil {
		t.Fatal(err)
	}
	vmi.UID, vmi.ResourceVersion = "vmi-uid", "3"
	vmi.Status.Phase = virtv1.Running
	return vmi
}

func TestSyncStartsAVMThatShouldRun(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	f := newFixture(t, vm)
	f.sync(t, vm)
	got := kvfake.Writes(f.KubeVirt.Actions())
	if !slices.Equal(got, []string{"create virtualmachineinstances", "update virtualmachines/status"}) {
		t.Fatalf("writes %q, want the VMI created and the VM's status updated", got)
	}
	vmi := f.KubeVirt.Actions()[0].(k8stesting.CreateAction).GetObject().(*virtv1.VirtualMachineInstance)
	if !metav1.IsControlledBy(vmi, vm) || vmi.Labels[shard.LabelRange] == "" {
		t.Errorf("VMI %+v: want it controlled by the VM and labelled with its range", vmi.ObjectMeta)
	}
	status := f.KubeVirt.Actions()[1].(k8stesting.UpdateAction).GetObject().(*virtv1.VirtualMachine)
	if status.ResourceVersion != vm.ResourceVersion {
		t.Errorf("status update at resourceVersion %q, want the cached %q as precondition", status.ResourceVersion, vm.ResourceVersion)
	}
}

func TestSyncStopsAHaltedVMWithTheVMIsUID(t *testing.T) {
	vm := newVM(virtv1.RunStrategyHalted)
	f := newFixture(t, vm, vmiOf(t, vm, shardedtest.Ranges(t).Of(vm)))
	f.sync(t, vm)
	got := kvfake.Writes(f.KubeVirt.Actions())
	if len(got) == 0 || got[0] != "delete virtualmachineinstances" {
		t.Fatalf("writes %q, want the VMI deleted first", got)
	}
	del := f.KubeVirt.Actions()[0].(k8stesting.DeleteAction).GetDeleteOptions()
	if del.Preconditions == nil || del.Preconditions.UID == nil || *del.Preconditions.UID != "vmi-uid" {
		t.Errorf("delete preconditions %+v, want the VMI's UID", del.Preconditions)
	}
}

// RerunOnFailure deletes a VMI that ended, as KubeVirt's does; only a
// failed one gets a Start request to run again.
func TestSyncOfRerunOnFailureDeletesAnEndedVMIAndRestartsOnlyAFailedOne(t *testing.T) {
	for _, tc := range []struct {
		phase   virtv1.VirtualMachineInstancePhase
		restart bool
	}{{virtv1.Succeeded, false}, {virtv1.Failed, true}} {
		t.Run(string(tc.phase), func(t *testing.T) {
			vm := newVM(virtv1.RunStrategyRerunOnFailure)
			vm.Status.RunStrategy = virtv1.RunStrategyRerunOnFailure
			vmi := vmiOf(t, vm, shardedtest.Ranges(t).Of(vm))
			vmi.Status.Phase = tc.phase
			f := newFixture(t, vm, vmi)
			f.sync(t, vm)
			got := kvfake.Writes(f.KubeVirt.Actions())
			if len(got) == 0 || got[0] != "delete virtualmachineinstances" {
				t.Fatalf("writes %q, want the %s VMI deleted first", got, tc.phase)
			}
			updated, err := f.KubeVirt.VirtualMachines(vm.Namespace).Get(context.Background(), vm.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			reqs := updated.Status.StateChangeRequests
			restart := len(reqs) > 0 && reqs[0].Action == virtv1.StartRequest
			if restart != tc.restart {
				t.Errorf("state change requests %+v after a %s VMI, want a Start: %v", reqs, tc.phase, tc.restart)
			}
		})
	}
}

func TestSyncOfARangeNoLongerHeldSendsNothing(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	f := newFixture(t, vm)
	f.Fence.Cut()
	_, err := f.c.sync(context.Background(), item{Range: f.Ranges.Of(vm), Key: vm.Namespace + "/" + vm.Name})
	if err != nil && !errors.Is(err, sharded.ErrNotHeld) {
		t.Fatalf("sync returned %v, want nothing or ErrNotHeld (the worker drops the item)", err)
	}
	if got := kvfake.Writes(f.KubeVirt.Actions()); len(got) != 0 {
		t.Errorf("writes %q for a range not held", got)
	}
}

func TestSyncReportsAnInvalidRunStrategyOnTheVM(t *testing.T) {
	vm := newVM("Sometimes")
	f := newFixture(t, vm)
	f.sync(t, vm)
	got := kvfake.Writes(f.KubeVirt.Actions())
	if !slices.Equal(got, []string{"update virtualmachines/status"}) {
		t.Fatalf("writes %q, want only the status with the failure", got)
	}
	status := f.KubeVirt.Actions()[0].(k8stesting.UpdateAction).GetObject().(*virtv1.VirtualMachine).Status
	found := false
	for _, c := range status.Conditions {
		found = found || (c.Type == virtv1.VirtualMachineFailure && c.Reason == "FailedCreate" && c.Message == "unknown runstrategy: Sometimes")
	}
	if !found {
		t.Errorf("conditions %+v: want KubeVirt's Failure FailedCreate, unknown runstrategy", status.Conditions)
	}
}

// syncAfter syncs vm and returns when the controller asks to look again.
func (f *fixture) syncAfter(t *testing.T, vm *virtv1.VirtualMachine) time.Duration {
	t.Helper()
	after, err := f.c.sync(context.Background(), item{Range: f.Ranges.Of(vm), Key: vm.Namespace + "/" + vm.Name})
	if err != nil {
		t.Fatal(err)
	}
	return after
}

func TestSyncWaitsOutAStartBackoff(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	retry := metav1.NewTime(time.Now().Add(time.Minute))
	vm.Status.StartFailure = &virtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 2, RetryAfterTimestamp: &retry}
	f := newFixture(t, vm)
	after := f.syncAfter(t, vm)
	if got := kvfake.Writes(f.KubeVirt.Actions()); slices.Contains(got, "create virtualmachineinstances") {
		t.Errorf("writes %q during the start backoff, want no VMI created", got)
	}
	if after <= 0 || after > time.Minute {
		t.Errorf("look again after %s, want the backoff's remainder (at most 1m)", after)
	}
}

func TestSyncStartsAVMWhoseBackoffIsOver(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	retry := metav1.NewTime(time.Now().Add(-time.Second))
	vm.Status.StartFailure = &virtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 2, RetryAfterTimestamp: &retry}
	f := newFixture(t, vm)
	if after := f.syncAfter(t, vm); after != 0 {
		t.Errorf("look again after %s, want no wait", after)
	}
	if got := kvfake.Writes(f.KubeVirt.Actions()); !slices.Contains(got, "create virtualmachineinstances") {
		t.Errorf("writes %q, want the VMI created once the backoff is over", got)
	}
}

func TestSyncOfAManualVMFollowsItsStateChangeRequests(t *testing.T) {
	start := newVM(virtv1.RunStrategyManual)
	start.Status.StateChangeRequests = []virtv1.VirtualMachineStateChangeRequest{{Action: virtv1.StartRequest}}
	f := newFixture(t, start)
	f.sync(t, start)
	if got := kvfake.Writes(f.KubeVirt.Actions()); !slices.Contains(got, "create virtualmachineinstances") {
		t.Errorf("start request: writes %q, want the VMI created", got)
	}

	for _, tc := range []struct {
		name   string
		uid    types.UID
		delete bool
	}{
		{"stop of the running VMI", "vmi-uid", true},
		{"stop of an earlier VMI", "earlier-uid", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := newVM(virtv1.RunStrategyManual)
			vm.Status.StateChangeRequests = []virtv1.VirtualMachineStateChangeRequest{{Action: virtv1.StopRequest, UID: ptr.To(tc.uid)}}
			f := newFixture(t, vm, vmiOf(t, vm, shardedtest.Ranges(t).Of(vm)))
			f.sync(t, vm)
			if got := slices.Contains(kvfake.Writes(f.KubeVirt.Actions()), "delete virtualmachineinstances"); got != tc.delete {
				t.Errorf("writes %q: VMI deleted %t, want %t", kvfake.Writes(f.KubeVirt.Actions()), got, tc.delete)
			}
		})
	}
}

// orphanOf is a VMI of vm's name that nobody controls, on range rng (its
// own key's): a user created it, or deleted its VM leaving it behind.
func orphanOf(t *testing.T, vm *virtv1.VirtualMachine, rng int) *virtv1.VirtualMachineInstance {
	t.Helper()
	ranges := shardedtest.Ranges(t)
	vmi := vmiOf(t, vm, 0)
	vmi.OwnerReferences, vmi.Labels = nil, map[string]string{"app": "mine"}
	for i := 0; ranges.Of(vmi) != rng; i++ {
		vmi.UID = types.UID(fmt.Sprintf("orphan-uid-%d", i))
	}
	return vmi
}

func TestSyncAdoptsAnOrphanVMIOfItsName(t *testing.T) {
	ranges := shardedtest.Ranges(t)
	vm := newVM(virtv1.RunStrategyAlways)
	for _, tc := range []struct {
		name   string
		rng    int
		writes []string
	}{
		// Cached with the VM: claimed as the sync finds it.
		{"on the VM's range", ranges.Of(vm), []string{"patch virtualmachineinstances", "update virtualmachines/status"}},
		// Out of the VM's caches: found when the VM's create meets it.
		{"on another range", (ranges.Of(vm) + 1) % ranges.Count(),
			[]string{"create virtualmachineinstances", "patch virtualmachineinstances", "update virtualmachines/status"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orphan := orphanOf(t, vm, tc.rng)
			f := newFixture(t, vm, orphan)
			f.sync(t, vm)
			if got := kvfake.Writes(f.KubeVirt.Actions()); !slices.Equal(got, tc.writes) {
				t.Fatalf("writes %q, want %q", got, tc.writes)
			}
			adopted, err := f.KubeVirt.VirtualMachineInstances(vm.Namespace).Get(context.Background(), vm.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if adopted.UID != orphan.UID || !metav1.IsControlledBy(adopted, vm) {
				t.Errorf("VMI %s controlled by %+v, want the orphan %s adopted by the VM", adopted.UID, metav1.GetControllerOf(adopted), orphan.UID)
			}
			if got, ok := ranges.Labelled(adopted); !ok || got != ranges.Of(vm) || adopted.Labels["app"] != "mine" {
				t.Errorf("VMI labels %v, want the VM's range %d beside its own", adopted.Labels, ranges.Of(vm))
			}
			for _, e := range f.Events() {
				if strings.Contains(e, "FailedCreate") {
					t.Errorf("event %q for an orphan the VM adopts", e)
				}
			}
		})
	}
}

func TestSyncOfADeletedVMLeavesAnOrphanAlone(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	vm.DeletionTimestamp = ptr.To(metav1.Now())
	f := newFixture(t, vm, orphanOf(t, vm, shardedtest.Ranges(t).Of(vm)))
	f.sync(t, vm)
	got := kvfake.Writes(f.KubeVirt.Actions())
	if slices.Contains(got, "patch virtualmachineinstances") || slices.Contains(got, "delete virtualmachineinstances") {
		t.Fatalf("writes %q, want the orphan neither adopted nor deleted", got)
	}
	if !slices.Contains(got, "patch virtualmachines") {
		t.Errorf("writes %q, want the VM's finalizer removed: it has no VMI", got)
	}
}

func TestSyncRefusesAVMINotControlledByTheVM(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	foreign := vmiOf(t, vm, shardedtest.Ranges(t).Of(vm))
	foreign.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(&metav1.ObjectMeta{Name: "vm", UID: "another-vm"}, virtv1.VirtualMachineGroupVersionKind)}
	f := newFixture(t, vm, foreign)
	recorder := f.Recorder
	after := f.syncAfter(t, vm)
	got := kvfake.Writes(f.KubeVirt.Actions())
	if !slices.Equal(got, []string{"update virtualmachines/status"}) {
		t.Fatalf("writes %q, want only the status with the failure (the foreign VMI left alone)", got)
	}
	status := f.KubeVirt.Actions()[0].(k8stesting.UpdateAction).GetObject().(*virtv1.VirtualMachine)
	if !hasFailure(status, "FailedCreate") {
		t.Errorf("conditions %+v, want Failure FailedCreate", status.Status.Conditions)
	}
	if after != foreignRetry {
		t.Errorf("look again after %s, want %s (the foreign VMI's events may never reach this VM)", after, foreignRetry)
	}
	select {
	case e := <-recorder.Events:
		if !strings.Contains(e, "FailedCreate") {
			t.Errorf("event %q, want FailedCreate", e)
		}
	default:
		t.Error("no event for the refused VMI")
	}
}

func TestSyncOfADeletedVMWithoutVMIDropsItsFinalizer(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	vm.DeletionTimestamp = ptr.To(metav1.Now())
	f := newFixture(t, vm)
	f.sync(t, vm)
	got := kvfake.Writes(f.KubeVirt.Actions())
	if len(got) == 0 || got[0] != "patch virtualmachines" {
		t.Fatalf("writes %q, want the finalizer patch first and no VMI created", got)
	}
	if slices.Contains(got, "create virtualmachineinstances") {
		t.Errorf("writes %q: a VMI created for a deleted VM", got)
	}
	p := string(f.KubeVirt.Actions()[0].(k8stesting.PatchAction).GetPatch())
	if strings.Contains(p, virtv1.VirtualMachineControllerFinalizer) || !strings.Contains(p, `"resourceVersion":"5"`) {
		t.Errorf("finalizer patch %s, want the finalizer gone, with the VM's resourceVersion as precondition", p)
	}
}

func TestSyncReleasesAFinalVMIOnceTheVMSawIt(t *testing.T) {
	vm := newVM(virtv1.RunStrategyManual)
	vmi := vmiOf(t, vm, shardedtest.Ranges(t).Of(vm))
	vmi.Status.Phase = virtv1.Succeeded
	f := newFixture(t, vm, vmi)
	f.sync(t, vm)
	got := kvfake.Writes(f.KubeVirt.Actions())
	if !slices.Equal(got, []string{"update virtualmachines/status", "patch virtualmachineinstances"}) {
		t.Fatalf("writes %q, want the VM's status first, then the VMI's finalizer released", got)
	}
	if p := string(f.KubeVirt.Actions()[1].(k8stesting.PatchAction).GetPatch()); strings.Contains(p, virtv1.VirtualMachineControllerFinalizer) {
		t.Errorf("release patch %s still holds the VM controller's finalizer", p)
	}
}
