package vm_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/test/clustertest"
)

// A VM as users write it, on 3 replicas: a disk CDI imports, an instance
// type and a preference. It runs with both applied and their revisions
// stored; moving it to a preference the VMI cannot take live makes it
// RestartRequired.
func TestAVMWithDataVolumeInstancetypeAndPreference(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(clustertest.Config(t))
	create := func(gvr schema.GroupVersionResource, kind, name string, spec map[string]any) {
		t.Helper()
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "instancetype.kubevirt.io/v1beta1", "kind": kind,
			"metadata": map[string]any{"name": name}, "spec": spec}}
		if _, err := dyn.Resource(gvr).Namespace(e.ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(caches.InstancetypeGVR, "VirtualMachineInstancetype", "medium",
		map[string]any{"cpu": map[string]any{"guest": int64(4)}, "memory": map[string]any{"guest": "128Mi"}})
	create(caches.PreferenceGVR, "VirtualMachinePreference", "sata",
		map[string]any{"cpu": map[string]any{"preferredCPUTopology": "cores"}, "devices": map[string]any{"preferredDiskBus": "sata"},
			"preferredTerminationGracePeriodSeconds": int64(45)})
	create(caches.PreferenceGVR, "VirtualMachinePreference", "patient",
		map[string]any{"cpu": map[string]any{"preferredCPUTopology": "cores"}, "preferredTerminationGracePeriodSeconds": int64(600)})

	template := workload.AsWritten("typed")
	template.Spec.Domain.Resources, template.Spec.Domain.CPU = virtv1.ResourceRequirements{}, nil
	template.Spec.TerminationGracePeriodSeconds = nil // the preference's
	template.Spec.Domain.Devices.Disks = append(template.Spec.Domain.Devices.Disks, virtv1.Disk{Name: "root"})
	template.Spec.Volumes = append(template.Spec.Volumes, virtv1.Volume{Name: "root",
		VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: "typed-root"}}})
	always := virtv1.RunStrategyAlways
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "typed"},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy:  &always,
			Instancetype: &virtv1.InstancetypeMatcher{Name: "medium", Kind: "VirtualMachineInstancetype"},
			Preference:   &virtv1.PreferenceMatcher{Name: "sata", Kind: "VirtualMachinePreference"},
			Template:     &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: template.ObjectMeta, Spec: template.Spec},
			DataVolumeTemplates: []virtv1.DataVolumeTemplateSpec{{
				ObjectMeta: metav1.ObjectMeta{Name: "typed-root"},
				Spec: cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
					Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}},
			}},
		},
	}
	if _, err := e.kv.VirtualMachines(e.ns).Create(ctx, vm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vm = e.waitVM("typed", "Running", printable(virtv1.VirtualMachineStatusRunning))

	vmi := e.vmi("typed")
	if cpu := vmi.Spec.Domain.CPU; cpu == nil || cpu.Sockets != 1 || cpu.Cores != 4 || cpu.Threads != 1 {
		t.Errorf("VMI cpu %+v, want the instance type's 4 vCPUs as cores", cpu)
	}
	if m := vmi.Spec.Domain.Memory; m == nil || m.Guest == nil || !m.Guest.Equal(resource.MustParse("128Mi")) {
		t.Errorf("VMI memory %+v, want the instance type's 128Mi", m)
	}
	root := slices.IndexFunc(vmi.Spec.Domain.Devices.Disks, func(d virtv1.Disk) bool { return d.Name == "root" })
	if root < 0 || vmi.Spec.Domain.Devices.Disks[root].Disk == nil || vmi.Spec.Domain.Devices.Disks[root].Disk.Bus != virtv1.DiskBusSATA {
		t.Errorf("VMI disks %+v, want root on the preferred SATA bus", vmi.Spec.Domain.Devices.Disks)
	}
	if g := vmi.Spec.TerminationGracePeriodSeconds; g == nil || *g != 45 {
		t.Errorf("VMI termination grace period %v, want the preferred 45", ptr.Deref(g, -1))
	}
	if vmi.Annotations[virtv1.InstancetypeAnnotation] != "medium" || vmi.Annotations[virtv1.PreferenceAnnotation] != "sata" {
		t.Errorf("VMI annotations %v, want the instance type's and preference's names", vmi.Annotations)
	}
	for what, ref := range map[string]*virtv1.InstancetypeStatusRef{"instancetypeRef": vm.Status.InstancetypeRef, "preferenceRef": vm.Status.PreferenceRef} {
		if ref == nil || ref.ControllerRevisionRef == nil {
			t.Errorf("status.%s %+v, want a revision", what, ref)
			continue
		}
		cr, err := e.kube.AppsV1().ControllerRevisions(e.ns).Get(ctx, ref.ControllerRevisionRef.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("status.%s names revision %s: %v", what, ref.ControllerRevisionRef.Name, err)
			continue
		}
		if owner := metav1.GetControllerOf(cr); owner == nil || owner.UID != vm.UID || cr.Labels["instancetype.kubevirt.io/object-name"] != ref.Name {
			t.Errorf("revision %s: controller %+v, labels %v; want the VM and the object's name", cr.Name, owner, cr.Labels)
		}
	}

	// Another preference: a termination grace period the VMI cannot take
	// live.
	if _, err := e.kv.VirtualMachines(e.ns).Patch(ctx, "typed", types.MergePatchType,
		[]byte(`{"spec":{"preference":{"name":"patient"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitVM("typed", "RestartRequired", func(vm *virtv1.VirtualMachine) bool {
		return slices.ContainsFunc(vm.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
			return c.Type == virtv1.VirtualMachineRestartRequired && c.Status == corev1.ConditionTrue
		})
	})
}
