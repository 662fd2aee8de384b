package vm

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/shard"
)

// instancetypeObject is an instance type or preference of kind, as the
// API serves it.
func instancetypeObject(kind, namespace, name, uid string, generation int64, spec map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"name": name, "uid": uid, "generation": generation, "resourceVersion": "7",
		"labels": map[string]any{"dropped": "from the revision"}}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "instancetype.kubevirt.io/v1beta1", "kind": kind,
		"metadata": meta, "spec": spec}}
}

// typedVM is a VM that names the cluster instance type u1 and the
// preference pref of its namespace, its template without sizes.
func typedVM() *virtv1.VirtualMachine {
	vm := newVM(virtv1.RunStrategyAlways)
	vm.Spec.Template.Spec.Domain.Resources = virtv1.ResourceRequirements{}
	vm.Spec.Template.Spec.Domain.Devices.Disks = []virtv1.Disk{{Name: "root"}}
	vm.Spec.Template.Spec.Volumes = []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{
		ContainerDisk: &virtv1.ContainerDiskSource{Image: "example.invalid/disk"}}}}
	vm.Spec.Instancetype = &virtv1.InstancetypeMatcher{Name: "u1"}
	vm.Spec.Preference = &virtv1.PreferenceMatcher{Name: "pref", Kind: "VirtualMachinePreference"}
	return vm
}

func typedObjects() []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		instancetypeObject("VirtualMachineClusterInstancetype", "", "u1", "it-uid", 2,
			map[string]any{"cpu": map[string]any{"guest": int64(2)}, "memory": map[string]any{"guest": "1Gi"}}),
		instancetypeObject("VirtualMachinePreference", "default", "pref", "pref-uid", 1,
			map[string]any{"devices": map[string]any{"preferredDiskBus": "sata"}}),
	}
}

func createdRevisions(f *fixture) map[string]*appsv1.ControllerRevision {
	out := map[string]*appsv1.ControllerRevision{}
	for _, a := range f.Kube.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "controllerrevisions" {
			cr := c.GetObject().(*appsv1.ControllerRevision)
			out[cr.Name] = cr
		}
	}
	return out
}

// KubeVirt's Store and startVMI: each object stored whole as a revision
// the VM controls, both named in one status patch, the VMI made from the
// template with both applied, and the start revision pinned to them.
func TestAVMsInstancetypeAndPreferenceAreStoredAndApplied(t *testing.T) {
	vm := typedVM()
	objects := typedObjects()
	f := newFixture(t, vm, objects[0], objects[1])
	f.sync(t, vm)

	itRev, prefRev := "vm-u1-v1beta1-it-uid-2", "vm-pref-v1beta1-pref-uid-1"
	revisions := createdRevisions(f)
	it := revisions[itRev]
	if it == nil || revisions[prefRev] == nil {
		t.Fatalf("revisions %v, want %s and %s", keys(revisions), itRev, prefRev)
	}
	wantLabels := map[string]string{revisionObjectGeneration: "2", revisionObjectKind: "VirtualMachineClusterInstancetype",
		revisionObjectName: "u1", revisionObjectUID: "it-uid", revisionObjectVersion: "v1beta1"}
	for k, v := range wantLabels {
		if it.Labels[k] != v {
			t.Errorf("revision label %s=%q, want %q", k, it.Labels[k], v)
		}
	}
	if it.Labels[shard.LabelRange] == "" || len(it.OwnerReferences) != 1 || it.OwnerReferences[0].UID != vm.UID || it.Revision != 0 {
		t.Errorf("revision %+v: want the VM's range, the VM as controller, revision 0", it.ObjectMeta)
	}
	var held map[string]any
	if err := json.Unmarshal(it.Data.Raw, &held); err != nil {
		t.Fatal(err)
	}
	meta := held["metadata"].(map[string]any)
	if held["kind"] != "VirtualMachineClusterInstancetype" || meta["labels"] != nil || meta["uid"] != "it-uid" {
		t.Errorf("revision data %v: want the object with its kind and UID, without its labels", held)
	}

	var patch []map[string]any
	var vmi *virtv1.VirtualMachineInstance
	for _, a := range f.KubeVirt.Actions() {
		switch a := a.(type) {
		case k8stesting.PatchAction:
			if a.GetSubresource() == "status" && a.GetPatchType() == types.JSONPatchType {
				if err := json.Unmarshal(a.GetPatch(), &patch); err != nil {
					t.Fatal(err)
				}
			}
		case k8stesting.CreateAction:
			if created, ok := a.GetObject().(*virtv1.VirtualMachineInstance); ok && a.GetVerb() == "create" {
				vmi = created
			}
		}
	}
	if len(patch) != 2 || patch[0]["path"] != "/status/instancetypeRef" || patch[1]["path"] != "/status/preferenceRef" {
		t.Fatalf("status patch %v, want both refs added", patch)
	}
	if ref := patch[1]["value"].(map[string]any); ref["kind"] != "VirtualMachinePreference" ||
		ref["controllerRevisionRef"].(map[string]any)["name"] != prefRev {
		t.Errorf("preference ref %v", ref)
	}
	if vmi == nil {
		t.Fatalf("no VMI created: %q", kvfake.Writes(f.KubeVirt.Actions()))
	}
	cpu, mem := vmi.Spec.Domain.CPU, vmi.Spec.Domain.Memory
	if cpu == nil || cpu.Sockets != 2 || mem == nil || mem.Guest == nil || !mem.Guest.Equal(resource.MustParse("1Gi")) {
		t.Errorf("VMI cpu %+v memory %+v, want the instance type's 2 sockets and 1Gi", cpu, mem)
	}
	if d := vmi.Spec.Domain.Devices.Disks; len(d) != 1 || d[0].Disk == nil || d[0].Disk.Bus != virtv1.DiskBusSATA {
		t.Errorf("disks %+v, want the preferred SATA bus", d)
	}
	if vmi.Annotations[virtv1.ClusterInstancetypeAnnotation] != "u1" || vmi.Annotations[virtv1.PreferenceAnnotation] != "pref" {
		t.Errorf("VMI annotations %v, want the objects' names", vmi.Annotations)
	}
	start := revisions[startRevisionName(vm)]
	if start == nil {
		t.Fatalf("no start revision among %v", keys(revisions))
	}
	spec, err := decodeStartSpec(start)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Instancetype.RevisionName != itRev || spec.Preference.RevisionName != prefRev {
		t.Errorf("start revision pins %q and %q, want the stored revisions", spec.Instancetype.RevisionName, spec.Preference.RevisionName)
	}
}

// A missing instance type is the VM's Failure with the lookup's error, no
// event and no VMI (KubeVirt's FailedFindInstancetype).
func TestAMissingInstancetypeFailsTheVMWithoutAnEvent(t *testing.T) {
	vm := typedVM()
	f := newFixture(t, vm, typedObjects()[1])
	f.sync(t, vm)
	if slices.Contains(kvfake.Writes(f.KubeVirt.Actions()), "create virtualmachineinstances") {
		t.Fatal("a VMI was created without its instance type")
	}
	cond := failureOf(t, f)
	if cond == nil || cond.Reason != "FailedFindInstancetype" || !strings.Contains(cond.Message, `"u1" not found`) {
		t.Errorf("Failure condition %+v, want FailedFindInstancetype with the lookup's error", cond)
	}
	if len(f.Recorder.Events) != 0 {
		t.Errorf("event %q, want none", <-f.Recorder.Events)
	}
}

// A template that sets what the instance type sets is refused when the
// instance type is first stored, with KubeVirt's message and event.
func TestATemplateConflictingWithItsInstancetypeIsRefused(t *testing.T) {
	vm := typedVM()
	vm.Spec.Template.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
	objects := typedObjects()
	f := newFixture(t, vm, objects[0], objects[1])
	f.sync(t, vm)
	if len(createdRevisions(f)) != 0 {
		t.Errorf("revisions %v stored despite the conflict", keys(createdRevisions(f)))
	}
	want := "error encountered while storing instancetype.kubevirt.io controllerRevisions: " +
		"VM field(s) spec.template.spec.domain.resources.requests.memory conflicts with selected instance type"
	if cond := failureOf(t, f); cond == nil || cond.Reason != "FailedCreate" || cond.Message != want {
		t.Errorf("Failure condition %+v, want FailedCreate %q", cond, want)
	}
	if len(f.Recorder.Events) != 1 || !strings.Contains(<-f.Recorder.Events, "Warning FailedCreate "+want) {
		t.Error("no FailedCreate event with the message")
	}
}

func failureOf(t *testing.T, f *fixture) *virtv1.VirtualMachineCondition {
	t.Helper()
	for _, a := range slices.Backward(f.KubeVirt.Actions()) {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" {
			for _, c := range u.GetObject().(*virtv1.VirtualMachine).Status.Conditions {
				if c.Type == virtv1.VirtualMachineFailure {
					return &c
				}
			}
			return nil
		}
	}
	t.Fatalf("no status written: %q", kvfake.Writes(f.KubeVirt.Actions()))
	return nil
}

func decodeStartSpec(cr *appsv1.ControllerRevision) (*virtv1.VirtualMachineSpec, error) {
	var started struct {
		Spec virtv1.VirtualMachineSpec `json:"spec"`
	}
	return &started.Spec, json.Unmarshal(cr.Data.Raw, &started)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
