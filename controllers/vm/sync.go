package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"

	"github.com/virtshard/virtshard/controllers/apidefaults"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/instancetype"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/patch"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/shard"
)

// syncError is why the controller could not do what the VM asks; it ends up
// in the VM's Failure condition.
type syncError struct {
	reason, message string
	// event is the event's message where KubeVirt's differs from the
	// condition's; the condition's when empty.
	event string
	// silent: KubeVirt records no event, only the condition (a live
	// change that waits for a migration to end).
	silent bool
}

func (e *syncError) Error() string { return e.reason + ": " + e.message }

// observed is what one sync sees of a VM.
type observed struct {
	vm  *virtv1.VirtualMachine
	vmi *virtv1.VirtualMachineInstance // the VMI the VM controls, or nil
	// strategy is the effective run strategy ("" if the spec is invalid).
	strategy virtv1.VirtualMachineRunStrategy
	// creating and deleting: a VMI create or delete was sent and is not
	// observed yet.
	creating, deleting bool
	// restart is what the sync says of the RestartRequired condition;
	// restartWhy its message where not KubeVirt's general one.
	restart    restartVerdict
	restartWhy string
	// volumes is what the VM's DataVolumes and claims say, for the
	// printable status.
	volumes volumeState
	// volumeUpdate is the volume migration this sync recorded on the VMI,
	// for the VM's status.volumeUpdateState; nil if none.
	volumeUpdate *virtv1.VolumeUpdateState
	// resolved are the instance type and preference the VM runs from.
	resolved resolved
	// expanded: the sync wrote the VM's instance type and preference
	// into it, and ends there.
	expanded bool
}

// volumeState is what KubeVirt's printable status reads of a VM's
// volumes: a DataVolume in error, one still provisioning, a claim not
// bound.
type volumeState struct {
	dataVolumeError, provisioning, unboundClaim bool
}

// sync reconciles one VM. It returns how long to wait before the next sync
// when time alone will change the answer (a start backoff).
func (c *Controller) sync(ctx context.Context, it item) (time.Duration, error) {
	r := c.env.Caches.Get(it.Range)
	if r == nil {
		return 0, nil
	}
	// The latest copy: what a write of ours returned a moment ago, while
	// the informer lags, so that a start failure or a consumed request is
	// not acted on as if it were not.
	cached, exists, err := kinds.VMs.In(r).Latest(it.Key)
	if err != nil {
		return 0, err
	}
	if !exists {
		c.expectations.Delete(it.Range, it.Key)
		// A VMI whose VM is gone (deleted with orphan propagation) must not
		// keep our finalizer forever.
		if vmi, _, err := kinds.VMIs.In(r).Get(it.Key); err == nil && vmi != nil && metav1.GetControllerOf(vmi) != nil &&
			metav1.GetControllerOf(vmi).Kind == virtv1.VirtualMachineGroupVersionKind.Kind {
			orphan := *vmi
			orphan.DeletionTimestamp = &metav1.Time{} // done, as far as the VM is concerned
			return 0, c.releaseVMI(ctx, it, observed{vmi: &orphan})
		}
		return 0, nil
	}
	// A copy: the sync goes on from what its own writes return.
	o := observed{vm: cached.DeepCopy()}
	vmi, _, err := kinds.VMIs.In(r).Get(it.Key)
	if err != nil {
		return 0, err
	}
	var syncErr *syncError
	var after time.Duration
	if vmi != nil && !metav1.IsControlledBy(vmi, o.vm) {
		// As KubeVirt: an orphan of the VM's name is claimed; a VMI that
		// cannot be is not the VM's, which then acts as if it had none.
		if vmi, err = c.claim(ctx, it, o.vm, vmi); err != nil {
			return 0, err
		}
		if vmi == nil && o.vm.DeletionTimestamp == nil {
			syncErr = &syncError{reason: "FailedCreate", message: fmt.Sprintf("VMI %s exists and is not controlled by this VM", it.Key)}
			after = foreignRetry
		}
	}
	o.vmi = vmi
	var strategyErr *syncError
	if o.strategy, strategyErr = runStrategy(o.vm); strategyErr != nil && syncErr == nil {
		syncErr = strategyErr
	}
	if syncErr != nil && o.vm.DeletionTimestamp == nil {
		// A VM the controller cannot act on is managed all the same, as
		// KubeVirt's first write of any VM is.
		if err := c.patchVMFinalizers(ctx, it, o.vm, patch.Manage(o.vm, virtv1.VirtualMachineControllerFinalizer)); err != nil {
			return 0, err
		}
	}

	if c.satisfied(it) && syncErr == nil {
		after, err = c.act(ctx, it, &o)
		var foreign errForeign
		switch {
		case errors.As(err, &foreign):
			syncErr, err, after = foreign.syncError, nil, foreignRetry
		case errors.As(err, &syncErr):
			err = nil
		}
		if err != nil {
			return 0, err
		}
		// Judged once the run strategy acted without a failure, against
		// the VMI the sync began with, as KubeVirt judges it.
		if syncErr == nil && o.vm.DeletionTimestamp == nil && !o.expanded {
			retry, err := c.follow(ctx, it, r, &o, &syncErr)
			if err != nil {
				return 0, err
			}
			if retry > 0 {
				after = retry
			}
		}
	}
	adds, dels := c.expectations.Pending(it.Range, it.Key)
	// What this sync sent counts even if the informer already saw it
	// done: a failed VMI deleted now still earns RerunOnFailure's Start.
	o.creating, o.deleting = o.creating || adds > 0, o.deleting || dels > 0
	if syncErr != nil && !syncErr.silent && !hasFailure(o.vm, syncErr.reason) {
		// Once, as the Failure condition appears: not on every retry.
		msg := syncErr.message
		if syncErr.event != "" {
			msg = syncErr.event
		}
		c.env.Recorder.Event(o.vm, corev1.EventTypeWarning, syncErr.reason, msg)
	}
	if o.vmi != nil {
		if o.vmi, err = c.restoreGeneration(ctx, it, r, o.vm, o.vmi); err != nil {
			return 0, err
		}
	}
	o.volumes = volumeState{dataVolumeError: c.dataVolumeError(o.vm), provisioning: c.dataVolumeProvisioning(o.vm),
		unboundClaim: c.unboundClaim(o.vm)}
	if err := c.writeStatus(ctx, it, o, syncErr); err != nil {
		return 0, err
	}
	if err := c.releaseVMI(ctx, it, o); err != nil {
		return 0, err
	}
	return after, nil
}

// follow judges whether the VM needs a restart, and brings what follows
// the VM while its VMI runs up to date: the persisted firmware UUID, the
// VMI's followed annotations, the PCI topology the VMI started with and
// its live fields. Like KubeVirt, it waits
// for a VMI the sync created or deleted to be seen first. A step that
// fails sets *syncErr and says when to look again.
func (c *Controller) follow(ctx context.Context, it item, r *caches.Range, o *observed, syncErr **syncError) (time.Duration, error) {
	if o.vmi != nil {
		var err error
		if o.restart, err = c.judgeRestart(ctx, r, o); err != nil {
			return 0, err
		}
	}
	if !c.satisfied(it) {
		return 0, nil
	}
	steps := []func() error{
		func() error { return c.persistFirmwareUUID(ctx, it, o) },
		func() error { return c.syncMetadata(ctx, it, o) },
		func() error { return c.persistPCITopology(ctx, it, o) },
		func() error {
			if !c.liveChangesApply(o) {
				return nil
			}
			// A migration that holds a change back brings the VM back as it ends.
			return c.applyLiveChanges(ctx, it, o)
		},
	}
	for i, step := range steps {
		err := step()
		switch {
		case errors.As(err, syncErr):
			if i == len(steps)-1 {
				return 0, nil
			}
			return followRetry, nil
		case err != nil:
			return 0, err
		}
	}
	return 0, nil
}

// satisfied: every VMI and DataVolume the VM's syncs created or deleted
// is seen, as KubeVirt's satisfiedExpectations.
func (c *Controller) satisfied(it item) bool {
	return c.expectations.Satisfied(it.Range, it.Key) && c.dataVolumeExpectations.Satisfied(it.Range, it.Key)
}

// hasFailure reports whether vm already has a Failure condition for reason.
func hasFailure(vm *virtv1.VirtualMachine, reason string) bool {
	for _, c := range vm.Status.Conditions {
		if c.Type == virtv1.VirtualMachineFailure && c.Status == corev1.ConditionTrue && c.Reason == reason {
			return true
		}
	}
	return false
}

// act does what the run strategy and the first state change request ask.
func (c *Controller) act(ctx context.Context, it item, o *observed) (time.Duration, error) {
	vm, vmi := o.vm, o.vmi
	alive := vmi != nil && vmi.DeletionTimestamp == nil
	if vm.DeletionTimestamp != nil {
		switch {
		case alive:
			return 0, c.stopVMI(ctx, it, o)
		case vmi == nil:
			return 0, c.patchVMFinalizers(ctx, it, vm, patch.RemoveFinalizer(vm, virtv1.VirtualMachineControllerFinalizer))
		}
		return 0, nil // the VMI is going away
	}
	if err := c.patchVMFinalizers(ctx, it, vm, patch.Manage(vm, virtv1.VirtualMachineControllerFinalizer)); err != nil {
		return 0, err
	}
	r := c.env.Caches.Get(it.Range)
	if r == nil {
		return 0, nil
	}
	if vmi != nil {
		var err error
		if o.vmi, err = c.bumpGeneration(ctx, it, r, vm, vmi); err != nil {
			return 0, err
		}
		vmi = o.vmi
	}
	// KubeVirt's instance type sync: nothing else is done for a VM whose
	// instance type or preference cannot be found or stored.
	if err := c.syncInstancetypes(ctx, it, r, o); err != nil {
		return instancetypeRetry, err
	}
	if o.expanded {
		return 0, nil
	}
	vm = o.vm
	// KubeVirt's default: the DataVolumes first, and no start until they
	// are populated (a halted VM gets them all the same).
	if vm.Annotations[virtv1.ImmediateDataVolumeCreation] != "false" {
		ready, err := c.ensureDataVolumes(ctx, it, vm)
		if err != nil {
			return dataVolumeRetry, &syncError{reason: "FailedCreate", message: fmt.Sprintf("Error encountered while creating DataVolumes: %v", err), silent: true}
		}
		if !ready && o.strategy != virtv1.RunStrategyHalted {
			return 0, nil
		}
	}
	start, stop := c.requests(o)
	switch o.strategy {
	case virtv1.RunStrategyAlways:
		if alive && (vmi.IsFinal() || stop) {
			return 0, c.stopVMI(ctx, it, o)
		}
		if vmi == nil {
			return c.startAfterBackoff(ctx, it, o)
		}
	case virtv1.RunStrategyRerunOnFailure:
		// A VMI that ended is deleted either way, as KubeVirt's does; only
		// a failed one is started again (status.go adds its Start).
		if alive && (vmi.IsFinal() || stop) {
			return 0, c.stopVMI(ctx, it, o)
		}
		// Started once the strategy is (newly) RerunOnFailure, and again
		// after a failure or on request.
		if vmi == nil && (start || vm.Status.RunStrategy != virtv1.RunStrategyRerunOnFailure) {
			return c.startAfterBackoff(ctx, it, o)
		}
	case virtv1.RunStrategyOnce:
		if vmi == nil && vm.Status.RunStrategy != virtv1.RunStrategyOnce {
			return 0, c.createVMI(ctx, it, o)
		}
	case virtv1.RunStrategyManual:
		if alive && stop {
			return 0, c.stopVMI(ctx, it, o)
		}
		if vmi == nil && start {
			return 0, c.createVMI(ctx, it, o)
		}
	case virtv1.RunStrategyHalted:
		if alive {
			return 0, c.stopVMI(ctx, it, o)
		}
	case virtv1.RunStrategyWaitAsReceiver:
		// The VM arrives by a decentralized migration into a receiver VMI
		// (newVMI marks it), which no one can start by accident. Once the
		// migration completed, the VMI is an ordinary one and the VM gets
		// back the run strategy it had (KubeVirt's syncRunStrategy).
		switch {
		case vmi == nil:
			return 0, c.createVMI(ctx, it, o)
		case vmi.IsMigrationTarget():
		case vmi.IsMigrationCompleted():
			return 0, c.restoreRunStrategy(ctx, it, o)
		default:
			return 0, &syncError{reason: "FailedCreate", message: "Found non receiver VMI while VM is receiver"}
		}
	}
	return 0, nil
}

// restoreRunStrategy gives a VM whose decentralized migration completed
// the run strategy its kubevirt.io/restore-run-strategy annotation keeps,
// once every VMI it created or deleted is seen, as KubeVirt's sync updates
// the VM after syncRunStrategy restored it.
func (c *Controller) restoreRunStrategy(ctx context.Context, it item, o *observed) error {
	vm := o.vm
	restored, ok := vm.Annotations[virtv1.RestoreRunStrategy]
	if !ok || !c.satisfied(it) {
		return nil
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": vm.ResourceVersion},
		"spec":     map[string]any{"runStrategy": restored},
	})
	if err != nil {
		return err
	}
	updated, ok, err := sharded.SendPatch(ctx, c.rt.Writer, it.Range, body, func(ctx context.Context, body []byte) (*virtv1.VirtualMachine, error) {
		return c.env.KubeVirt.VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, body, metav1.PatchOptions{})
	})
	if err != nil {
		return &syncError{reason: "FailedUpdate", silent: true,
			message: fmt.Sprintf("Error encountered when trying to update vm according to add volume and/or memory dump requests: %v", err)}
	}
	if ok {
		o.vm = updated
		c.wrote(it.Range, updated)
	}
	return nil
}

// requests reads the first state change request: Start, or Stop of the
// current VMI (a Stop naming another VMI is stale).
func (c *Controller) requests(o *observed) (start, stop bool) {
	reqs := o.vm.Status.StateChangeRequests
	if len(reqs) == 0 {
		return false, false
	}
	switch reqs[0].Action {
	case virtv1.StartRequest:
		return true, false
	case virtv1.StopRequest:
		// A Stop names the VMI it stops; one without a UID is dropped
		// unheeded, as KubeVirt's isTrimFirstChangeRequestNeeded drops it.
		return false, o.vmi != nil && reqs[0].UID != nil && *reqs[0].UID == o.vmi.UID
	}
	return false, false
}

// startAfterBackoff creates the VMI unless a start backoff is running, in
// which case it says when to look again.
func (c *Controller) startAfterBackoff(ctx context.Context, it item, o *observed) (time.Duration, error) {
	if f := o.vm.Status.StartFailure; f != nil && f.RetryAfterTimestamp != nil {
		if left := f.RetryAfterTimestamp.Sub(c.env.Clock.Now()); left > 0 {
			return left, nil
		}
	}
	return 0, c.createVMI(ctx, it, o)
}

// newVMI renders the VMI of vm from its template, stamped with the VM's
// range so that the VM's replica also holds it, and with the range of the
// VM's fleet (a pool), if it has one, so that the pool sees it too.
// A preference's autoattach choices go in first: they decide the default
// input device (here) and pod interface (applyInstancetype).
func newVMI(vm *virtv1.VirtualMachine, rng int, pref *v1beta1.VirtualMachinePreferenceSpec) (*virtv1.VirtualMachineInstance, error) {
	if vm.Spec.Template == nil {
		return nil, &syncError{reason: "FailedCreate", message: "the VM has no spec.template"}
	}
	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: *vm.Spec.Template.ObjectMeta.DeepCopy(),
		Spec:       *vm.Spec.Template.Spec.DeepCopy(),
	}
	vmi.Name, vmi.GenerateName, vmi.Namespace = vm.Name, "", vm.Namespace
	vmi.ResourceVersion, vmi.UID = "", ""
	if startPausedRequested(vm) {
		vmi.Spec.StartStrategy = ptr.To(virtv1.StartStrategyPaused)
	}
	if vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == virtv1.RunStrategyWaitAsReceiver {
		if vmi.Annotations == nil {
			vmi.Annotations = map[string]string{}
		}
		vmi.Annotations[virtv1.CreateMigrationTarget] = "true"
	}
	// A UUID that stays the VM's across restarts: derived from its name
	// when the template has none (KubeVirt's CalculateLegacyUUID).
	if vmi.Spec.Domain.Firmware == nil {
		vmi.Spec.Domain.Firmware = &virtv1.Firmware{}
	}
	if vmi.Spec.Domain.Firmware.UUID == "" {
		vmi.Spec.Domain.Firmware.UUID = legacyFirmwareUUID(vm.Name)
	}
	instancetype.ApplyAutoattach(pref, &vmi.Spec)
	// An input device asked for but not described gets one by name; its
	// bus and type are virt-api's defaults (or the preference's).
	if d := &vmi.Spec.Domain.Devices; d.AutoattachInputDevice != nil && *d.AutoattachInputDevice && len(d.Inputs) == 0 {
		d.Inputs = []virtv1.Input{{Name: "default-0"}}
	}
	shard.StampRange(vmi, rng)
	if fleet, ok := vm.Labels[shard.LabelFleetRange]; ok {
		vmi.Labels[shard.LabelFleetRange] = fleet
	}
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[virtv1.VirtualMachineGenerationAnnotation] = strconv.FormatInt(vm.Generation, 10)
	vmi.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)}
	vmi.Finalizers = append(slices.DeleteFunc(vmi.Finalizers, func(f string) bool {
		return f == virtv1.VirtualMachineControllerFinalizer
	}), virtv1.VirtualMachineControllerFinalizer)
	return vmi, nil
}

// applyInstancetype makes vmi the VM's instance type and preference
// applied to its template, as KubeVirt's startVMI: with the default disks
// and pod network first (which a preference tunes), the objects' names in
// annotations. Conflicts (the template changed since the instance type was
// stored) refuse the start.
func (c *Controller) applyInstancetype(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, res resolved) error {
	if res.none() {
		return nil
	}
	fail := func(err error) error {
		return &syncError{reason: "FailedCreate", message: "Failure while starting VMI: " + err.Error(),
			event: "Error creating virtual machine instance: Failed to apply instancetype: " + err.Error()}
	}
	if err := apidefaults.SetVMDefaults(&vmi.Spec, c.env.ClusterConfig.Current()); err != nil {
		return &syncError{reason: "FailedCreate", message: "Failure while starting VMI: " + err.Error(),
			event: "Error creating virtual machine instance: " + err.Error()}
	}
	setNameAnnotation(vmi, instancetypeSide.get(vm), instancetypeSide, virtv1.InstancetypeAnnotation, virtv1.ClusterInstancetypeAnnotation)
	setNameAnnotation(vmi, preferenceSide.get(vm), preferenceSide, virtv1.PreferenceAnnotation, virtv1.ClusterPreferenceAnnotation)
	if conflicts := instancetype.Apply("spec", res.instancetype, res.preference, &vmi.Spec, &vmi.ObjectMeta); len(conflicts) > 0 {
		return fail(conflicts.VMIError())
	}
	return nil
}

// setNameAnnotation records on the VMI which object of a side it runs
// from, under the namespaced or the cluster-wide key by the matcher's kind
// (none for an unknown kind).
func setNameAnnotation(vmi *virtv1.VirtualMachineInstance, m *matcher, side matcherSide, namespacedKey, clusterKey string) {
	if m == nil {
		return
	}
	k, err := side.kindOf(m)
	if err != nil {
		return
	}
	key := clusterKey
	if k.namespaced() {
		key = namespacedKey
	}
	vmi.Annotations[key] = m.Name
}

// startPausedRequested reports a first state change request to start
// paused (virtctl start --paused).
func startPausedRequested(vm *virtv1.VirtualMachine) bool {
	reqs := vm.Status.StateChangeRequests
	return len(reqs) > 0 && reqs[0].Action == virtv1.StartRequest &&
		reqs[0].Data[virtv1.StartRequestDataPausedKey] == virtv1.StartRequestDataPausedTrue
}

// firmwareNamespace is the UUID namespace of KubeVirt's name-derived
// firmware UUIDs (pkg/virt-controller/watch/vm/firmware.go).
var firmwareNamespace = uuid.MustParse("6a1a24a1-4061-4607-8bf4-a3963d0c5895")

// legacyFirmwareUUID is the firmware UUID KubeVirt derives from a VM's
// name.
func legacyFirmwareUUID(name string) types.UID {
	return types.UID(uuid.NewSHA1(firmwareNamespace, []byte(name)).String())
}

func (c *Controller) createVMI(ctx context.Context, it item, o *observed) error {
	vm := o.vm
	// KubeVirt's startVMI: with immediate creation off, the DataVolumes
	// are made at the start, which waits for them.
	if ready, err := c.ensureDataVolumes(ctx, it, vm); err != nil || !ready {
		return err
	}
	if needsManualRecovery(vm) {
		// As KubeVirt's: logged, and left until a person puts the old
		// claims back (volumes.go).
		klog.ErrorS(nil, "Cannot start the VM: its volume migration needs a manual recovery", "vm", it.Key)
		return nil
	}
	vmi, err := newVMI(vm, it.Range, o.resolved.preference)
	if err != nil {
		return err
	}
	if err := c.applyInstancetype(vm, vmi, o.resolved); err != nil {
		return err
	}
	// A start takes the template as it is: nothing is left to restart
	// for, whether or not the create goes through, as in KubeVirt.
	o.restart = restartNotRequired
	revision, err := c.startRevision(ctx, it, vm)
	if errors.Is(err, sharded.ErrNotHeld) {
		return nil // not ours any more: the range's holder starts the VM
	}
	if err != nil {
		return err
	}
	vmi.Status.VirtualMachineRevisionName = revision
	var created *virtv1.VirtualMachineInstance
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		c.expectations.ExpectCreations(it.Range, it.Key, 1)
		if created, err = c.env.KubeVirt.VirtualMachineInstances(vm.Namespace).Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
			c.expectations.CreationObserved(it.Range, it.Key)
		}
		return err
	})
	if errors.Is(err, sharded.ErrNotHeld) {
		return nil // not ours any more: the range's holder starts the VM
	}
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return c.alreadyExists(ctx, it, vm)
		}
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) {
			// KubeVirt's startVMI: the event says the create failed, the
			// condition that starting did.
			return &syncError{reason: "FailedCreate", message: "Failure while starting VMI: " + err.Error(),
				event: "Error creating virtual machine instance: " + err.Error()}
		}
		return fmt.Errorf("create VMI %s: %w", it.Key, err)
	}
	o.creating = true
	klog.FromContext(ctx).V(2).Info("Started VM", "vm", klog.KObj(vm), "vmi", created.UID)
	c.env.Recorder.Eventf(vm, corev1.EventTypeNormal, "SuccessfulCreate", "Started the virtual machine by creating the new virtual machine instance %s", created.Name)
	return nil
}

// claim adopts vmi, a VMI of the VM's name that it does not control, if
// it is an orphan, as KubeVirt's VM controller does: neither is being
// deleted, nobody controls the VMI, and a fresh read shows the VM is not
// being deleted either (the cached copy may be late to say so). The adopted
// VMI becomes the VM's child on the VM's range (shard.Adopt), where the
// VMI controller brings its launcher pods after it. claim returns the
// adopted VMI, or nil when vmi cannot be claimed.
func (c *Controller) claim(ctx context.Context, it item, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) (*virtv1.VirtualMachineInstance, error) {
	if metav1.GetControllerOf(vmi) != nil || vmi.DeletionTimestamp != nil || vm.DeletionTimestamp != nil {
		return nil, nil
	}
	fresh, err := c.env.KubeVirt.VirtualMachines(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("recheck VM %s before adopting its VMI: %w", it.Key, err)
	}
	if fresh.UID != vm.UID || fresh.DeletionTimestamp != nil {
		return nil, nil // its next event says what to do
	}
	ref := metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)
	var adopted *virtv1.VirtualMachineInstance
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		adopted, err = c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.MergePatchType,
			shard.Adopt(vmi, *ref, it.Range), metav1.PatchOptions{})
		return err
	})
	switch {
	case errors.Is(err, sharded.ErrNotHeld), apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		// A conflict: someone changed it since it was read; look again.
		return nil, fmt.Errorf("adopt VMI %s: %w", it.Key, err)
	}
	klog.FromContext(ctx).V(2).Info("Adopted orphan VMI", "vm", klog.KObj(vm), "vmi", adopted.UID)
	return adopted, nil
}

// followRetry is when a VM whose firmware UUID or VMI annotations could
// not be written tries again: KubeVirt requeues it with backoff.
const followRetry = 10 * time.Second

// dataVolumeRetry is when a VM whose DataVolumes could not be made tries
// again (a clone's authorization may have been granted since, CDI
// installed): KubeVirt requeues it with backoff.
const dataVolumeRetry = 30 * time.Second

// foreignRetry is how often a VM whose name a foreign VMI holds looks
// again: that VMI may hash into another range, whose events never reach
// this VM.
const foreignRetry = 30 * time.Second

// errForeign is a VMI of the VM's name that the VM does not control.
type errForeign struct{ *syncError }

// alreadyExists tells a VMI our own create made (the cache lags) from a
// foreign one that holds the name.
func (c *Controller) alreadyExists(ctx context.Context, it item, vm *virtv1.VirtualMachine) error {
	existing, err := c.env.KubeVirt.VirtualMachineInstances(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get VMI %s: %w", it.Key, err)
	}
	if metav1.IsControlledBy(existing, vm) {
		return nil // ours: the informer will show it
	}
	// An orphan on another range, which this range's caches do not hold:
	// claimed, it moves here, and its event brings the VM back.
	adopted, err := c.claim(ctx, it, vm, existing)
	if err != nil || adopted != nil {
		return err
	}
	return errForeign{&syncError{reason: "FailedCreate", message: fmt.Sprintf("VMI %s exists and is not controlled by this VM", it.Key)}}
}

// stopVMI deletes the sync's VMI and records that it did.
func (c *Controller) stopVMI(ctx context.Context, it item, o *observed) error {
	if err := c.deleteVMI(ctx, it, o.vm, o.vmi); err != nil {
		return err
	}
	o.deleting = true
	return nil
}

func (c *Controller) deleteVMI(ctx context.Context, it item, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) error {
	err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		c.expectations.ExpectDeletions(it.Range, it.Key, vmi.UID)
		err := c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Delete(ctx, vmi.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &vmi.UID},
		})
		if err != nil {
			c.expectations.DeletionObserved(it.Range, it.Key, vmi.UID)
		}
		return err
	})
	if err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) || errors.Is(err, sharded.ErrNotHeld) {
			return nil // gone, or another VMI by now: the informer tells
		}
		c.env.Recorder.Eventf(vm, corev1.EventTypeWarning, "FailedDelete", "Error deleting virtual machine instance %s: %v", vmi.Name, err)
		return fmt.Errorf("delete VMI %s: %w", it.Key, err)
	}
	klog.FromContext(ctx).V(2).Info("Stopped VM", "vm", klog.KObj(vm), "vmi", vmi.UID)
	c.env.Recorder.Eventf(vm, corev1.EventTypeNormal, "SuccessfulDelete", "Stopped the virtual machine by deleting the virtual machine instance %s", vmi.UID)
	return nil
}

// patchVMFinalizers sends a finalizer patch of vm (none when nil); the
// rest of the sync works on what the server returned.
func (c *Controller) patchVMFinalizers(ctx context.Context, it item, vm *virtv1.VirtualMachine, finalizers []byte) error {
	updated, ok, err := sharded.SendPatch(ctx, c.rt.Writer, it.Range, finalizers, func(ctx context.Context, body []byte) (*virtv1.VirtualMachine, error) {
		return c.env.KubeVirt.VirtualMachines(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, body, metav1.PatchOptions{})
	})
	if err != nil {
		return fmt.Errorf("patch finalizers of VM %s: %w", it.Key, err)
	}
	if ok {
		*vm = *updated
		c.wrote(it.Range, updated)
	}
	return nil
}

// releaseVMI removes the VM controller's finalizer from a VMI that is done
// (final or being deleted) once the VM's status has recorded it: the
// finalizer is there so that no VMI disappears before its VM saw how it
// ended (a start failure counts towards the backoff).
func (c *Controller) releaseVMI(ctx context.Context, it item, o observed) error {
	vmi := o.vmi
	if vmi == nil || !(vmi.IsFinal() || vmi.DeletionTimestamp != nil) {
		return nil
	}
	release := patch.RemoveFinalizer(vmi, virtv1.VirtualMachineControllerFinalizer)
	_, _, err := sharded.SendPatch(ctx, c.rt.Writer, it.Range, release, func(ctx context.Context, body []byte) (*virtv1.VirtualMachineInstance, error) {
		return c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.MergePatchType, body, metav1.PatchOptions{})
	})
	if err != nil {
		return fmt.Errorf("release VMI %s: %w", it.Key, err)
	}
	return nil
}

// runStrategy is the VM's effective run strategy, as KubeVirt derives it,
// or why there is none: an unknown strategy fails as KubeVirt's
// syncRunStrategy fails it (FailedCreate); both spec.running and
// spec.runStrategy set, which KubeVirt only requeues without a word, is
// InvalidRunStrategy.
func runStrategy(vm *virtv1.VirtualMachine) (virtv1.VirtualMachineRunStrategy, *syncError) {
	switch {
	case vm.Spec.Running != nil && vm.Spec.RunStrategy != nil:
		return "", &syncError{reason: ReasonInvalidRunStrategy, message: "spec.running and spec.runStrategy are mutually exclusive"}
	case vm.Spec.RunStrategy != nil:
		switch s := *vm.Spec.RunStrategy; s {
		case virtv1.RunStrategyAlways, virtv1.RunStrategyRerunOnFailure, virtv1.RunStrategyManual,
			virtv1.RunStrategyHalted, virtv1.RunStrategyOnce, virtv1.RunStrategyWaitAsReceiver:
			return s, nil
		default:
			return "", &syncError{reason: "FailedCreate", message: fmt.Sprintf("unknown runstrategy: %s", s)}
		}
	case vm.Spec.Running != nil && *vm.Spec.Running:
		return virtv1.RunStrategyAlways, nil
	}
	return virtv1.RunStrategyHalted, nil
}
