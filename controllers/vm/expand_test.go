package vm

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
)

// newPolicyFixture is the VM controller under a KubeVirt CR whose
// instancetype.referencePolicy is policy.
func newPolicyFixture(t *testing.T, policy virtv1.InstancetypeReferencePolicy, objects ...runtime.Object) *fixture {
	t.Helper()
	kv := &virtv1.KubeVirt{Spec: virtv1.KubeVirtSpec{Configuration: virtv1.KubeVirtConfiguration{
		Instancetype: &virtv1.InstancetypeConfiguration{ReferencePolicy: &policy},
	}}, Status: virtv1.KubeVirtStatus{DefaultArchitecture: "amd64"}}
	cfg, err := clusterconfig.FromKubeVirt(kv, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	return newFixtureOn(t, shardedtest.Cluster{Objects: objects, Config: shardedtest.StaticConfig{Config: cfg}})
}

// pinnedVM is typedVM running from stored revisions of its instance type
// and preference, named in its status; it returns the revisions too.
func pinnedVM(t *testing.T) (*virtv1.VirtualMachine, []*appsv1.ControllerRevision) {
	t.Helper()
	vm := typedVM()
	objects := typedObjects()
	var revisions []*appsv1.ControllerRevision
	for i, side := range []matcherSide{instancetypeSide, preferenceSide} {
		kind, err := side.kindOf(side.get(vm))
		if err != nil {
			t.Fatal(err)
		}
		cr, err := newInstancetypeRevision(vm, kind, objects[i], 0)
		if err != nil {
			t.Fatal(err)
		}
		revisions = append(revisions, cr)
		m := side.get(vm)
		*side.ref(&vm.Status) = &virtv1.InstancetypeStatusRef{Name: m.Name, Kind: m.Kind,
			ControllerRevisionRef: &virtv1.ControllerRevisionRef{Name: cr.Name}}
	}
	return vm, revisions
}

// vmUpdates are the VM objects the controller sent by update, of the
// object (subresource "") or its status.
func vmUpdates(f *fixture, subresource string) []*virtv1.VirtualMachine {
	var out []*virtv1.VirtualMachine
	for _, a := range f.KubeVirt.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == subresource {
			if vm, ok := u.GetObject().(*virtv1.VirtualMachine); ok {
				out = append(out, vm)
			}
		}
	}
	return out
}

func deletedRevisions(f *fixture) []string {
	var out []string
	for _, a := range f.Kube.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == "controllerrevisions" {
			out = append(out, d.GetName())
		}
	}
	slices.Sort(out)
	return out
}

// KubeVirt's expand policy: the instance type and preference are written
// into the VM's template, which is defaulted as virt-api defaults a VMI;
// the matchers and refs go; nothing is stored and nothing started in the
// same sync.
func TestTheExpandPolicyWritesTheInstancetypeIntoTheVM(t *testing.T) {
	vm := typedVM()
	objects := typedObjects()
	f := newPolicyFixture(t, virtv1.Expand, vm, objects[0], objects[1])
	f.sync(t, vm)

	updates := vmUpdates(f, "")
	if len(updates) != 1 {
		t.Fatalf("VM updates %d, want 1: %q", len(updates), kvfake.Writes(f.KubeVirt.Actions()))
	}
	got := updates[0]
	if got.Spec.Instancetype != nil || got.Spec.Preference != nil {
		t.Errorf("matchers %+v %+v left in the expanded VM", got.Spec.Instancetype, got.Spec.Preference)
	}
	spec := got.Spec.Template.Spec
	if cpu := spec.Domain.CPU; cpu == nil || cpu.Sockets != 2 || cpu.Cores != 1 || cpu.Threads != 1 {
		t.Errorf("cpu %+v, want the instance type's 2 sockets of one core and thread", cpu)
	}
	if mem := spec.Domain.Memory; mem == nil || mem.Guest == nil || !mem.Guest.Equal(resource.MustParse("1Gi")) {
		t.Errorf("memory %+v, want the instance type's 1Gi", mem)
	}
	if d := spec.Domain.Devices.Disks; len(d) != 1 || d[0].Disk == nil || d[0].Disk.Bus != virtv1.DiskBusSATA {
		t.Errorf("disks %+v, want the preference's SATA bus", d)
	}
	// virt-api's defaults, given after both are applied.
	if spec.Architecture != "amd64" || spec.Domain.Machine == nil || spec.Domain.Machine.Type != "q35" {
		t.Errorf("architecture %q machine %+v, want amd64 and q35", spec.Architecture, spec.Domain.Machine)
	}
	if len(spec.Networks) != 1 || spec.Networks[0].Pod == nil || len(spec.Domain.Devices.Interfaces) != 1 {
		t.Errorf("networks %+v interfaces %+v, want the default pod network", spec.Networks, spec.Domain.Devices.Interfaces)
	}
	if p := spec.Volumes[0].ContainerDisk.ImagePullPolicy; p != corev1.PullAlways {
		t.Errorf("container disk pull policy %q, want Always for an untagged image", p)
	}
	statuses := vmUpdates(f, "status")
	if len(statuses) == 0 || statuses[0].Status.InstancetypeRef != nil || statuses[0].Status.PreferenceRef != nil {
		t.Errorf("status updates %d, want the first without the refs", len(statuses))
	}
	if writes := kvfake.Writes(f.KubeVirt.Actions()); slices.Contains(writes, "create virtualmachineinstances") {
		t.Errorf("writes %q: the sync that expands must not start the VM", writes)
	}
	if len(createdRevisions(f)) != 0 {
		t.Errorf("revisions %v stored under the expand policy", keys(createdRevisions(f)))
	}
}

// expand leaves a VM that runs from stored revisions as it is; expandAll
// expands it and deletes the revisions.
func TestExpandSparesAVMWithRevisionsAndExpandAllDoesNot(t *testing.T) {
	for _, tc := range []struct {
		policy  virtv1.InstancetypeReferencePolicy
		expands bool
	}{{virtv1.Expand, false}, {virtv1.ExpandAll, true}} {
		t.Run(string(tc.policy), func(t *testing.T) {
			vm, revisions := pinnedVM(t)
			objects := typedObjects()
			f := newPolicyFixture(t, tc.policy, vm, objects[0], objects[1], revisions[0], revisions[1])
			f.sync(t, vm)
			updates, deleted := vmUpdates(f, ""), deletedRevisions(f)
			started := slices.Contains(kvfake.Writes(f.KubeVirt.Actions()), "create virtualmachineinstances")
			if !tc.expands {
				if len(updates) != 0 || len(deleted) != 0 || !started {
					t.Errorf("updates %d, revisions deleted %v, started %v: want the VM left as it is and started", len(updates), deleted, started)
				}
				return
			}
			want := []string{revisions[0].Name, revisions[1].Name}
			slices.Sort(want)
			if len(updates) != 1 || updates[0].Spec.Instancetype != nil || !slices.Equal(deleted, want) || started {
				t.Errorf("updates %d, revisions deleted %v, started %v: want the VM expanded, %v deleted, no start", len(updates), deleted, started, want)
			}
		})
	}
}

// A template that conflicts with its instance type cannot be expanded:
// KubeVirt's error, which its VM controller reports as unsupported, in
// the Failure condition, no event, the VM unchanged.
func TestAConflictingTemplateIsNotExpanded(t *testing.T) {
	vm := typedVM()
	vm.Spec.Template.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
	objects := typedObjects()
	f := newPolicyFixture(t, virtv1.ExpandAll, vm, objects[0], objects[1])
	f.sync(t, vm)
	if n := len(vmUpdates(f, "")); n != 0 {
		t.Errorf("VM updated %d times despite the conflict", n)
	}
	want := "unsupported error: error encountered while expanding into VirtualMachine: " +
		"VM field(s) spec.template.spec.domain.resources.requests.memory conflicts with selected instance type"
	if cond := failureOf(t, f); cond == nil || cond.Reason != "UnsupportedSyncError" || cond.Message != want {
		t.Errorf("Failure condition %+v, want UnsupportedSyncError %q", cond, want)
	}
	if len(f.Recorder.Events) != 0 {
		t.Errorf("event %q, want none", <-f.Recorder.Events)
	}
}

// KubeVirt's upgrade: a revision an older KubeVirt stored (no object
// version label) is stored again under today's name and labels, the
// status ref moved to it by a patch that tests the old name first, the
// old revision deleted.
func TestARevisionOfAnOlderKubeVirtIsUpgraded(t *testing.T) {
	vm, revisions := pinnedVM(t)
	legacy := revisions[0]
	newName := legacy.Name
	legacy.Name = "vm-u1-legacy"
	delete(legacy.Labels, revisionObjectVersion)
	vm.Status.InstancetypeRef.ControllerRevisionRef.Name = legacy.Name
	objects := typedObjects()
	f := newFixture(t, vm, objects[0], objects[1], legacy, revisions[1])
	f.sync(t, vm)

	created := createdRevisions(f)[newName]
	if created == nil || created.Labels[revisionObjectVersion] != "v1beta1" || created.Labels[revisionObjectUID] != "it-uid" {
		t.Fatalf("revisions created %v, want %s labelled v1beta1", keys(createdRevisions(f)), newName)
	}
	var ops []map[string]any
	for _, a := range f.KubeVirt.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetSubresource() == "status" && p.GetPatchType() == types.JSONPatchType {
			if err := json.Unmarshal(p.GetPatch(), &ops); err != nil {
				t.Fatal(err)
			}
		}
	}
	path := "/status/instancetypeRef/controllerRevisionRef/name"
	want := []map[string]any{{"op": "test", "path": path, "value": legacy.Name}, {"op": "replace", "path": path, "value": newName}}
	if got, _ := json.Marshal(ops); string(got) != string(must(json.Marshal(want))) {
		t.Errorf("status patch %s, want %s", got, must(json.Marshal(want)))
	}
	if deleted := deletedRevisions(f); !slices.Equal(deleted, []string{legacy.Name}) {
		t.Errorf("revisions deleted %v, want the legacy one", deleted)
	}
	if !slices.Contains(kvfake.Writes(f.KubeVirt.Actions()), "create virtualmachineinstances") {
		t.Error("the VM was not started after the upgrade")
	}
}

// An upgrade that finds a revision of the new name takes it if it holds
// the same object (a deliberate difference: KubeVirt fails the VM for
// good), and fails the VM with KubeVirt's message if it holds another.
func TestAnUpgradeTakesAnEqualRevisionOfTheNewName(t *testing.T) {
	for _, tc := range []struct {
		name  string
		equal bool
	}{{"equal", true}, {"different", false}} {
		t.Run(tc.name, func(t *testing.T) {
			vm, revisions := pinnedVM(t)
			upgraded := revisions[0]
			legacy := upgraded.DeepCopy()
			legacy.Name = "vm-u1-legacy"
			delete(legacy.Labels, revisionObjectVersion)
			vm.Status.InstancetypeRef.ControllerRevisionRef.Name = legacy.Name
			if !tc.equal {
				upgraded.Data.Raw = []byte(strings.Replace(string(upgraded.Data.Raw), `"guest":2`, `"guest":4`, 1))
			}
			objects := typedObjects()
			f := newFixture(t, vm, objects[0], objects[1], legacy, upgraded, revisions[1])
			f.sync(t, vm)
			deleted := deletedRevisions(f)
			if tc.equal {
				if !slices.Equal(deleted, []string{legacy.Name}) {
					t.Errorf("revisions deleted %v, want the legacy one", deleted)
				}
				return
			}
			want := "error encountered while upgrading instancetype.kubevirt.io controllerRevisions: " +
				"found existing ControllerRevision with unexpected data: " + upgraded.Name
			if cond := failureOf(t, f); cond == nil || cond.Reason != "FailedCreate" || cond.Message != want {
				t.Errorf("Failure condition %+v, want FailedCreate %q", cond, want)
			}
			if len(deleted) != 0 {
				t.Errorf("revisions deleted %v, want none", deleted)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
