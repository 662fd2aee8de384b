package replicaset

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/patch"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/shard"
)

// Event reasons, KubeVirt's.
const (
	ReasonSuccessfulCreate  = "SuccessfulCreate"
	ReasonFailedCreate      = "FailedCreate"
	ReasonSuccessfulDelete  = "SuccessfulDelete"
	ReasonFailedDelete      = "FailedDelete"
	ReasonSuccessfulPaused  = "SuccessfulPaused"
	ReasonSuccessfulResumed = "SuccessfulResumed"
)

type vmi = virtv1.VirtualMachineInstance

// sync reconciles one replica set, in KubeVirt's order: record the API
// version (a write of its own), check the spec, claim the members, scale
// once every create and delete sent before is seen, delete finished
// members, write the status.
func (c *Controller) sync(ctx context.Context, it sharded.Item) (time.Duration, error) {
	r := c.env.Caches.Get(it.Range)
	if r == nil {
		return 0, nil
	}
	cached, exists, err := ReplicaSets.In(r).Latest(it.Key)
	if err != nil {
		return 0, err
	}
	if !exists {
		c.expectations.Delete(it.Range, it.Key)
		return 0, nil
	}
	rs := cached.DeepCopy()
	if patch.ObserveAPIVersion(rs) {
		// KubeVirt's first write of a set: a whole update, and nothing else
		// in that sync; its event brings the set back.
		_, err := c.write(ctx, it, r, rs, false)
		return 0, err
	}
	selector, err := validSelector(rs)
	if err != nil {
		// Not retried, as in KubeVirt: a change of the set queues it.
		return 0, c.invalid(ctx, it, r, rs, err)
	}
	needsSync := c.expectations.Satisfied(it.Range, it.Key)
	members, err := c.claim(ctx, it, r, rs, selector, needsSync)
	if err != nil {
		return 0, err
	}
	active, finished := sortMembers(members)
	var scaleErr error
	if needsSync && !rs.Spec.Paused && rs.DeletionTimestamp == nil {
		scaleErr = c.scale(ctx, it, r, rs, active)
		if scaleErr == nil && len(finished) > 0 {
			scaleErr = c.deleteFinished(ctx, it, rs, finished)
		}
	}
	if errors.Is(scaleErr, sharded.ErrNotHeld) {
		return 0, nil // the range moved on: its holder takes it from here
	}
	if err := c.writeStatus(ctx, it, r, rs, selector, active, scaleErr); err != nil {
		return 0, err
	}
	return 0, scaleErr
}

// validSelector is the set's selector, or why the set cannot be acted on:
// no template, no selector, no template labels, or a selector the
// template's labels do not match (virt-api's admission refuses the last,
// the controller checks all of them, as KubeVirt's does).
func validSelector(rs *virtv1.VirtualMachineInstanceReplicaSet) (labels.Selector, error) {
	if rs.Spec.Template == nil || rs.Spec.Selector == nil || len(rs.Spec.Template.ObjectMeta.Labels) == 0 {
		return nil, errors.New("a replica set needs a template with labels and a selector")
	}
	selector, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("invalid selector: %w", err)
	}
	if !selector.Matches(labels.Set(rs.Spec.Template.ObjectMeta.Labels)) {
		return nil, fmt.Errorf("selector %s does not match the template's labels", selector)
	}
	return selector, nil
}

// ReasonInvalidSpec is the reason of the ReplicaFailure condition and the
// event of a set the controller cannot act on.
const ReasonInvalidSpec = "InvalidSpec"

// invalid says why the set cannot be acted on, in a ReplicaFailure
// condition and an event, once. KubeVirt only logs it (virt-api refuses
// the selector that does not match the template's labels, but not every
// cluster runs virt-api's webhooks in front of every client); the
// condition goes once the set is fixed, as any ReplicaFailure does.
func (c *Controller) invalid(ctx context.Context, it sharded.Item, r *caches.Range, rs *virtv1.VirtualMachineInstanceReplicaSet, why error) error {
	klog.FromContext(ctx).V(2).Info("Invalid replica set", "replicaset", klog.KObj(rs), "reason", why)
	if slices.ContainsFunc(rs.Status.Conditions, func(c virtv1.VirtualMachineInstanceReplicaSetCondition) bool {
		return c.Type == virtv1.VirtualMachineInstanceReplicaSetReplicaFailure && c.Reason == ReasonInvalidSpec && c.Message == why.Error()
	}) {
		return nil
	}
	removeCondition(rs, virtv1.VirtualMachineInstanceReplicaSetReplicaFailure)
	rs.Status.Conditions = append(rs.Status.Conditions, virtv1.VirtualMachineInstanceReplicaSetCondition{
		Type: virtv1.VirtualMachineInstanceReplicaSetReplicaFailure, Status: corev1.ConditionTrue,
		Reason: ReasonInvalidSpec, Message: why.Error(), LastTransitionTime: metav1.Now(),
	})
	if written, err := c.write(ctx, it, r, rs, true); err != nil || !written {
		return err
	}
	c.env.Recorder.Eventf(rs, corev1.EventTypeWarning, ReasonInvalidSpec, "%s", why)
	return nil
}

// claim returns the set's members: the VMIs it controls that match its
// selector, and the orphans it adopts; members that no longer match are
// released. It is KubeVirt's ClaimVirtualMachineInstances, with orphans
// found by a live list (doc.go), only when the sync is to count
// (adoptOrphans): while creates and deletes are on their way, their
// events bring many syncs, and one list each would be wasted.
func (c *Controller) claim(ctx context.Context, it sharded.Item, r *caches.Range, rs *virtv1.VirtualMachineInstanceReplicaSet, selector labels.Selector, adoptOrphans bool) ([]*vmi, error) {
	owned, err := kinds.FleetVMIs.In(r).ByIndex(byReplicaSet, string(rs.UID))
	if err != nil {
		return nil, err
	}
	var members []*vmi
	for _, v := range owned {
		switch {
		case selector.Matches(labels.Set(v.Labels)):
			members = append(members, v)
		case rs.DeletionTimestamp == nil:
			if err := c.release(ctx, it, v); err != nil {
				return nil, err
			}
		}
	}
	if rs.DeletionTimestamp != nil || !adoptOrphans {
		return members, nil
	}
	orphans, err := c.orphans(ctx, rs, selector)
	if err != nil || len(orphans) == 0 {
		return members, err
	}
	// A fresh read: the cached set may be late to say it is being
	// deleted, and a set being deleted adopts nothing.
	fresh, err := c.env.KubeVirt.ReplicaSets(rs.Namespace).Get(ctx, rs.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("recheck replica set %s before adopting: %w", it.Key, err)
	}
	if fresh.UID != rs.UID || fresh.DeletionTimestamp != nil {
		return members, nil
	}
	ref := metav1.NewControllerRef(rs, virtv1.VirtualMachineInstanceReplicaSetGroupVersionKind)
	for _, orphan := range orphans {
		body := shard.Enlist(orphan, *ref, it.Range)
		if metav1.IsControlledBy(orphan, rs) {
			body = shard.ClaimMember(orphan, it.Range) // the set's already, but out of its view
		}
		var adopted *vmi
		c.adopting.Store(orphan.UID, true)
		c.expectations.ExpectCreations(it.Range, it.Key, 1)
		err := c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
			adopted, err = c.env.KubeVirt.VirtualMachineInstances(orphan.Namespace).Patch(ctx, orphan.Name, types.MergePatchType,
				body, metav1.PatchOptions{})
			return err
		})
		if err != nil {
			if _, unseen := c.adopting.LoadAndDelete(orphan.UID); unseen {
				c.expectations.CreationObserved(it.Range, it.Key)
			}
		}
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("adopt VMI %s/%s: %w", orphan.Namespace, orphan.Name, err)
		}
		klog.FromContext(ctx).V(2).Info("Adopted orphan VMI", "replicaset", klog.KObj(rs), "vmi", klog.KObj(adopted))
		members = append(members, adopted)
	}
	return members, nil
}

// orphans lists the VMIs of the set's namespace that match its selector
// and are out of every set's view (no fleet range label): those with no
// controller, which users made on their own, and the set's own members
// made without the label (by KubeVirt's virt-controller before virtshard
// took over, or by a version that put members on the set's range). Members
// carry the label, so the list leaves them out on the server's side and
// stays as small as the orphans are.
func (c *Controller) orphans(ctx context.Context, rs *virtv1.VirtualMachineInstanceReplicaSet, selector labels.Selector) ([]*vmi, error) {
	outside, err := labels.NewRequirement(shard.LabelFleetRange, selection.DoesNotExist, nil)
	if err != nil {
		return nil, err
	}
	list, err := c.env.KubeVirt.VirtualMachineInstances(rs.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.Add(*outside).String()})
	if err != nil {
		return nil, fmt.Errorf("list orphan VMIs of replica set %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	var out []*vmi
	for i := range list.Items {
		v := &list.Items[i]
		if ref := metav1.GetControllerOf(v); (ref == nil || ref.UID == rs.UID) && v.DeletionTimestamp == nil {
			out = append(out, v)
		}
	}
	return out, nil
}

// release lets go of a member whose labels no longer match: its owner
// references are cleared, as KubeVirt's release does, and it leaves the
// set's view, for this UID only. Its own range does not change: the fleet
// label never placed it.
func (c *Controller) release(ctx context.Context, it sharded.Item, v *vmi) error {
	body := fmt.Sprintf(`{"metadata":{"uid":%q,"ownerReferences":[],"labels":{%q:null}}}`, v.UID, shard.LabelFleetRange)
	err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		_, err := c.env.KubeVirt.VirtualMachineInstances(v.Namespace).Patch(ctx, v.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) || errors.Is(err, sharded.ErrNotHeld) {
		return nil // released, gone, or being deleted; or not ours to say
	}
	return fmt.Errorf("release VMI %s/%s: %w", v.Namespace, v.Name, err)
}

// sortMembers splits the members into the active ones and the finished
// ones (final, or whose pod is terminating) that the set deletes; members
// being deleted count as neither. The active ones come in the order they
// are given up when the set scales down: KubeVirt's is the cache's
// arbitrary one; here those not running go first, then the newest.
func sortMembers(members []*vmi) (active, finished []*vmi) {
	for _, v := range members {
		switch {
		case v.DeletionTimestamp != nil:
		case v.IsFinal() || podTerminating(v):
			finished = append(finished, v)
		default:
			active = append(active, v)
		}
	}
	slices.SortStableFunc(active, func(a, b *vmi) int {
		if ar, br := a.Status.Phase == virtv1.Running, b.Status.Phase == virtv1.Running; ar != br {
			if br {
				return -1
			}
			return 1
		}
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return active, finished
}

// podTerminating: the VMI's Ready condition is False because its launcher
// pod is terminating (KubeVirt's "unknown" VMIs).
func podTerminating(v *vmi) bool {
	for _, c := range v.Status.Conditions {
		if c.Type == virtv1.VirtualMachineInstanceReady {
			return c.Status == corev1.ConditionFalse && c.Reason == virtv1.PodTerminatingReason
		}
	}
	return false
}

func ready(v *vmi) bool {
	for _, c := range v.Status.Conditions {
		if c.Type == virtv1.VirtualMachineInstanceReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// wanted is spec.replicas, 1 when unset.
func wanted(rs *virtv1.VirtualMachineInstanceReplicaSet) int {
	if rs.Spec.Replicas == nil {
		return 1
	}
	return int(*rs.Spec.Replicas)
}

// scale creates or deletes active members towards spec.replicas, at most
// BurstReplicas in one sync, and returns the first error of any of them.
func (c *Controller) scale(ctx context.Context, it sharded.Item, r *caches.Range, rs *virtv1.VirtualMachineInstanceReplicaSet, active []*vmi) error {
	diff := len(active) - wanted(rs)
	switch {
	case diff > 0:
		victims := active[:min(diff, BurstReplicas)]
		return c.deleteAll(ctx, it, rs, victims, "Error deleting virtual machine instance %s: %v",
			"Stopped the virtual machine by deleting the virtual machine instance %v")
	case diff < 0:
		return c.createAll(ctx, it, r, rs, min(-diff, BurstReplicas))
	}
	return nil
}

// deleteFinished deletes up to BurstReplicas finished members.
func (c *Controller) deleteFinished(ctx context.Context, it sharded.Item, rs *virtv1.VirtualMachineInstanceReplicaSet, finished []*vmi) error {
	return c.deleteAll(ctx, it, rs, finished[:min(len(finished), BurstReplicas)],
		"Error deleting finished virtual machine %s: %v", "Deleted finished virtual machine: %v")
}

// deleteAll deletes the VMIs side by side, each with its UID as a
// precondition, recording an event for each with KubeVirt's messages
// (failed: the VMI's name and the error; done: its UID).
func (c *Controller) deleteAll(ctx context.Context, it sharded.Item, rs *virtv1.VirtualMachineInstanceReplicaSet, victims []*vmi, failed, done string) error {
	uids := make([]types.UID, len(victims))
	for i, v := range victims {
		uids[i] = v.UID
	}
	c.expectations.ExpectDeletions(it.Range, it.Key, uids...)
	return parallel(len(victims), func(i int) error {
		v := victims[i]
		err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
			return c.env.KubeVirt.VirtualMachineInstances(v.Namespace).Delete(ctx, v.Name, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: &v.UID},
			})
		})
		if err != nil {
			// Not accepted: there is no deletion to see.
			c.expectations.DeletionObserved(it.Range, it.Key, v.UID)
			if !errors.Is(err, sharded.ErrNotHeld) {
				c.env.Recorder.Eventf(rs, corev1.EventTypeWarning, ReasonFailedDelete, failed, v.Name, err)
			}
			return err
		}
		c.env.Recorder.Eventf(rs, corev1.EventTypeNormal, ReasonSuccessfulDelete, done, v.UID)
		return nil
	})
}

// createAll creates n members side by side from the template, in the set's
// lowest free slots (memberNames).
func (c *Controller) createAll(ctx context.Context, it sharded.Item, r *caches.Range, rs *virtv1.VirtualMachineInstanceReplicaSet, n int) error {
	names := memberNames(r, rs, n)
	c.expectations.ExpectCreations(it.Range, it.Key, n)
	return parallel(n, func(i int) error {
		var created *vmi
		err := c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
			created, err = c.env.KubeVirt.VirtualMachineInstances(rs.Namespace).Create(ctx, newMember(rs, names[i], it.Range), metav1.CreateOptions{})
			return err
		})
		existed := apierrors.IsAlreadyExists(err)
		if existed {
			err = c.existingMember(ctx, rs, names[i])
		}
		if err != nil {
			c.expectations.CreationObserved(it.Range, it.Key)
			if !errors.Is(err, sharded.ErrNotHeld) {
				c.env.Recorder.Eventf(rs, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating virtual machine instance: %v", err)
			}
			return err
		}
		if existed {
			// The slot's member exists already: the create of a replica
			// that held the range before, which the cache will show.
			c.expectations.CreationObserved(it.Range, it.Key)
			return nil
		}
		c.env.Recorder.Eventf(rs, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Started the virtual machine by creating the new virtual machine instance %v", created.Name)
		return nil
	})
}

// existingMember is what a create answered AlreadyExists found: nil if the
// set controls it, else why the slot's name is not the set's to use.
func (c *Controller) existingMember(ctx context.Context, rs *virtv1.VirtualMachineInstanceReplicaSet, name string) error {
	existing, err := c.env.KubeVirt.VirtualMachineInstances(rs.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err != nil:
		return fmt.Errorf("read VMI %s/%s, which a create found: %w", rs.Namespace, name, err)
	case metav1.IsControlledBy(existing, rs):
		return nil
	}
	return fmt.Errorf("VMI %s/%s exists and is not a member of this replica set", rs.Namespace, name)
}

// memberNames are the names of the set's next n members: those of its
// slots 0, 1, … that no VMI of the range's cache holds (a member being
// deleted keeps its slot until it is gone), each the members' prefix
// (memberPrefix) with five characters derived from the set's UID and the slot (sharded.ChildName), the shape of the names the
// API server generates for KubeVirt's. A create sent by a replica that lost
// the range and the next holder's create of the same member then have one
// name, and the server takes only the first.
func memberNames(r *caches.Range, rs *virtv1.VirtualMachineInstanceReplicaSet, n int) []string {
	prefix := memberPrefix(rs)
	var names []string
	for slot := 0; len(names) < n; slot++ {
		name := sharded.ChildName(prefix, string(rs.UID), strconv.Itoa(slot))
		if _, taken, _ := kinds.FleetVMIs.In(r).Get(rs.Namespace + "/" + name); !taken {
			names = append(names, name)
		}
	}
	return names
}

// memberPrefix is the GenerateName KubeVirt gives the set's members: the
// template's name, else its GenerateName, else the set's name.
func memberPrefix(rs *virtv1.VirtualMachineInstanceReplicaSet) string {
	t := rs.Spec.Template.ObjectMeta
	return cmp.Or(t.Name, t.GenerateName, rs.Name)
}

// newMember is a member as KubeVirt makes one: the template's metadata and
// spec, the template's labels, the set as controller; here with its derived
// name (memberNames) and the set's range as its fleet label, for the set's
// view: the member's own key places it.
func newMember(rs *virtv1.VirtualMachineInstanceReplicaSet, name string, rng int) *vmi {
	t := rs.Spec.Template.DeepCopy()
	v := &vmi{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
	v.Name, v.GenerateName = name, memberPrefix(rs) // KubeVirt's GenerateName, kept as a record beside the derived name
	v.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(rs, virtv1.VirtualMachineInstanceReplicaSetGroupVersionKind)}
	shard.StampFleetRange(v, rng)
	return v
}

// parallel runs do(0..n-1) side by side, as KubeVirt's goroutines per
// create or delete, and returns the first error.
func parallel(n int, do func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = do(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// writeStatus writes replicas, ready replicas, the selector and the Paused
// and ReplicaFailure conditions, counted from the active members before
// this sync scaled, when any of them changed, as KubeVirt's updateStatus.
// The events for a pause or resume follow the write.
func (c *Controller) writeStatus(ctx context.Context, it sharded.Item, r *caches.Range, rs *virtv1.VirtualMachineInstanceReplicaSet, selector labels.Selector, active []*vmi, scaleErr error) error {
	readyCount := 0
	for _, v := range active {
		if ready(v) {
			readyCount++
		}
	}
	st := &rs.Status
	pausedMatch := rs.Spec.Paused == hasCondition(rs, virtv1.VirtualMachineInstanceReplicaSetReplicaPaused)
	if int(st.Replicas) == len(active) && int(st.ReadyReplicas) == readyCount &&
		(scaleErr != nil) == hasCondition(rs, virtv1.VirtualMachineInstanceReplicaSetReplicaFailure) &&
		pausedMatch && st.LabelSelector == selector.String() {
		return nil
	}
	st.LabelSelector, st.Replicas, st.ReadyReplicas = selector.String(), int32(len(active)), int32(readyCount)
	now := metav1.Now()
	switch has := hasCondition(rs, virtv1.VirtualMachineInstanceReplicaSetReplicaPaused); {
	case rs.Spec.Paused && !has:
		st.Conditions = append(st.Conditions, virtv1.VirtualMachineInstanceReplicaSetCondition{
			Type: virtv1.VirtualMachineInstanceReplicaSetReplicaPaused, Status: corev1.ConditionTrue,
			Reason: "Paused", Message: "Controller got paused", LastTransitionTime: now,
		})
	case !rs.Spec.Paused && has:
		removeCondition(rs, virtv1.VirtualMachineInstanceReplicaSetReplicaPaused)
	}
	switch has := hasCondition(rs, virtv1.VirtualMachineInstanceReplicaSetReplicaFailure); {
	case scaleErr != nil && !has:
		reason := ReasonFailedDelete
		if len(active) < wanted(rs) {
			reason = ReasonFailedCreate
		}
		st.Conditions = append(st.Conditions, virtv1.VirtualMachineInstanceReplicaSetCondition{
			Type: virtv1.VirtualMachineInstanceReplicaSetReplicaFailure, Status: corev1.ConditionTrue,
			Reason: reason, Message: scaleErr.Error(), LastTransitionTime: now,
		})
	case scaleErr == nil && has:
		removeCondition(rs, virtv1.VirtualMachineInstanceReplicaSetReplicaFailure)
	}
	if written, err := c.write(ctx, it, r, rs, true); err != nil || !written {
		return err
	}
	if !pausedMatch {
		if rs.Spec.Paused {
			c.env.Recorder.Eventf(rs, corev1.EventTypeNormal, ReasonSuccessfulPaused, "Paused")
		} else {
			c.env.Recorder.Eventf(rs, corev1.EventTypeNormal, ReasonSuccessfulResumed, "Resumed")
		}
	}
	return nil
}

// write updates the set (or its status) whole, with the cached
// resourceVersion as a precondition, as KubeVirt does; the answer is
// what the next syncs of the range start from. It reports whether the
// set was written: not if it is gone or the range moved on.
func (c *Controller) write(ctx context.Context, it sharded.Item, r *caches.Range, rs *virtv1.VirtualMachineInstanceReplicaSet, status bool) (bool, error) {
	var updated *virtv1.VirtualMachineInstanceReplicaSet
	err := c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		client := c.env.KubeVirt.ReplicaSets(rs.Namespace)
		if status {
			updated, err = client.UpdateStatus(ctx, rs, metav1.UpdateOptions{})
		} else {
			updated, err = client.Update(ctx, rs, metav1.UpdateOptions{})
		}
		return err
	})
	switch {
	case apierrors.IsNotFound(err), errors.Is(err, sharded.ErrNotHeld):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("update replica set %s: %w", it.Key, err)
	}
	ReplicaSets.In(r).Wrote(updated)
	return true, nil
}

func hasCondition(rs *virtv1.VirtualMachineInstanceReplicaSet, t virtv1.VirtualMachineInstanceReplicaSetConditionType) bool {
	return slices.ContainsFunc(rs.Status.Conditions, func(c virtv1.VirtualMachineInstanceReplicaSetCondition) bool { return c.Type == t })
}

func removeCondition(rs *virtv1.VirtualMachineInstanceReplicaSet, t virtv1.VirtualMachineInstanceReplicaSetConditionType) {
	rs.Status.Conditions = slices.DeleteFunc(rs.Status.Conditions, func(c virtv1.VirtualMachineInstanceReplicaSetCondition) bool { return c.Type == t })
}
