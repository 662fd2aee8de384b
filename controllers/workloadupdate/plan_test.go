package workloadupdate

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
)

const (
	oldImage = "registry.example/virt-launcher:v1.8.0"
	newImage = "registry.example/virt-launcher:v1.8.1"
)

// running is a Running VMI on the old launcher that can migrate.
func running(name string) *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Running, NodeName: "node-1", LauncherContainerImageVersion: oldImage,
			Conditions: []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue}}},
	}
}

func with(vmi *virtv1.VirtualMachineInstance, change func(*virtv1.VirtualMachineInstance)) *virtv1.VirtualMachineInstance {
	change(vmi)
	return vmi
}

func notMigratable(vmi *virtv1.VirtualMachineInstance) { vmi.Status.Conditions = nil }

// Sorted as KubeVirt's getUpdateData sorts: counted VMIs are on an old
// launcher or wait for a migration; of those, the ones with no migration
// under way are migrated if the strategy and the VMI allow it, else
// evicted if the strategy allows that.
func TestJudgeSortsAsKubeVirt(t *testing.T) {
	now := time.Now()
	started := &virtv1.VirtualMachineInstanceMigrationState{StartTimestamp: &metav1.Time{Time: now.Add(-time.Second)}}
	tests := []struct {
		name       string
		vmi        *virtv1.VirtualMachineInstance
		methods    []virtv1.WorkloadUpdateMethod
		unfinished bool
		updateMigs int
		want       string // migrate, evict, abort, counted (only), or none
	}{
		{"old launcher, migratable", running("a"), []virtv1.WorkloadUpdateMethod{"LiveMigrate", "Evict"}, false, 0, "migrate"},
		{"old launcher, not migratable", with(running("a"), notMigratable), []virtv1.WorkloadUpdateMethod{"LiveMigrate", "Evict"}, false, 0, "evict"},
		{"old launcher, not migratable, migration only", with(running("a"), notMigratable), []virtv1.WorkloadUpdateMethod{"LiveMigrate"}, false, 0, "counted"},
		{"old launcher, migratable, evict only", running("a"), []virtv1.WorkloadUpdateMethod{"Evict"}, false, 0, "evict"},
		{"old launcher, no methods", running("a"), nil, false, 0, "counted"},
		{"old launcher, a migration pending", running("a"), []virtv1.WorkloadUpdateMethod{"LiveMigrate"}, true, 0, "counted"},
		{"old launcher, migrating", with(running("a"), func(v *virtv1.VirtualMachineInstance) { v.Status.MigrationState = started }),
			[]virtv1.WorkloadUpdateMethod{"LiveMigrate"}, false, 0, "counted"},
		{"current launcher", with(running("a"), func(v *virtv1.VirtualMachineInstance) { v.Status.LauncherContainerImageVersion = newImage }),
			[]virtv1.WorkloadUpdateMethod{"LiveMigrate"}, false, 0, "none"},
		{"launcher not known yet", with(running("a"), func(v *virtv1.VirtualMachineInstance) { v.Status.LauncherContainerImageVersion = "" }),
			[]virtv1.WorkloadUpdateMethod{"LiveMigrate"}, false, 0, "none"},
		{"not running", with(running("a"), func(v *virtv1.VirtualMachineInstance) { v.Status.Phase = virtv1.Scheduled }),
			[]virtv1.WorkloadUpdateMethod{"LiveMigrate"}, false, 0, "none"},
		{"being deleted", with(running("a"), func(v *virtv1.VirtualMachineInstance) { v.DeletionTimestamp = &metav1.Time{Time: now} }),
			[]virtv1.WorkloadUpdateMethod{"LiveMigrate"}, false, 0, "none"},
		{"CPU change waits, current launcher", with(running("a"), func(v *virtv1.VirtualMachineInstance) {
			v.Status.LauncherContainerImageVersion = newImage
			v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: corev1.ConditionFalse})
		}), []virtv1.WorkloadUpdateMethod{"LiveMigrate"}, false, 0, "migrate"},
		{"memory change called off, migration left", with(running("a"), func(v *virtv1.VirtualMachineInstance) {
			v.Status.LauncherContainerImageVersion = newImage
			v.Annotations = map[string]string{virtv1.WorkloadUpdateMigrationAbortionAnnotation: ""}
			v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceMemoryChange, Status: corev1.ConditionTrue})
		}), []virtv1.WorkloadUpdateMethod{"LiveMigrate"}, true, 1, "abort"},
		{"change gone, migration left", with(running("a"), func(v *virtv1.VirtualMachineInstance) { v.Status.LauncherContainerImageVersion = newImage }),
			[]virtv1.WorkloadUpdateMethod{"LiveMigrate"}, true, 1, "abort"},
		{"change gone, target domain ready", with(running("a"), func(v *virtv1.VirtualMachineInstance) {
			v.Status.LauncherContainerImageVersion = newImage
			v.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{TargetNodeDomainReadyTimestamp: &metav1.Time{Time: now}}
		}), []virtv1.WorkloadUpdateMethod{"LiveMigrate"}, true, 1, "none"},
		{"old launcher and an update migration: counted, not aborted", running("a"), []virtv1.WorkloadUpdateMethod{"LiveMigrate"}, true, 1, "counted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := judge{image: newImage, now: now,
				migrations: func(string) []*virtv1.VirtualMachineInstanceMigration {
					switch {
					case tt.updateMigs > 0:
						return []*virtv1.VirtualMachineInstanceMigration{{ObjectMeta: metav1.ObjectMeta{
							Annotations: map[string]string{virtv1.WorkloadUpdateMigrationAnnotation: ""}}}} // no phase yet
					case tt.unfinished:
						return []*virtv1.VirtualMachineInstanceMigration{{}}
					}
					return nil
				}}
			for _, m := range tt.methods {
				j.migrateAllowed = j.migrateAllowed || m == virtv1.WorkloadUpdateMethodLiveMigrate
				j.evictAllowed = j.evictAllowed || m == virtv1.WorkloadUpdateMethodEvict
			}
			p := plan{outdated: map[int]int{}}
			j.add(&p, held{Range: &caches.Range{Index: 3}, Object: tt.vmi})
			got := "none"
			switch {
			case len(p.migrate) == 1:
				got = "migrate"
			case len(p.evict) == 1:
				got = "evict"
			case len(p.abort) == 1:
				got = "abort"
			case p.outdated[3] == 1:
				got = "counted"
			}
			if got != tt.want {
				t.Errorf("sorted %s, want %s", got, tt.want)
			}
			if counted := p.outdated[3] == 1; counted != (tt.want == "migrate" || tt.want == "evict" || tt.want == "counted") {
				t.Errorf("counted %v", counted)
			}
		})
	}
}

// A volume migration takes every read-write-once claim along, or the VMI
// does not migrate for it.
func TestVolumesMigrateOnlyWithEveryReadWriteOnceClaim(t *testing.T) {
	vmi := running("a")
	vmi.Status.VolumeStatus = []virtv1.VolumeStatus{
		{Name: "root", PersistentVolumeClaimInfo: &virtv1.PersistentVolumeClaimInfo{ClaimName: "root", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}},
		{Name: "shared", PersistentVolumeClaimInfo: &virtv1.PersistentVolumeClaimInfo{ClaimName: "shared", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}},
	}
	if volumesMigrate(vmi) {
		t.Error("a VMI with no volumes to migrate migrates for them")
	}
	vmi.Status.MigratedVolumes = []virtv1.StorageMigratedVolumeInfo{{VolumeName: "root"}}
	if !volumesMigrate(vmi) {
		t.Error("the read-write-once claim is taken along, yet the VMI does not migrate")
	}
	vmi.Status.MigratedVolumes = []virtv1.StorageMigratedVolumeInfo{{VolumeName: "shared"}}
	if volumesMigrate(vmi) {
		t.Error("the read-write-once claim is left out, yet the VMI migrates")
	}
	vmi.Status.MigratedVolumes = []virtv1.StorageMigratedVolumeInfo{{VolumeName: "root"}}
	vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceIsStorageLiveMigratable, Status: corev1.ConditionFalse})
	if volumesMigrate(vmi) {
		t.Error("storage that cannot migrate migrates")
	}
}

// At most size evictions within any interval, shared by whoever draws.
func TestDrawKeepsEveryIntervalWithinTheBatchSize(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	r, n := record{}.draw(4, 10, time.Minute, t0)
	if n != 4 || len(r.Evicted) != 4 {
		t.Fatalf("first draw %d, evicted %v", n, r.Evicted)
	}
	r, n = r.draw(8, 10, time.Minute, t0.Add(5*time.Second))
	if n != 6 || len(r.Evicted) != 10 {
		t.Fatalf("second draw %d: want the 6 left of the interval's 10", n)
	}
	if _, n := r.draw(1, 10, time.Minute, t0.Add(59*time.Second)); n != 0 {
		t.Fatalf("a draw with 10 granted within the interval got %d", n)
	}
	// A minute after the first draw its 4 are out of the window, the 6 of
	// the second are not.
	r, n = r.draw(10, 10, time.Minute, t0.Add(time.Minute))
	if n != 4 || len(r.Evicted) != 10 {
		t.Fatalf("draw a minute after the first %d, evicted %v: want the first draw's 4 back", n, r.Evicted)
	}
	if r2, n := r.draw(0, 10, time.Minute, t0.Add(3*time.Minute)); n != 0 || len(r2.Evicted) != len(r.Evicted) {
		t.Fatal("drawing nothing changed the record")
	}
}

func TestWithCountsReplacesTheGivenRangesOnly(t *testing.T) {
	r := record{Outdated: map[string]int{"1": 4, "2": 5}}
	got := r.withCounts(map[int]int{1: 0, 3: 2})
	if len(got.Outdated) != 2 || got.Outdated["2"] != 5 || got.Outdated["3"] != 2 || got.total() != 7 {
		t.Errorf("counts %v", got.Outdated)
	}
	if r.Outdated["1"] != 4 {
		t.Error("withCounts changed the record it was given")
	}
}
