package vmi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/expectations"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/controllers/topology"
	"github.com/virtshard/virtshard/controllers/vmistatus"
	"github.com/virtshard/virtshard/shard"
)

var errRangeNotHeld = errors.New("range not held by this replica")

func notFound(key string) error {
	return apierrors.NewNotFound(virtv1.Resource("virtualmachineinstances"), key)
}

// Condition reasons and event reasons, KubeVirt's where it has them.
const (
	ReasonSuccessfulCreate   = "SuccessfulCreate"
	ReasonFailedCreate       = "FailedCreate"
	ReasonSuccessfulDelete   = "SuccessfulDelete"
	ReasonFailedDelete       = "FailedDelete"
	ReasonFailedPVCNotFound  = "FailedPvcNotFound"
	ReasonInvalidNetwork     = "InvalidNetworkSpec"
	ReasonInvalidSpec        = "InvalidSpec"
	ReasonRangeLabelRestored = "RangeLabelRestored"
	ReasonPodFailed          = "PodFailed"
)

// sync reconciles one VMI of a range this replica holds.
func (c *Controller) sync(ctx context.Context, it item) error {
	r := c.env.Caches.Get(it.Range)
	if r == nil {
		return nil
	}
	vmi, exists, err := kinds.VMIs.In(r).Get(it.Key)
	if err != nil {
		return err
	}
	if !exists {
		c.expectations.Delete(it.Range, it.Key)
		c.cids.release(it.Range, it.Key)
		return nil
	}
	pods := kinds.PodsOf(r, vmi)
	satisfied := c.expectations.Satisfied(it.Range, it.Key)
	if !satisfied {
		// The informer event that meets the expectation requeues the VMI;
		// should it never come, look again once the expectation expires.
		c.rt.AddAfter(it.Range, it.Key, expectations.Timeout+time.Second)
	}

	if vmi.DeletionTimestamp != nil {
		return c.syncDeletion(ctx, it, vmi, pods, satisfied)
	}
	pod := activePod(vmi, pods)
	switch vmi.Status.Phase {
	case "", virtv1.Pending:
		if pod != nil {
			return c.followPod(ctx, it, vmi, pod, pods)
		}
		if receiving(vmi) {
			c.batcher.Enqueue(it.Range, it.Key, vmi.UID, c.opts.UrgentStatusWait, c.observe(nil, nil).waitForSync(metav1.Now()))
			return nil
		}
		if !satisfied {
			return nil // our create is on its way to the cache
		}
		if c.batcher.Await(it.Key, vmi.UID) {
			// The VMI may have moved on in a status write not yet sent:
			// never a second pod. The write's informer event (or, if it
			// writes nothing, the batcher) queues the VMI again.
			return nil
		}
		return c.createPod(ctx, it, vmi, pods)
	case virtv1.Scheduling, virtv1.Scheduled, virtv1.Running:
		if pod == nil {
			if !satisfied {
				return nil
			}
			if relabelled, err := c.restoreRangeLabel(ctx, it, vmi, pods); err != nil || relabelled {
				return err
			}
			c.batcher.Enqueue(it.Range, it.Key, vmi.UID, c.opts.UrgentStatusWait, podGone(metav1.Now()))
			return nil // a launcher pod is never re-created after Pending
		}
		return c.followPod(ctx, it, vmi, pod, pods)
	case virtv1.WaitingForSync:
		// Its decentralized migration creates its pod and moves it on;
		// virtshard does not run that migration yet (docs/kubevirt.md).
		return nil
	}
	if satisfied {
		// Final: what the pods left says, until deletion.
		c.batcher.EnqueueLazy(it.Range, it.Key, vmi.UID, settle(pod, pods, metav1.Now()))
	}
	if pod != nil {
		return c.syncPodMetadata(ctx, it, vmi, pod)
	}
	return nil
}

// syncPodMetadata brings the launcher pod's synced labels and annotations
// (the outdated-launcher mark, the descheduler's asks, Velero's hooks) to
// the VMI's, as KubeVirt's syncDynamicAnnotationsAndLabelsToPod does on
// every sync of a VMI with a pod (template.MetadataSync: all but the node
// label). It writes only when they differ, which is when someone changed
// the VMI's.
func (c *Controller) syncPodMetadata(ctx context.Context, it item, vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod) error {
	if pod.DeletionTimestamp != nil {
		return nil
	}
	if from, ok := c.labelsSent.Load(pod.UID); ok {
		if from == pod.ResourceVersion {
			return nil // our last write is on its way to the cache
		}
		c.labelsSent.Delete(pod.UID)
	}
	body := template.MetadataSync(vmi, pod, c.env.Template)
	if body == nil {
		return nil
	}
	err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		_, err := c.env.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	})
	if apierrors.IsNotFound(err) || errors.Is(err, sharded.ErrNotHeld) {
		return nil // gone, or another replica's now
	}
	if err != nil {
		return fmt.Errorf("sync labels and annotations of pod %s: %w", pod.Name, err)
	}
	c.labelsSent.Store(pod.UID, pod.ResourceVersion)
	return nil
}

// restoreRangeLabel looks for launcher pods of vmi that are not in the
// range's cache because someone changed or removed their range label, or
// because the VMI moved here from another range (a VM adopted it), and
// labels them with this range: a running VM must not fail for that. It reports
// whether it found any. A pod that carries the range's label but is not in
// its cache yet, or is there at an older resourceVersion, is an error,
// retried with backoff: the cache lags the server (a replica that was
// stopped took the range back with caches kept from before), and a VMI
// whose pod runs must not fail for that.
func (c *Controller) restoreRangeLabel(ctx context.Context, it item, vmi *virtv1.VirtualMachineInstance, cached []*corev1.Pod) (bool, error) {
	pods, err := c.env.Kube.CoreV1().Pods(vmi.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: virtv1.CreatedByLabel + "=" + string(vmi.UID),
	})
	if err != nil {
		return false, fmt.Errorf("look for launcher pods of %s: %w", it.Key, err)
	}
	want := strconv.Itoa(it.Range)
	found := false
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp != nil || !metav1.IsControlledBy(pod, vmi) {
			continue
		}
		if pod.Labels[shard.LabelRange] == want {
			if slices.ContainsFunc(cached, func(p *corev1.Pod) bool { return p.UID == pod.UID && p.ResourceVersion == pod.ResourceVersion }) {
				continue // cached as it is, and not the VMI's pod
			}
			// Not cached, or cached as it was (before it was scheduled
			// to the VMI's node, say): the cache lags.
			return true, fmt.Errorf("launcher pod %s/%s of %s is not in range %d's cache as it is yet", pod.Namespace, pod.Name, it.Key, it.Range)
		}
		found = true
		if err := c.labelHere(ctx, it, vmi, pod); err != nil {
			return true, err
		}
	}
	return found, nil
}

// labelHere puts pod, a launcher pod of vmi that carries another range's
// label or none, on the range's label: the pod as read, or nothing (a
// conflict retries the VMI).
func (c *Controller) labelHere(ctx context.Context, it item, vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod) error {
	want := strconv.Itoa(it.Range)
	patch := fmt.Sprintf(`{"metadata":{"uid":%q,"resourceVersion":%q,"labels":{%q:%q}}}`, pod.UID, pod.ResourceVersion, shard.LabelRange, want)
	err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		_, err := c.env.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("restore the range label of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if had := pod.Labels[shard.LabelRange]; had == strconv.Itoa(c.env.Ranges.Of(vmi)) && had != want {
		// The VMI was an orphan on its own key's range, and an owner
		// (a VM, a replica set) adopted it onto its own: the pod follows,
		// which is no one's mistake to warn of.
		klog.FromContext(ctx).V(2).Info("Moved launcher pod with its adopted VMI", "vmi", klog.KObj(vmi), "pod", pod.Name, "from", had, "to", want)
		return nil
	}
	c.env.Recorder.Eventf(vmi, corev1.EventTypeWarning, ReasonRangeLabelRestored,
		"launcher pod %s had range label %q; restored it to %s", pod.Name, pod.Labels[shard.LabelRange], want)
	return nil
}

// existingPod is what a create answered AlreadyExists found: ours (a
// previous holder's, or our own not seen yet), which the cache will show,
// or one left on another range when the VMI moved here (a VM adopted
// it), which is labelled with this range.
func (c *Controller) existingPod(ctx context.Context, it item, vmi *virtv1.VirtualMachineInstance, name string) error {
	pod, err := c.env.Kube.CoreV1().Pods(vmi.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("launcher pod %s/%s was there at create and is gone: look again", vmi.Namespace, name)
	case err != nil:
		return fmt.Errorf("get launcher pod %s/%s: %w", vmi.Namespace, name, err)
	}
	if pod.DeletionTimestamp != nil || !metav1.IsControlledBy(pod, vmi) || pod.Labels[shard.LabelRange] == strconv.Itoa(it.Range) {
		return nil
	}
	return c.labelHere(ctx, it, vmi, pod)
}

// activePod is the launcher pod that runs the VMI: once the VMI has a
// node, the pod on that node — a migration's target pod becomes it when the
// VMI moves, and the source pod, which then completes, stops being it —
// before that, the newest pod that is not a migration target. Normally
// there is one, by name. A temporary WaitForFirstConsumer pod never is.
//
// Of two pods on the node, KubeVirt takes the newer (CurrentVMIPod). A VMI
// migrated away and back within one second has its first pod, completed,
// and the last target pod there with creation timestamps equal to the
// second: a pod not finished goes before a finished one, then the newer.
func activePod(vmi *virtv1.VirtualMachineInstance, pods []*corev1.Pod) *corev1.Pod {
	var active *corev1.Pod
	for _, p := range pods {
		if isProvisioningPod(p) {
			continue
		}
		if node := vmi.Status.NodeName; node != "" && p.Spec.NodeName != node {
			continue
		}
		if _, target := p.Labels[virtv1.MigrationJobLabel]; target && vmi.Status.NodeName == "" {
			continue
		}
		if active == nil || runsLater(p, active) {
			active = p
		}
	}
	return active
}

// runsLater: p, not a's, is the pod that runs the VMI now.
func runsLater(p, a *corev1.Pod) bool {
	if pf, af := kinds.PodFinished(p), kinds.PodFinished(a); pf != af {
		return af
	}
	return p.CreationTimestamp.After(a.CreationTimestamp.Time)
}

// createPod checks that the VMI can run and creates its launcher pod, or
// first the temporary pod its WaitForFirstConsumer DataVolumes need.
func (c *Controller) createPod(ctx context.Context, it item, cached *virtv1.VirtualMachineInstance, pods []*corev1.Pod) error {
	vmi := cached.DeepCopy()
	template.ApplyDefaults(vmi, c.env.Template)
	if err := template.ValidateNetworks(vmi); err != nil {
		// Bad input: say so on the object and wait for the user to change it
		// (the update requeues it); no retry loop.
		c.blocked(it, cached, corev1.EventTypeWarning, ReasonInvalidNetwork, err.Error())
		return nil
	}
	if err := errors.Join(template.ValidateVolumes(vmi), template.ValidateMemory(vmi)); err != nil {
		c.blocked(it, cached, corev1.EventTypeWarning, ReasonInvalidSpec, err.Error())
		return nil
	}
	for _, claim := range template.ClaimNames(vmi) {
		if _, exists := c.env.Objects.PVC(vmi.Namespace, claim); !exists {
			// The PVC informer requeues this VMI when the claim appears.
			c.blocked(it, cached, corev1.EventTypeNormal, ReasonFailedPVCNotFound,
				fmt.Sprintf("PVC %s/%s does not exist, waiting for it to appear", vmi.Namespace, claim))
			return nil
		}
	}
	if need := topology.NeedOf(cached); need != topology.NotNeeded && cached.Status.TopologyHints == nil {
		return c.hint(it, cached, need) // the hint's write requeues the VMI
	}
	// As KubeVirt, with no event: the VMI's DataVolumesReady says why it
	// waits, and the DataVolume informer requeues it when one changes.
	dvs := dataVolumesOf(vmi, c.env.Objects, c.dataVolumes())
	state := stateOf(dvs)
	temps := provisioningPods(vmi, pods)
	if !state.firstConsumer && len(temps) > 0 {
		// Their claims are bound: the temporary pods have done their job.
		if err := c.deleteProvisioningPods(ctx, it, cached, temps); err != nil {
			return err
		}
	}
	if state.blocked() {
		var temp *corev1.Pod
		if len(temps) > 0 {
			temp = temps[0]
		} else if !state.failed && !state.importing {
			created, err := c.createLauncherPod(ctx, it, cached, vmi, template.RenderProvisioning)
			if err != nil || created == nil {
				return err
			}
			temp, pods = created, append(pods, created)
		}
		c.batcher.Enqueue(it.Range, it.Key, vmi.UID, c.opts.UrgentStatusWait, waitForDataVolumes(dvs, pods, temp, metav1.Now()))
		return nil
	}
	if len(temps) > 0 {
		return nil // their deletion requeues the VMI
	}
	if kinds.UnfinishedMigration(c.env.Caches, vmi) {
		return nil // the migration informer requeues the VMI when it ends
	}
	created, err := c.createLauncherPod(ctx, it, cached, vmi, template.Render)
	if err != nil || created == nil {
		return err
	}
	c.batcher.EnqueueLazy(it.Range, it.Key, cached.UID, toScheduling(c.observe(created, []*corev1.Pod{created}), metav1.Now()))
	return nil
}

// renderer renders a pod for a VMI: template.Render or RenderProvisioning.
type renderer func(*virtv1.VirtualMachineInstance, int, template.Options, template.Cluster, template.Objects) (*corev1.Pod, error)

// createLauncherPod renders vmi's pod with render and creates it. It
// returns nil, nil when there is nothing more to do in this sync: the pod
// exists already, or the range is no longer held.
func (c *Controller) createLauncherPod(ctx context.Context, it item, cached, vmi *virtv1.VirtualMachineInstance, render renderer) (*corev1.Pod, error) {
	pod, err := render(vmi, it.Range, c.env.Template, c.env.ClusterConfig.Current(), c.env.Objects)
	if err != nil {
		// As KubeVirt: what is missing (a backend-storage PVC, a
		// NetworkAttachmentDefinition) or refused (a host device the CR
		// does not permit) may appear or change, so report it and retry
		// with backoff.
		message := fmt.Sprintf("failed to render launch manifest: %v", err)
		c.blocked(it, cached, corev1.EventTypeWarning, ReasonFailedCreate, message)
		return nil, errors.New(message)
	}
	var created *corev1.Pod
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		c.expectations.ExpectCreations(it.Range, it.Key, 1)
		created, err = c.env.Kube.CoreV1().Pods(vmi.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	switch {
	case errors.Is(err, sharded.ErrNotHeld):
		return nil, nil
	case apierrors.IsAlreadyExists(err):
		// The deterministic name makes a second pod impossible: ours
		// exists already, a previous holder's not yet seen, or one left on
		// another range (the VMI was adopted by a VM there): bring it here.
		c.expectations.CreationObserved(it.Range, it.Key)
		return nil, c.existingPod(ctx, it, cached, pod.Name)
	case err != nil:
		c.expectations.CreationObserved(it.Range, it.Key)
		c.env.Recorder.Eventf(cached, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating pod: %v", err)
		return nil, fmt.Errorf("create launcher pod: %w", err)
	}
	klog.FromContext(ctx).V(4).Info("Created launcher pod", "vmi", klog.KObj(cached), "pod", klog.KObj(created))
	c.env.Recorder.Eventf(cached, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created virtual machine pod %s", created.Name)
	return created, nil
}

// followPod moves the VMI along with its launcher pod.
func (c *Controller) followPod(ctx context.Context, it item, vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod, pods []*corev1.Pod) error {
	if pod.DeletionTimestamp == nil && !kinds.PodFinished(pod) {
		if err := c.syncUnpaused(ctx, it, vmi, pod); err != nil {
			return err
		}
	}
	if err := c.syncPodMetadata(ctx, it, vmi, pod); err != nil {
		return err
	}
	switch {
	case migratedAway(vmi, pod):
		// The source of a migration under way: its virt-launcher ends once
		// the domain has left, and the watch may bring that before the
		// VMI's move to the target, which brings the VMI back here.
	case kinds.PodFinished(pod) && rank(vmi.Status.Phase) >= rank(virtv1.Scheduled):
		// Handed off: the pod ended with its domain, whose end the node
		// agent reports (Succeeded after a shutdown, Failed after a
		// crash). KubeVirt's VMI controller leaves a Scheduled or Running
		// VMI whose pod exists to it; a Failed written first would keep a
		// VMI that shut down from Succeeded.
	case kinds.PodFinished(pod):
		c.fail(it, vmi, ReasonPodFailed, fmt.Sprintf("launcher pod %s is %s", pod.Name, pod.Status.Phase))
	case pod.DeletionTimestamp != nil:
		// Terminating: the VMI fails when the pod is gone.
	case pod.Status.Phase == corev1.PodRunning && podReady(pod):
		if err := c.syncEvictionInProgress(ctx, it, vmi, pod); err != nil {
			return err
		}
		if rank(vmi.Status.Phase) < rank(virtv1.Scheduled) {
			o := c.observe(pod, pods)
			if autoattachVSOCK(vmi) {
				cid, err := c.cids.allocate(ctx, it.Range, it.Key, vmi)
				if err != nil {
					return fmt.Errorf("give %s a VSOCK CID: %w", it.Key, err)
				}
				o.vsockCID = &cid
			}
			c.batcher.Enqueue(it.Range, it.Key, vmi.UID, c.opts.UrgentStatusWait, toScheduled(o, metav1.Now()))
		} else if podStale(vmi, pod, pods) && !c.batcher.Pending(it.Key, vmi.UID) {
			c.batcher.EnqueueLazy(it.Range, it.Key, vmi.UID, followingPod(c.observe(pod, pods)))
		}
		if ratio := c.env.ClusterConfig.Current().AdditionalGuestMemoryOverheadRatio(); hotplugUnmarked(vmi, ratio) && !c.batcher.Pending(it.Key, vmi.UID) {
			c.batcher.EnqueueLazy(it.Range, it.Key, vmi.UID, markHotplug(ratio))
		}
		if (claimsMoved(vmi) || volumesMoveUnmarked(vmi)) && !c.batcher.Pending(it.Key, vmi.UID) {
			c.batcher.EnqueueLazy(it.Range, it.Key, vmi.UID, followVolumeMove(c.observe(pod, pods), metav1.Now()))
		}
	default:
		// Scheduling is already on its way if anything is pending for the
		// VMI: a second lazy intent could only pull its write forward.
		if rank(vmi.Status.Phase) < rank(virtv1.Scheduling) && !c.batcher.Pending(it.Key, vmi.UID) {
			c.batcher.EnqueueLazy(it.Range, it.Key, vmi.UID, toScheduling(c.observe(pod, pods), pod.CreationTimestamp))
		}
		if cond := unschedulable(pod); cond != nil {
			c.batcher.EnqueueLazy(it.Range, it.Key, vmi.UID, copyPodScheduled(*cond))
		}
	}
	if !evictionRequestShown(vmi) {
		c.batcher.Enqueue(it.Range, it.Key, vmi.UID, c.opts.UrgentStatusWait, evictionRequested(metav1.Now()))
	}
	return nil
}

// migratedAway tells whether pod is the source pod of vmi's migration that
// started and has not failed, and has ended.
func migratedAway(vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod) bool {
	ms := vmi.Status.MigrationState
	return pod.Status.Phase == corev1.PodSucceeded && ms != nil && ms.SourcePod == pod.Name &&
		ms.StartTimestamp != nil && !ms.Failed
}

// syncUnpaused keeps the launcher pod's readiness gate,
// kubevirt.io/virtual-machine-unpaused, in step with the VMI's Paused
// condition, as KubeVirt's syncPausedConditionToPod does: True unless the
// VMI is paused. Without it no kubelet reports the pod Ready. The patch
// carries the pod's UID, so it cannot land on a successor of that name.
//
// It waits for the scheduler's answer (no kubelet reads the gate before),
// and with a node also labels the pod with it: KubeVirt labels every
// launcher pod kubevirt.io/nodeName once its VMI is scheduled, in a write
// of its own; here it rides in this one (pods/status takes labels), so
// the label costs no write. An unschedulable pod gets its gate as
// KubeVirt's does.
func (c *Controller) syncUnpaused(ctx context.Context, it item, vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod) error {
	paused := false
	if cond := vmistatus.Condition(vmi, virtv1.VirtualMachineInstancePaused); cond != nil && cond.Status == corev1.ConditionTrue {
		paused = true
	}
	unpaused := false
	for _, cond := range pod.Status.Conditions {
		if cond.Type == virtv1.VirtualMachineUnpaused && cond.Status == corev1.ConditionTrue {
			unpaused = true
		}
	}
	if unpaused != paused {
		c.gatesSent.Delete(pod.UID) // in step: our patch, if any, is in the cache
		return nil
	}
	if sent, ok := c.gatesSent.Load(pod.UID); ok && sent.(bool) != paused {
		return nil // our patch is on its way to the cache
	}
	if pod.Spec.NodeName == "" && unschedulable(pod) == nil {
		return nil // the scheduler's answer brings the VMI back here
	}
	meta := map[string]any{"uid": pod.UID}
	if node := pod.Spec.NodeName; node != "" && pod.Labels[virtv1.NodeNameLabel] != node {
		meta["labels"] = map[string]string{virtv1.NodeNameLabel: node}
	}
	status, reason, message := corev1.ConditionTrue, "NotPaused", "the virtual machine is not paused"
	if paused {
		status, reason, message = corev1.ConditionFalse, "Paused", "the virtual machine is paused"
	}
	now := metav1.Now()
	patch, err := json.Marshal(map[string]any{
		"metadata": meta,
		"status": map[string]any{"conditions": []corev1.PodCondition{{
			Type: virtv1.VirtualMachineUnpaused, Status: status, Reason: reason, Message: message,
			LastProbeTime: now, LastTransitionTime: now,
		}}},
	})
	if err != nil {
		return err
	}
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		_, err := c.env.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		return err
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) || errors.Is(err, sharded.ErrNotHeld) {
		return nil // gone or replaced: its event requeues the VMI
	}
	if err != nil {
		return fmt.Errorf("patch readiness gate of pod %s: %w", pod.Name, err)
	}
	c.gatesSent.Store(pod.UID, !paused)
	if meta["labels"] != nil {
		c.labelsSent.Store(pod.UID, pod.ResourceVersion)
	}
	return nil
}

// syncDeletion deletes the launcher pods and, once none is left, removes
// the finalizer.
func (c *Controller) syncDeletion(ctx context.Context, it item, vmi *virtv1.VirtualMachineInstance, pods []*corev1.Pod, satisfied bool) error {
	if !satisfied {
		return nil
	}
	if len(pods) == 0 {
		if vmi.Status.Phase == virtv1.WaitingForSync {
			owned, err := c.ownedByVM(ctx, vmi)
			if err != nil {
				return err
			}
			c.batcher.Enqueue(it.Range, it.Key, vmi.UID, c.opts.UrgentStatusWait, releaseReceiver(!owned))
			return nil
		}
		c.batcher.Enqueue(it.Range, it.Key, vmi.UID, c.opts.UrgentStatusWait, finalize)
		return nil
	}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		deleted, err := c.deletePod(ctx, it, pod, nil)
		if err != nil {
			return fmt.Errorf("delete launcher pod %s: %w", pod.Name, err)
		}
		if deleted {
			c.env.Recorder.Eventf(vmi, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted virtual machine pod %s", pod.Name)
		}
	}
	return nil
}

// receiving tells a receiver VMI, which a VM whose run strategy is
// WaitAsReceiver creates, from the others: until a decentralized migration
// names its target node it has no pod and waits (KubeVirt's
// IsMigrationTarget without IsMigrationTargetNodeLabelSet).
func receiving(vmi *virtv1.VirtualMachineInstance) bool {
	_, labelled := vmi.Labels[virtv1.MigrationTargetNodeNameLabel]
	return vmi.IsMigrationTarget() && !labelled
}

// ownedByVM reports whether the VM that controls vmi still exists (KubeVirt's
// hasOwnerVM). Read from the API: asked only of a deleted receiver VMI.
func (c *Controller) ownedByVM(ctx context.Context, vmi *virtv1.VirtualMachineInstance) (bool, error) {
	ref := metav1.GetControllerOf(vmi)
	if ref == nil || ref.Kind != virtv1.VirtualMachineGroupVersionKind.Kind {
		return false, nil
	}
	vm, err := c.env.KubeVirt.VirtualMachines(vmi.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read the VM of receiver VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return vm.UID == ref.UID, nil
}

// deletePod deletes a pod of the VMI it queued (grace nil: the pod's own),
// with its UID as a precondition, and expects the deletion. It reports
// whether it deleted the pod: not when the range is no longer held, nor
// when the pod was gone already (its delete event may have come and gone).
func (c *Controller) deletePod(ctx context.Context, it item, pod *corev1.Pod, grace *int64) (bool, error) {
	sent := false
	err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		sent = true
		c.expectations.ExpectDeletions(it.Range, it.Key, pod.UID)
		return c.env.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: grace,
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
	})
	if err != nil && sent {
		c.expectations.DeletionObserved(it.Range, it.Key, pod.UID)
	}
	if apierrors.IsNotFound(err) || errors.Is(err, sharded.ErrNotHeld) {
		return false, nil
	}
	return err == nil, err
}

// blocked reports a VMI that cannot proceed: a Synchronized=False condition
// with the reason, and an event (once per reason and message: the
// condition dedups them).
func (c *Controller) blocked(it item, vmi *virtv1.VirtualMachineInstance, eventType, reason, message string) {
	if cond := vmistatus.Condition(vmi, virtv1.VirtualMachineInstanceSynchronized); cond != nil &&
		cond.Status == corev1.ConditionFalse && cond.Reason == reason && cond.Message == message {
		return // already reported
	}
	c.env.Recorder.Event(vmi, eventType, reason, message)
	c.batcher.Enqueue(it.Range, it.Key, vmi.UID, c.opts.UrgentStatusWait, notSynchronized(reason, message, metav1.Now()))
}

func (c *Controller) fail(it item, vmi *virtv1.VirtualMachineInstance, reason, message string) {
	c.env.Recorder.Event(vmi, corev1.EventTypeWarning, reason, message)
	c.batcher.Enqueue(it.Range, it.Key, vmi.UID, c.opts.UrgentStatusWait, toFailed(reason, message, metav1.Now()))
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func unschedulable(pod *corev1.Pod) *corev1.PodCondition {
	for i, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
