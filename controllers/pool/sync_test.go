package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	poolv1 "kubevirt.io/api/pool/v1beta1"

	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
	"github.com/virtshard/virtshard/shard"
)

type fixture struct {
	*shardedtest.Fixture
	c *Controller
}

func start(t *testing.T, objects ...runtime.Object) *fixture {
	t.Helper()
	f, ctrl := shardedtest.StartController(t, "pool", func(env *sharded.Env, rt *sharded.Runtime) (*Controller, *sharded.Controller, error) {
		c := newController(env, rt)
		return c, c.declare(), nil
	}, shardedtest.Cluster{Objects: objects})
	// The fake's tracker does not move resourceVersions, by which the
	// replica's overlay of its own writes tells them newer than its cache.
	for _, verb := range []string{"update", "patch"} {
		f.KubeVirt.PrependReactor(verb, "virtualmachinepools", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if u, ok := a.(k8stesting.UpdateAction); ok && a.GetVerb() == "update" {
				p := u.GetObject().(*poolv1.VirtualMachinePool)
				rv, _ := strconv.Atoi(p.ResourceVersion)
				p.ResourceVersion = strconv.Itoa(rv + 1)
			}
			return false, nil, nil
		})
	}
	return &fixture{f, ctrl}
}

func (f *fixture) sync(p *poolv1.VirtualMachinePool) error {
	_, err := f.c.sync(context.Background(), sharded.Item{Range: f.Ranges.Of(p), Key: p.Namespace + "/" + p.Name})
	return err
}

func newPool(replicas int32) *poolv1.VirtualMachinePool {
	return &poolv1.VirtualMachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "pool-uid", ResourceVersion: "1", Generation: 2,
			Finalizers: []string{Finalizer}},
		Spec: poolv1.VirtualMachinePoolSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "p"}},
			VirtualMachineTemplate: &poolv1.VirtualMachineTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "p"}},
				Spec: virtv1.VirtualMachineSpec{
					RunStrategy: ptr.To(virtv1.RunStrategyAlways),
					Template:    &virtv1.VirtualMachineInstanceTemplateSpec{},
				},
			},
		},
	}
}

// poolVM is the pool's VM at index on the pool's range.
func poolVM(t *testing.T, p *poolv1.VirtualMachinePool, index int, ready bool) *virtv1.VirtualMachine {
	v := newVM(p, index, "p-2", shardedtest.Ranges(t).Of(p))
	v.UID, v.ResourceVersion = types.UID(fmt.Sprintf("vm-%d", index)), "1"
	if ready {
		v.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionTrue}}
	}
	return v
}

func created(f *fixture) []*virtv1.VirtualMachine {
	var out []*virtv1.VirtualMachine
	for _, a := range f.KubeVirt.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetVerb() == "create" && a.GetResource().Resource == "virtualmachines" {
			out = append(out, c.GetObject().(*virtv1.VirtualMachine))
		}
	}
	slices.SortFunc(out, func(a, b *virtv1.VirtualMachine) int { return indexOf(a.Name) - indexOf(b.Name) })
	return out
}

func TestAPoolCreatesItsVMsInItsLowestFreeIndexes(t *testing.T) {
	p := newPool(3)
	f := start(t, p, poolVM(t, p, 0, true), poolVM(t, p, 2, false))
	if err := f.sync(p); err != nil {
		t.Fatal(err)
	}
	vms := created(f)
	if len(vms) != 1 || vms[0].Name != "p-1" {
		t.Fatalf("created %v, want p-1 only", vms)
	}
	v := vms[0]
	if v.Labels["app"] != "p" || v.Labels[virtv1.VirtualMachinePoolRevisionName] != "p-2" ||
		v.Spec.Template.ObjectMeta.Labels[virtv1.VirtualMachinePoolRevisionName] != "p-2" ||
		!slices.Equal(v.Finalizers, []string{Finalizer}) || !metav1.IsControlledBy(v, p) ||
		v.Labels[shard.LabelFleetRange] != strconv.Itoa(f.Ranges.Of(p)) || v.Labels[shard.LabelRange] != "" {
		t.Errorf("VM %+v: want the template's labels, the revision p-2 on it and its VMI template, the pool's finalizer, controller and range as its fleet's (not its own)", v.ObjectMeta)
	}
	if !slices.Contains(f.KubeWrites(), "create controllerrevisions") {
		t.Errorf("kube writes %q, want the revision of the pool's spec", f.KubeWrites())
	}
	if events := f.Events(); !slices.Contains(events, "Normal SuccessfulCreate Created VM default/p-1") {
		t.Errorf("events %q", events)
	}
}

func TestAPoolScalesInFromItsHighestIndex(t *testing.T) {
	p := newPool(1)
	f := start(t, p, poolVM(t, p, 0, true), poolVM(t, p, 1, true), poolVM(t, p, 2, true))
	if err := f.sync(p); err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, a := range f.KubeVirt.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && a.GetVerb() == "delete" {
			deleted = append(deleted, d.GetName())
		}
	}
	slices.Sort(deleted)
	if !slices.Equal(deleted, []string{"p-1", "p-2"}) {
		t.Errorf("deleted %q, want p-1 and p-2", deleted)
	}
}

func TestAPoolsStatusCountsReadyVMsAndSaysPaused(t *testing.T) {
	p := newPool(2)
	p.Spec.Paused = true
	f := start(t, p, poolVM(t, p, 0, true), poolVM(t, p, 1, false))
	if err := f.sync(p); err != nil {
		t.Fatal(err)
	}
	var st *poolv1.VirtualMachinePoolStatus
	for _, a := range f.KubeVirt.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetVerb() == "update" && a.GetSubresource() == "status" {
			st = &u.GetObject().(*poolv1.VirtualMachinePool).Status
		}
	}
	if st == nil {
		t.Fatalf("no status written: %q", f.KubeVirtWrites())
	}
	if st.Replicas != 2 || st.ReadyReplicas != 1 || st.LabelSelector != "app=p" || len(st.Conditions) != 1 ||
		st.Conditions[0].Type != poolv1.VirtualMachinePoolReplicaPaused || st.Conditions[0].Message != "Pool controller is paused" {
		t.Errorf("status %+v", st)
	}
	if events := f.Events(); !slices.Equal(events, []string{"Normal SuccessfulPaused Pool is paused"}) {
		t.Errorf("events %q", events)
	}
}

func TestTheIndexReachesDataVolumesAndAskedForReferences(t *testing.T) {
	p := newPool(1)
	p.Spec.NameGeneration = &poolv1.VirtualMachinePoolNameGeneration{AppendIndexToConfigMapRefs: ptr.To(true)}
	p.Spec.VirtualMachineTemplate.Spec.DataVolumeTemplates = []virtv1.DataVolumeTemplateSpec{{ObjectMeta: metav1.ObjectMeta{Name: "root"}}}
	p.Spec.VirtualMachineTemplate.Spec.Template.Spec.Volumes = []virtv1.Volume{
		{Name: "a", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: "root"}}},
		{Name: "b", VolumeSource: virtv1.VolumeSource{ConfigMap: &virtv1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
		{Name: "c", VolumeSource: virtv1.VolumeSource{Secret: &virtv1.SecretVolumeSource{SecretName: "s"}}},
	}
	spec := indexedSpec(&p.Spec, 7)
	vols := spec.Template.Spec.Volumes
	if spec.DataVolumeTemplates[0].Name != "root-7" || vols[0].DataVolume.Name != "root-7" || vols[1].ConfigMap.Name != "cm-7" || vols[2].Secret.SecretName != "s" {
		t.Errorf("indexed spec %+v", spec)
	}
	if p.Spec.VirtualMachineTemplate.Spec.DataVolumeTemplates[0].Name != "root" {
		t.Error("the pool's own template changed")
	}
}

// revision is the pool's revision at generation gen, holding spec.
func revision(t *testing.T, p *poolv1.VirtualMachinePool, gen int64, spec poolv1.VirtualMachinePoolSpec) *appsv1.ControllerRevision {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: fmt.Sprintf("%s-%d", p.Name, gen), UID: types.UID(fmt.Sprintf("cr-%d", gen)), ResourceVersion: "1",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(p, poolv1.SchemeGroupVersion.WithKind(kind))}},
		Data: runtime.RawExtension{Raw: raw}, Revision: gen,
	}
	shard.StampRange(cr, shardedtest.Ranges(t).Of(p))
	return cr
}

// vmiOf is v's running, ready VMI, started from the given pool revision:
// on its VM's range, in the pool's view.
func vmiOf(t *testing.T, p *poolv1.VirtualMachinePool, v *virtv1.VirtualMachine, rev string) *virtv1.VirtualMachineInstance {
	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name, UID: "vmi-" + v.UID, ResourceVersion: "1",
			Labels:          map[string]string{virtv1.VirtualMachinePoolRevisionName: rev},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(v, virtv1.VirtualMachineGroupVersionKind)}},
		Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Running, Conditions: []virtv1.VirtualMachineInstanceCondition{
			{Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}}},
	}
	shard.StampRange(vmi, shardedtest.Ranges(t).Of(v))
	shard.StampFleetRange(vmi, shardedtest.Ranges(t).Of(p))
	return vmi
}

// actions are the fake's writes of a resource, as "verb name".
func actions(f *fixture, resource string) []string {
	var out []string
	for _, a := range append(f.KubeVirt.Actions(), f.Kube.Actions()...) {
		if a.GetResource().Resource != resource {
			continue
		}
		switch a := a.(type) {
		case k8stesting.DeleteAction:
			out = append(out, "delete "+a.GetName())
		case k8stesting.PatchAction:
			out = append(out, "patch "+a.GetName())
		case k8stesting.CreateAction: // an update's too
			if a.GetSubresource() == "" {
				out = append(out, a.GetVerb()+" "+a.GetObject().(metav1.Object).GetName())
			}
		}
	}
	slices.Sort(out)
	return out
}

// A VM made from an older template is rewritten to the pool's template at
// its index, under the new revision, keeping its firmware identity and
// its range; with the opportunistic strategy its VMI is left running.
func TestAnOutdatedVMIsRewrittenInPlaceKeepingItsIdentity(t *testing.T) {
	p := newPool(1)
	p.Generation = 3
	p.Spec.UpdateStrategy = &poolv1.VirtualMachinePoolUpdateStrategy{Opportunistic: &poolv1.VirtualMachineOpportunisticUpdateStrategy{}}
	old := p.Spec.DeepCopy()
	old.VirtualMachineTemplate.Spec.Template.Spec.Domain.CPU = &virtv1.CPU{Cores: 1}
	p.Spec.VirtualMachineTemplate.Spec.Template.Spec.Domain.CPU = &virtv1.CPU{Cores: 2}
	v := poolVM(t, p, 0, true)
	v.Spec.Template.Spec.Domain.CPU = &virtv1.CPU{Cores: 1}
	v.Spec.Template.Spec.Domain.Firmware = &virtv1.Firmware{UUID: "guest-uuid", Serial: "guest-serial"}
	f := start(t, p, v, vmiOf(t, p, v, "p-2"), revision(t, p, 2, *old))
	if err := f.sync(p); err != nil {
		t.Fatal(err)
	}
	var got *virtv1.VirtualMachine
	for _, a := range f.KubeVirt.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetVerb() == "update" && a.GetResource().Resource == "virtualmachines" {
			got = u.GetObject().(*virtv1.VirtualMachine)
		}
	}
	if got == nil {
		t.Fatalf("VM not updated: %q", f.KubeVirtWrites())
	}
	spec := got.Spec.Template.Spec
	if spec.Domain.CPU.Cores != 2 || spec.Domain.Firmware == nil || spec.Domain.Firmware.UUID != "guest-uuid" || spec.Domain.Firmware.Serial != "guest-serial" ||
		got.Labels[virtv1.VirtualMachinePoolRevisionName] != "p-3" || got.Spec.Template.ObjectMeta.Labels[virtv1.VirtualMachinePoolRevisionName] != "p-3" ||
		got.Labels[shard.LabelFleetRange] != strconv.Itoa(f.Ranges.Of(p)) || got.Labels["app"] != "p" {
		t.Errorf("updated VM labels %v, spec %+v: want 2 cores, its firmware identity, revision p-3 and its pool's range", got.Labels, spec)
	}
	if w := actions(f, "controllerrevisions"); !slices.Equal(w, []string{"create p-3"}) {
		t.Errorf("revision writes %q, want p-3 created", w)
	}
	if w := actions(f, "virtualmachineinstances"); len(w) != 0 {
		t.Errorf("VMI writes %q under the opportunistic strategy", w)
	}
	if events := f.Events(); !slices.Contains(events, "Normal SuccessfulUpdate Updated VM default/p-0") {
		t.Errorf("events %q", events)
	}
}

// VMIs started from an older VMI template are restarted, lowest index
// first, no more at once than maxUnavailable allows; the pool looks again
// later for the rest.
func TestAProactiveUpdateRestartsOutdatedVMIsWithinMaxUnavailable(t *testing.T) {
	p := newPool(3)
	p.Generation = 3
	p.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	old := p.Spec.DeepCopy()
	old.VirtualMachineTemplate.Spec.Template.Spec.Domain.CPU = &virtv1.CPU{Cores: 1}
	objects := []runtime.Object{p, revision(t, p, 2, *old), revision(t, p, 3, p.Spec)}
	for i := range 3 {
		v := newVM(p, i, "p-3", shardedtest.Ranges(t).Of(p))
		v.UID, v.ResourceVersion = types.UID(fmt.Sprintf("vm-%d", i)), "1"
		v.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionTrue}}
		objects = append(objects, v, vmiOf(t, p, v, "p-2"))
	}
	f := start(t, objects...)
	retry, err := f.c.sync(context.Background(), sharded.Item{Range: f.Ranges.Of(p), Key: "default/p"})
	if err != nil {
		t.Fatal(err)
	}
	if w := actions(f, "virtualmachineinstances"); !slices.Equal(w, []string{"delete p-0"}) {
		t.Errorf("VMI writes %q, want p-0 restarted only", w)
	}
	if retry != UpdateRetry {
		t.Errorf("retry after %v, want %v", retry, UpdateRetry)
	}
	if w := actions(f, "virtualmachines"); len(w) != 0 {
		t.Errorf("VM writes %q: the VMs are at the pool's template", w)
	}
	if events := f.Events(); !slices.Contains(events, "Normal SuccessfulDelete Successfully updated resource default/p-0") {
		t.Errorf("events %q", events)
	}
}

// A VMI whose revision holds the same VMI template is relabelled, not
// restarted; with every VM current, revisions nothing is at are pruned.
func TestTheSameTemplateUnderANewRevisionRelabelsTheVMIAndPrunes(t *testing.T) {
	p := newPool(1)
	p.Generation = 3
	older := p.Spec.DeepCopy()
	older.Replicas = ptr.To[int32](5)
	v := newVM(p, 0, "p-3", shardedtest.Ranges(t).Of(p))
	v.UID, v.ResourceVersion = "vm-0", "1"
	v.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionTrue}}
	f := start(t, p, v, vmiOf(t, p, v, "p-2"), revision(t, p, 1, *older), revision(t, p, 2, *older), revision(t, p, 3, p.Spec))
	if err := f.sync(p); err != nil {
		t.Fatal(err)
	}
	var body string
	for _, a := range f.KubeVirt.Actions() {
		if pa, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "virtualmachineinstances" {
			body = string(pa.GetPatch())
		}
	}
	if !strings.Contains(body, `"op":"test"`) || !strings.Contains(body, `"`+virtv1.VirtualMachinePoolRevisionName+`":"p-3"`) {
		t.Errorf("VMI patch %s, want its labels replaced with revision p-3 if unchanged", body)
	}
	if w := actions(f, "virtualmachineinstances"); !slices.Equal(w, []string{"patch p-0"}) {
		t.Errorf("VMI writes %q, want the relabel only", w)
	}
	if w := actions(f, "controllerrevisions"); !slices.Equal(w, []string{"delete p-1"}) {
		t.Errorf("revision writes %q, want p-1 pruned (p-2 is the VMI's, p-3 the VM's)", w)
	}
}

// Autohealing deletes a VM that failed to start the threshold's count of
// times in a row, and the one failing to start for longer than the
// minimum; not one failing for less.
func TestAutohealingDeletesVMsThatKeepFailingToStart(t *testing.T) {
	p := newPool(3)
	p.Spec.Autohealing = &poolv1.VirtualMachinePoolAutohealingStrategy{StartUpFailureThreshold: ptr.To[uint32](2),
		MinFailingToStartDuration: &metav1.Duration{Duration: time.Minute}}
	crashing := poolVM(t, p, 0, false)
	crashing.Status.StartFailure = &virtv1.VirtualMachineStartFailure{ConsecutiveFailCount: 2}
	stuck, fresh := poolVM(t, p, 1, false), poolVM(t, p, 2, false)
	for v, since := range map[*virtv1.VirtualMachine]time.Duration{stuck: 2 * time.Minute, fresh: 10 * time.Second} {
		v.Status.PrintableStatus = virtv1.VirtualMachineStatusUnschedulable
		v.Status.Conditions = []virtv1.VirtualMachineCondition{{Type: virtv1.VirtualMachineReady, Status: corev1.ConditionFalse,
			LastProbeTime: metav1.NewTime(time.Now().Add(-since))}}
	}
	f := start(t, p, crashing, stuck, fresh, revision(t, p, 2, p.Spec))
	if err := f.sync(p); err != nil {
		t.Fatal(err)
	}
	if w := actions(f, "virtualmachines"); !slices.Equal(w, []string{"delete p-0", "delete p-1", "patch p-0", "patch p-1"}) {
		t.Errorf("VM writes %q, want p-0 and p-1 deleted and let go", w)
	}
}

// An unmanaged scale-in strategy leaves surplus VMs alone.
func TestAnUnmanagedScaleInDeletesNothing(t *testing.T) {
	p := newPool(1)
	p.Spec.ScaleInStrategy = &poolv1.VirtualMachinePoolScaleInStrategy{Unmanaged: &poolv1.VirtualMachinePoolUnmanagedStrategy{}}
	f := start(t, p, poolVM(t, p, 0, true), poolVM(t, p, 1, true), revision(t, p, 2, p.Spec))
	if err := f.sync(p); err != nil {
		t.Fatal(err)
	}
	if w := actions(f, "virtualmachines"); len(w) != 0 {
		t.Errorf("VM writes %q, want none", w)
	}
}

// A proactive scale-in takes the VMs in its sort policy's order, among
// those its selectors match.
func TestAProactiveScaleInFollowsItsPolicy(t *testing.T) {
	p := newPool(1)
	p.Spec.ScaleInStrategy = &poolv1.VirtualMachinePoolScaleInStrategy{Proactive: &poolv1.VirtualMachinePoolProactiveScaleInStrategy{
		SelectionPolicy: &poolv1.VirtualMachinePoolSelectionPolicy{SortPolicy: ptr.To(poolv1.VirtualMachinePoolSortPolicyAscendingOrder)}}}
	f := start(t, p, poolVM(t, p, 0, true), poolVM(t, p, 1, true), poolVM(t, p, 2, true), revision(t, p, 2, p.Spec))
	if err := f.sync(p); err != nil {
		t.Fatal(err)
	}
	if w := actions(f, "virtualmachines"); !slices.Equal(w, []string{"delete p-0", "delete p-1", "patch p-0", "patch p-1"}) {
		t.Errorf("VM writes %q, want the two lowest deleted", w)
	}
}

// A VM of the pool KubeVirt's own virt-controller made (no label, so out
// of the pool's view) answers the pool's create AlreadyExists; the pool
// takes it into its view instead of failing.
func TestAPoolClaimsItsVMMadeWithoutItsLabel(t *testing.T) {
	p := newPool(1)
	ranges := shardedtest.Ranges(t)
	made := poolVM(t, p, 0, true)
	delete(made.Labels, shard.LabelFleetRange)
	for i := 0; ranges.Of(made) == ranges.Of(p); i++ {
		made.UID = types.UID(fmt.Sprintf("kubevirt-made-%d", i))
	}
	f := start(t, p, made, revision(t, p, 2, p.Spec))
	if err := f.sync(p); err != nil {
		t.Fatal(err)
	}
	var body string
	for _, a := range f.KubeVirt.Actions() {
		if pa, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "virtualmachines" && pa.GetName() == "p-0" {
			body = string(pa.GetPatch())
		}
	}
	want := fmt.Sprintf(`"%s":"%d"`, shard.LabelFleetRange, ranges.Of(p))
	if !strings.Contains(body, want) || !strings.Contains(body, string(made.UID)) {
		t.Errorf("patch of p-0 %q, want the pool's range (%s) at its UID", body, want)
	}
	if events := f.Events(); slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, ReasonFailedCreate) }) {
		t.Errorf("events %q: the VM is the pool's, no failure", events)
	}
}

// A VM deleted before but not let go (the finalizer's patch failed) is let
// go on the next scale-in, by a patch that holds across its delete: its
// finalizers tested, not its resourceVersion.
func TestADeletedVMStillHeldIsLetGo(t *testing.T) {
	p := newPool(1)
	deleting := poolVM(t, p, 1, true)
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	deleting.Finalizers = []string{Finalizer, virtv1.VirtualMachineControllerFinalizer}
	f := start(t, p, poolVM(t, p, 0, true), deleting, revision(t, p, 2, p.Spec))
	if err := f.sync(p); err != nil {
		t.Fatal(err)
	}
	if w := actions(f, "virtualmachines"); !slices.Equal(w, []string{"patch p-1"}) {
		t.Errorf("VM writes %q, want p-1 let go only", w)
	}
	for _, a := range f.KubeVirt.Actions() {
		if pa, ok := a.(k8stesting.PatchAction); ok && pa.GetName() == "p-1" {
			want := `[{"op":"test","path":"/metadata/finalizers","value":["` + Finalizer + `","` + virtv1.VirtualMachineControllerFinalizer +
				`"]},{"op":"replace","path":"/metadata/finalizers","value":["` + virtv1.VirtualMachineControllerFinalizer + `"]}]`
			if pa.GetPatchType() != types.JSONPatchType || string(pa.GetPatch()) != want {
				t.Errorf("patch %s %s, want %s", pa.GetPatchType(), pa.GetPatch(), want)
			}
		}
	}
}

// The VM controller takes its own finalizer off a deleted VM while the
// pool lets it go: the patch's test fails, and the pool reads the VM again
// and lets it go without a warning.
func TestAVMsFinalizersChangingUnderTheLetGoAreReadAgain(t *testing.T) {
	p := newPool(1)
	deleting := poolVM(t, p, 1, true)
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	deleting.Finalizers = []string{Finalizer, virtv1.VirtualMachineControllerFinalizer}
	f := start(t, p, poolVM(t, p, 0, true), deleting, revision(t, p, 2, p.Spec))
	raced := false
	f.KubeVirt.PrependReactor("patch", "virtualmachines", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		gvr := a.GetResource()
		obj, err := f.KubeVirt.Tracker().Get(gvr, "default", "p-1")
		if err != nil {
			t.Fatal(err)
		}
		v := obj.(*virtv1.VirtualMachine)
		v.Finalizers = []string{Finalizer}
		if err := f.KubeVirt.Tracker().Update(gvr, v, "default"); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewGenericServerResponse(422, "patch", gvr.GroupResource(), "p-1", "the test operation failed", 0, false)
	})
	if err := f.sync(p); err != nil {
		t.Fatal(err)
	}
	var patches []string
	for _, a := range f.KubeVirt.Actions() {
		if pa, ok := a.(k8stesting.PatchAction); ok && pa.GetName() == "p-1" {
			patches = append(patches, string(pa.GetPatch()))
		}
	}
	want := `[{"op":"test","path":"/metadata/finalizers","value":["` + Finalizer + `"]},{"op":"replace","path":"/metadata/finalizers","value":[]}]`
	if len(patches) != 2 || patches[1] != want {
		t.Errorf("patches of p-1 %q, want the second %s", patches, want)
	}
	if e := f.Events(); len(e) != 0 {
		t.Errorf("events %q, want none", e)
	}
	if v, err := f.KubeVirt.VirtualMachines("default").Get(context.Background(), "p-1", metav1.GetOptions{}); err != nil || len(v.Finalizers) != 0 {
		t.Errorf("p-1 finalizers %v (%v), want none", v.Finalizers, err)
	}
}
