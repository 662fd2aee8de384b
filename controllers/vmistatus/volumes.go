package vmistatus

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// StorageMovable judges whether v can migrate with its volumes moving as
// moves say (KubeVirt v1.8.1's ValidateVolumesUpdateMigration): nothing
// to move passes; otherwise the node agent must not have said its storage
// cannot migrate, and every read-write-once claim of v must be among the
// moves, as a claim only one node can mount cannot stay behind. The
// claim of the VM's persistent TPM/EFI state is exempt; KubeVirt finds it
// by comparing volume names with that claim's name, which exempts a
// volume named as the claim, and so does this.
func StorageMovable(v *virtv1.VirtualMachineInstance, moves []virtv1.StorageMigratedVolumeInfo) error {
	if len(moves) == 0 {
		return nil
	}
	if c := Condition(v, virtv1.VirtualMachineInstanceIsStorageLiveMigratable); c != nil && c.Status == corev1.ConditionFalse {
		return fmt.Errorf("cannot migrate the volumes as the VMI isn't migratable: %s", c.Message)
	}
	state := stateClaim(v)
	for _, s := range v.Status.VolumeStatus {
		if s.PersistentVolumeClaimInfo == nil || s.Name == state {
			continue
		}
		if readWriteOnce(s.PersistentVolumeClaimInfo.AccessModes) &&
			!slices.ContainsFunc(moves, func(m virtv1.StorageMigratedVolumeInfo) bool { return m.VolumeName == s.Name }) {
			return fmt.Errorf("cannot migrate the VM. The volume %s is RWO and not included in the migration volumes", s.Name)
		}
	}
	return nil
}

// stateClaim is the claim of v's persistent TPM/EFI state as KubeVirt's
// CurrentPVCName reads it from the volume status (the entry whose name
// holds persistent-state-for-<vmi>); "" without one.
func stateClaim(v *virtv1.VirtualMachineInstance) string {
	base := "persistent-state-for-" + v.Name
	for _, s := range v.Status.VolumeStatus {
		if strings.Contains(s.Name, base) && s.PersistentVolumeClaimInfo != nil {
			return s.PersistentVolumeClaimInfo.ClaimName
		}
	}
	return ""
}

// readWriteOnce: no access mode lets another node mount the claim (no
// modes at all counts).
func readWriteOnce(modes []corev1.PersistentVolumeAccessMode) bool {
	return !slices.ContainsFunc(modes, func(m corev1.PersistentVolumeAccessMode) bool {
		return m == corev1.ReadOnlyMany || m == corev1.ReadWriteMany
	})
}
