package vm

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/shard"
)

func TestRunStrategyFollowsKubeVirt(t *testing.T) {
	strategy := func(s virtv1.VirtualMachineRunStrategy) *virtv1.VirtualMachineRunStrategy { return &s }
	cases := []struct {
		name    string
		spec    virtv1.VirtualMachineSpec
		want    virtv1.VirtualMachineRunStrategy
		invalid bool
	}{
		{"running true means Always", virtv1.VirtualMachineSpec{Running: ptr.To(true)}, virtv1.RunStrategyAlways, false},
		{"running false means Halted", virtv1.VirtualMachineSpec{Running: ptr.To(false)}, virtv1.RunStrategyHalted, false},
		{"neither means Halted", virtv1.VirtualMachineSpec{}, virtv1.RunStrategyHalted, false},
		{"an explicit strategy wins", virtv1.VirtualMachineSpec{RunStrategy: strategy(virtv1.RunStrategyRerunOnFailure)}, virtv1.RunStrategyRerunOnFailure, false},
		{"both fields are refused", virtv1.VirtualMachineSpec{Running: ptr.To(true), RunStrategy: strategy(virtv1.RunStrategyOnce)}, "", true},
		{"an unknown strategy is refused", virtv1.VirtualMachineSpec{RunStrategy: strategy("Sometimes")}, "", true},
		{"WaitAsReceiver is one", virtv1.VirtualMachineSpec{RunStrategy: strategy(virtv1.RunStrategyWaitAsReceiver)}, virtv1.RunStrategyWaitAsReceiver, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := runStrategy(&virtv1.VirtualMachine{Spec: tc.spec})
			if (err != nil) != tc.invalid || got != tc.want {
				t.Errorf("runStrategy = %q, %v; want %q, invalid %v", got, err, tc.want, tc.invalid)
			}
		})
	}
}

func TestStartBackoffGrowsWithTheSquareOfFailuresUpToTheCap(t *testing.T) {
	limit := DefaultMaxStartBackoff
	none := func(int64) int64 { return 0 }
	most := func(n int64) int64 { return n - 1 }
	cases := []struct {
		failures int
		low      time.Duration
		high     time.Duration
	}{
		{1, 10 * time.Second, 15 * time.Second},
		{2, 40 * time.Second, 60 * time.Second},
		{3, 90 * time.Second, 135 * time.Second},
		{4, 160 * time.Second, 240 * time.Second},
		{5, 250 * time.Second, 300 * time.Second},
		{6, 300 * time.Second, 300 * time.Second},
		{100, 300 * time.Second, 300 * time.Second},
	}
	for _, tc := range cases {
		if got := startBackoff(tc.failures, limit, none); got != tc.low {
			t.Errorf("%d failures without jitter: %s, want %s", tc.failures, got, tc.low)
		}
		if got := startBackoff(tc.failures, limit, most); got != tc.high {
			t.Errorf("%d failures with the most jitter: %s, want %s", tc.failures, got, tc.high)
		}
	}
}

func vmiIn(phase virtv1.VirtualMachineInstancePhase, conds ...virtv1.VirtualMachineInstanceCondition) *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vm", UID: "vmi-uid"},
		Status:     virtv1.VirtualMachineInstanceStatus{Phase: phase, Conditions: conds},
	}
}

func TestPrintableStatusInKubeVirtsOrder(t *testing.T) {
	now := metav1.Now()
	deleting := func(v *virtv1.VirtualMachineInstance) *virtv1.VirtualMachineInstance {
		v.DeletionTimestamp = &now
		return v
	}
	migratingVMI := vmiIn(virtv1.Running)
	migratingVMI.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{StartTimestamp: &now}
	failed := &virtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 2}
	cases := []struct {
		name      string
		o         observed
		failure   *virtv1.VirtualMachineStartFailure
		want      virtv1.VirtualMachinePrintableStatus
		vmDeleted bool
	}{
		{name: "a VM being deleted is Terminating", o: observed{vmi: vmiIn(virtv1.Running)}, vmDeleted: true, want: virtv1.VirtualMachineStatusTerminating},
		{name: "a VMI being deleted is Stopping", o: observed{vmi: deleting(vmiIn(virtv1.Running))}, want: virtv1.VirtualMachineStatusStopping},
		{name: "a VMI whose deletion was sent is Stopping", o: observed{vmi: vmiIn(virtv1.Running), deleting: true}, want: virtv1.VirtualMachineStatusStopping},
		{name: "a migration under way is Migrating", o: observed{vmi: migratingVMI}, want: virtv1.VirtualMachineStatusMigrating},
		{name: "a paused VMI is Paused", o: observed{vmi: vmiIn(virtv1.Running, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue})}, want: virtv1.VirtualMachineStatusPaused},
		{name: "a running VMI is Running", o: observed{vmi: vmiIn(virtv1.Running)}, want: virtv1.VirtualMachineStatusRunning},
		{name: "a missing claim is ErrorPvcNotFound", o: observed{vmi: vmiIn(virtv1.Pending, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse, Reason: "FailedPvcNotFound"})}, want: virtv1.VirtualMachineStatusPvcNotFound},
		{name: "an unschedulable pod is ErrorUnschedulable", o: observed{vmi: vmiIn(virtv1.Scheduling, virtv1.VirtualMachineInstanceCondition{Type: "PodScheduled", Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable})}, want: virtv1.VirtualMachineStatusUnschedulable},
		{name: "a scheduling VMI is Starting", o: observed{vmi: vmiIn(virtv1.Scheduling)}, want: virtv1.VirtualMachineStatusStarting},
		{name: "a create in flight is Starting", o: observed{creating: true}, want: virtv1.VirtualMachineStatusStarting},
		{name: "no VMI after start failures is CrashLoopBackOff", o: observed{strategy: virtv1.RunStrategyAlways}, failure: failed, want: virtv1.VirtualMachineStatusCrashLoopBackOff},
		{name: "a failed VMI after start failures is CrashLoopBackOff", o: observed{vmi: vmiIn(virtv1.Failed), strategy: virtv1.RunStrategyRerunOnFailure}, failure: failed, want: virtv1.VirtualMachineStatusCrashLoopBackOff},
		{name: "start failures do not count for Manual", o: observed{strategy: virtv1.RunStrategyManual}, failure: failed, want: virtv1.VirtualMachineStatusStopped},
		{name: "no VMI is Stopped", o: observed{strategy: virtv1.RunStrategyHalted}, want: virtv1.VirtualMachineStatusStopped},
		{name: "a succeeded VMI is Stopped", o: observed{vmi: vmiIn(virtv1.Succeeded), strategy: virtv1.RunStrategyOnce}, want: virtv1.VirtualMachineStatusStopped},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.vm = &virtv1.VirtualMachine{}
			if tc.vmDeleted {
				tc.o.vm.DeletionTimestamp = &now
			}
			if got := printableStatus(tc.o, tc.failure); got != tc.want {
				t.Errorf("printableStatus = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestStateChangeRequestsAreConsumedWhenDone(t *testing.T) {
	uid := types.UID("vmi-uid")
	other := types.UID("old-uid")
	start := virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest}
	stopThis := virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: &uid}
	stopOld := virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: &other}
	now := metav1.Now()
	failedDeleting := vmiIn(virtv1.Failed)
	failedDeleting.DeletionTimestamp = &now
	cases := []struct {
		name     string
		reqs     []virtv1.VirtualMachineStateChangeRequest
		vmi      *virtv1.VirtualMachineInstance
		strategy virtv1.VirtualMachineRunStrategy
		want     []virtv1.VirtualMachineStateChangeRequest
	}{
		{"a Start is kept until the VMI runs", []virtv1.VirtualMachineStateChangeRequest{start}, nil, virtv1.RunStrategyManual, []virtv1.VirtualMachineStateChangeRequest{start}},
		{"a Start is dropped once the VMI is up", []virtv1.VirtualMachineStateChangeRequest{start}, vmiIn(virtv1.Scheduling), virtv1.RunStrategyManual, nil},
		{"a Stop is kept while its VMI lives", []virtv1.VirtualMachineStateChangeRequest{stopThis, start}, vmiIn(virtv1.Running), virtv1.RunStrategyManual, []virtv1.VirtualMachineStateChangeRequest{stopThis, start}},
		{"a Stop is dropped once the VMI is gone, then the Start waits", []virtv1.VirtualMachineStateChangeRequest{stopThis, start}, nil, virtv1.RunStrategyManual, []virtv1.VirtualMachineStateChangeRequest{start}},
		{"a Stop of another VMI is stale", []virtv1.VirtualMachineStateChangeRequest{stopOld}, vmiIn(virtv1.Running), virtv1.RunStrategyManual, nil},
		{"a Stop that names no VMI is dropped unheeded", []virtv1.VirtualMachineStateChangeRequest{{Action: virtv1.StopRequest}}, vmiIn(virtv1.Running), virtv1.RunStrategyManual, nil},
		{"RerunOnFailure asks to start again a failed VMI it deletes", nil, failedDeleting, virtv1.RunStrategyRerunOnFailure, []virtv1.VirtualMachineStateChangeRequest{start}},
		{"but not twice", []virtv1.VirtualMachineStateChangeRequest{start}, failedDeleting, virtv1.RunStrategyRerunOnFailure, []virtv1.VirtualMachineStateChangeRequest{start}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vm := &virtv1.VirtualMachine{Status: virtv1.VirtualMachineStatus{StateChangeRequests: tc.reqs}}
			got := stateChangeRequests(observed{vm: vm, vmi: tc.vmi, strategy: tc.strategy})
			if len(got) != len(tc.want) {
				t.Fatalf("requests = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i].Action != tc.want[i].Action || (got[i].UID == nil) != (tc.want[i].UID == nil) {
					t.Errorf("request %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestStartFailureCountsVMIsThatNeverRan(t *testing.T) {
	c := &Controller{opts: DefaultOptions()}
	now := time.Now()
	failedEarly := vmiIn(virtv1.Failed)
	ranThenFailed := vmiIn(virtv1.Failed)
	ranThenFailed.Status.PhaseTransitionTimestamps = []virtv1.VirtualMachineInstancePhaseTransitionTimestamp{{Phase: virtv1.Running}}
	counted := &virtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 1, LastFailedVMIUID: "vmi-uid"}
	older := &virtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 1, LastFailedVMIUID: "older"}

	if got := c.startFailure(observed{vmi: failedEarly, strategy: virtv1.RunStrategyAlways}, nil, now); got == nil ||
		got.ConsecutiveFailCount != 1 || got.LastFailedVMIUID != "vmi-uid" || got.RetryAfterTimestamp.Sub(now) < 10*time.Second {
		t.Errorf("first early failure: %+v, want 1 failure of vmi-uid retried after at least 10 s", got)
	}
	if got := c.startFailure(observed{vmi: failedEarly, strategy: virtv1.RunStrategyAlways}, counted, now); got != counted {
		t.Errorf("the same VMI counted again: %+v", got)
	}
	if got := c.startFailure(observed{vmi: failedEarly, strategy: virtv1.RunStrategyAlways}, older, now); got == nil || got.ConsecutiveFailCount != 2 {
		t.Errorf("a second VMI failing early: %+v, want 2 failures", got)
	}
	if got := c.startFailure(observed{vmi: ranThenFailed, strategy: virtv1.RunStrategyAlways}, older, now); got != nil {
		t.Errorf("a VMI that ran resets the count, got %+v", got)
	}
	if got := c.startFailure(observed{vmi: failedEarly, strategy: virtv1.RunStrategyManual}, older, now); got != nil {
		t.Errorf("Manual has no backoff, got %+v", got)
	}
	if got := c.startFailure(observed{strategy: virtv1.RunStrategyAlways}, older, now); got != older {
		t.Errorf("no VMI keeps the count, got %+v", got)
	}
}

func TestNewVMIIsTheTemplateStampedWithTheVMsRange(t *testing.T) {
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "vm-uid", Generation: 3},
		Spec: virtv1.VirtualMachineSpec{Template: &virtv1.VirtualMachineInstanceTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Name: "ignored", Labels: map[string]string{"app": "db", shard.LabelRange: "9"}, Annotations: map[string]string{"a": "b"}},
			Spec:       virtv1.VirtualMachineInstanceSpec{Hostname: "db-host"},
		}},
	}
	vmi, err := newVMI(vm, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.GetControllerOf(vmi)
	switch {
	case vmi.Name != "db" || vmi.Namespace != "ns":
		t.Errorf("name %s/%s, want ns/db", vmi.Namespace, vmi.Name)
	case vmi.Labels["app"] != "db" || vmi.Labels[shard.LabelRange] != "5":
		t.Errorf("labels %v, want the template's with range 5", vmi.Labels)
	case vmi.Annotations["a"] != "b" || vmi.Annotations[virtv1.VirtualMachineGenerationAnnotation] != "3":
		t.Errorf("annotations %v, want the template's and generation 3", vmi.Annotations)
	case ref == nil || ref.UID != "vm-uid" || ref.Kind != "VirtualMachine" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion:
		t.Errorf("controller reference %+v, want the VM, blocking owner deletion", ref)
	case len(vmi.Finalizers) != 1 || vmi.Finalizers[0] != virtv1.VirtualMachineControllerFinalizer:
		t.Errorf("finalizers %v, want the VM controller's", vmi.Finalizers)
	case vmi.Spec.Hostname != "db-host":
		t.Errorf("spec not copied: %+v", vmi.Spec)
	}
	if vm.Spec.Template.ObjectMeta.Labels[shard.LabelRange] != "9" {
		t.Error("the VM's template was modified")
	}
	if _, fleet := vmi.Labels[shard.LabelFleetRange]; fleet {
		t.Errorf("labels %v: a VM of no pool gave its VMI a fleet's range", vmi.Labels)
	}
	shard.StampFleetRange(vm, 7)
	if vmi, err := newVMI(vm, 5, nil); err != nil || vmi.Labels[shard.LabelFleetRange] != "7" || vmi.Labels[shard.LabelRange] != "5" {
		t.Errorf("a pool's VM gave labels %v (%v), want its pool's range 7 as the fleet's beside range 5", vmi.Labels, err)
	}
	if _, err := newVMI(&virtv1.VirtualMachine{}, 0, nil); err == nil {
		t.Error("a VM without a template gave a VMI")
	}
}

// The VM's conditions follow KubeVirt's syncConditions: kept as they were
// while their status and reason hold, those of the last VMI kept once it
// is gone, dropped when a VMI no longer reports them.
func TestConditionsAreUpdatedAsKubeVirtUpdatesThem(t *testing.T) {
	earlier, now := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	vmCond := func(typ virtv1.VirtualMachineConditionType, status corev1.ConditionStatus, reason string, at metav1.Time) virtv1.VirtualMachineCondition {
		return virtv1.VirtualMachineCondition{Type: typ, Status: status, Reason: reason, LastTransitionTime: at}
	}
	vmiCond := func(typ virtv1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus, reason string, at metav1.Time) virtv1.VirtualMachineInstanceCondition {
		return virtv1.VirtualMachineInstanceCondition{Type: typ, Status: status, Reason: reason, LastTransitionTime: at}
	}
	running := &virtv1.VirtualMachine{Status: virtv1.VirtualMachineStatus{Conditions: []virtv1.VirtualMachineCondition{
		vmCond(virtv1.VirtualMachineReady, corev1.ConditionTrue, "", earlier),
		vmCond("LiveMigratable", corev1.ConditionTrue, "", earlier),
	}}}
	for _, tc := range []struct {
		name string
		vm   *virtv1.VirtualMachine
		vmi  *virtv1.VirtualMachineInstance
		want []virtv1.VirtualMachineCondition
	}{
		{"a stopped VM keeps its last VMI's conditions and probes Ready now", running, nil, []virtv1.VirtualMachineCondition{
			{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionFalse, Reason: ReasonVMINotExists, Message: "VMI does not exist",
				LastProbeTime: now, LastTransitionTime: now},
			vmCond("LiveMigratable", corev1.ConditionTrue, "", earlier),
		}},
		{"an unchanged condition keeps its time, a gone one is dropped, a new one appended", running,
			&virtv1.VirtualMachineInstance{Status: virtv1.VirtualMachineInstanceStatus{Conditions: []virtv1.VirtualMachineInstanceCondition{
				vmiCond(virtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", now),
				vmiCond(virtv1.VirtualMachineInstancePaused, corev1.ConditionTrue, "PausedByUser", now),
			}}},
			[]virtv1.VirtualMachineCondition{
				vmCond(virtv1.VirtualMachineReady, corev1.ConditionTrue, "", earlier),
				vmCond(virtv1.VirtualMachinePaused, corev1.ConditionTrue, "PausedByUser", now),
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := conditions(tc.vm, tc.vmi, nil, now); !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("conditions\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}
