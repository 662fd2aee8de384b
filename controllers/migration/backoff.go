package migration

import (
	"cmp"
	"slices"
	"time"

	virtv1 "kubevirt.io/api/core/v1"
)

// ReasonBackoff is the reason of the event a migration in backoff posts on
// its VMI (KubeVirt's MigrationBackoffReason).
const ReasonBackoff = "MigrationBackoff"

// First backoff after a failed system migration, doubled with each more.
const firstBackoff = 20 * time.Second

// backoff is how long m, a pending migration of the system (an evacuation
// or a workload update), waits before its target pod is made, given mine,
// the VMI's migrations: none unless m is the newest of the VMI's system
// migrations; else 20 s after the failure of the one before it for one
// failed since the last success, doubled for each more, less the time
// since that failure (KubeVirt's handleMigrationBackoff). A user's
// migration never waits, nor one annotated to ignore the backoff.
func backoff(m *virtv1.VirtualMachineInstanceMigration, mine []*virtv1.VirtualMachineInstanceMigration, now time.Time) time.Duration {
	if _, ignore := m.Annotations[virtv1.FuncTestForceIgnoreMigrationBackoffAnnotation]; ignore || !systemMade(m) {
		return 0
	}
	var made []*virtv1.VirtualMachineInstanceMigration
	for _, o := range mine {
		if systemMade(o) {
			made = append(made, o)
		}
	}
	if len(made) < 2 {
		return 0
	}
	// Newest first; KubeVirt's order of two created in one second is its
	// sort's, by name here.
	slices.SortFunc(made, func(a, b *virtv1.VirtualMachineInstanceMigration) int {
		return cmp.Or(b.CreationTimestamp.Compare(a.CreationTimestamp.Time), cmp.Compare(b.Name, a.Name))
	})
	if made[0].UID != m.UID {
		return 0
	}
	wait := time.Duration(0)
	for _, o := range made[1:] {
		if o.Status.Phase == virtv1.MigrationSucceeded {
			break
		}
		if o.DeletionTimestamp != nil || o.Status.Phase != virtv1.MigrationFailed {
			continue
		}
		if wait == 0 {
			wait = firstBackoff
		} else {
			wait *= 2
		}
	}
	if wait == 0 {
		return 0
	}
	// From the failure of the one before m; none recorded (it has not
	// failed), and the backoff is long over.
	var failed time.Time
	for _, ts := range made[1].Status.PhaseTransitionTimestamps {
		if ts.Phase == virtv1.MigrationFailed {
			failed = ts.PhaseTransitionTimestamp.Time
			break
		}
	}
	return max(failed.Add(wait).Sub(now), 0)
}

// systemMade: an evacuation or a workload update's migration, which back
// off after failures.
func systemMade(m *virtv1.VirtualMachineInstanceMigration) bool {
	_, evacuation := m.Annotations[virtv1.EvacuationMigrationAnnotation]
	_, update := m.Annotations[virtv1.WorkloadUpdateMigrationAnnotation]
	return evacuation || update
}
