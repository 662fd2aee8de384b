package shard

import (
	"encoding/json"
	"testing"

	"k8s.io/utils/ptr"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Every placement puts an object in one range, and the selections of its
// placement hold it exactly once, in the one Selecting names.
func TestPlacementsPlaceEachObjectOnceAsTheirSelectionsHoldIt(t *testing.T) {
	ranges, err := NewRanges(8, KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	all := NewSet(8, 0, 1, 2, 3, 4, 5, 6, 7)
	own := &metav1.ObjectMeta{Namespace: "ns", Name: "own", UID: "uid-own"}
	child := &metav1.ObjectMeta{Namespace: "ns", Name: "child", UID: "uid-child"}
	StampRange(child, 5)
	member := &metav1.ObjectMeta{Namespace: "ns", Name: "member", UID: "uid-member"}
	StampFleetRange(member, 6)
	for _, tc := range []struct {
		name      string
		placement Placement
		obj       *metav1.ObjectMeta
		want      int
		placed    bool
	}{
		{"own key", OwnKey, own, ranges.Of(own), true},
		{"own key ignores a range label", OwnKey, child, ranges.Of(child), true},
		{"owner's range", OwnersRange, child, 5, true},
		{"owner's range without a label", OwnersRange, own, 0, false},
		{"owner's range or own key, labelled", OwnersRangeOrOwnKey, child, 5, true},
		{"owner's range or own key, unlabelled", OwnersRangeOrOwnKey, own, ranges.Of(own), true},
		{"cluster-wide", ClusterWide, own, 0, false},
		{"fleet's range", FleetsRange, member, 6, true},
		{"fleet's range ignores a range label", FleetsRange, child, 0, false},
		{"a member's own placement ignores the fleet's range", OwnersRangeOrOwnKey, member, ranges.Of(member), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, placed := ranges.Place(tc.placement, tc.obj)
			if placed != tc.placed || (placed && got != tc.want) {
				t.Fatalf("Place = %d, %v; want %d, %v", got, placed, tc.want, tc.placed)
			}
			if tc.placement.Sharded() != (tc.placement != ClusterWide) {
				t.Errorf("Sharded = %v", tc.placement.Sharded())
			}
			holders := 0
			for k, by := range ranges.Selections(tc.placement) {
				sel := by(all)
				if !sel.owns(tc.obj) {
					continue
				}
				holders++
				if k != ranges.Selecting(tc.placement, tc.obj) {
					t.Errorf("selection %d holds the object, Selecting says %d", k, ranges.Selecting(tc.placement, tc.obj))
				}
				if rng, _ := sel.rangeOf(tc.obj); rng != got {
					t.Errorf("selection %d hands the object to range %d, Place says %d", k, rng, got)
				}
			}
			if want := map[bool]int{true: 1, false: 0}[placed]; holders != want {
				t.Errorf("%d selections hold the object, want %d", holders, want)
			}
		})
	}
}

func TestStampRangeSetsTheRangeLabelAndKeepsTheOthers(t *testing.T) {
	obj := &metav1.ObjectMeta{Labels: map[string]string{"app": "x"}}
	StampRange(obj, 12)
	if obj.Labels[LabelRange] != "12" || obj.Labels["app"] != "x" {
		t.Errorf("labels %v, want the range label 12 beside app=x", obj.Labels)
	}
}

// patched is the metadata of obj once the API server applied the merge
// patch body to it.
func patched(t *testing.T, obj *metav1.ObjectMeta, body []byte) metav1.ObjectMeta {
	t.Helper()
	current, err := json.Marshal(map[string]any{"metadata": obj})
	if err != nil {
		t.Fatal(err)
	}
	merged, err := jsonpatch.MergePatch(current, body)
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Metadata metav1.ObjectMeta }
	if err := json.Unmarshal(merged, &got); err != nil {
		t.Fatal(err)
	}
	return got.Metadata
}

// An adopted orphan keeps its labels and other owners, gains the
// controller reference and its owner's range, and only at the version read.
func TestAdoptMovesTheOrphanToItsOwnersRangeAtTheVersionRead(t *testing.T) {
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "cm-uid"}
	orphan := &metav1.ObjectMeta{Name: "x", UID: "x-uid", ResourceVersion: "41",
		Labels: map[string]string{"app": "x", LabelRange: "3"}, OwnerReferences: []metav1.OwnerReference{other}}
	owner := &metav1.ObjectMeta{Name: "x", UID: "owner-uid"}
	ref := *metav1.NewControllerRef(owner, schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"})

	m := patched(t, orphan, Adopt(orphan, ref, 9))
	if m.UID != orphan.UID || m.ResourceVersion != orphan.ResourceVersion {
		t.Errorf("uid %q resourceVersion %q, want the orphan's as preconditions", m.UID, m.ResourceVersion)
	}
	if c := metav1.GetControllerOf(&m); c == nil || c.UID != owner.UID || len(m.OwnerReferences) != 2 || m.OwnerReferences[0] != other {
		t.Errorf("owner references %+v, want %s kept and the owner as controller", m.OwnerReferences, other.Name)
	}
	if m.Labels[LabelRange] != "9" || m.Labels["app"] != "x" {
		t.Errorf("labels %v, want the owner's range 9 beside app=x", m.Labels)
	}
}

// A claimed child keeps its labels and owners and gains its owner's range,
// only at the version read.
func TestClaimPutsAnUnlabelledChildOnItsOwnersRangeAtTheVersionRead(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: "pool.kubevirt.io/v1beta1", Kind: "VirtualMachinePool", Name: "p", UID: "p-uid", Controller: ptr.To(true)}
	child := &metav1.ObjectMeta{Name: "p-0", UID: "c-uid", ResourceVersion: "7", Labels: map[string]string{"app": "p"}, OwnerReferences: []metav1.OwnerReference{owner}}
	m := patched(t, child, Claim(child, 4))
	if m.Labels["app"] != "p" || m.Labels[LabelRange] != "4" || len(m.OwnerReferences) != 1 || m.OwnerReferences[0].UID != "p-uid" ||
		m.UID != "c-uid" || m.ResourceVersion != "7" {
		t.Errorf("claimed %+v: want its labels and owner kept, range 4, at uid c-uid and resourceVersion 7", m)
	}
}

// A fleet enlists an orphan into its view at the version read: the
// orphan gains the controller reference and the fleet's range label, and
// keeps its own range label, which places it.
func TestEnlistPutsTheOrphanInItsFleetsViewAndLeavesItsPlacement(t *testing.T) {
	orphan := &metav1.ObjectMeta{Name: "x", UID: "x-uid", ResourceVersion: "41", Labels: map[string]string{"app": "x", LabelRange: "3"}}
	owner := &metav1.ObjectMeta{Name: "set", UID: "set-uid"}
	ref := *metav1.NewControllerRef(owner, schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachineInstanceReplicaSet"})
	for name, body := range map[string][]byte{"Enlist": Enlist(orphan, ref, 9), "ClaimMember": ClaimMember(orphan, 9)} {
		m := patched(t, orphan, body)
		if m.UID != orphan.UID || m.ResourceVersion != orphan.ResourceVersion {
			t.Errorf("%s: uid %q resourceVersion %q, want the orphan's as preconditions", name, m.UID, m.ResourceVersion)
		}
		if m.Labels[LabelFleetRange] != "9" || m.Labels[LabelRange] != "3" || m.Labels["app"] != "x" {
			t.Errorf("%s: labels %v, want the fleet's range 9 beside range 3 and app=x", name, m.Labels)
		}
		if enlisted := metav1.IsControlledBy(&m, owner); enlisted != (name == "Enlist") {
			t.Errorf("%s: controlled by the set: %v", name, enlisted)
		}
	}
}
