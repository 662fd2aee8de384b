package workloadupdate_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/cdi"
	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/vmistatus"
	"github.com/virtshard/virtshard/shard"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

// A running VM whose updateVolumesStrategy is Migration gets another claim
// for its data volume in its template. The replica holding the VM's range
// is killed the moment the move is asked for; the others take the range
// over, and the move goes on as KubeVirt's does: the new claim reaches the
// VMI's spec, the VMI is migrated once (a kubevirt-workload-update-
// migration labelled kubevirt.io/volume-update-migration), the target's
// node agent ends the move, and the VM's status.volumeUpdateState keeps
// the move's record. Three replica processes.
func TestAVolumeMoveMigratesTheVMIWhileItsReplicaDies(t *testing.T) {
	ns, kube, kv := controllertest.Clients(t)
	ctx := context.Background()
	createKubeVirt(t, dynamic.NewForConfigOrDie(clustertest.Config(t)).Resource(clusterconfig.KubeVirtResource).Namespace(ns))
	procs := controllertest.StartProcesses(t, ns, 3, "--kubevirt-namespace="+ns)
	controllertest.WaitShared(t, procs)

	for _, claim := range []string{"old-disk", "new-disk"} {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ptr.To(cdi.StorageClassImmediate),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if _, err := kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	template := workload.VMI("")
	template.Spec.Domain.Devices.Disks = append(template.Spec.Domain.Devices.Disks,
		virtv1.Disk{Name: "data", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}})
	template.Spec.Volumes = append(template.Spec.Volumes, virtv1.Volume{Name: "data", VolumeSource: virtv1.VolumeSource{
		PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "old-disk"}}}})
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "mover"},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyAlways), UpdateVolumesStrategy: ptr.To(virtv1.UpdateVolumesStrategyMigration),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: template.Labels}, Spec: template.Spec}}}
	vm, err := kv.VirtualMachines(ns).Create(ctx, vm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := waitVMI(t, kv, ns, vm.Name, "Running on its first claim", 2*time.Minute, func(v *virtv1.VirtualMachineInstance) bool {
		return v.Status.Phase == virtv1.Running && v.Status.NodeName != "" && dataClaim(v) == "old-disk"
	})

	// The holder of the VM's range, which its VMI's range label names.
	rng := before.Labels[shard.LabelRange]
	m, err := shard.ReadMap(ctx, kube, ns, "virtshard")
	if err != nil {
		t.Fatal(err)
	}
	holder := ""
	for _, r := range m.Ranges {
		if fmt.Sprint(r.Range) == rng {
			holder = r.Holder
		}
	}
	victim := slices.IndexFunc(procs, func(p *replicas.Replica) bool { return p.ID == holder })
	if victim < 0 {
		t.Fatalf("no replica holds range %q of the VM (holder %q)", rng, holder)
	}

	patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/template/spec/volumes/%d/persistentVolumeClaim/claimName","value":"new-disk"}]`, len(template.Spec.Volumes)-1)
	if _, err := kv.VirtualMachines(ns).Patch(ctx, vm.Name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	procs[victim].Kill()
	t.Logf("killed %s, the holder of the VM's range %s, as the move was asked for", holder, rng)

	after := waitVMI(t, kv, ns, vm.Name, "moved to the new claim with the move ended", 3*time.Minute, func(v *virtv1.VirtualMachineInstance) bool {
		return dataClaim(v) == "new-disk" && v.Status.MigrationState != nil && v.Status.MigrationState.Completed &&
			len(v.Status.MigratedVolumes) == 0 && vmistatus.Condition(v, virtv1.VirtualMachineInstanceVolumesChange) == nil
	})
	if after.UID != before.UID || after.Status.Phase != virtv1.Running {
		t.Errorf("VMI %s %s after the move, was %s: a volume move keeps it running", after.UID, after.Status.Phase, before.UID)
	}
	if after.Status.NodeName == before.Status.NodeName {
		t.Errorf("the VMI stayed on %s: the move is taken by a migration", before.Status.NodeName)
	}
	if m := theWorkloadUpdateMigration(t, kv, ns); m != nil {
		if _, labelled := m.Labels[virtv1.VolumesUpdateMigration]; !labelled {
			t.Errorf("migration labels %v, want %s", m.Labels, virtv1.VolumesUpdateMigration)
		}
	}
	got, err := kv.VirtualMachines(ns).Get(ctx, vm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Status.VolumeUpdateState; s == nil || s.VolumeMigrationState == nil || len(s.VolumeMigrationState.MigratedVolumes) != 1 ||
		s.VolumeMigrationState.MigratedVolumes[0].DestinationPVCInfo == nil || s.VolumeMigrationState.MigratedVolumes[0].DestinationPVCInfo.ClaimName != "new-disk" {
		t.Errorf("the VM's volumeUpdateState %+v: want the move to new-disk recorded", s)
	}
}

// dataClaim is the claim of v's volume "data".
func dataClaim(v *virtv1.VirtualMachineInstance) string {
	i := slices.IndexFunc(v.Spec.Volumes, func(vol virtv1.Volume) bool { return vol.Name == "data" })
	if i < 0 || v.Spec.Volumes[i].PersistentVolumeClaim == nil {
		return ""
	}
	return v.Spec.Volumes[i].PersistentVolumeClaim.ClaimName
}
