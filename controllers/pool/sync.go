package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"
	poolv1 "kubevirt.io/api/pool/v1beta1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/patch"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/shard"
)

// Event reasons and condition reasons, KubeVirt's.
const (
	ReasonSuccessfulCreate = "SuccessfulCreate"
	ReasonFailedCreate     = "FailedCreate"
	ReasonSuccessfulDelete = "SuccessfulDelete"
	ReasonFailedDelete     = "FailedDelete"
	ReasonFailedUpdate     = "FailedUpdate"
	ReasonFailedScaleOut   = "FailedScaleOut"
	ReasonFailedScaleIn    = "FailedScaleIn"
	ReasonPaused           = "SuccessfulPaused"
	ReasonResumed          = "SuccessfulResume"
	ReasonInvalidSpec      = "InvalidSpec"
)

// syncError is why a sync could not do what the pool asks: the reason of
// its ReplicaFailure condition and event.
type syncError struct {
	reason string
	err    error
}

func (e *syncError) Error() string { return e.err.Error() }
func (e *syncError) Unwrap() error { return e.err }

type vm = virtv1.VirtualMachine

// sync reconciles one pool, in KubeVirt's order: check the selector,
// take the VMs it controls (releasing those it no longer selects), heal
// the failing ones, put its finalizer on it; then, once every create and
// delete sent before is seen and unless it is paused, scale it, update
// its VMs once scaled, prune its revisions once updated; or, when it is
// being deleted, let go of its VMs; last, write its status.
func (c *Controller) sync(ctx context.Context, it sharded.Item) (time.Duration, error) {
	r := c.env.Caches.Get(it.Range)
	if r == nil {
		return 0, nil
	}
	cached, exists, err := Pools.In(r).Latest(it.Key)
	if err != nil {
		return 0, err
	}
	if !exists {
		c.expectations.Delete(it.Range, it.Key)
		return 0, nil
	}
	pool := cached.DeepCopy()
	selector, err := validSelector(pool)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Invalid pool", "pool", klog.KObj(pool), "reason", err)
		return 0, c.writeStatus(ctx, it, r, pool, nil, &syncError{reason: ReasonInvalidSpec, err: err})
	}
	vms, err := c.owned(ctx, it, r, pool, selector)
	if err != nil {
		return 0, err
	}
	if heal := pool.Spec.Autohealing; heal != nil {
		if sick := failing(vms, heal, c.env.Clock.Now()); len(sick) > 0 {
			if err := c.deleteVMs(ctx, it, pool, sick, len(sick), scaleInPolicy(pool)); err != nil {
				return 0, err
			}
		}
	}
	if pool.DeletionTimestamp == nil {
		if err := c.patchPool(ctx, it, r, pool, patch.AddFinalizer(pool, Finalizer)); err != nil {
			return 0, err
		}
	}
	var syncErr *syncError
	var retry time.Duration
	switch {
	case pool.DeletionTimestamp != nil:
		if err := c.release(ctx, it, r, pool, selector); err != nil {
			return 0, err
		}
		syncErr = c.prune(ctx, it, r, pool, vms)
	case c.expectations.Satisfied(it.Range, it.Key) && !pool.Spec.Paused:
		var scaled, updated bool
		scaled, syncErr = c.scale(ctx, it, r, pool, vms)
		if syncErr == nil && scaled && c.expectations.Satisfied(it.Range, it.Key) {
			updated, retry, syncErr = c.update(ctx, it, r, pool, vms)
		}
		if syncErr == nil && scaled && updated && c.expectations.Satisfied(it.Range, it.Key) {
			syncErr = c.prune(ctx, it, r, pool, vms)
		}
	}
	if syncErr != nil && errors.Is(syncErr, sharded.ErrNotHeld) {
		return 0, nil // the range moved on: its holder takes it from here
	}
	if err := c.writeStatus(ctx, it, r, pool, vms, syncErr); err != nil {
		return 0, err
	}
	if syncErr != nil {
		return 0, syncErr
	}
	return retry, nil
}

// validSelector is the pool's selector, or why the pool cannot be acted on.
func validSelector(pool *poolv1.VirtualMachinePool) (labels.Selector, error) {
	if pool.Spec.VirtualMachineTemplate == nil || pool.Spec.Selector == nil {
		return nil, errors.New("a pool needs a VM template and a selector")
	}
	selector, err := metav1.LabelSelectorAsSelector(pool.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("invalid selector: %w", err)
	}
	if !selector.Matches(labels.Set(pool.Spec.VirtualMachineTemplate.ObjectMeta.Labels)) {
		return nil, fmt.Errorf("selector %s does not match the VM template's labels", selector)
	}
	return selector, nil
}

// owned are the VMs the pool controls that its selector matches; those it
// no longer matches are released, unless the pool is being deleted, as
// KubeVirt's ReleaseDetachedVirtualMachines. A pool adopts no orphans.
func (c *Controller) owned(ctx context.Context, it sharded.Item, r *caches.Range, pool *poolv1.VirtualMachinePool, selector labels.Selector) ([]*vm, error) {
	controlled, err := kinds.FleetVMs.In(r).ByIndex(byPool, string(pool.UID))
	if err != nil {
		return nil, err
	}
	var out []*vm
	for _, v := range controlled {
		// This replica's own rewrites, which its informer may not show yet.
		if latest, ok, _ := kinds.FleetVMs.In(r).Latest(v.Namespace + "/" + v.Name); ok && latest.UID == v.UID {
			v = latest
		}
		switch {
		case selector.Matches(labels.Set(v.Labels)):
			out = append(out, v)
		case pool.DeletionTimestamp == nil:
			// Its owner references cleared and the pool's finalizer taken
			// off, the others kept, for this VM only.
			body, err := json.Marshal(map[string]any{"metadata": map[string]any{
				"uid": v.UID, "ownerReferences": []metav1.OwnerReference{},
				"finalizers": slices.DeleteFunc(append([]string{}, v.Finalizers...), func(f string) bool { return f == Finalizer }),
			}})
			if err != nil {
				return nil, err
			}
			if err := c.patchVM(ctx, it, v, types.MergePatchType, body); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// scale creates or deletes VMs towards spec.replicas, at most
// BurstReplicas in one sync; with the count right (stable), it lets go of
// the VMs being deleted (KubeVirt's opportunistic scale-in).
func (c *Controller) scale(ctx context.Context, it sharded.Item, r *caches.Range, pool *poolv1.VirtualMachinePool, vms []*vm) (stable bool, _ *syncError) {
	diff := len(vms) - int(replicas(pool))
	in := pool.Spec.ScaleInStrategy
	switch {
	case diff == 0:
		if in != nil && in.Unmanaged != nil {
			return true, nil
		}
		for _, v := range vms {
			if v.DeletionTimestamp != nil {
				if err := c.letGo(ctx, it, pool, v); err != nil {
					return false, &syncError{ReasonFailedScaleIn, fmt.Errorf("error during opportunistic scale in: %w", err)}
				}
			}
		}
		return true, nil
	case diff < 0:
		if err := c.scaleOut(ctx, it, r, pool, min(-diff, BurstReplicas)); err != nil {
			return false, &syncError{ReasonFailedScaleOut, fmt.Errorf("error during scale out: %w", err)}
		}
	case in != nil && (in.Unmanaged != nil || in.Opportunistic != nil):
		// Left to whoever deletes VMs; the count comes right as they go.
	default:
		if err := c.deleteVMs(ctx, it, pool, vms, min(diff, BurstReplicas), scaleInPolicy(pool)); err != nil {
			return false, &syncError{ReasonFailedScaleIn, fmt.Errorf("error during scale in: %w", err)}
		}
	}
	return false, nil
}

// scaleOut creates n VMs in the pool's lowest free indexes, from the
// revision of the pool's spec at its generation.
func (c *Controller) scaleOut(ctx context.Context, it sharded.Item, r *caches.Range, pool *poolv1.VirtualMachinePool, n int) error {
	revision, err := c.ensureRevision(ctx, it, r, pool)
	if err != nil {
		return err
	}
	indexes := freeIndexes(pool, n, func(name string) bool {
		_, taken, _ := kinds.FleetVMs.In(r).Get(pool.Namespace + "/" + name)
		return taken
	})
	c.expectations.ExpectCreations(it.Range, it.Key, n)
	return parallel(n, func(i int) error {
		v := newVM(pool, indexes[i], revision, it.Range)
		vms := c.env.KubeVirt.VirtualMachines(v.Namespace)
		err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
			_, err := vms.Create(ctx, v, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return claim(ctx, pool, shard.LabelFleetRange, shard.ClaimMember, it.Range, err, func(ctx context.Context) (metav1.Object, error) {
					return vms.Get(ctx, v.Name, metav1.GetOptions{})
				}, func(ctx context.Context, body []byte) error {
					_, err := vms.Patch(ctx, v.Name, types.MergePatchType, body, metav1.PatchOptions{})
					return err
				})
			}
			return err
		})
		if err != nil {
			c.expectations.CreationObserved(it.Range, it.Key)
			if !errors.Is(err, sharded.ErrNotHeld) {
				c.env.Recorder.Eventf(pool, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating VM: %v", err)
			}
			return err
		}
		c.env.Recorder.Eventf(pool, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created VM %s/%s", v.Namespace, v.Name)
		return nil
	})
}

// newVM is the pool's VM at index, as KubeVirt makes it: the template's
// labels (with the revision's) and annotations, the indexed spec (with the
// revision label on its VMI template), the pool's finalizer and controller
// reference; and here the pool's range as its fleet's, for the pool's view:
// the VM's own key places it.
func newVM(pool *poolv1.VirtualMachinePool, index int, revision string, rng int) *vm {
	t := pool.Spec.VirtualMachineTemplate
	v := &vm{
		ObjectMeta: metav1.ObjectMeta{
			Name: vmName(pool, index), Namespace: pool.Namespace,
			Labels: map[string]string{}, Annotations: t.ObjectMeta.DeepCopy().Annotations,
			Finalizers:      []string{Finalizer},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pool, poolv1.SchemeGroupVersion.WithKind(kind))},
		},
		Spec: *indexedSpec(&pool.Spec, index),
	}
	for k, val := range t.ObjectMeta.Labels {
		v.Labels[k] = val
	}
	withRevision(v, revision)
	shard.StampFleetRange(v, rng)
	return v
}

// withRevision labels the VM and its VMI template with the pool revision.
func withRevision(v *vm, revision string) {
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	v.Labels[virtv1.VirtualMachinePoolRevisionName] = revision
	if v.Spec.Template != nil {
		if v.Spec.Template.ObjectMeta.Labels == nil {
			v.Spec.Template.ObjectMeta.Labels = map[string]string{}
		}
		v.Spec.Template.ObjectMeta.Labels[virtv1.VirtualMachinePoolRevisionName] = revision
	}
}

// ensureRevision makes sure the ControllerRevision "<pool>-<generation>"
// holding the pool's spec exists, on the pool's range, and returns its
// name.
func (c *Controller) ensureRevision(ctx context.Context, it sharded.Item, r *caches.Range, pool *poolv1.VirtualMachinePool) (string, error) {
	name := fmt.Sprintf("%s-%d", pool.Name, pool.Generation)
	if _, found, err := kinds.Revisions.In(r).Latest(pool.Namespace + "/" + name); err != nil || found {
		return name, err
	}
	data, err := json.Marshal(pool.Spec)
	if err != nil {
		return "", err
	}
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pool.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pool, poolv1.SchemeGroupVersion.WithKind(kind))}},
		Data:     runtime.RawExtension{Raw: data},
		Revision: pool.Generation,
	}
	shard.StampRange(cr, it.Range)
	var created *appsv1.ControllerRevision
	crs := c.env.Kube.AppsV1().ControllerRevisions(pool.Namespace)
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		created, err = crs.Create(ctx, cr, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			created = nil // the client's empty answer
			return claim(ctx, pool, shard.LabelRange, shard.Claim, it.Range, err, func(ctx context.Context) (metav1.Object, error) {
				return crs.Get(ctx, name, metav1.GetOptions{})
			}, func(ctx context.Context, body []byte) error {
				_, err := crs.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
				return err
			})
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("create revision %s: %w", name, err)
	}
	if created != nil {
		kinds.Revisions.In(r).Wrote(created)
	}
	return name, nil
}

// claim answers a create of the pool's child refused as AlreadyExists:
// the child the pool controls is the pool's (a create of this replica's,
// its answer lost, or the cache behind), and one made without the pool's
// label (by KubeVirt's own virt-controller before virtshard took over, or,
// for a VM, by a version that put VMs on the pool's range) gets it by the
// patch claimPatch makes (shard.Claim for a revision, shard.ClaimMember
// for a VM); anything else keeps the refusal.
func claim(ctx context.Context, pool *poolv1.VirtualMachinePool, label string, claimPatch func(metav1.Object, int) []byte, rng int, exists error,
	get func(context.Context) (metav1.Object, error), patch func(context.Context, []byte) error) error {
	child, err := get(ctx)
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(child, pool) {
		return exists
	}
	if _, labelled := child.GetLabels()[label]; labelled {
		return nil
	}
	return patch(ctx, claimPatch(child, rng))
}

// scaleInPolicy is the proactive scale-in's selection policy, if any.
func scaleInPolicy(pool *poolv1.VirtualMachinePool) *poolv1.VirtualMachinePoolSelectionPolicy {
	if in := pool.Spec.ScaleInStrategy; in != nil && in.Proactive != nil {
		return in.Proactive.SelectionPolicy
	}
	return nil
}

// deleteVMs deletes n of vms (those being deleted already count), in
// the selection policy's order among those its selectors match, and takes
// the pool's finalizer off each: a proactive scale-in, or autohealing.
func (c *Controller) deleteVMs(ctx context.Context, it sharded.Item, pool *poolv1.VirtualMachinePool, vms []*vm, n int, policy *poolv1.VirtualMachinePoolSelectionPolicy) error {
	var live []*vm
	for _, v := range vms {
		if v.DeletionTimestamp == nil {
			live = append(live, v)
			continue
		}
		// Deleted before, and not let go then: it is counted until it goes.
		if err := c.letGo(ctx, it, pool, v); err != nil {
			return err
		}
	}
	n -= len(vms) - len(live)
	if n <= 0 || len(live) == 0 {
		return nil
	}
	var sortPolicy *poolv1.VirtualMachinePoolSortPolicy
	if policy != nil {
		sortPolicy = policy.SortPolicy
	}
	sortBy(live, sortPolicy, true)
	if policy != nil {
		var err error
		if live, err = selected(live, policy.Selectors); err != nil {
			return err
		}
	}
	victims := live[:min(n, len(live))]
	uids := make([]types.UID, len(victims))
	for i, v := range victims {
		uids[i] = v.UID
	}
	c.expectations.ExpectDeletions(it.Range, it.Key, uids...)
	return parallel(len(victims), func(i int) error {
		v := victims[i]
		err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
			return c.env.KubeVirt.VirtualMachines(v.Namespace).Delete(ctx, v.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &v.UID}})
		})
		if err != nil {
			c.expectations.DeletionObserved(it.Range, it.Key, v.UID)
			if !errors.Is(err, sharded.ErrNotHeld) {
				c.env.Recorder.Eventf(pool, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting virtual machine %s/%s: %v", v.Namespace, v.Name, err)
			}
			return err
		}
		if err := c.letGo(ctx, it, pool, v); err != nil {
			return err
		}
		c.env.Recorder.Eventf(pool, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted VM %s/%s with uid %v from pool", v.Namespace, v.Name, v.UID)
		return nil
	})
}

// dropFinalizer is the JSON patch that takes the pool's finalizer off v if
// its finalizers are still those read, as KubeVirt's: unlike a
// resourceVersion, the test holds across the VM's own delete. Nil when v
// does not have it.
func dropFinalizer(v *vm) []byte {
	if !slices.Contains(v.Finalizers, Finalizer) {
		return nil
	}
	kept := slices.DeleteFunc(slices.Clone(v.Finalizers), func(f string) bool { return f == Finalizer })
	if kept == nil {
		kept = []string{}
	}
	body, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/finalizers", "value": v.Finalizers},
		{"op": "replace", "path": "/metadata/finalizers", "value": kept},
	})
	if err != nil {
		panic(err) // strings only: it cannot fail
	}
	return body
}

// letGo takes the pool's finalizer off a VM leaving it. (KubeVirt first
// takes the VM's claims and DataVolumes from it when the scale-in
// strategy preserves state: not built here.)
func (c *Controller) letGo(ctx context.Context, it sharded.Item, pool *poolv1.VirtualMachinePool, v *vm) error {
	if err := c.unhold(ctx, it, v); err != nil {
		c.env.Recorder.Eventf(pool, corev1.EventTypeWarning, ReasonFailedUpdate, "Error removing finalizer for VM %s/%s: %v", v.Namespace, v.Name, err)
		return err
	}
	return nil
}

// release takes the pool's finalizer off every VM its selector matches,
// then off the pool: the garbage collector deletes the VMs.
func (c *Controller) release(ctx context.Context, it sharded.Item, r *caches.Range, pool *poolv1.VirtualMachinePool, selector labels.Selector) error {
	for _, v := range kinds.FleetVMs.In(r).List() {
		if v.Namespace == pool.Namespace && selector.Matches(labels.Set(v.Labels)) {
			if err := c.unhold(ctx, it, v); err != nil {
				return err
			}
		}
	}
	return c.patchPool(ctx, it, nil, pool, patch.RemoveFinalizer(pool, Finalizer))
}

// unhold takes the pool's finalizer off v. The VM controller takes its
// own finalizer off a deleted VM at any moment, failing the patch's test
// of the finalizers read: then the VM is read again and the patch sent
// again, a bounded number of times. (KubeVirt posts the failure as an
// event and tries on the next sync; its slower VM controller rarely races.)
func (c *Controller) unhold(ctx context.Context, it sharded.Item, v *vm) error {
	const attempts = 3
	for i := 1; ; i++ {
		err := c.patchVM(ctx, it, v, types.JSONPatchType, dropFinalizer(v))
		if err == nil || !apierrors.IsInvalid(err) || i == attempts {
			return err
		}
		fresh, err := c.env.KubeVirt.VirtualMachines(v.Namespace).Get(ctx, v.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && fresh.UID != v.UID) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("get VM %s/%s: %w", v.Namespace, v.Name, err)
		}
		v = fresh
	}
}

// patchVM sends a merge patch of a VM (none when body is nil); a VM gone
// is no error.
func (c *Controller) patchVM(ctx context.Context, it sharded.Item, v *vm, pt types.PatchType, body []byte) error {
	if body == nil {
		return nil
	}
	err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		_, err := c.env.KubeVirt.VirtualMachines(v.Namespace).Patch(ctx, v.Name, pt, body, metav1.PatchOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patch VM %s/%s: %w", v.Namespace, v.Name, err)
	}
	return nil
}

// patchPool sends a merge patch of the pool (none when body is nil) and
// goes on from what the server returned.
func (c *Controller) patchPool(ctx context.Context, it sharded.Item, r *caches.Range, pool *poolv1.VirtualMachinePool, body []byte) error {
	updated, ok, err := sharded.SendPatch(ctx, c.rt.Writer, it.Range, body, func(ctx context.Context, body []byte) (*poolv1.VirtualMachinePool, error) {
		return c.env.KubeVirt.Pools(pool.Namespace).Patch(ctx, pool.Name, types.MergePatchType, body, metav1.PatchOptions{})
	})
	if err != nil {
		return fmt.Errorf("patch pool %s: %w", it.Key, err)
	}
	if ok {
		*pool = *updated
		if r != nil {
			Pools.In(r).Wrote(updated)
		}
	}
	return nil
}

// writeStatus writes replicas, ready replicas (VMs whose Ready condition is
// True), the selector and the ReplicaFailure and ReplicaPaused conditions,
// with KubeVirt's events, when any of them changed. KubeVirt writes it on
// every sync while a VM is not ready; virtshard only when it changed.
func (c *Controller) writeStatus(ctx context.Context, it sharded.Item, r *caches.Range, pool *poolv1.VirtualMachinePool, vms []*vm, syncErr *syncError) error {
	st := pool.Status.DeepCopy()
	if selector, err := metav1.LabelSelectorAsSelector(pool.Spec.Selector); err == nil && (syncErr == nil || syncErr.reason != ReasonInvalidSpec) {
		st.LabelSelector = selector.String()
	}
	st.Replicas, st.ReadyReplicas = int32(len(vms)), 0
	for _, v := range vms {
		if isReady(v) {
			st.ReadyReplicas++
		}
	}
	now := metav1.Now()
	var events []func()
	switch has := hasCondition(st, poolv1.VirtualMachinePoolReplicaFailure); {
	case syncErr != nil && !has:
		st.Conditions = append(st.Conditions, poolv1.VirtualMachinePoolCondition{Type: poolv1.VirtualMachinePoolReplicaFailure,
			Status: corev1.ConditionTrue, Reason: syncErr.reason, Message: syncErr.Error(), LastTransitionTime: now})
		events = append(events, func() {
			c.env.Recorder.Eventf(pool, corev1.EventTypeWarning, syncErr.reason, "%s", syncErr.Error())
		})
	case syncErr == nil && has:
		removeCondition(st, poolv1.VirtualMachinePoolReplicaFailure)
	}
	switch has := hasCondition(st, poolv1.VirtualMachinePoolReplicaPaused); {
	case pool.Spec.Paused && !has:
		st.Conditions = append(st.Conditions, poolv1.VirtualMachinePoolCondition{Type: poolv1.VirtualMachinePoolReplicaPaused,
			Status: corev1.ConditionTrue, Reason: ReasonPaused, Message: "Pool controller is paused", LastTransitionTime: now})
		events = append(events, func() { c.env.Recorder.Eventf(pool, corev1.EventTypeNormal, ReasonPaused, "Pool is paused") })
	case !pool.Spec.Paused && has:
		removeCondition(st, poolv1.VirtualMachinePoolReplicaPaused)
		events = append(events, func() { c.env.Recorder.Eventf(pool, corev1.EventTypeNormal, ReasonResumed, "Pool is unpaused") })
	}
	if equality.Semantic.DeepEqual(*st, pool.Status) {
		return nil
	}
	// As KubeVirt: the events before the write.
	for _, e := range events {
		e()
	}
	update := pool.DeepCopy()
	update.Status = *st
	var updated *poolv1.VirtualMachinePool
	err := c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		updated, err = c.env.KubeVirt.Pools(pool.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err), errors.Is(err, sharded.ErrNotHeld):
		return nil
	case err != nil:
		return fmt.Errorf("update status of pool %s: %w", it.Key, err)
	}
	Pools.In(r).Wrote(updated)
	return nil
}

func hasCondition(st *poolv1.VirtualMachinePoolStatus, t poolv1.VirtualMachinePoolConditionType) bool {
	return slices.ContainsFunc(st.Conditions, func(c poolv1.VirtualMachinePoolCondition) bool { return c.Type == t })
}

func removeCondition(st *poolv1.VirtualMachinePoolStatus, t poolv1.VirtualMachinePoolConditionType) {
	st.Conditions = slices.DeleteFunc(st.Conditions, func(c poolv1.VirtualMachinePoolCondition) bool { return c.Type == t })
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
	return errors.Join(slices.DeleteFunc(errs, func(err error) bool { return err == nil })...)
}
