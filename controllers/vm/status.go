package vm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// Reasons of the VM's own conditions.
const (
	ReasonVMINotExists        = "VMINotExists"
	ReasonVMIConditionMissing = "VMIConditionMissing"
	// ReasonInvalidRunStrategy: spec.running and spec.runStrategy are both set.
	ReasonInvalidRunStrategy = "InvalidRunStrategy"
)

// writeStatus writes the VM's status if it changed, with the cached
// resourceVersion as a precondition: a state change request appended
// meanwhile makes it conflict and retry instead of being lost.
func (c *Controller) writeStatus(ctx context.Context, it item, o observed, syncErr *syncError) error {
	vm := o.vm
	status := c.status(o, syncErr)
	if equality.Semantic.DeepEqual(status, vm.Status) {
		return nil
	}
	update := vm.DeepCopy()
	update.Status = status
	var updated *virtv1.VirtualMachine
	err := c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		updated, err = c.env.KubeVirt.VirtualMachines(vm.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("update status of VM %s: %w", it.Key, err)
	}
	c.wrote(it.Range, updated)
	return nil
}

// status is the VM's status as the sync observed it.
func (c *Controller) status(o observed, syncErr *syncError) virtv1.VirtualMachineStatus {
	vm, vmi := o.vm, o.vmi
	now := metav1.NewTime(c.env.Clock.Now())
	status := *vm.Status.DeepCopy()
	status.Created = vmi != nil
	status.Ready = vmi != nil && conditionIs(vmi, virtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, "")
	if vmi != nil {
		status.RunStrategy = o.strategy
		// Both, or neither while the VMI's generation is unknown.
		if gen, ok := vmiGeneration(vmi); ok {
			status.ObservedGeneration, status.DesiredGeneration = gen, vm.Generation
		}
	}
	status.StartFailure = c.startFailure(o, status.StartFailure, now.Time)
	status.StateChangeRequests = stateChangeRequests(o)
	// The volume migration's state first, judged on the conditions the VM
	// had, as KubeVirt's syncVolumeMigration before its syncConditions.
	prior := vm
	state := status.VolumeUpdateState
	if o.volumeUpdate != nil {
		state = o.volumeUpdate
	}
	var recovered, stranded bool
	status.VolumeUpdateState, recovered, stranded = volumeUpdateState(vm, vmi, state)
	if recovered || stranded {
		prior = vm.DeepCopy()
		prior.Status.Conditions = volumeMigrationConditions(prior.Status.Conditions, recovered)
	}
	status.Conditions = conditions(prior, vmi, syncErr, now)
	switch o.restart {
	case restartRequired:
		// Kept as it is once True, time and message included (KubeVirt's
		// UpdateCondition). A hotplug's condition KubeVirt removes and
		// sets again on every sync, so its message follows the latest
		// reason; virtshard keeps its time while the reason stays, where
		// KubeVirt's moves with every sync.
		why := restartMessage
		if o.restartWhy != "" {
			why = o.restartWhy
		}
		cond := virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue,
			Message: why, LastTransitionTime: now}
		switch i := slices.IndexFunc(status.Conditions, isRestartRequired); {
		case i < 0:
			status.Conditions = append(status.Conditions, cond)
		case status.Conditions[i].Status != cond.Status || status.Conditions[i].Reason != "" || (o.restartWhy != "" && status.Conditions[i].Message != why):
			status.Conditions[i] = cond
		}
	case restartNotRequired:
		status.Conditions = slices.DeleteFunc(status.Conditions, isRestartRequired)
	}
	status.PrintableStatus = printableStatus(o, status.StartFailure)
	return status
}

func isRestartRequired(c virtv1.VirtualMachineCondition) bool {
	return c.Type == virtv1.VirtualMachineRestartRequired
}

// startFailure counts VMIs that ended without ever running, for the
// crash-loop backoff, and forgets them once a VMI ran.
func (c *Controller) startFailure(o observed, cur *virtv1.VirtualMachineStartFailure, now time.Time) *virtv1.VirtualMachineStartFailure {
	switch o.strategy {
	case virtv1.RunStrategyAlways, virtv1.RunStrategyRerunOnFailure, virtv1.RunStrategyOnce:
	default:
		return nil
	}
	vmi := o.vmi
	switch {
	case vmi == nil || (!vmi.IsFinal() && !ran(vmi)):
		return cur
	case ran(vmi):
		return nil
	case cur != nil && cur.LastFailedVMIUID == vmi.UID:
		return cur // counted already
	}
	n := 1
	if cur != nil {
		n = cur.ConsecutiveFailCount + 1
	}
	retry := metav1.NewTime(now.Add(startBackoff(n, c.opts.MaxStartBackoff, rand.Int64N)))
	return &virtv1.VirtualMachineStartFailure{ConsecutiveFailCount: n, LastFailedVMIUID: vmi.UID, RetryAfterTimestamp: &retry}
}

// startBackoff is KubeVirt's crash-loop backoff: a 30th of the cap times
// the square of the failures, plus up to half of that at random, capped.
// randN(n) returns a number in [0, n).
func startBackoff(failures int, limit time.Duration, randN func(int64) int64) time.Duration {
	interval := limit / 30
	delay := interval * time.Duration(failures*failures)
	if delay <= 0 || delay >= limit {
		return limit
	}
	delay += time.Duration(randN(int64(delay/2) + 1))
	return min(delay, limit)
}

// ran reports whether the VMI ever reached Running.
func ran(vmi *virtv1.VirtualMachineInstance) bool {
	if vmi.Status.Phase == virtv1.Running {
		return true
	}
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == virtv1.Running {
			return true
		}
	}
	return false
}

// stateChangeRequests drops the first request once it is done (a Start
// whose VMI is up, a Stop whose VMI is gone or was another) or cannot be
// (a Stop that names no VMI), and records a
// Start for a VMI that RerunOnFailure deletes because it failed.
func stateChangeRequests(o observed) []virtv1.VirtualMachineStateChangeRequest {
	reqs := o.vm.Status.StateChangeRequests
	vmi := o.vmi
	if len(reqs) > 0 {
		first := reqs[0]
		switch {
		case first.Action == virtv1.StopRequest && (vmi == nil || first.UID == nil || *first.UID != vmi.UID):
			reqs = reqs[1:]
		case first.Action == virtv1.StartRequest && vmi != nil && vmi.DeletionTimestamp == nil && !vmi.IsFinal():
			reqs = reqs[1:]
		}
	}
	if o.strategy == virtv1.RunStrategyRerunOnFailure && vmi != nil && vmi.Status.Phase == virtv1.Failed &&
		(vmi.DeletionTimestamp != nil || o.deleting) && (len(reqs) == 0 || reqs[0].Action != virtv1.StartRequest) {
		reqs = append([]virtv1.VirtualMachineStateChangeRequest{{Action: virtv1.StartRequest}}, reqs...)
	}
	if len(reqs) == 0 {
		return nil
	}
	return reqs
}

// updateCondition is KubeVirt's UpdateCondition on a VM's conditions:
// cond replaces the condition of its type only when its status or reason
// differs, and is appended when there is none. It writes into conds.
func updateCondition(conds []virtv1.VirtualMachineCondition, cond virtv1.VirtualMachineCondition) []virtv1.VirtualMachineCondition {
	i := slices.IndexFunc(conds, func(c virtv1.VirtualMachineCondition) bool { return c.Type == cond.Type })
	switch {
	case i < 0:
		return append(conds, cond)
	case conds[i].Status != cond.Status || conds[i].Reason != cond.Reason:
		conds[i] = cond
	}
	return conds
}

// conditions are the VM's conditions after a sync, as KubeVirt's
// syncConditions (watch/vm/vm.go) leaves them. A condition is replaced
// only when its status or reason changes, and otherwise kept as it was,
// times and message included (KubeVirt's UpdateCondition); new ones are
// appended. Ready is the VMI's, or False with VMINotExists (probed now)
// or VMIConditionMissing; Failure says why the controller could not act.
// The VMI's other conditions are mirrored, and those the VMI no longer
// has dropped, but only while there is a VMI: a stopped VM keeps what its
// last VMI reported, as KubeVirt's does.
func conditions(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, syncErr *syncError, now metav1.Time) []virtv1.VirtualMachineCondition {
	out := slices.Clone(vm.Status.Conditions)
	update := func(cond virtv1.VirtualMachineCondition) { out = updateCondition(out, cond) }
	mirror := func(vc virtv1.VirtualMachineInstanceCondition) virtv1.VirtualMachineCondition {
		return virtv1.VirtualMachineCondition{
			Type: virtv1.VirtualMachineConditionType(vc.Type), Status: vc.Status, Reason: vc.Reason, Message: vc.Message,
			LastProbeTime: vc.LastProbeTime, LastTransitionTime: vc.LastTransitionTime,
		}
	}

	var ready *virtv1.VirtualMachineInstanceCondition
	if vmi != nil {
		ready = vmistatus.Condition(vmi, virtv1.VirtualMachineInstanceReady)
	}
	switch {
	case vmi == nil:
		update(virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionFalse,
			Reason: ReasonVMINotExists, Message: "VMI does not exist", LastProbeTime: now, LastTransitionTime: now})
	case ready == nil:
		update(virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionFalse,
			Reason: ReasonVMIConditionMissing, Message: "VMI is missing the Ready condition", LastProbeTime: now, LastTransitionTime: now})
	default:
		update(mirror(*ready))
	}
	if syncErr != nil {
		update(virtv1.VirtualMachineCondition{Type: virtv1.VirtualMachineFailure, Status: corev1.ConditionTrue,
			Reason: syncErr.reason, Message: syncErr.message, LastTransitionTime: now})
	} else {
		out = slices.DeleteFunc(out, func(c virtv1.VirtualMachineCondition) bool { return c.Type == virtv1.VirtualMachineFailure })
	}
	if vmi == nil {
		return out
	}

	// Conditions the VM keeps for itself, not mirrored from the VMI.
	own := func(t virtv1.VirtualMachineConditionType) bool {
		return t == virtv1.VirtualMachineReady || t == virtv1.VirtualMachineFailure || t == virtv1.VirtualMachineRestartRequired
	}
	mirrored := map[virtv1.VirtualMachineConditionType]bool{}
	for _, vc := range vmi.Status.Conditions {
		if t := virtv1.VirtualMachineConditionType(vc.Type); !own(t) {
			mirrored[t] = true
			update(mirror(vc))
		}
	}
	return slices.DeleteFunc(out, func(c virtv1.VirtualMachineCondition) bool { return !own(c.Type) && !mirrored[c.Type] })
}

// printableStatus is KubeVirt's one-word summary, checked in its order.
func printableStatus(o observed, failure *virtv1.VirtualMachineStartFailure) virtv1.VirtualMachinePrintableStatus {
	vm, vmi := o.vm, o.vmi
	running := vmi != nil && vmi.Status.Phase == virtv1.Running
	switch {
	case vm.DeletionTimestamp != nil:
		return virtv1.VirtualMachineStatusTerminating
	case vmi != nil && !vmi.IsFinal() && (vmi.DeletionTimestamp != nil || o.deleting):
		return virtv1.VirtualMachineStatusStopping
	case vmi != nil && migrating(vmi):
		return virtv1.VirtualMachineStatusMigrating
	case running && conditionIs(vmi, virtv1.VirtualMachineInstancePaused, corev1.ConditionTrue, ""):
		return virtv1.VirtualMachineStatusPaused
	case running:
		return virtv1.VirtualMachineStatusRunning
	case vmi != nil && conditionIs(vmi, virtv1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, "FailedPvcNotFound"):
		return virtv1.VirtualMachineStatusPvcNotFound
	case o.volumes.dataVolumeError:
		return virtv1.VirtualMachineStatusDataVolumeError
	case vmi != nil && conditionIs(vmi, virtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), corev1.ConditionFalse, corev1.PodReasonUnschedulable):
		return virtv1.VirtualMachineStatusUnschedulable
	case o.volumes.provisioning:
		return virtv1.VirtualMachineStatusProvisioning
	case o.volumes.unboundClaim && setToStart(o):
		return virtv1.VirtualMachineStatusWaitingForVolumeBinding
	case vmi != nil && conditionIs(vmi, virtv1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, "ErrImagePull"):
		return virtv1.VirtualMachineStatusErrImagePull
	case vmi != nil && conditionIs(vmi, virtv1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, "ImagePullBackOff"):
		return virtv1.VirtualMachineStatusImagePullBackOff
	case (vmi == nil && o.creating) || (vmi != nil && starting(vmi)):
		return virtv1.VirtualMachineStatusStarting
	case (vmi == nil || vmi.IsFinal()) && failure != nil && failure.ConsecutiveFailCount > 0 &&
		(o.strategy == virtv1.RunStrategyAlways || o.strategy == virtv1.RunStrategyRerunOnFailure || o.strategy == virtv1.RunStrategyOnce):
		return virtv1.VirtualMachineStatusCrashLoopBackOff
	case vmi == nil || vmi.IsFinal():
		return virtv1.VirtualMachineStatusStopped
	case vmi.IsWaitingForSync() && o.strategy == virtv1.RunStrategyWaitAsReceiver:
		return virtv1.VirtualMachineStatusWaitingForReceiver
	}
	return virtv1.VirtualMachineStatusUnknown
}

// starting: the VMI is on its way to Running (KubeVirt's
// isVirtualMachineStatusStarting); one waiting for its migration's source
// or in phase Unknown is not.
func starting(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi.IsUnprocessed() || vmi.IsScheduling() || vmi.IsScheduled()
}

// setToStart is isSetToStart: the run strategy and requests want the VM
// running.
func setToStart(o observed) bool {
	vm, vmi := o.vm, o.vmi
	reqs := vm.Status.StateChangeRequests
	switch o.strategy {
	case virtv1.RunStrategyAlways:
		return true
	case virtv1.RunStrategyManual:
		if vmi != nil {
			return !(len(reqs) > 0 && reqs[0].Action == virtv1.StopRequest && reqs[0].UID != nil && *reqs[0].UID == vmi.UID)
		}
		return len(reqs) > 0 && reqs[0].Action == virtv1.StartRequest
	case virtv1.RunStrategyRerunOnFailure:
		return vmi == nil || vmi.Status.Phase != virtv1.Succeeded
	case virtv1.RunStrategyOnce:
		return vmi == nil
	}
	return false
}

// migrating reports a live migration under way.
func migrating(vmi *virtv1.VirtualMachineInstance) bool {
	m := vmi.Status.MigrationState
	return m != nil && m.StartTimestamp != nil && !m.Completed && !m.Failed
}

// conditionIs reports whether the VMI has condition t with status (and
// reason, unless "").
func conditionIs(vmi *virtv1.VirtualMachineInstance, t virtv1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus, reason string) bool {
	for _, c := range vmi.Status.Conditions {
		if c.Type == t {
			return c.Status == status && (reason == "" || c.Reason == reason)
		}
	}
	return false
}
