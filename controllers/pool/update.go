package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	poolv1 "kubevirt.io/api/pool/v1beta1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/shard"
)

// Update reasons, KubeVirt's. A proactive update's event has the reason
// SuccessfulDelete whatever it did, as KubeVirt's has.
const (
	ReasonSuccessfulUpdate      = "SuccessfulUpdate"
	ReasonFailedRevisionPruning = "FailedRevisionPruning"
)

// UpdateRetry is when a proactive update held back by maxUnavailable looks
// again (KubeVirt's defaultRetryDelay).
const UpdateRetry = 3 * time.Second

// vmiUpdate is what a proactive update does for a VM whose VMI came from
// another revision than the VM's.
type vmiUpdate int

const (
	noUpdate vmiUpdate = iota
	restart            // the VMI template changed: delete the VMI, its VM starts a new one
	relabel            // the same VMI template under a new revision: relabel the VMI
	recreate           // the DataVolume templates changed: delete the VM (foreground)
)

// update brings the pool's VMs to its spec once it is scaled (KubeVirt's
// update): every VM whose template is outdated is rewritten in place (the
// opportunistic update, always done), and, unless the update strategy is
// opportunistic, each VMI started from an older template is restarted, at
// most maxUnavailable at a time (the proactive update). stable says no VM
// was outdated; retry asks for another look when maxUnavailable held an
// update back.
func (c *Controller) update(ctx context.Context, it sharded.Item, r *caches.Range, pool *poolv1.VirtualMachinePool, vms []*vm) (stable bool, retry time.Duration, err *syncError) {
	strategy := pool.Spec.UpdateStrategy
	if strategy != nil && strategy.Unmanaged != nil {
		return true, 0, nil
	}
	candidates := slices.Clone(vms)
	if strategy != nil && strategy.Proactive != nil && strategy.Proactive.SelectionPolicy != nil {
		var err error
		if candidates, err = selected(candidates, strategy.Proactive.SelectionPolicy.Selectors); err != nil {
			return false, 0, &syncError{ReasonFailedUpdate, fmt.Errorf("failed to filter VMs based on ordered policies: %w", err)}
		}
	}
	judge := newRevisionJudge(r, pool)
	var outdated, current []*vm
	for _, v := range candidates {
		old, err := judge.outdated(v)
		if err != nil {
			return false, 0, &syncError{ReasonFailedUpdate, fmt.Errorf("error while detecting outdated VMs: %w", err)}
		}
		if old {
			outdated = append(outdated, v)
		} else {
			current = append(current, v)
		}
	}
	if err := c.rewrite(ctx, it, r, pool, judge, outdated); err != nil {
		return false, 0, &syncError{ReasonFailedUpdate, fmt.Errorf("error during VM update: %w", err)}
	}
	if strategy == nil || strategy.Opportunistic == nil {
		var err error
		if retry, err = c.restartOutdated(ctx, it, r, pool, current); err != nil {
			return false, 0, &syncError{ReasonFailedUpdate, fmt.Errorf("error during VMI update: %w", err)}
		}
	}
	return len(outdated) == 0, retry, nil
}

// revisionJudge tells, within one sync of a pool, whether a VM's revision
// is outdated. A pool's VMs share a few revisions, so each revision is
// decoded and compared with the pool's template once, not once per VM:
// that comparison was most of a pool replica's CPU at 500 VMs. Rewrites
// run in parallel and ask it too, hence the lock.
type revisionJudge struct {
	r    *caches.Range
	pool *poolv1.VirtualMachinePool

	mu       sync.Mutex
	verdicts map[string]bool
}

func newRevisionJudge(r *caches.Range, pool *poolv1.VirtualMachinePool) *revisionJudge {
	return &revisionJudge{r: r, pool: pool, verdicts: map[string]bool{}}
}

// outdated: the VM has no revision label, its revision is not there, or
// the VM template it holds is not the pool's. Only a revision that was
// found is remembered; one not yet cached is looked up again.
func (j *revisionJudge) outdated(v *vm) (bool, error) {
	name, ok := v.Labels[virtv1.VirtualMachinePoolRevisionName]
	if !ok {
		return true, nil
	}
	j.mu.Lock()
	verdict, known := j.verdicts[name]
	j.mu.Unlock()
	if known {
		return verdict, nil
	}
	spec, found, err := revisionSpec(j.r, j.pool.Namespace, name)
	if err != nil || !found {
		return true, err
	}
	verdict = !equality.Semantic.DeepEqual(spec.VirtualMachineTemplate, j.pool.Spec.VirtualMachineTemplate)
	j.mu.Lock()
	j.verdicts[name] = verdict
	j.mu.Unlock()
	return verdict, nil
}

// revisionSpec is the pool spec the revision name holds, if it is cached
// or this replica created it.
func revisionSpec(r *caches.Range, namespace, name string) (*poolv1.VirtualMachinePoolSpec, bool, error) {
	cr, found, err := kinds.Revisions.In(r).Latest(namespace + "/" + name)
	if err != nil || !found {
		return nil, false, err
	}
	spec, err := kinds.PoolSpec(cr)
	return spec, err == nil, err
}

// rewrite updates each outdated VM to the pool's template at the VM's
// index, under the pool's current revision, keeping the firmware UUID and
// serial the VM was made with (they name the machine to its guest) and
// its range labels (keepPlacement).
func (c *Controller) rewrite(ctx context.Context, it sharded.Item, r *caches.Range, pool *poolv1.VirtualMachinePool, judge *revisionJudge, outdated []*vm) error {
	if len(outdated) == 0 {
		return nil
	}
	revision, err := c.ensureRevision(ctx, it, r, pool)
	if err != nil {
		return err
	}
	return parallel(len(outdated), func(i int) error {
		old := outdated[i]
		index := indexOf(old.Name)
		if index < 0 {
			return fmt.Errorf("VM %s/%s has no index in its name", old.Namespace, old.Name)
		}
		rewritten := func(old *vm) *vm {
			v := old.DeepCopy()
			v.Labels = maps.Clone(pool.Spec.VirtualMachineTemplate.ObjectMeta.Labels)
			v.Annotations = maps.Clone(pool.Spec.VirtualMachineTemplate.ObjectMeta.Annotations)
			v.Spec = *indexedSpec(&pool.Spec, index)
			withRevision(v, revision)
			keepIdentity(old, v)
			keepPlacement(old, v)
			return v
		}
		v := rewritten(old)
		vms := c.env.KubeVirt.VirtualMachines(v.Namespace)
		err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
			// The VM's own controller writes it too, and the cache may be
			// behind this pool's own rewrite: a conflict reads the VM
			// afresh and rewrites it only if it is still outdated, where
			// KubeVirt fails the sync.
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				updated, err := vms.Update(ctx, v, metav1.UpdateOptions{})
				if err == nil {
					kinds.FleetVMs.In(r).Wrote(updated)
				}
				if !apierrors.IsConflict(err) {
					return err
				}
				fresh, getErr := vms.Get(ctx, v.Name, metav1.GetOptions{})
				if getErr != nil {
					return getErr
				}
				if fresh.UID != old.UID {
					return fmt.Errorf("VM %s/%s was replaced", v.Namespace, v.Name)
				}
				if still, checkErr := judge.outdated(fresh); checkErr != nil || !still {
					v = nil
					return checkErr
				}
				v = rewritten(fresh)
				return err
			})
		})
		if err != nil {
			if !errors.Is(err, sharded.ErrNotHeld) {
				c.env.Recorder.Eventf(pool, corev1.EventTypeWarning, ReasonFailedUpdate, "Error updating virtual machine %s/%s: %v", old.Namespace, old.Name, err)
			}
			return err
		}
		if v == nil {
			return nil // rewritten already, by an earlier sync the cache had not caught up with
		}
		klog.FromContext(ctx).V(2).Info("Updated VM in pool", "pool", klog.KObj(pool), "vm", klog.KObj(v))
		c.env.Recorder.Eventf(pool, corev1.EventTypeNormal, ReasonSuccessfulUpdate, "Updated VM %s/%s", v.Namespace, v.Name)
		return nil
	})
}

// keepPlacement keeps old's range labels in v: the pool's, which puts v
// in the pool's view, and the range label of a VM made by a version that
// put VMs on the pool's range, which places it.
func keepPlacement(old, v *vm) {
	for _, label := range []string{shard.LabelFleetRange, shard.LabelRange} {
		if value, ok := old.Labels[label]; ok {
			v.Labels[label] = value
		}
	}
}

// keepIdentity keeps old's firmware UUID and serial in v.
func keepIdentity(old, v *vm) {
	if old.Spec.Template == nil || v.Spec.Template == nil || old.Spec.Template.Spec.Domain.Firmware == nil {
		return
	}
	was, fw := old.Spec.Template.Spec.Domain.Firmware, &v.Spec.Template.Spec.Domain.Firmware
	if *fw == nil {
		*fw = &virtv1.Firmware{}
	}
	if was.UUID != "" {
		(*fw).UUID = was.UUID
	}
	if was.Serial != "" {
		(*fw).Serial = was.Serial
	}
}

// restartOutdated is the proactive update: first every VM not ready whose
// VMI is outdated (a restart that failed before), then, in the policy's
// order, as many of the rest as maxUnavailable allows beside the VMIs
// already unavailable.
func (c *Controller) restartOutdated(ctx context.Context, it sharded.Item, r *caches.Range, pool *poolv1.VirtualMachinePool, vms []*vm) (time.Duration, error) {
	vmiOf := func(v *vm) (*virtv1.VirtualMachineInstance, bool) {
		vmi, ok, _ := kinds.FleetVMIs.In(r).Get(v.Namespace + "/" + v.Name)
		return vmi, ok
	}
	for _, v := range vms {
		if isReady(v) {
			continue
		}
		if vmi, ok := vmiOf(v); ok && vmi.DeletionTimestamp == nil {
			if err := c.updateVMI(ctx, it, r, pool, v, vmi); err != nil {
				return 0, err
			}
		}
	}
	limit, err := maxUnavailable(pool)
	if err != nil {
		return 0, err
	}
	for _, v := range vms {
		if vmi, ok := vmiOf(v); !ok || !vmiReady(vmi) {
			limit--
		}
	}
	if s := pool.Spec.UpdateStrategy; s != nil && s.Proactive != nil {
		var policy *poolv1.VirtualMachinePoolSortPolicy
		if s.Proactive.SelectionPolicy != nil {
			policy = s.Proactive.SelectionPolicy.SortPolicy
		}
		sortBy(vms, policy, false)
	} else {
		sortBy(vms, nil, false)
	}
	for _, v := range vms {
		if limit <= 0 {
			klog.FromContext(ctx).V(4).Info("Delaying proactive update: max unavailable reached", "pool", klog.KObj(pool))
			return UpdateRetry, nil
		}
		vmi, ok := vmiOf(v)
		if !ok {
			continue
		}
		kind, err := c.vmiUpdateOf(r, v, vmi)
		if err != nil {
			return 0, err
		}
		if kind == noUpdate {
			continue
		}
		if err := c.apply(ctx, it, pool, v, vmi, kind); err != nil {
			return 0, err
		}
		limit--
	}
	return 0, nil
}

// updateVMI applies what vmi's revision asks for.
func (c *Controller) updateVMI(ctx context.Context, it sharded.Item, r *caches.Range, pool *poolv1.VirtualMachinePool, v *vm, vmi *virtv1.VirtualMachineInstance) error {
	kind, err := c.vmiUpdateOf(r, v, vmi)
	if err != nil {
		return err
	}
	return c.apply(ctx, it, pool, v, vmi, kind)
}

// vmiUpdateOf compares the revision the VM is at with the one its VMI
// started from: the same name, or a VM without a revision (the
// opportunistic update gives it one), or a VM revision not cached yet,
// needs nothing; a VMI without a revision, or whose revision is gone,
// restarts; different DataVolume templates recreate the VM; a different
// VMI template restarts the VMI; the same template under another name
// relabels it.
func (c *Controller) vmiUpdateOf(r *caches.Range, v *vm, vmi *virtv1.VirtualMachineInstance) (vmiUpdate, error) {
	vmRevision, ok := v.Labels[virtv1.VirtualMachinePoolRevisionName]
	if !ok {
		return noUpdate, nil
	}
	vmiRevision, ok := vmi.Labels[virtv1.VirtualMachinePoolRevisionName]
	if !ok {
		return restart, nil
	}
	if vmRevision == vmiRevision {
		return noUpdate, nil
	}
	want, found, err := revisionSpec(r, v.Namespace, vmRevision)
	if err != nil || !found {
		return noUpdate, err
	}
	had, found, err := revisionSpec(r, v.Namespace, vmiRevision)
	if err != nil {
		return restart, err
	}
	if !found {
		return restart, nil
	}
	wantVM, hadVM := want.VirtualMachineTemplate.Spec, had.VirtualMachineTemplate.Spec
	switch {
	case !equality.Semantic.DeepEqual(hadVM.DataVolumeTemplates, wantVM.DataVolumeTemplates):
		return recreate, nil
	case !equality.Semantic.DeepEqual(hadVM.Template, wantVM.Template):
		return restart, nil
	}
	return relabel, nil
}

// apply does one VMI update, with KubeVirt's events.
func (c *Controller) apply(ctx context.Context, it sharded.Item, pool *poolv1.VirtualMachinePool, v *vm, vmi *virtv1.VirtualMachineInstance, kind vmiUpdate) error {
	var write func(ctx context.Context) error
	switch kind {
	case noUpdate:
		return nil
	case restart:
		write = func(ctx context.Context) error {
			return c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Delete(ctx, vmi.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &vmi.UID}})
		}
	case recreate:
		write = func(ctx context.Context) error {
			return c.env.KubeVirt.VirtualMachines(v.Namespace).Delete(ctx, v.Name, metav1.DeleteOptions{
				PropagationPolicy: ptr.To(metav1.DeletePropagationForeground), Preconditions: &metav1.Preconditions{UID: &v.UID}})
		}
	case relabel:
		body, err := relabelPatch(vmi, v.Labels[virtv1.VirtualMachinePoolRevisionName])
		if err != nil {
			return err
		}
		write = func(ctx context.Context) error {
			_, err := c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.JSONPatchType, body, metav1.PatchOptions{})
			return err
		}
	}
	err := c.rt.Write(ctx, it.Range, write)
	switch {
	case errors.Is(err, sharded.ErrNotHeld):
		return err
	case err != nil:
		c.env.Recorder.Eventf(pool, corev1.EventTypeWarning, ReasonFailedUpdate, "Error updating resource %s/%s: %v", v.Namespace, v.Name, err)
		return err
	}
	c.env.Recorder.Eventf(pool, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Successfully updated resource %s/%s", v.Namespace, v.Name)
	return nil
}

// relabelPatch sets the VMI's revision label, if its labels are still
// those read.
func relabelPatch(vmi *virtv1.VirtualMachineInstance, revision string) ([]byte, error) {
	relabelled := maps.Clone(vmi.Labels)
	if relabelled == nil {
		relabelled = map[string]string{}
	}
	relabelled[virtv1.VirtualMachinePoolRevisionName] = revision
	ops := []map[string]any{{"op": "add", "path": "/metadata/labels", "value": relabelled}}
	if vmi.Labels != nil {
		ops = []map[string]any{
			{"op": "test", "path": "/metadata/labels", "value": vmi.Labels},
			{"op": "replace", "path": "/metadata/labels", "value": relabelled},
		}
	}
	return json.Marshal(ops)
}

// prune deletes the pool's revisions no VM and no VMI of it is at.
func (c *Controller) prune(ctx context.Context, it sharded.Item, r *caches.Range, pool *poolv1.VirtualMachinePool, vms []*vm) *syncError {
	owned, err := kinds.Revisions.In(r).ByIndex(kinds.ByControllerUID, string(pool.UID))
	if err != nil {
		return &syncError{ReasonFailedRevisionPruning, fmt.Errorf("error while pruning vmpool revisions: %w", err)}
	}
	used := map[string]bool{}
	for _, v := range vms {
		used[v.Labels[virtv1.VirtualMachinePoolRevisionName]] = true
		if vmi, ok, _ := kinds.FleetVMIs.In(r).Get(v.Namespace + "/" + v.Name); ok {
			used[vmi.Labels[virtv1.VirtualMachinePoolRevisionName]] = true
		}
	}
	for _, cr := range owned {
		if used[cr.Name] {
			continue
		}
		err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
			return c.env.Kube.AppsV1().ControllerRevisions(cr.Namespace).Delete(ctx, cr.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cr.UID}})
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return &syncError{ReasonFailedRevisionPruning, fmt.Errorf("error while pruning vmpool revisions: %w", err)}
		}
	}
	return nil
}
