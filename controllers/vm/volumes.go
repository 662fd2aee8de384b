package vm

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// A volume migration: under the LiveUpdate rollout, a running VM whose
// updateVolumesStrategy is Migration and whose template now names other
// claims for some of its volumes has its VMI moved onto them by a live
// migration, as KubeVirt v1.8.1 does (handleVolumeUpdateRequest in
// watch/vm/vm.go, watch/volume-migration). The VM controller first lists
// the moved volumes in the VMI's status.migratedVolumes, then puts the new
// claims in the VMI's spec (virt-api admits a change of a VMI's
// non-hotplugged volumes only for volumes that list names); the VMI
// controller then marks the VMI VolumesChange, the workload updater
// migrates it, and the target's virt-handler takes the mark and the list
// away once the copy is done. Putting the template back to the old claims
// before that cancels it.

// Reasons and messages of a volume migration, KubeVirt's.
const (
	// ReasonVolumesChangeCancellation is the reason of the VMI's
	// VolumesChange condition (False) once a volume migration is
	// cancelled.
	ReasonVolumesChangeCancellation = string(virtv1.VirtualMachineInstanceReasonVolumesChangeCancellation)
	// revertOnlyMessage: a volume under migration may only go back to the
	// claim it came from.
	revertOnlyMessage = "The volume can only be reverted to the previous version during the update"
	// manualRecoveryReason is the reason (KubeVirt puts the sentence
	// there) of ManualRecoveryRequired, set once the VMI ended or went
	// while its volumes moved: some volumes may point at half-copied
	// claims, and the VM does not start until its template names the old
	// claims again or the strategy is no longer Migration.
	manualRecoveryReason = "VMI was removed or was final during the volume migration"
)

// errRevertOnly is KubeVirt's refusal of a change of a moving volume other
// than back to its old claim, in KubeVirt's words.
type errRevertOnly struct{}

func (errRevertOnly) Error() string { return revertOnlyMessage }

// errMissingDestination: a destination volume (a DataVolume, or a
// DataVolume's claim) does not exist yet; the VMI says so in its
// VolumesChange condition (False) and the update waits for it.
type errMissingDestination struct{ what, name string }

func (e errMissingDestination) Error() string {
	return fmt.Sprintf("the %s %s doesn't exist", e.what, e.name)
}

// movedClaims are the VMI's volumes whose claim the VM's template changed:
// volume name to the template's claim. Only claim names count, so a
// PersistentVolumeClaim volume turned into a DataVolume of the same name
// is no move.
func movedClaims(tmpl, vmi *virtv1.VirtualMachineInstanceSpec) map[string]string {
	var out map[string]string
	for _, v := range vmi.Volumes {
		have := template.VolumeClaim(v)
		if have == "" {
			continue
		}
		i := slices.IndexFunc(tmpl.Volumes, func(t virtv1.Volume) bool { return t.Name == v.Name })
		if i < 0 {
			continue
		}
		if want := template.VolumeClaim(tmpl.Volumes[i]); want != "" && want != have {
			if out == nil {
				out = map[string]string{}
			}
			out[v.Name] = want
		}
	}
	return out
}

// checkDestinations judges the moved volumes as KubeVirt's ValidateVolumes
// does: a filesystem, a shareable disk or a LUN cannot move, nor can a
// DataVolume not yet populated whose claim has no data source reference
// (only a CSI volume populator's can be copied into while empty); a
// missing DataVolume or DataVolume claim is errMissingDestination.
// Volumes without a disk are not judged.
func (c *Controller) checkDestinations(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, moved map[string]string) error {
	var filesystems, shareable, luns, notPopulator []string
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if _, ok := moved[v.Name]; !ok {
			continue
		}
		if slices.ContainsFunc(vmi.Spec.Domain.Devices.Filesystems, func(f virtv1.Filesystem) bool { return f.Name == v.Name }) {
			filesystems = append(filesystems, v.Name)
			continue
		}
		i := slices.IndexFunc(vmi.Spec.Domain.Devices.Disks, func(d virtv1.Disk) bool { return d.Name == v.Name })
		if i < 0 {
			continue
		}
		disk := vmi.Spec.Domain.Devices.Disks[i]
		switch {
		case disk.Shareable != nil && *disk.Shareable:
			shareable = append(shareable, v.Name)
			continue
		case disk.LUN != nil:
			luns = append(luns, v.Name)
			continue
		case v.DataVolume == nil:
			continue
		}
		dv := c.dataVolumeOf(vm.Namespace, v.DataVolume.Name)
		if dv == nil {
			return errMissingDestination{what: "datavolume", name: v.DataVolume.Name}
		}
		if dv.Status.Phase == cdiv1.Succeeded {
			continue
		}
		pvc, ok := c.env.Objects.PVC(vm.Namespace, v.DataVolume.Name)
		if !ok {
			return errMissingDestination{what: "pvc", name: v.DataVolume.Name}
		}
		if pvc.Spec.DataSourceRef == nil {
			notPopulator = append(notPopulator, v.Name)
		}
	}
	if len(filesystems)+len(shareable)+len(luns)+len(notPopulator) == 0 {
		return nil
	}
	msg := "invalid volumes to update with migration:"
	for _, bucket := range []struct {
		what  string
		names []string
	}{
		{"filesystems", filesystems}, {"shareable", shareable}, {"luns", luns},
		{"DV storage class isn't a CSI or not using volume populators", notPopulator},
	} {
		if len(bucket.names) > 0 {
			msg += fmt.Sprintf(" %s: %v", bucket.what, bucket.names)
		}
	}
	return errors.New(msg)
}

// describeMoves lists the moves as the VMI's status.migratedVolumes holds
// them, in the template's order: each volume's claim before and after,
// with each claim's volume mode, access modes, requests and capacity where
// the claim is cached.
func (c *Controller) describeMoves(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, moved map[string]string) []virtv1.StorageMigratedVolumeInfo {
	claim := func(name string) *virtv1.PersistentVolumeClaimInfo {
		info := &virtv1.PersistentVolumeClaimInfo{ClaimName: name}
		if pvc, ok := c.env.Objects.PVC(vm.Namespace, name); ok {
			info.VolumeMode, info.AccessModes = pvc.Spec.VolumeMode, pvc.Spec.AccessModes
			info.Requests, info.Capacity = pvc.Spec.Resources.Requests, pvc.Status.Capacity
		}
		return info
	}
	var out []virtv1.StorageMigratedVolumeInfo
	for _, v := range vm.Spec.Template.Spec.Volumes {
		to, ok := moved[v.Name]
		if !ok {
			continue
		}
		i := slices.IndexFunc(vmi.Spec.Volumes, func(w virtv1.Volume) bool { return w.Name == v.Name })
		out = append(out, virtv1.StorageMigratedVolumeInfo{VolumeName: v.Name,
			SourcePVCInfo: claim(template.VolumeClaim(vmi.Spec.Volumes[i])), DestinationPVCInfo: claim(to)})
	}
	return out
}

// updateVolumes is the volume part of a live update (KubeVirt's
// handleVolumeUpdateRequest): a cancellation first, whatever the
// strategy; then, with the Migration strategy, the moves checked,
// recorded on the VMI and taken into its spec, and the VM's
// status.volumeUpdateState set. A move that cannot be made asks for a
// restart instead.
func (c *Controller) updateVolumes(ctx context.Context, it item, o *observed) error {
	failed := func(err error) error {
		return &syncError{reason: ReasonVolumesUpdate, silent: true,
			message: "error encountered while handling volumes update requests: " + err.Error()}
	}
	if cancelled, err := c.cancelVolumeMove(ctx, it, o); cancelled || err != nil {
		if err != nil {
			return failed(err)
		}
		return nil
	}
	strategy := o.vm.Spec.UpdateVolumesStrategy
	switch {
	case strategy == nil || *strategy == virtv1.UpdateVolumesStrategyReplacement:
		return nil
	case *strategy != virtv1.UpdateVolumesStrategyMigration:
		return failed(fmt.Errorf("updateVolumes strategy not recognized: %s", *strategy))
	}
	vm, vmi := o.vm, o.vmi
	moved := movedClaims(&vm.Spec.Template.Spec, &vmi.Spec)
	if len(moved) == 0 {
		return nil
	}
	if err := c.checkDestinations(vm, vmi, moved); err != nil {
		if missing := (errMissingDestination{}); errors.As(err, &missing) {
			if err := c.patchVolumesChange(ctx, it, o, corev1.ConditionFalse, "", "One of the destination volumes doesn't exist: "+err.Error()); err != nil {
				return failed(err)
			}
			return nil
		}
		askRestart(o, err.Error())
		return nil
	}
	// A check passed: a False condition an earlier one or a cancellation
	// left goes.
	if err := c.patchVolumesChange(ctx, it, o, "", "", ""); err != nil {
		return failed(err)
	}
	moves := c.describeMoves(vm, vmi, moved)
	if err := vmistatus.StorageMovable(vmi, moves); err != nil {
		askRestart(o, err.Error())
		return nil
	}
	if len(o.vmi.Status.MigratedVolumes) == 0 && len(moves) > 0 {
		ops := []jsonPatchOp{{Op: "test", Path: "/status/migratedVolumes", Value: jsonNull}, {Op: "replace", Path: "/status/migratedVolumes", Value: moves}}
		if err := c.patchVMI(ctx, it, o, ops); err != nil {
			return failed(err)
		}
	}
	if err := c.takeTemplateVolumes(ctx, it, o); err != nil {
		return failed(err)
	}
	o.volumeUpdate = &virtv1.VolumeUpdateState{VolumeMigrationState: &virtv1.VolumeMigrationState{MigratedVolumes: moves}}
	return nil
}

// takeTemplateVolumes replaces each of the VMI's volumes its
// status.migratedVolumes names with the template's volume of that name,
// in place (KubeVirt's PatchVMIVolumes): the move's destinations, or on a
// cancellation its sources.
func (c *Controller) takeTemplateVolumes(ctx context.Context, it item, o *observed) error {
	vmi := o.vmi
	if len(vmi.Status.MigratedVolumes) == 0 {
		return nil
	}
	volumes := slices.Clone(vmi.Spec.Volumes)
	for i, v := range volumes {
		if !slices.ContainsFunc(vmi.Status.MigratedVolumes, func(m virtv1.StorageMigratedVolumeInfo) bool { return m.VolumeName == v.Name }) {
			continue
		}
		if j := slices.IndexFunc(o.vm.Spec.Template.Spec.Volumes, func(t virtv1.Volume) bool { return t.Name == v.Name }); j >= 0 {
			volumes[i] = o.vm.Spec.Template.Spec.Volumes[j]
		}
	}
	if equality.Semantic.DeepEqual(volumes, vmi.Spec.Volumes) {
		return nil
	}
	return c.patchVMI(ctx, it, o, []jsonPatchOp{{Op: "test", Path: "/spec/volumes", Value: vmi.Spec.Volumes}, {Op: "replace", Path: "/spec/volumes", Value: volumes}})
}

// cancelVolumeMove takes a volume migration back when the template names
// the old claims again while the VMI still moves (KubeVirt's
// VolumeMigrationCancel): the VMI's volumes go back, its VolumesChange
// turns False (VolumesChangeCancellation) and its migratedVolumes go, and
// the workload updater then deletes the migration not yet made. Any other
// change of a moving volume is refused (reported true with an error).
func (c *Controller) cancelVolumeMove(ctx context.Context, it item, o *observed) (bool, error) {
	vmi := o.vmi
	if !vmistatus.ConditionIs(vmi, virtv1.VirtualMachineInstanceVolumesChange, corev1.ConditionTrue) {
		return false, nil
	}
	moved := movedClaims(&o.vm.Spec.Template.Spec, &vmi.Spec)
	touched := 0
	back := true
	for _, m := range vmi.Status.MigratedVolumes {
		want, ok := moved[m.VolumeName]
		if !ok {
			continue
		}
		touched++
		if m.SourcePVCInfo == nil || want != m.SourcePVCInfo.ClaimName {
			back = false
		}
	}
	switch {
	case touched == 0:
		return false, nil
	case !back || touched != len(moved) || touched != len(vmi.Status.MigratedVolumes):
		return true, errRevertOnly{}
	}
	if err := c.takeTemplateVolumes(ctx, it, o); err != nil {
		return true, err
	}
	conditions := slices.DeleteFunc(slices.Clone(o.vmi.Status.Conditions), func(c virtv1.VirtualMachineInstanceCondition) bool {
		return c.Type == virtv1.VirtualMachineInstanceVolumesChange
	})
	conditions = append(conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVolumesChange,
		Status: corev1.ConditionFalse, Reason: ReasonVolumesChangeCancellation, LastTransitionTime: metav1.NewTime(c.env.Clock.Now())})
	ops := []jsonPatchOp{
		{Op: "test", Path: "/status/conditions", Value: o.vmi.Status.Conditions}, {Op: "replace", Path: "/status/conditions", Value: conditions},
		{Op: "test", Path: "/status/migratedVolumes", Value: o.vmi.Status.MigratedVolumes}, {Op: "replace", Path: "/status/migratedVolumes", Value: jsonNull},
	}
	return true, c.patchVMI(ctx, it, o, ops)
}

// patchVolumesChange sets the VMI's VolumesChange condition to status
// (reason and message), or removes it when status is empty, unless it
// already is so (KubeVirt's UpdateCondition: a condition of the same
// status and reason stays as it is).
func (c *Controller) patchVolumesChange(ctx context.Context, it item, o *observed, status corev1.ConditionStatus, reason, message string) error {
	have := o.vmi.Status.Conditions
	i := slices.IndexFunc(have, func(c virtv1.VirtualMachineInstanceCondition) bool {
		return c.Type == virtv1.VirtualMachineInstanceVolumesChange
	})
	var want []virtv1.VirtualMachineInstanceCondition
	switch {
	case status == "" && i < 0:
		return nil
	case status == "":
		want = slices.Delete(slices.Clone(have), i, i+1)
	case i >= 0 && have[i].Status == status && string(have[i].Reason) == reason:
		return nil
	default:
		cond := virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVolumesChange, Status: status,
			Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(c.env.Clock.Now())}
		want = slices.Clone(have)
		if i >= 0 {
			want[i] = cond
		} else {
			want = append(want, cond)
		}
	}
	return c.patchVMI(ctx, it, o, []jsonPatchOp{{Op: "test", Path: "/status/conditions", Value: have}, {Op: "replace", Path: "/status/conditions", Value: want}})
}

// volumeUpdateState is the VM's status.volumeUpdateState after a sync,
// and whether the VM now needs a manual recovery (KubeVirt's
// syncVolumeMigration, judged on the conditions the VM had before the
// sync): the state goes once the template names the source claims again
// or the strategy is no longer Migration; a VMI gone or ended while the
// VM shows its volumes moving leaves it for a person to recover; a
// cancelled move drops it. A completed move keeps it.
func volumeUpdateState(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, state *virtv1.VolumeUpdateState) (_ *virtv1.VolumeUpdateState, recovered, stranded bool) {
	if state == nil || state.VolumeMigrationState == nil {
		return state, false, false
	}
	sources := map[string]string{}
	for _, m := range state.VolumeMigrationState.MigratedVolumes {
		if m.SourcePVCInfo != nil {
			sources[m.VolumeName] = m.SourcePVCInfo.ClaimName
		}
	}
	back := true
	if vm.Spec.Template != nil {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			if src, ok := sources[v.Name]; ok && template.VolumeClaim(v) != src {
				back = false
			}
		}
	}
	strategy := vm.Spec.UpdateVolumesStrategy
	if back || strategy == nil || *strategy != virtv1.UpdateVolumesStrategyMigration {
		state = state.DeepCopy()
		state.VolumeMigrationState = nil
		return state, true, false
	}
	if vmi == nil || vmi.IsFinal() {
		moving := slices.ContainsFunc(vm.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
			return c.Type == virtv1.VirtualMachineConditionType(virtv1.VirtualMachineInstanceVolumesChange) && c.Status == corev1.ConditionTrue
		})
		return state, false, moving
	}
	if vmistatus.ConditionIs(vmi, virtv1.VirtualMachineInstanceVolumesChange, corev1.ConditionFalse) &&
		vmistatus.Condition(vmi, virtv1.VirtualMachineInstanceVolumesChange).Reason == ReasonVolumesChangeCancellation {
		state = state.DeepCopy()
		state.VolumeMigrationState = nil
	}
	return state, false, false
}

// volumeMigrationConditions are the VM's conditions once its volume
// migration was recovered (VolumesChange and ManualRecoveryRequired go) or
// stranded (ManualRecoveryRequired set, if not there).
func volumeMigrationConditions(conds []virtv1.VirtualMachineCondition, recovered bool) []virtv1.VirtualMachineCondition {
	if recovered {
		return slices.DeleteFunc(slices.Clone(conds), func(c virtv1.VirtualMachineCondition) bool {
			return c.Type == virtv1.VirtualMachineConditionType(virtv1.VirtualMachineInstanceVolumesChange) ||
				c.Type == virtv1.VirtualMachineManualRecoveryRequired
		})
	}
	return updateCondition(slices.Clone(conds), virtv1.VirtualMachineCondition{
		Type: virtv1.VirtualMachineManualRecoveryRequired, Status: corev1.ConditionTrue, Reason: manualRecoveryReason})
}

// needsManualRecovery: the VM may not start (KubeVirt's startVMI refuses,
// virt-api's start too).
func needsManualRecovery(vm *virtv1.VirtualMachine) bool {
	return slices.ContainsFunc(vm.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
		return c.Type == virtv1.VirtualMachineManualRecoveryRequired && c.Status == corev1.ConditionTrue
	})
}
