package replicaset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/patch"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
	"github.com/virtshard/virtshard/shard"
)

type fixture struct {
	*shardedtest.Fixture
	c *Controller
}

func newFixture(t *testing.T, objects ...runtime.Object) *fixture {
	t.Helper()
	f, ctrl := shardedtest.StartController(t, "replicaset", func(env *sharded.Env, rt *sharded.Runtime) (*Controller, *sharded.Controller, error) {
		c := newController(env, rt)
		return c, c.declare(), nil
	}, shardedtest.Cluster{Objects: objects})
	// The fake's tracker does not move resourceVersions, by which the replica's overlay
	// of its own writes tells them newer than its cache.
	f.KubeVirt.PrependReactor("update", "virtualmachineinstancereplicasets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rs := a.(k8stesting.UpdateAction).GetObject().(*virtv1.VirtualMachineInstanceReplicaSet)
		rv, _ := strconv.Atoi(rs.ResourceVersion)
		rs.ResourceVersion = strconv.Itoa(rv + 1)
		return false, nil, nil
	})
	return &fixture{f, ctrl}
}

func (f *fixture) sync(rs *virtv1.VirtualMachineInstanceReplicaSet) error {
	_, err := f.c.sync(context.Background(), sharded.Item{Range: f.Ranges.Of(rs), Key: rs.Namespace + "/" + rs.Name})
	return err
}

// newRS is a set of replicas VMIs labelled app=web, its API version
// recorded.
func newRS(replicas int32) *virtv1.VirtualMachineInstanceReplicaSet {
	rs := &virtv1.VirtualMachineInstanceReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "rs-uid", ResourceVersion: "1"},
		Spec: virtv1.VirtualMachineInstanceReplicaSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "kept"}},
			},
		},
	}
	patch.ObserveAPIVersion(rs)
	return rs
}

// member is a VMI of rs in phase, created at second s, in rs's view.
func member(ranges shard.Ranges, rs *virtv1.VirtualMachineInstanceReplicaSet, name string, phase virtv1.VirtualMachineInstancePhase, s int64) *virtv1.VirtualMachineInstance {
	v := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: rs.Namespace, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
			Labels:            map[string]string{"app": "web"},
			CreationTimestamp: metav1.Unix(s, 0),
			OwnerReferences:   []metav1.OwnerReference{*metav1.NewControllerRef(rs, virtv1.VirtualMachineInstanceReplicaSetGroupVersionKind)}},
		Status: virtv1.VirtualMachineInstanceStatus{Phase: phase},
	}
	shard.StampFleetRange(v, ranges.Of(rs))
	return v
}

// start is a fixture whose cache holds rs and the VMIs made by build.
func start(t *testing.T, rs *virtv1.VirtualMachineInstanceReplicaSet, build func(shard.Ranges) []runtime.Object) *fixture {
	t.Helper()
	objs := []runtime.Object{rs}
	if build != nil {
		objs = append(objs, build(shardedtest.Ranges(t))...)
	}
	return newFixture(t, objs...)
}

func statusOf(t *testing.T, f *fixture) virtv1.VirtualMachineInstanceReplicaSetStatus {
	t.Helper()
	for _, a := range slices.Backward(f.KubeVirt.Actions()) {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetVerb() == "update" && a.GetSubresource() == "status" {
			return u.GetObject().(*virtv1.VirtualMachineInstanceReplicaSet).Status
		}
	}
	t.Fatalf("no status written: %q", f.KubeVirtWrites())
	return virtv1.VirtualMachineInstanceReplicaSetStatus{}
}

func TestFirstSyncRecordsTheAPIVersionAndNothingElse(t *testing.T) {
	rs := newRS(2)
	rs.Annotations = nil
	f := start(t, rs, nil)
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	if got := f.KubeVirtWrites(); !slices.Equal(got, []string{"update virtualmachineinstancereplicasets"}) {
		t.Fatalf("writes %q, want the one update", got)
	}
	updated := f.KubeVirt.Actions()[len(f.KubeVirt.Actions())-1].(k8stesting.UpdateAction).GetObject().(*virtv1.VirtualMachineInstanceReplicaSet)
	if updated.Annotations[virtv1.ControllerAPILatestVersionObservedAnnotation] != virtv1.ApiLatestVersion {
		t.Errorf("annotations %v: want the observed API version", updated.Annotations)
	}
}

func TestSyncCreatesTheMissingMembersFromTheTemplate(t *testing.T) {
	rs := newRS(3)
	f := start(t, rs, nil)
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	var created []*virtv1.VirtualMachineInstance
	for _, a := range f.KubeVirt.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetVerb() == "create" {
			created = append(created, c.GetObject().(*virtv1.VirtualMachineInstance))
		}
	}
	if len(created) != 3 {
		t.Fatalf("created %d VMIs, want 3: %q", len(created), f.KubeVirtWrites())
	}
	v := created[0]
	if v.GenerateName != "web" || v.Labels["app"] != "web" || v.Annotations["note"] != "kept" ||
		v.Labels[shard.LabelFleetRange] != fmt.Sprint(f.Ranges.Of(rs)) || v.Labels[shard.LabelRange] != "" || !metav1.IsControlledBy(v, rs) {
		t.Errorf("member %+v: want the template's metadata, KubeVirt's generateName, the set's range as its fleet's (not its own) and controller", v.ObjectMeta)
	}
	var names []string
	for _, c := range created {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	want := []string{sharded.ChildName("web", "rs-uid", "0"), sharded.ChildName("web", "rs-uid", "1"), sharded.ChildName("web", "rs-uid", "2")}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("members %q, want the set's slots 0-2 %q", names, want)
	}
	if events := f.Events(); len(events) != 3 || !strings.HasPrefix(events[0], "Normal SuccessfulCreate Started the virtual machine by creating the new virtual machine instance") {
		t.Errorf("events %q, want three SuccessfulCreate", events)
	}
	// The status counts the members before the sync scaled, as KubeVirt's.
	if st := statusOf(t, f); st.Replicas != 0 || st.LabelSelector != "app=web" || len(st.Conditions) != 0 {
		t.Errorf("status %+v, want 0 replicas, selector app=web, no condition", st)
	}
	// Until the creates are seen, a sync creates nothing more.
	f.KubeVirt.ClearActions()
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	for _, w := range f.KubeVirtWrites() {
		if w == "create virtualmachineinstances" {
			t.Fatalf("writes %q before the creates were seen", f.KubeVirtWrites())
		}
	}
}

func TestSyncGivesUpMembersNotRunningFirstThenTheNewest(t *testing.T) {
	rs := newRS(2)
	f := start(t, rs, func(r shard.Ranges) []runtime.Object {
		old, newer, pending := member(r, rs, "old", virtv1.Running, 100), member(r, rs, "newer", virtv1.Running, 200), member(r, rs, "pending", virtv1.Pending, 50)
		newest := member(r, rs, "newest", virtv1.Running, 300)
		return []runtime.Object{old, newer, pending, newest}
	})
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, a := range f.KubeVirt.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && a.GetVerb() == "delete" {
			deleted = append(deleted, d.GetName())
		}
	}
	slices.Sort(deleted)
	if !slices.Equal(deleted, []string{"newest", "pending"}) {
		t.Errorf("deleted %q, want the pending one and the newest running one", deleted)
	}
	if st := statusOf(t, f); st.Replicas != 4 {
		t.Errorf("status replicas %d, want the 4 seen before scaling", st.Replicas)
	}
}

func TestSyncDeletesFinishedMembersAndReplacesThem(t *testing.T) {
	rs := newRS(1)
	f := start(t, rs, func(r shard.Ranges) []runtime.Object {
		failed := member(r, rs, "failed", virtv1.Failed, 1)
		terminating := member(r, rs, "terminating", virtv1.Running, 2)
		terminating.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{{
			Type: virtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: virtv1.PodTerminatingReason}}
		return []runtime.Object{failed, terminating}
	})
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	writes := f.KubeVirtWrites()
	slices.Sort(writes)
	want := []string{"create virtualmachineinstances", "delete virtualmachineinstances", "delete virtualmachineinstances", "update virtualmachineinstancereplicasets/status"}
	if !slices.Equal(writes, want) {
		t.Fatalf("writes %q, want %q", writes, want)
	}
	events := f.Events()
	if !slices.Contains(events, "Normal SuccessfulDelete Deleted finished virtual machine: uid-failed") {
		t.Errorf("events %q, want the finished member's deletion", events)
	}
}

func TestSyncAdoptsMatchingOrphansAndReleasesMembersThatNoLongerMatch(t *testing.T) {
	rs := newRS(2)
	var orphan *virtv1.VirtualMachineInstance
	f := start(t, rs, func(r shard.Ranges) []runtime.Object {
		orphan = &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "orphan", UID: "uid-orphan",
			ResourceVersion: "5", Labels: map[string]string{"app": "web"}}}
		relabelled := member(r, rs, "relabelled", virtv1.Running, 1)
		relabelled.Labels["app"] = "other"
		kept := member(r, rs, "kept", virtv1.Running, 2)
		return []runtime.Object{orphan, relabelled, kept}
	})
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	patches := map[string]string{}
	for _, a := range f.KubeVirt.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetVerb() == "patch" {
			patches[p.GetName()] = string(p.GetPatch())
		}
	}
	if p := patches["relabelled"]; p != `{"metadata":{"uid":"uid-relabelled","ownerReferences":[],"labels":{"virtshard.io/fleet-range":null}}}` {
		t.Errorf("release patch %s", p)
	}
	if p := patches["orphan"]; !strings.Contains(p, `"uid":"rs-uid"`) || !strings.Contains(p, `"resourceVersion":"5"`) ||
		!strings.Contains(p, fmt.Sprintf(`%q:"%d"`, shard.LabelFleetRange, f.Ranges.Of(rs))) {
		t.Errorf("adoption patch %s: want the set as controller and its range as the fleet's, for the orphan as read", p)
	}
	for _, w := range f.KubeVirtWrites() {
		if w == "create virtualmachineinstances" || w == "delete virtualmachineinstances" {
			t.Errorf("writes %q: the kept member and the adopted orphan are the 2 replicas", f.KubeVirtWrites())
		}
	}
	if st := statusOf(t, f); st.Replicas != 2 {
		t.Errorf("status replicas %d, want 2", st.Replicas)
	}
}

// The VMI a set adopted reaches its range's cache later than the patch's
// answer: until it does, the set does not count its members again, or it
// would find neither the member nor the orphan and create one too many.
func TestAnAdoptionIsExpectedUntilTheCacheHoldsIt(t *testing.T) {
	rs := newRS(1)
	orphan := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "orphan", UID: "uid-orphan",
		ResourceVersion: "5", Labels: map[string]string{"app": "web"}}}
	f := start(t, rs, func(shard.Ranges) []runtime.Object { return []runtime.Object{orphan} })
	adopted := orphan.DeepCopy()
	adopted.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(rs, virtv1.VirtualMachineInstanceReplicaSetGroupVersionKind)}
	shard.StampFleetRange(adopted, f.Ranges.Of(rs))
	// The server's answer, held back from the watch.
	f.KubeVirt.PrependReactor("patch", "virtualmachineinstances", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, adopted.DeepCopy(), nil
	})
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	rng, key := f.Ranges.Of(rs), rs.Namespace+"/"+rs.Name
	if f.c.expectations.Satisfied(rng, key) {
		t.Fatal("the adoption is not expected")
	}
	before := len(f.KubeVirt.Actions())
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.KubeVirt.Actions()[before:] {
		if v := a.GetVerb(); v != "get" && !(v == "update" && a.GetSubresource() == "status") {
			t.Errorf("%s %s while the adoption was on its way, want no count", v, a.GetResource().Resource)
		}
	}
	if err := f.KubeVirt.Tracker().Update(virtv1.VirtualMachineInstanceGroupVersionKind.GroupVersion().WithResource("virtualmachineinstances"), adopted, "default"); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.c.expectations.Satisfied(rng, key), nil
	}); err != nil {
		t.Errorf("the adopted VMI in the cache did not satisfy the set's expectations: %v", err)
	}
}

// A member the set controls but that carries no fleet label (KubeVirt's
// virt-controller made it, or a version that put members on the set's
// range) is taken into the set's view, not counted as missing.
func TestAMemberOutOfTheViewIsClaimedNotReplaced(t *testing.T) {
	rs := newRS(1)
	var made *virtv1.VirtualMachineInstance
	f := start(t, rs, func(r shard.Ranges) []runtime.Object {
		made = member(r, rs, "made-by-kubevirt", virtv1.Running, 1)
		delete(made.Labels, shard.LabelFleetRange)
		return []runtime.Object{made}
	})
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	var patched []string
	for _, a := range f.KubeVirt.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetVerb() == "patch" {
			patched = append(patched, p.GetName()+" "+string(p.GetPatch()))
		}
	}
	want := fmt.Sprintf(`made-by-kubevirt {"metadata":{"labels":{%q:"%d"},"resourceVersion":"1","uid":"uid-made-by-kubevirt"}}`, shard.LabelFleetRange, f.Ranges.Of(rs))
	if !slices.Equal(patched, []string{want}) {
		t.Errorf("patches %q, want %q", patched, want)
	}
	for _, w := range f.KubeVirtWrites() {
		if w == "create virtualmachineinstances" {
			t.Errorf("writes %q: the claimed member is the one replica", f.KubeVirtWrites())
		}
	}
}

func TestAPausedSetDoesNotScaleAndSaysSo(t *testing.T) {
	rs := newRS(2)
	rs.Spec.Paused = true
	f := start(t, rs, nil)
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	if got := f.KubeVirtWrites(); !slices.Equal(got, []string{"update virtualmachineinstancereplicasets/status"}) {
		t.Fatalf("writes %q, want only the status", got)
	}
	st := statusOf(t, f)
	if len(st.Conditions) != 1 || st.Conditions[0].Type != virtv1.VirtualMachineInstanceReplicaSetReplicaPaused ||
		st.Conditions[0].Reason != "Paused" || st.Conditions[0].Message != "Controller got paused" {
		t.Errorf("conditions %+v, want KubeVirt's Paused", st.Conditions)
	}
	if events := f.Events(); !slices.Equal(events, []string{"Normal SuccessfulPaused Paused"}) {
		t.Errorf("events %q", events)
	}
}

func TestAFailedCreateSetsReplicaFailureAndRetries(t *testing.T) {
	rs := newRS(1)
	f := start(t, rs, nil)
	f.KubeVirt.PrependReactor("create", "virtualmachineinstances", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(virtv1.Resource("virtualmachineinstances"), "", errors.New("quota exceeded"))
	})
	err := f.sync(rs)
	if err == nil {
		t.Fatal("sync succeeded: want the create's error, for a retry")
	}
	st := statusOf(t, f)
	if len(st.Conditions) != 1 || st.Conditions[0].Type != virtv1.VirtualMachineInstanceReplicaSetReplicaFailure ||
		st.Conditions[0].Reason != ReasonFailedCreate || st.Conditions[0].Message != err.Error() {
		t.Errorf("conditions %+v, want ReplicaFailure FailedCreate saying %q", st.Conditions, err)
	}
	if events := f.Events(); len(events) != 1 || !strings.HasPrefix(events[0], "Warning FailedCreate Error creating virtual machine instance:") {
		t.Errorf("events %q", events)
	}
	// The failed create is not awaited: the next sync tries again.
	f.KubeVirt.ClearActions()
	_ = f.sync(rs)
	if !slices.Contains(f.KubeVirtWrites(), "create virtualmachineinstances") {
		t.Errorf("writes %q, want the create tried again", f.KubeVirtWrites())
	}
}

func TestAnInvalidSetSaysWhyOnceAndIsLeftAlone(t *testing.T) {
	rs := newRS(1)
	rs.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	f := start(t, rs, nil)
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	if got := f.KubeVirtWrites(); !slices.Equal(got, []string{"update virtualmachineinstancereplicasets/status"}) {
		t.Fatalf("writes %q for a set whose selector does not match its template, want only its status", got)
	}
	st := statusOf(t, f)
	if len(st.Conditions) != 1 || st.Conditions[0].Reason != ReasonInvalidSpec ||
		st.Conditions[0].Message != "selector app=db does not match the template's labels" {
		t.Errorf("conditions %+v, want ReplicaFailure InvalidSpec saying why", st.Conditions)
	}
	if events := f.Events(); !slices.Equal(events, []string{"Warning InvalidSpec selector app=db does not match the template's labels"}) {
		t.Errorf("events %q", events)
	}
	// Said once: the next sync, from the status written, writes nothing.
	f.KubeVirt.ClearActions()
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	if got := f.KubeVirtWrites(); len(got) != 0 {
		t.Errorf("writes %q on the second sync", got)
	}
}

func TestMembersCreatedAreObservedOnce(t *testing.T) {
	rs := newRS(1)
	f := start(t, rs, nil)
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	rng, key := f.Ranges.Of(rs), rs.Namespace+"/"+rs.Name
	deadline := time.Now().Add(10 * time.Second)
	for !f.c.expectations.Satisfied(rng, key) {
		if time.Now().After(deadline) {
			t.Fatal("the created member was never observed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A member a replica that held the range before sent late, or created
// moments before the handoff, holds its slot's name: the next holder's
// create of that slot is answered AlreadyExists, and no second member
// comes of it.
func TestASlotsMemberThatExistsAlreadyIsNoSecondMember(t *testing.T) {
	rs := newRS(1)
	f := start(t, rs, nil)
	name := sharded.ChildName("web", "rs-uid", "0")
	f.KubeVirt.PrependReactor("create", "virtualmachineinstances", func(a k8stesting.Action) (bool, runtime.Object, error) {
		// On the server, not yet in the range's cache.
		return true, nil, apierrors.NewAlreadyExists(virtv1.Resource("virtualmachineinstances"), name)
	})
	late := member(shardedtest.Ranges(t), rs, name, virtv1.Pending, 1)
	f.KubeVirt.PrependReactor("get", "virtualmachineinstances", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, late, nil
	})
	if err := f.sync(rs); err != nil {
		t.Fatal(err)
	}
	if events := f.Events(); len(events) != 0 {
		t.Errorf("events %q: the slot's member is the set's own", events)
	}
}
