package workloadupdate

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// held is a VMI of a held range, with the range's caches.
type held = caches.Found[*virtv1.VirtualMachineInstance]

// plan is what one look at a replica's VMIs finds, sorted as KubeVirt's
// getUpdateData sorts the cluster's.
type plan struct {
	// outdated counts, by range, the running VMIs on an outdated launcher
	// or with a change that needs a migration, acted on or not.
	outdated map[int]int
	// migrate, evict and abort are the VMIs to act on: migrate (live
	// migration allowed and the VMI can), evict (otherwise, when eviction
	// is allowed), and abort (their change was reverted: the workload
	// update migrations are deleted).
	migrate      []migration.Decided
	evict, abort []held
}

// judge is what a VMI's sorting depends on besides the VMI.
type judge struct {
	// image is the launcher image the controller renders now.
	image string
	// migrateAllowed and evictAllowed are the strategy's methods.
	migrateAllowed, evictAllowed bool
	// migrations are the VMI's (namespace/name) migrations.
	migrations func(vmiKey string) []*virtv1.VirtualMachineInstanceMigration
	now        time.Time
}

// add sorts one VMI into p.
func (j judge) add(p *plan, h held) {
	vmi := h.Object
	if vmi.Status.Phase != virtv1.Running || vmi.IsFinal() || vmi.DeletionTimestamp != nil {
		return
	}
	known := j.migrations(vmi.Namespace + "/" + vmi.Name)
	switch {
	case j.abortChange(vmi, known) && !j.outdatedImage(vmi):
		p.abort = append(p.abort, h)
		return
	case !j.outdatedImage(vmi) && !j.changeNeedsMigration(vmi):
		return
	}
	p.outdated[h.Range.Index]++
	// Counted, but acted on only when no migration is under way.
	if vmistatus.Migrating(vmi, j.now) || kinds.AnyUnfinished(known) {
		return
	}
	switch {
	case j.migrateAllowed && (vmistatus.Migratable(vmi) || volumesMigrate(vmi)):
		p.migrate = append(p.migrate, migration.Decided{Found: h, Known: known})
	case j.evictAllowed:
		p.evict = append(p.evict, h)
	}
}

// outdatedImage: the VMI's launcher (status.launcherContainerImageVersion,
// which the VMI controller sets once the pod runs) is not the image the
// controller renders now.
func (j judge) outdatedImage(vmi *virtv1.VirtualMachineInstance) bool {
	v := vmi.Status.LauncherContainerImageVersion
	return !vmi.IsFinal() && v != "" && v != j.image
}

// changeNeedsMigration: a hotplug or volume change waits for a migration
// (the VM controller's conditions), and it was not called off.
func (j judge) changeNeedsMigration(vmi *virtv1.VirtualMachineInstance) bool {
	if vmi.IsFinal() || vmistatus.Migrating(vmi, j.now) {
		return false
	}
	if _, ok := vmi.Annotations[virtv1.WorkloadUpdateMigrationAbortionAnnotation]; ok {
		return false
	}
	return vmistatus.HotplugPending(vmi) || volumesChangePending(vmi)
}

// abortChange: the VMI's workload update migration is to be deleted: its
// change was called off (the abortion annotation), or is gone and the
// migration has not yet reached the point where the target domain is
// ready.
func (j judge) abortChange(vmi *virtv1.VirtualMachineInstance, known []*virtv1.VirtualMachineInstanceMigration) bool {
	n := len(unfinishedUpdates(known))
	if _, ok := vmi.Annotations[virtv1.WorkloadUpdateMigrationAbortionAnnotation]; ok {
		return n > 0
	}
	if vmistatus.HotplugPending(vmi) || volumesChangePending(vmi) {
		return false
	}
	if m := vmi.Status.MigrationState; m != nil && m.TargetNodeDomainReadyTimestamp != nil {
		return false
	}
	return n > 0
}

// unfinishedUpdates are the workload update migrations of ms not final.
func unfinishedUpdates(ms []*virtv1.VirtualMachineInstanceMigration) []*virtv1.VirtualMachineInstanceMigration {
	var out []*virtv1.VirtualMachineInstanceMigration
	for _, m := range ms {
		if _, ok := m.Annotations[virtv1.WorkloadUpdateMigrationAnnotation]; ok && !m.IsFinal() {
			out = append(out, m)
		}
	}
	return out
}

func volumesChangePending(vmi *virtv1.VirtualMachineInstance) bool {
	return vmistatus.ConditionIs(vmi, virtv1.VirtualMachineInstanceVolumesChange, corev1.ConditionTrue)
}

// volumesMigrate: the VMI has volumes to move, and a migration of them
// would take every read-write-once claim along (KubeVirt's
// ValidateVolumesUpdateMigration with no VM).
func volumesMigrate(vmi *virtv1.VirtualMachineInstance) bool {
	return len(vmi.Status.MigratedVolumes) > 0 && vmistatus.StorageMovable(vmi, vmi.Status.MigratedVolumes) == nil
}
