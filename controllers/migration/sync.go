package migration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/patch"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// Finalizer keeps a migration until its permit is given back and its
// target pod dealt with (KubeVirt's kubevirt.io/migrationJobFinalize).
const Finalizer = "kubevirt.io/migrationJobFinalize"

// Reasons of failed migrations (events and the Failed condition).
const (
	ReasonVMINotFound      = "VMINotFound"
	ReasonVMINotRunning    = "VMINotRunning"
	ReasonInProgress       = "MigrationInProgress"
	ReasonTargetPodGone    = "TargetPodGone"
	ReasonVMIGone          = "VMIShutDown"
	ReasonNodeFailed       = "MigrationFailedOnNode"
	ReasonDeleted          = "MigrationDeleted"
	ConditionFailed        = virtv1.VirtualMachineInstanceMigrationConditionType("Failed")
	permitPoll             = time.Second
	eventFailedMigration   = "FailedMigration"
	eventSucceeded         = "SuccessfulMigration"
	eventSuccessfulCreate  = "SuccessfulCreate"
	eventSuccessfulHandOff = "SuccessfulHandOver"
	eventFailedAbort       = "FailedAbortMigration"
	eventSuccessfulAbort   = "SuccessfulAbortMigration"
	// eventTargetPodUnschedulable is KubeVirt's
	// controller.MigrationTargetPodUnschedulable.
	eventTargetPodUnschedulable = "migrationTargetPodUnschedulable"
)

// state is what one sync sees.
type state struct {
	m   *virtv1.VirtualMachineInstanceMigration
	vmi *virtv1.VirtualMachineInstance
	pod *corev1.Pod // the target pod, if it exists
	// source is the launcher pod running the VMI now: the newest on its
	// node that is not this migration's target.
	source *corev1.Pod
}

func (c *Controller) sync(ctx context.Context, it item) (time.Duration, error) {
	r := c.env.Caches.Get(it.Range)
	if r == nil {
		return 0, nil
	}
	cached, exists, err := kinds.Migrations.All(c.env.Caches).Get(it.Key)
	if err != nil || !exists {
		return 0, err
	}
	s := state{m: cached.DeepCopy()}
	s.vmi, _, err = kinds.VMIs.In(r).Get(s.m.Namespace + "/" + s.m.Spec.VMIName)
	if err != nil {
		return 0, err
	}
	if s.vmi == nil {
		return 0, c.syncWithoutVMI(ctx, it, s)
	}
	for _, pod := range kinds.PodsOf(r, s.vmi) {
		switch {
		case pod.Labels[virtv1.MigrationJobLabel] == string(s.m.UID):
			s.pod = pod
		case pod.Spec.NodeName == s.vmi.Status.NodeName && (s.source == nil || pod.CreationTimestamp.After(s.source.CreationTimestamp.Time)):
			s.source = pod
		}
	}

	if s.m.IsFinal() {
		return 0, c.finish(ctx, it, s)
	}
	if s.m.DeletionTimestamp != nil && !handedOff(s.m, s.vmi) {
		return 0, c.failAndFinish(ctx, it, s, ReasonDeleted, "the migration was deleted before it ended")
	}
	return c.advance(ctx, it, s)
}

// handedOff: the VMI's migration state is m's, with its target named: the
// nodes have the migration. A migration deleted after that is aborted
// through the VMI rather than failed at once.
func handedOff(m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance) bool {
	if vmi == nil {
		return false
	}
	ms := vmi.Status.MigrationState
	return ms != nil && ms.MigrationUID == m.UID && ms.TargetNode != ""
}

// syncWithoutVMI handles a migration whose VMI no held range has: only the
// holder of the migration's own range acts, and only once the API server
// confirms the VMI does not exist (it may be another replica's).
func (c *Controller) syncWithoutVMI(ctx context.Context, it item, s state) error {
	if c.env.Ranges.Of(s.m) != it.Range {
		return nil
	}
	if s.m.IsFinal() {
		return c.finish(ctx, it, s)
	}
	_, err := c.env.KubeVirt.VirtualMachineInstances(s.m.Namespace).Get(ctx, s.m.Spec.VMIName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return c.failAndFinish(ctx, it, s, ReasonVMINotFound, fmt.Sprintf("VMI %s/%s does not exist", s.m.Namespace, s.m.Spec.VMIName))
	case err != nil:
		return fmt.Errorf("get VMI of migration %s: %w", it.Key, err)
	}
	return nil // it exists: its range's holder acts
}

// advance moves an active migration as far as what it sees allows, and
// writes the status once.
func (c *Controller) advance(ctx context.Context, it item, s state) (time.Duration, error) {
	m, vmi := s.m, s.vmi
	var after time.Duration
	ms := vmi.Status.MigrationState
	handedOff := handedOff(m, vmi)
	if m.Status.Phase != virtv1.MigrationPhaseUnset && m.Status.Phase != virtv1.MigrationPending && s.pod == nil {
		// The cache may not show a pod another replica created a moment
		// before it handed the range over: ask before calling it gone.
		pod, err := c.env.Kube.CoreV1().Pods(m.Namespace).Get(ctx, targetPodName(vmi, m), metav1.GetOptions{})
		switch {
		case err == nil:
			s.pod = pod
		case !apierrors.IsNotFound(err):
			return 0, fmt.Errorf("get target pod of migration %s: %w", it.Key, err)
		}
	}
	if m.Status.Phase != virtv1.MigrationPhaseUnset && m.Status.Phase != virtv1.MigrationPending {
		switch {
		case vmi.IsFinal() || vmi.DeletionTimestamp != nil:
			return 0, c.failAndFinish(ctx, it, s, ReasonVMIGone, "the VMI shut down during the migration")
		case s.pod == nil:
			return 0, c.failAndFinish(ctx, it, s, ReasonTargetPodGone, msgTargetPodRemoved)
		case kinds.PodFinished(s.pod):
			// KubeVirt's PodIsDown; a pod being deleted is not down until
			// it is gone.
			return 0, c.failAndFinish(ctx, it, s, ReasonTargetPodGone, msgTargetPodShutDown)
		case handedOff && ms.Failed:
			return 0, c.failAndFinish(ctx, it, s, ReasonNodeFailed, "the source node reported the migration failed")
		}
	}
	if m.DeletionTimestamp != nil && !migrationCanceled(m) {
		// Deleted after the hand-off: marked first, in a write of its own,
		// as KubeVirt's sync does; the abort is asked of the nodes once it
		// runs.
		m.Status.Conditions = append(m.Status.Conditions, virtv1.VirtualMachineInstanceMigrationCondition{
			Type: virtv1.VirtualMachineInstanceMigrationAbortRequested, Status: corev1.ConditionTrue, LastProbeTime: now(),
		})
		return 0, c.writeStatus(ctx, it, m)
	}
	for changed := true; changed; {
		changed = false
		next := m.Status.Phase
		switch m.Status.Phase {
		case virtv1.MigrationPhaseUnset:
			if reason, message := c.refuse(s); reason != "" {
				return 0, c.failAndFinish(ctx, it, s, reason, message)
			}
			if err := c.patchFinalizers(ctx, it, m, patch.Manage(m, Finalizer)); err != nil {
				return 0, err
			}
			// As KubeVirt's SetSourcePod.
			if s.source != nil {
				m.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{SourcePod: s.source.Name}
			}
			next = virtv1.MigrationPending
		case virtv1.MigrationPending:
			if s.pod == nil {
				if wait := backoff(m, kinds.MigrationsOf(c.env.Caches, m.Namespace+"/"+m.Spec.VMIName), c.env.Clock.Now()); wait > 0 {
					c.env.Recorder.Eventf(vmi, corev1.EventTypeWarning, ReasonBackoff, "backoff migrating vmi %s/%s", vmi.Namespace, vmi.Name)
					after = wait
					break
				}
				// As KubeVirt's: the VMI is readied for a target pod before
				// the limits are asked, so a migration waiting for a slot
				// has already set it.
				var err error
				if vmi, err = c.setRuntimeUser(ctx, it, vmi); err != nil {
					return 0, err
				}
				var granted bool
				err = c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
					granted, err = c.permits.Acquire(ctx, asking(m, vmi.Status.NodeName), c.waiting(), c.limits())
					return err
				})
				if err != nil {
					return 0, err
				}
				if !granted {
					after = permitPoll // at a limit: look again shortly
					break
				}
				if s.pod, err = c.createTargetPod(ctx, it, m, vmi, s.source); err != nil {
					return 0, c.targetPodRefused(ctx, it, m, vmi, err)
				}
			}
			next = virtv1.MigrationScheduling
		case virtv1.MigrationScheduling:
			m.Status.Conditions = slices.DeleteFunc(m.Status.Conditions, rejectedByQuota)
			if podReady(s.pod) {
				next = virtv1.MigrationScheduled
				break
			}
			if pendingUnschedulable(s.pod) {
				// KubeVirt's handlePendingPodTimeout says so on every sync.
				c.warnNoHostModelNode(vmi, s.pod)
				c.env.Recorder.Eventf(m, corev1.EventTypeWarning, eventTargetPodUnschedulable,
					"Migration target pod for VMI [%s/%s] is currently unschedulable.", vmi.Namespace, vmi.Name)
			}
			message, left := c.podTimedOut(m, s.pod)
			if message != "" {
				// As KubeVirt's deleteTimedOutTargetPod: the pod goes, and
				// its absence fails the migration on the next sync.
				return 0, c.deleteTimedOutPod(ctx, it, m, s.pod, message)
			}
			after = left
		case virtv1.MigrationScheduled:
			if !handedOff {
				if err := c.handOff(ctx, it, m, vmi, s.pod, s.source); err != nil {
					return 0, err
				}
				break // the VMI's update brings us back
			}
			next = virtv1.MigrationPreparingTarget
		case virtv1.MigrationPreparingTarget:
			if ms.TargetNodeAddress != "" {
				next = virtv1.MigrationTargetReady
			}
		case virtv1.MigrationTargetReady:
			if ms.StartTimestamp != nil {
				next = virtv1.MigrationRunning
			}
		case virtv1.MigrationRunning:
			if m.DeletionTimestamp != nil {
				if err := c.requestAbort(ctx, it, m, vmi); err != nil {
					return 0, err
				}
			}
			if err := c.stampTargetReady(ctx, it, s.pod, ms); err != nil {
				return 0, err
			}
			if ms.Completed && !ms.Failed && !vmistatus.HotplugPending(vmi) {
				next = virtv1.MigrationSucceeded
			}
		}
		if next != m.Status.Phase {
			setPhase(m, next)
			changed = next != virtv1.MigrationSucceeded
		}
	}
	if m.Status.Phase == virtv1.MigrationSucceeded {
		m.Status.MigrationState = vmi.Status.MigrationState.DeepCopy()
		c.env.Recorder.Eventf(m, corev1.EventTypeNormal, eventSucceeded, "Source node reported migration succeeded")
		if err := c.writeStatus(ctx, it, m); err != nil {
			return 0, err
		}
		return 0, c.finish(ctx, it, s)
	}
	return after, c.writeStatus(ctx, it, m)
}

// targetPodRefused answers the API server's refusal of m's target pod
// (err) as KubeVirt does: a FailedCreate warning on the VMI; for a refusal
// by a ResourceQuota, the RejectedByResourceQuota condition on the
// migration, which stays Pending and is tried again (at once when a quota
// of its namespace changes). The permit goes back meanwhile: KubeVirt counts
// a migration with no target pod as pending, not running.
func (c *Controller) targetPodRefused(ctx context.Context, it item, m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance, err error) error {
	var refused apierrors.APIStatus
	if !errors.As(err, &refused) {
		return err // not the API server's answer: the render failed, or the write was fenced
	}
	c.env.Recorder.Eventf(vmi, corev1.EventTypeWarning, "FailedCreate", "Error creating pod: %v", refused)
	errs := []error{err, c.rt.Write(ctx, it.Range, func(ctx context.Context) error { return c.permits.Release(ctx, m.UID) })}
	if strings.Contains(err.Error(), "exceeded quota") && !slices.ContainsFunc(m.Status.Conditions, rejectedByQuota) {
		m.Status.Conditions = append(m.Status.Conditions, virtv1.VirtualMachineInstanceMigrationCondition{
			Type: virtv1.VirtualMachineInstanceMigrationRejectedByResourceQuota, Status: corev1.ConditionTrue, LastProbeTime: now(),
		})
		errs = append(errs, c.writeStatus(ctx, it, m))
	}
	return errors.Join(errs...)
}

func rejectedByQuota(c virtv1.VirtualMachineInstanceMigrationCondition) bool {
	return c.Type == virtv1.VirtualMachineInstanceMigrationRejectedByResourceQuota
}

// requestAbort asks the source node to abort the running migration m,
// deleted by its user: the VMI's migration state says abortRequested, as
// KubeVirt's markMigrationAbortInVmiStatus writes it (at the version read).
// The node's report that the migration failed then ends it.
func (c *Controller) requestAbort(ctx context.Context, it item, m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance) error {
	if vmi.Status.MigrationState.AbortRequested {
		return nil
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": vmi.ResourceVersion},
		"status":   map[string]any{"migrationState": map[string]any{"abortRequested": true}},
	})
	if err != nil {
		return err
	}
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		_, err := c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	})
	if apierrors.IsConflict(err) {
		return nil // the VMI's newer version brings the migration back
	}
	if err != nil {
		c.env.Recorder.Eventf(m, corev1.EventTypeWarning, eventFailedAbort, "failed to set MigrationState in VMI status. :%v", err)
		return fmt.Errorf("ask the abort of migration %s: %w", it.Key, err)
	}
	c.env.Recorder.Event(m, corev1.EventTypeNormal, eventSuccessfulAbort, "Migration is ready to be canceled by virt-handler.")
	return nil
}

// stampTargetReady records on the target pod when the target's domain
// was first seen ready, as KubeVirt's processMigrationPhase does once,
// in Go's time format.
func (c *Controller) stampTargetReady(ctx context.Context, it item, pod *corev1.Pod, ms *virtv1.VirtualMachineInstanceMigrationState) error {
	if ms.TargetNodeDomainReadyTimestamp == nil {
		return nil
	}
	if _, done := pod.Annotations[virtv1.MigrationTargetReadyTimestamp]; done {
		return nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]string{virtv1.MigrationTargetReadyTimestamp: ms.TargetNodeDomainReadyTimestamp.String()},
	}})
	if err != nil {
		return err
	}
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		_, err := c.env.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("stamp target pod %s ready: %w", pod.Name, err)
	}
	return nil
}

// refuse says why a new migration cannot run, as KubeVirt's admission and
// canMigrateVMI would.
func (c *Controller) refuse(s state) (reason, message string) {
	vmi := s.vmi
	if vmi.Status.Phase != virtv1.Running || vmi.DeletionTimestamp != nil {
		return ReasonVMINotRunning, fmt.Sprintf("VMI %s is %s, not Running", vmi.Name, vmi.Status.Phase)
	}
	for _, other := range kinds.MigrationsOf(c.env.Caches, vmi.Namespace+"/"+vmi.Name) {
		if other.UID == s.m.UID || other.IsFinal() || other.Status.Phase == virtv1.MigrationPhaseUnset {
			continue
		}
		return ReasonInProgress, fmt.Sprintf("migration %s of VMI %s is in progress", other.Name, vmi.Name)
	}
	if ms := vmi.Status.MigrationState; ms != nil && ms.MigrationUID != s.m.UID && !ms.Completed && !ms.Failed && ms.TargetNode != "" {
		return ReasonInProgress, fmt.Sprintf("VMI %s is migrating (migration %s)", vmi.Name, ms.MigrationUID)
	}
	return "", ""
}

func system(m *virtv1.VirtualMachineInstanceMigration) bool {
	_, evacuation := m.Annotations[virtv1.EvacuationMigrationAnnotation]
	return evacuation || (m.Spec.Priority != nil && *m.Spec.Priority == virtv1.PrioritySystemCritical)
}

// asking is m as it asks for a permit, from node, its VMI's.
func asking(m *virtv1.VirtualMachineInstanceMigration, node string) candidate {
	return candidate{uid: m.UID, node: node, hasNode: node != "", system: system(m)}
}

// waitingNode is the source node of a waiting migration that may be of
// another range, whose VMI this replica does not hold: an evacuation names
// it (kubevirt.io/evacuationMigration), others are not known.
func waitingNode(m *virtv1.VirtualMachineInstanceMigration) string {
	return m.Annotations[virtv1.EvacuationMigrationAnnotation]
}

// waiting are the migrations, cluster-wide, that wait for a permit.
func (c *Controller) waiting() []candidate {
	var out []candidate
	for _, m := range kinds.Migrations.All(c.env.Caches).List() {
		if m.Status.Phase == virtv1.MigrationPending && m.DeletionTimestamp == nil {
			out = append(out, asking(m, waitingNode(m)))
		}
	}
	return out
}

func setPhase(m *virtv1.VirtualMachineInstanceMigration, phase virtv1.VirtualMachineInstanceMigrationPhase) {
	m.Status.Phase = phase
	m.Status.PhaseTransitionTimestamps = append(m.Status.PhaseTransitionTimestamps,
		virtv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: now()})
}

// podTimedOut applies KubeVirt's two timeouts (handlePendingPodTimeout)
// to a target pod that is still Pending, counted in whole seconds from its
// creation: one while it is unschedulable, one whatever the reason, each
// overridden by the migration's annotation. It returns KubeVirt's message
// once one has passed, or else the wait until the next.
func (c *Controller) podTimedOut(m *virtv1.VirtualMachineInstanceMigration, pod *corev1.Pod) (message string, left time.Duration) {
	if pod.Status.Phase != corev1.PodPending || pod.DeletionTimestamp != nil || pod.CreationTimestamp.IsZero() {
		return "", 0
	}
	spent := max(time.Now().Unix()-pod.CreationTimestamp.Unix(), 0)
	catchAll := timeoutSeconds(m, virtv1.MigrationPendingPodTimeoutSecondsAnnotation, c.opts.PendingTimeout)
	if pendingUnschedulable(pod) {
		unschedulable := timeoutSeconds(m, virtv1.MigrationUnschedulablePodTimeoutSecondsAnnotation, c.opts.UnschedulableTimeout)
		if spent >= unschedulable {
			return fmt.Sprintf("unschedulable pod %s/%s timeout period exceeded", pod.Namespace, pod.Name), 0
		}
		left = time.Duration(unschedulable-spent) * time.Second
	}
	if spent >= catchAll {
		return fmt.Sprintf("pending pod %s/%s timeout period exceeded", pod.Namespace, pod.Name), 0
	}
	if rest := time.Duration(catchAll-spent) * time.Second; left == 0 || rest < left {
		left = rest
	}
	return "", left
}

// timeoutSeconds is the migration's annotation, or else the default; an
// annotation that is not a number is ignored, as KubeVirt ignores it.
func timeoutSeconds(m *virtv1.VirtualMachineInstanceMigration, annotation string, def time.Duration) int64 {
	if v, ok := m.Annotations[annotation]; ok {
		if n, err := strconv.Atoi(v); err == nil {
			return int64(n)
		}
	}
	return int64(def / time.Second)
}

// deleteTimedOutPod deletes a target pod that timed out, by UID, and says
// why on the migration as KubeVirt does.
func (c *Controller) deleteTimedOutPod(ctx context.Context, it item, m *virtv1.VirtualMachineInstanceMigration, pod *corev1.Pod, message string) error {
	err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		return c.env.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		c.env.Recorder.Eventf(m, corev1.EventTypeWarning, "FailedDelete", "Error deleted migration target pod: %v", err)
		return fmt.Errorf("delete timed-out target pod of migration %s: %w", it.Key, err)
	}
	c.env.Recorder.Event(m, corev1.EventTypeNormal, "SuccessfulDelete", message)
	return nil
}

// pendingUnschedulable reports whether the scheduler found no node for
// pod.
func pendingUnschedulable(pod *corev1.Pod) bool {
	if pod == nil || pod.Status.Phase != corev1.PodPending || pod.DeletionTimestamp != nil {
		return false
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

func podReady(pod *corev1.Pod) bool {
	if pod == nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// handOff tells the node agents: the VMI's migrationState names the
// migration, the source and the target, and carries the migration
// configuration in force now (bandwidth, timeouts, post-copy…: the KubeVirt
// CR's, with what the VMI's MigrationPolicy sets in its place, and the
// policy's name), which virt-handler applies to this migration, as
// KubeVirt's handleTargetPodHandoff writes it; with the
// VmiMemoryOverheadReport gate, the target pod's memory overhead; and for
// a hotplug, what the target pod was given (hotplugLabels).
func (c *Controller) handOff(ctx context.Context, it item, m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance, pod, source *corev1.Pod) error {
	cluster := c.env.ClusterConfig.Current()
	config, policy, err := c.migrationConfiguration(vmi)
	if err != nil {
		return err
	}
	state := &virtv1.VirtualMachineInstanceMigrationState{
		MigrationUID: m.UID, SourceNode: vmi.Status.NodeName, TargetNode: pod.Spec.NodeName, TargetPod: pod.Name,
		MigrationConfiguration: config, MigrationPolicyName: policy,
	}
	if source != nil {
		state.SourcePod = source.Name
	}
	if cluster.VmiMemoryOverheadReportEnabled() {
		state.TargetMemoryOverhead = memoryOverhead(pod)
	}
	replaced, err := replacing(vmi.Status.MigrationState, state)
	if err != nil {
		return err
	}
	labels, err := c.hotplugLabels(ctx, vmi, pod)
	if err != nil {
		return fmt.Errorf("hand migration %s to the nodes: %w", it.Key, err)
	}
	labels[virtv1.MigrationTargetNodeNameLabel] = pod.Spec.NodeName
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": vmi.ResourceVersion,
			"labels":          labels,
		},
		"status": map[string]any{"migrationState": replaced},
	})
	if err != nil {
		return err
	}
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		_, err := c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("hand migration %s to the nodes: %w", it.Key, err)
	}
	c.env.Recorder.Event(m, corev1.EventTypeNormal, eventSuccessfulHandOff, "Migration target pod is ready for preparation by virt-handler.")
	return nil
}

// memoryOverhead is the target pod's kubevirt.io/memory-overhead-bytes,
// nil when it has none or it does not parse (KubeVirt logs and goes on).
func memoryOverhead(pod *corev1.Pod) *resource.Quantity {
	raw, ok := pod.Annotations[virtv1.MemoryOverheadAnnotationBytes]
	if !ok {
		return nil
	}
	bytes, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return nil
	}
	return resource.NewQuantity(bytes, resource.BinarySI)
}

// replacing is a merge patch value that replaces old by next: a merge
// patch merges objects, so every field of an earlier migration's state is
// set to null unless next sets it, down into nested objects (the migration
// configuration of an earlier migration may set fields this one's does
// not).
func replacing(old, next *virtv1.VirtualMachineInstanceMigrationState) (map[string]any, error) {
	var fields [2]map[string]any
	for i, state := range []*virtv1.VirtualMachineInstanceMigrationState{old, next} {
		fields[i] = map[string]any{}
		if state == nil {
			continue
		}
		raw, err := json.Marshal(state)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &fields[i]); err != nil {
			return nil, err
		}
	}
	return replaceObject(fields[0], fields[1]), nil
}

// replaceObject is the merge patch turning the JSON object old into next.
func replaceObject(old, next map[string]any) map[string]any {
	out := make(map[string]any, len(old)+len(next))
	for k := range old {
		out[k] = nil
	}
	for k, v := range next {
		oldObj, wasObj := old[k].(map[string]any)
		if nextObj, isObj := v.(map[string]any); isObj && wasObj {
			v = replaceObject(oldObj, nextObj)
		}
		out[k] = v
	}
	return out
}

func (c *Controller) writeStatus(ctx context.Context, it item, m *virtv1.VirtualMachineInstanceMigration) error {
	cached, exists, _ := kinds.Migrations.All(c.env.Caches).Get(it.Key)
	if exists && equality.Semantic.DeepEqual(cached.Status, m.Status) {
		return nil
	}
	var updated *virtv1.VirtualMachineInstanceMigration
	err := c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		updated, err = c.env.KubeVirt.Migrations(m.Namespace).UpdateStatus(ctx, m, metav1.UpdateOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("update status of migration %s: %w", it.Key, err)
	}
	*m = *updated
	return nil
}

// Messages of the two ways a target pod goes.
const (
	msgTargetPodRemoved  = "the target pod was removed"
	msgTargetPodShutDown = "the target pod shut down"
)

// failureEvents are the messages of KubeVirt's FailedMigration events
// (watch/migration/migration.go: sync, updateStatus), by the failure they
// report; a failure KubeVirt reports otherwise says its reason and message.
var failureEvents = map[string]string{
	ReasonDeleted:        "Migration failed due to being canceled",
	ReasonVMINotFound:    "Migration failed because vmi does not exist.",
	ReasonVMIGone:        "Migration failed vmi shutdown during migration.",
	ReasonNodeFailed:     "source node reported migration failed",
	ReasonInProgress:     "VMI is not eligible for migration because another migration job is in progress.",
	msgTargetPodRemoved:  "Migration target pod was removed during active migration.",
	msgTargetPodShutDown: "Migration failed because target pod shutdown during migration",
}

func failureEvent(reason, message string) string {
	if e, ok := failureEvents[message]; ok {
		return e
	}
	if e, ok := failureEvents[reason]; ok {
		return e
	}
	return reason + ": " + message
}

// failAndFinish records a failure and ends the migration, as KubeVirt's
// failMigration does: the phase, and the event. A migration that could
// not start (refused) also gets a Failed condition naming why: bad input
// gets a condition (bench/differential/differences.go). A deleted one is
// marked AbortRequested, as KubeVirt marks it.
func (c *Controller) failAndFinish(ctx context.Context, it item, s state, reason, message string) error {
	m := s.m
	klog.FromContext(ctx).V(2).Info("Migration failed", "migration", klog.KObj(m), "reason", reason)
	c.env.Recorder.Event(m, corev1.EventTypeWarning, eventFailedMigration, failureEvent(reason, message))
	setPhase(m, virtv1.MigrationFailed)
	if ms := vmiMigrationState(s); ms != nil {
		m.Status.MigrationState = ms.DeepCopy() // in this write, not finish's
	}
	switch {
	case refusals[reason]:
		m.Status.Conditions = append(m.Status.Conditions, virtv1.VirtualMachineInstanceMigrationCondition{
			Type: ConditionFailed, Status: corev1.ConditionTrue, Reason: reason, Message: message, LastTransitionTime: now(),
		})
	case reason == ReasonDeleted && !migrationCanceled(m):
		m.Status.Conditions = append(m.Status.Conditions, virtv1.VirtualMachineInstanceMigrationCondition{
			Type: virtv1.VirtualMachineInstanceMigrationAbortRequested, Status: corev1.ConditionTrue, LastProbeTime: now(),
		})
	}
	if err := c.writeStatus(ctx, it, m); err != nil {
		return err
	}
	return c.finish(ctx, it, s)
}

// refusals are the failures of a migration that never started because of
// what it asked for.
var refusals = map[string]bool{ReasonVMINotFound: true, ReasonVMINotRunning: true, ReasonInProgress: true}

// migrationCanceled reports whether m failed because it was deleted.
func migrationCanceled(m *virtv1.VirtualMachineInstanceMigration) bool {
	for _, c := range m.Status.Conditions {
		if c.Type == virtv1.VirtualMachineInstanceMigrationAbortRequested {
			return true
		}
	}
	return false
}

// finish cleans up after a final migration: the migration state the VMI
// kept of it, the target pod of one canceled before its hand-off (as
// KubeVirt's handlePreHandoffMigrationCancel; after it, the node's
// virt-launcher exits as for any failure), the permit (only after the
// final phase is written), older migrations of the VMI, and the finalizer.
// The target pod of a migration that failed otherwise is left to the
// node, whose virt-launcher exits, and the source pod of a successful one
// likewise: KubeVirt deletes neither.
func (c *Controller) finish(ctx context.Context, it item, s state) error {
	m := s.m
	if ms := vmiMigrationState(s); ms != nil && !equality.Semantic.DeepEqual(m.Status.MigrationState, ms) {
		// As KubeVirt's updateStatus for a final migration.
		m.Status.MigrationState = ms.DeepCopy()
		if err := c.writeStatus(ctx, it, m); err != nil {
			return err
		}
	}
	if migrationCanceled(m) && !handedOff(m, s.vmi) && s.pod != nil && s.pod.DeletionTimestamp == nil {
		err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
			return c.env.Kube.CoreV1().Pods(s.pod.Namespace).Delete(ctx, s.pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.pod.UID}})
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete target pod of migration %s: %w", it.Key, err)
		}
		// KubeVirt's handlePreHandoffMigrationCancel.
		c.env.Recorder.Eventf(m, corev1.EventTypeNormal, "SuccessfulDelete", "migration canceled and pod %s/%s is deleted", s.pod.Namespace, s.pod.Name)
	}
	if err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error { return c.permits.Release(ctx, m.UID) }); err != nil {
		return err
	}
	if s.vmi != nil {
		if err := c.collectGarbage(ctx, it, s.vmi); err != nil {
			return err
		}
	}
	return c.patchFinalizers(ctx, it, m, patch.RemoveFinalizer(m, Finalizer))
}

// vmiMigrationState is the VMI's migration state when it is this
// migration's, handed off to the target: what KubeVirt keeps of it.
func vmiMigrationState(s state) *virtv1.VirtualMachineInstanceMigrationState {
	if s.vmi == nil {
		return nil
	}
	if ms := s.vmi.Status.MigrationState; ms != nil && ms.MigrationUID == s.m.UID && ms.TargetNode != "" {
		return ms
	}
	return nil
}

// collectGarbage keeps the newest final migrations of the VMI.
func (c *Controller) collectGarbage(ctx context.Context, it item, vmi *virtv1.VirtualMachineInstance) error {
	var final []*virtv1.VirtualMachineInstanceMigration
	for _, m := range kinds.MigrationsOf(c.env.Caches, vmi.Namespace+"/"+vmi.Name) {
		if m.IsFinal() && m.DeletionTimestamp == nil {
			final = append(final, m)
		}
	}
	if len(final) <= finishedToKeep {
		return nil
	}
	sort.Slice(final, func(i, j int) bool { return final[i].CreationTimestamp.Before(&final[j].CreationTimestamp) })
	for _, m := range final[:len(final)-finishedToKeep] {
		err := c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
			return c.env.KubeVirt.Migrations(m.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &m.UID}})
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete old migration %s: %w", m.Name, err)
		}
	}
	return nil
}

// patchFinalizers sends a finalizer patch of m (none when nil), and goes
// on from what the server returned, with the status worked out so far.
func (c *Controller) patchFinalizers(ctx context.Context, it item, m *virtv1.VirtualMachineInstanceMigration, finalizers []byte) error {
	updated, ok, err := sharded.SendPatch(ctx, c.rt.Writer, it.Range, finalizers, func(ctx context.Context, body []byte) (*virtv1.VirtualMachineInstanceMigration, error) {
		return c.env.KubeVirt.Migrations(m.Namespace).Patch(ctx, m.Name, types.MergePatchType, body, metav1.PatchOptions{})
	})
	if err != nil {
		return fmt.Errorf("patch finalizers of migration %s: %w", it.Key, err)
	}
	if ok {
		status := m.Status
		*m = *updated
		m.Status = status
	}
	return nil
}
