package shard

import (
	"encoding/json"
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Placement is how an object of a kind finds the range that acts on it.
// It is declared once per kind, and every reader of the kind (the range
// caches' watches and their client-side guard, the overlay of own writes,
// the lookup of a key among the held ranges) follows it.
type Placement int

const (
	// OwnKey: the range its own key (uid or namespace) hashes to. Objects
	// users create: VirtualMachines, VMIs nobody owns.
	OwnKey Placement = iota + 1
	// OwnersRange: the range label its owner stamped on it (StampRange).
	// Children a controller creates: launcher pods, whose own uid hashes
	// elsewhere than their VMI's.
	OwnersRange
	// OwnersRangeOrOwnKey: the owner's range label where it has one, else
	// its own key. VMIs: a VM's VMI lives on the VM's range, a VMI a user
	// created on its own.
	OwnersRangeOrOwnKey
	// ClusterWide: not sharded; every replica caches all of them and acts
	// only on the parts that belong to its ranges. Nodes, migrations, the
	// KubeVirt CR.
	ClusterWide
	// FleetsRange: the range label of the fleet it is a member of
	// (StampFleetRange). Not where the member is acted on — its own
	// placement says that — but a second view of the kind, in which the
	// fleet's holder counts, names and scales the fleet's members while
	// their own work spreads over every range.
	FleetsRange
)

func (p Placement) String() string {
	switch p {
	case OwnKey:
		return "own key"
	case OwnersRange:
		return "owner's range"
	case OwnersRangeOrOwnKey:
		return "owner's range or own key"
	case ClusterWide:
		return "cluster-wide"
	case FleetsRange:
		return "fleet's range"
	}
	return "placement(" + strconv.Itoa(int(p)) + ")"
}

// Sharded reports whether objects of the placement belong to ranges.
func (p Placement) Sharded() bool {
	switch p {
	case OwnKey, OwnersRange, OwnersRangeOrOwnKey, FleetsRange:
		return true
	}
	return false
}

// Selections are how the range caches select a placement's objects: one
// watch per selection, which together hold each object of the kind once.
// Nil for a placement that is not sharded.
func (r Ranges) Selections(p Placement) []func(Set) Selection {
	switch p {
	case OwnKey:
		return []func(Set) Selection{r.ByKey}
	case OwnersRange:
		return []func(Set) Selection{r.ByLabel}
	case OwnersRangeOrOwnKey:
		// Labelled first: Selecting's answer indexes this slice.
		return []func(Set) Selection{r.ByLabel, r.ByUnlabelledKey}
	case FleetsRange:
		return []func(Set) Selection{r.ByFleetLabel}
	}
	return nil
}

// Selecting is the index, in Selections(p), of the selection that holds
// obj.
func (r Ranges) Selecting(p Placement, obj interface{ GetLabels() map[string]string }) int {
	if p == OwnersRangeOrOwnKey {
		if _, labelled := r.Labelled(obj); !labelled {
			return 1
		}
	}
	return 0
}

// Place is the range of obj under placement p; false for objects that
// are not sharded, or whose owner's range label is missing or invalid.
func (r Ranges) Place(p Placement, obj metav1.Object) (int, bool) {
	switch p {
	case OwnKey:
		return r.Of(obj), true
	case OwnersRange:
		return r.Labelled(obj)
	case OwnersRangeOrOwnKey:
		return r.Owner(obj), true
	case FleetsRange:
		return r.labelledBy(obj, LabelFleetRange)
	}
	return 0, false
}

// StampRange is the one rule of placing a child on its owner's range: a
// controller stamps the range of the owner it acts for on every object it
// creates, before it creates it, and never changes it after, so that the
// owner's holder caches the child (OwnersRange, OwnersRangeOrOwnKey) and
// no other replica does. A range's index never changes, so neither does
// the label.
func StampRange(child metav1.Object, rng int) {
	labels := child.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelRange] = strconv.Itoa(rng)
	child.SetLabels(labels)
}

// Adopt is the rule of placement for an orphan a controller claims, as
// KubeVirt's controllers claim the orphans that match them: the orphan
// becomes the owner's child and moves to the owner's range (StampRange's
// label) in the same write, so that from then on the owner's holder acts on
// it and no other replica does. It is a merge patch that adds ref, the
// owner's controller reference, to the orphan's owner references, and it
// holds for the orphan's uid and resourceVersion only: if anyone adopted or
// changed the orphan since it was read, the write conflicts instead of
// taking it from them.
func Adopt(orphan metav1.Object, ref metav1.OwnerReference, rng int) []byte {
	return adopt(orphan, ref, LabelRange, rng)
}

// StampFleetRange is StampRange for a fleet's member: it records the
// fleet's range, for the fleet's view (FleetsRange), and leaves the member
// to its own placement. Stamped before the create and never changed while
// the fleet controls the member.
func StampFleetRange(member metav1.Object, rng int) {
	labels := member.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelFleetRange] = strconv.Itoa(rng)
	member.SetLabels(labels)
}

// Enlist is Adopt for an orphan a fleet claims: the orphan becomes the
// fleet's member and enters its view (StampFleetRange's label) in the same
// write, at the uid and resourceVersion read, and stays on the range its
// own placement gives it.
func Enlist(orphan metav1.Object, ref metav1.OwnerReference, rng int) []byte {
	return adopt(orphan, ref, LabelFleetRange, rng)
}

func adopt(orphan metav1.Object, ref metav1.OwnerReference, label string, rng int) []byte {
	// A merge patch replaces the whole list: keep the references there are.
	return labelAt(orphan, label, rng, append(slices.Clone(orphan.GetOwnerReferences()), ref))
}

// Claim is the rule of placement for a child its owner made without a
// range label (KubeVirt's own virt-controller made it, before virtshard
// took over): it moves to the owner's range, as StampRange would have put
// it, by a merge patch that holds for the child's uid and resourceVersion
// only.
func Claim(child metav1.Object, rng int) []byte { return labelAt(child, LabelRange, rng, nil) }

// ClaimMember is Claim for a fleet's member made without the fleet's
// label: it enters the fleet's view, as StampFleetRange would have put it.
func ClaimMember(member metav1.Object, rng int) []byte {
	return labelAt(member, LabelFleetRange, rng, nil)
}

// labelAt is a merge patch that sets a range label on obj, and its owner
// references to refs unless nil, holding for the uid and resourceVersion
// read only.
func labelAt(obj metav1.Object, label string, rng int, refs []metav1.OwnerReference) []byte {
	meta := map[string]any{
		"uid":             obj.GetUID(),
		"resourceVersion": obj.GetResourceVersion(),
		"labels":          map[string]string{label: strconv.Itoa(rng)},
	}
	if refs != nil {
		meta["ownerReferences"] = refs
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		panic(err) // plain strings and references: it cannot fail
	}
	return patch
}
