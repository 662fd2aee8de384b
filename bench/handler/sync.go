package handler

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// notSynced is how long a key waits for its node's caches.
const notSynced = 100 * time.Millisecond

// sync does, for one VMI, what this node's virt-handler would do next,
// one write at a time: every write changes the VMI, whose watch event
// brings it back here for the next step. It returns how long to wait
// before looking again when only time can move the VMI on.
func (a *agent) sync(ctx context.Context, key string) (time.Duration, error) {
	if !a.synced() {
		return notSynced, nil
	}
	if obj, ok, _ := a.targets.GetStore().GetByKey(key); ok {
		vmi := obj.(*virtv1.VirtualMachineInstance)
		if ms := vmi.Status.MigrationState; ms != nil && ms.TargetNode == a.node && vmi.Labels[virtv1.MigrationTargetNodeNameLabel] == a.node {
			return a.syncTarget(ctx, vmi.DeepCopy())
		}
	}
	if obj, ok, _ := a.vmis.GetStore().GetByKey(key); ok {
		vmi := obj.(*virtv1.VirtualMachineInstance)
		if vmi.Status.NodeName == a.node {
			return a.syncSource(ctx, vmi.DeepCopy())
		}
	}
	return 0, a.syncLeft(ctx, key)
}

// syncSource moves a VMI that runs on this node: start, status, shutdown,
// and the source side of a migration.
func (a *agent) syncSource(ctx context.Context, vmi *virtv1.VirtualMachineInstance) (time.Duration, error) {
	if vmi.IsFinal() {
		return 0, nil // virt-handler writes nothing more for a final VMI
	}
	now := a.now()
	if vmi.DeletionTimestamp != nil {
		if vmi.Status.Phase != virtv1.Scheduled && vmi.Status.Phase != virtv1.Running {
			return 0, nil
		}
		stopped(vmi, now)
		return 0, a.update(ctx, vmi, reasonStopped, corev1.EventTypeNormal, "The VirtualMachineInstance was shut down.")
	}
	pod := a.launcherPod(vmi, "")
	switch vmi.Status.Phase {
	case virtv1.Scheduled:
		if pod == nil || pod.Status.Phase != corev1.PodRunning {
			return 0, nil // the launcher is not up: a pod event brings it back
		}
		if !isDefined(vmi) {
			defined(vmi)
			return 0, a.update(ctx, vmi, reasonCreated, corev1.EventTypeNormal, "VirtualMachineInstance defined.")
		}
		running(vmi, pod, now)
		return 0, a.update(ctx, vmi, reasonStarted, corev1.EventTypeNormal, "VirtualMachineInstance started.")
	case virtv1.Running:
		if ms := vmi.Status.MigrationState; ms != nil && ms.SourceNode == a.node && !ms.Completed && !ms.Failed && ms.EndTimestamp == nil {
			return a.syncMigrationSource(ctx, vmi)
		}
		if pod == nil {
			return 0, nil
		}
		before := vmi.Status.DeepCopy()
		sized(vmi)
		// After a migration to this node: the new pod's addresses.
		vmi.Status.Interfaces = interfaces(vmi, pod)
		if equality.Semantic.DeepEqual(before, &vmi.Status) {
			return 0, nil
		}
		return 0, a.update(ctx, vmi, "", "", "")
	}
	return 0, nil
}

// syncMigrationSource starts the migration once the target is prepared
// (its proxy ports are published), and fails it, as virt-handler's
// setMigrationProgressStatus reports a failure, when the VMI asks for that
// or the migration controller asks for an abort (abortRequested).
func (a *agent) syncMigrationSource(ctx context.Context, vmi *virtv1.VirtualMachineInstance) (time.Duration, error) {
	ms := vmi.Status.MigrationState
	if len(ms.TargetDirectMigrationNodePorts) == 0 {
		return 0, nil
	}
	now := a.now()
	if ms.StartTimestamp == nil {
		ms.StartTimestamp = &now
		ms.Mode = virtv1.MigrationPreCopy
		return 0, a.update(ctx, vmi, reasonMigrating, corev1.EventTypeNormal, "VirtualMachineInstance is migrating.")
	}
	if ms.AbortRequested {
		// virt-handler aborts the migration job; the domain stays here.
		ms.AbortStatus = virtv1.MigrationAbortSucceeded
		ms.Failed, ms.EndTimestamp, ms.FailureReason = true, &now, abortReason
		return 0, a.update(ctx, vmi, reasonMigrated, corev1.EventTypeWarning,
			fmt.Sprintf("VirtualMachineInstance migration uid %s failed. reason:%s", ms.MigrationUID, abortReason))
	}
	reason, fails := vmi.Annotations[FailMigrationAnnotation]
	if !fails {
		return 0, nil
	}
	if left := ms.StartTimestamp.Add(a.migrationDuration(vmi)).Sub(a.h.opts.Clock.Now()); left > 0 {
		return left, nil
	}
	ms.Failed, ms.EndTimestamp, ms.FailureReason = true, &now, reason
	return 0, a.update(ctx, vmi, reasonMigrated, corev1.EventTypeWarning,
		fmt.Sprintf("VirtualMachineInstance migration uid %s failed. reason:%s", ms.MigrationUID, reason))
}

// failureSeen says how long the target's launcher waits before it exits
// after a failed migration: until the migration is final or gone, at
// most failureSeenLimit after the failure. A real target launcher takes
// its time to tear down, and the migration controller reports a failure
// by what it sees first (KubeVirt's sync checks a target pod that is down
// before the node's report): a launcher exiting at once would make the
// controller's event a race between two watches.
func (a *agent) failureSeen(ctx context.Context, vmi *virtv1.VirtualMachineInstance) (time.Duration, error) {
	ms := vmi.Status.MigrationState
	if ms.EndTimestamp == nil || a.h.opts.Clock.Since(ms.EndTimestamp.Time) > failureSeenLimit {
		return 0, nil
	}
	list, err := a.h.opts.KubeVirt.Migrations(vmi.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list migrations of %s: %w", vmi.Name, err)
	}
	for i := range list.Items {
		if m := &list.Items[i]; m.UID == ms.MigrationUID && !m.IsFinal() {
			return time.Second, nil
		}
	}
	return 0, nil
}

// failureSeenLimit bounds failureSeen's wait.
const failureSeenLimit = 30 * time.Second

// abortReason is the simulated failure reason of an aborted migration.
const abortReason = "Live migration aborted"

// syncTarget moves the target side of a migration to this node, one step
// a write: prepare the target, detect the incoming domain (after the
// migration's duration), take the VMI over, mark the migration completed,
// and let go of the target label, which ends this node's part.
func (a *agent) syncTarget(ctx context.Context, vmi *virtv1.VirtualMachineInstance) (time.Duration, error) {
	ms := vmi.Status.MigrationState
	if vmi.DeletionTimestamp != nil || vmi.IsFinal() || ms.MigrationUID == "" {
		return 0, nil
	}
	now := a.now()
	switch {
	case ms.Failed || ms.Completed:
		// The target's virt-launcher exits once the migration failed,
		// after the migration controller has seen the failure (see
		// failureSeen).
		if pod := a.launcherPod(vmi, ms.TargetPod); ms.Failed && pod != nil && pod.Status.Phase == corev1.PodRunning {
			if wait, err := a.failureSeen(ctx, vmi); wait > 0 || err != nil {
				return wait, err
			}
			return 0, a.exit(ctx, pod)
		}
		delete(vmi.Labels, virtv1.MigrationTargetNodeNameLabel)
		return 0, a.update(ctx, vmi, "", "", "")
	case ms.TargetNodeAddress == "":
		pod := a.launcherPod(vmi, ms.TargetPod)
		if pod == nil || pod.Status.Phase != corev1.PodRunning {
			return 0, nil
		}
		ms.TargetNodeAddress = pod.Status.PodIP
		ms.TargetDirectMigrationNodePorts = map[string]int{proxyPortLibvirt: 0, proxyPortDirect: 49152}
		if vmi.Status.MigrationMethod == virtv1.BlockMigration {
			ms.TargetDirectMigrationNodePorts[proxyPortBlock] = 49153
		}
		return 0, a.update(ctx, vmi, reasonPreparing, corev1.EventTypeNormal, "VirtualMachineInstance Migration Target Prepared.")
	case ms.StartTimestamp == nil:
		return 0, nil // the source has not started yet
	case !ms.TargetNodeDomainDetected:
		if _, fails := vmi.Annotations[FailMigrationAnnotation]; fails {
			return 0, nil // the domain never arrives
		}
		if left := ms.StartTimestamp.Add(a.migrationDuration(vmi)).Sub(a.h.opts.Clock.Now()); left > 0 {
			return left, nil
		}
		ms.TargetNodeDomainDetected = true
		ms.TargetNodeDomainReadyTimestamp = &now
		return 0, a.update(ctx, vmi, "", "", "")
	case ms.EndTimestamp == nil:
		ms.EndTimestamp = &now
		vmi.Status.NodeName = a.node
		vmi.Labels[virtv1.NodeNameLabel] = a.node
		delete(vmi.Labels, virtv1.OutdatedLauncherImageLabel)
		delete(vmi.Annotations, virtv1.EvictionSourceAnnotation)
		vmi.Status.LauncherContainerImageVersion = ""
		vmi.Status.EvacuationNodeName = ""
		vmi.Status.MigrationTransport = virtv1.MigrationTransportUnix
		return 0, a.update(ctx, vmi, reasonMigrated, corev1.EventTypeNormal, fmt.Sprintf("The VirtualMachineInstance migrated to node %s.", a.node))
	default:
		// virt-handler's finalizeMigration: what the VMI asked to plug
		// in is plugged in on the target before it says completed.
		hotplugged(vmi)
		volumesMoved(vmi)
		ms.Completed = true
		return 0, a.update(ctx, vmi, "", "", "")
	}
}

// syncLeft deals with a VMI this node no longer runs: the launcher pods
// it left behind after a migration exit, as a real virt-launcher does
// once its domain moved away.
func (a *agent) syncLeft(ctx context.Context, key string) error {
	pods, err := a.pods.GetIndexer().ByIndex(podsByOwner, key)
	if err != nil || len(pods) == 0 {
		return err
	}
	var live []*corev1.Pod
	for _, obj := range pods {
		if pod := obj.(*corev1.Pod); pod.Spec.NodeName == a.node && pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil {
			live = append(live, pod)
		}
	}
	if len(live) == 0 {
		return nil
	}
	// The VMI left this node's watch: it moved, or it is gone. Only the
	// API server can tell.
	ns, name := live[0].Namespace, metav1.GetControllerOf(live[0]).Name
	vmi, err := a.h.opts.KubeVirt.VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // the VMI controller deletes its pods
	}
	if err != nil {
		return fmt.Errorf("get VMI %s/%s: %w", ns, name, err)
	}
	ms := vmi.Status.MigrationState
	if vmi.Status.NodeName == a.node || ms == nil || ms.SourceNode != a.node || ms.EndTimestamp == nil {
		return nil
	}
	for _, pod := range live {
		if pod.Name == ms.SourcePod && pod.Labels[virtv1.CreatedByLabel] == string(vmi.UID) {
			if err := a.exit(ctx, pod); err != nil {
				return err
			}
		}
	}
	return nil
}

// launcherPod is vmi's launcher pod on this node: the one named name, or
// else the newest that has not ended.
func (a *agent) launcherPod(vmi *virtv1.VirtualMachineInstance, name string) *corev1.Pod {
	objs, _ := a.pods.GetIndexer().ByIndex(podsByVMI, string(vmi.UID))
	var newest *corev1.Pod
	for _, obj := range objs {
		pod := obj.(*corev1.Pod)
		switch {
		case pod.Spec.NodeName != a.node: // the watch selects by node; a fake's does not
		case name != "":
			if pod.Name == name {
				return pod
			}
		case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		case newest == nil || newest.CreationTimestamp.Before(&pod.CreationTimestamp):
			newest = pod
		}
	}
	return newest
}

// update writes vmi whole, as virt-handler does (the VMI CRD has no status
// subresource), at the resourceVersion it was read at, and records an
// event when reason is set.
func (a *agent) update(ctx context.Context, vmi *virtv1.VirtualMachineInstance, reason, eventType, message string) error {
	if _, err := a.h.opts.KubeVirt.VirtualMachineInstances(vmi.Namespace).Update(ctx, vmi, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	klog.FromContext(ctx).V(4).Info("Updated VMI", "vmi", klog.KObj(vmi), "node", a.node, "phase", vmi.Status.Phase, "reason", reason)
	if reason != "" {
		a.recorder.Event(vmi, eventType, reason, message)
	}
	return nil
}

// exit ends a launcher pod as its kubelet reports a virt-launcher that
// exited 0: every container terminated, the pod Succeeded.
func (a *agent) exit(ctx context.Context, pod *corev1.Pod) error {
	pod = pod.DeepCopy()
	now := a.now()
	pod.Status.Phase = corev1.PodSucceeded
	for i := range pod.Status.ContainerStatuses {
		c := &pod.Status.ContainerStatuses[i]
		var started metav1.Time
		if c.State.Running != nil {
			started = c.State.Running.StartedAt
		}
		c.Ready, c.Started = false, ptr.To(false)
		c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: now, ContainerID: c.ContainerID,
		}}
	}
	for i := range pod.Status.Conditions {
		if t := pod.Status.Conditions[i].Type; t == corev1.PodReady || t == corev1.ContainersReady {
			pod.Status.Conditions[i].Status = corev1.ConditionFalse
			pod.Status.Conditions[i].Reason = "PodCompleted"
			pod.Status.Conditions[i].LastTransitionTime = now
		}
	}
	if _, err := a.h.opts.Kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("end launcher pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	klog.FromContext(ctx).V(4).Info("Source launcher pod exited", "pod", klog.KObj(pod), "node", a.node)
	return nil
}

// now is the time virt-handler writes: whole seconds, as metav1.Time
// serializes.
func (a *agent) now() metav1.Time {
	return metav1.NewTime(a.h.opts.Clock.Now().Truncate(time.Second))
}

// migrationDuration is how long vmi's migration takes: its annotation, or
// the handler's.
func (a *agent) migrationDuration(vmi *virtv1.VirtualMachineInstance) time.Duration {
	if v, ok := vmi.Annotations[MigrationDurationAnnotation]; ok {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return d
		}
	}
	return a.h.opts.MigrationDuration
}
