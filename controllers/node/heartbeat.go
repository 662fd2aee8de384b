package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/patch"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// unresponsiveRecheck is how often an unresponsive node is looked at
// again while it exists (KubeVirt's recheckInterval): a launcher pod on it
// may die later.
const unresponsiveRecheck = time.Minute

// heartbeatStale reports whether the node's virt-handler heartbeat is
// older than timeout at now, and otherwise when to look again: just after
// it goes stale, which no event announces (zero: no heartbeat to go stale).
// A node without a heartbeat is never stale, as in KubeVirt: virt-handler
// never ran there. A heartbeat that does not parse is an error.
func heartbeatStale(node *corev1.Node, timeout time.Duration, now time.Time) (stale bool, recheck time.Duration, err error) {
	value, ok := node.Annotations[virtv1.VirtHandlerHeartbeat]
	if !ok {
		return false, 0, nil
	}
	var at metav1.Time
	if err := at.UnmarshalJSON([]byte(`"` + value + `"`)); err != nil {
		return false, 0, fmt.Errorf("node %s: heartbeat %q: %w", node.Name, value, err)
	}
	left := at.Add(timeout).Sub(now)
	if left < 0 {
		return true, 0, nil
	}
	// The heartbeat has whole seconds: look again a second after.
	return false, left + time.Second, nil
}

// unresponsive handles a node whose virt-handler stopped heartbeating, or
// that is gone (node nil), as KubeVirt's node controller does: the node is
// labelled unschedulable for VMIs, and the VMIs held here that are
// Scheduled or Running on it with no live launcher pod there fail. A VMI
// whose pod lives on is left alone: its virt-handler may come back.
func (c *Controller) unresponsive(ctx context.Context, name string, node *corev1.Node) error {
	var errs []error
	if node != nil {
		if err := c.markUnschedulable(ctx, node); err != nil {
			return err
		}
		// KubeVirt fails no VMI while it cannot tell (its sync ends in
		// the error, retried); virtshard logs it, goes on to the VMIs and
		// tells again at the next look.
		if err := c.reportOrphans(ctx, node); err != nil {
			klog.FromContext(ctx).Error(err, "Cannot tell whether the node's VMIs are orphaned", "node", node.Name)
		}
	}
	for _, h := range c.vmisOn(name) {
		vmi := h.Object
		if (!vmi.IsRunning() && !vmi.IsScheduled()) || hasLivePod(h, name) {
			continue
		}
		if err := c.failUnresponsive(ctx, h); err != nil && !errors.Is(err, sharded.ErrNotHeld) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// markUnschedulable labels the node kubevirt.io/schedulable=false, with
// KubeVirt's event, unless it is not labelled schedulable. Every replica
// looks at every node; the holder of the range the node's name hashes to
// writes it.
func (c *Controller) markUnschedulable(ctx context.Context, node *corev1.Node) error {
	if node.Labels[virtv1.NodeSchedulable] != "true" {
		return nil
	}
	body := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"false"}}}`, virtv1.NodeSchedulable)
	err := c.rt.Write(ctx, c.env.Ranges.OfValue(node.Name), func(ctx context.Context) error {
		_, err := c.env.Kube.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{})
		return err
	})
	switch {
	case errors.Is(err, sharded.ErrNotHeld), apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("mark node %s unschedulable: %w", node.Name, err)
	}
	c.env.Recorder.Event(node, corev1.EventTypeNormal, ReasonNodeUnresponsive, "virt-handler is not responsive, marking node as unresponsive")
	return nil
}

// virtHandlerSelector selects virt-handler's pods and DaemonSet.
const virtHandlerSelector = "kubevirt.io=virt-handler"

// msgOrphans is KubeVirt's warning on a node with VMIs and no virt-handler.
const msgOrphans = "virt-handler is not present, there are orphaned vmis on this node. Run virt-handler on this node to migrate or remove them."

// reportOrphans warns, on an unresponsive node with Scheduled or Running
// VMIs, that no virt-handler pod runs there while the virt-handler
// DaemonSet has scheduled its pods everywhere else, as KubeVirt's node
// controller does (createEventIfNodeHasOrphanedVMIs): virt-handler is not
// coming back to this node by itself. The holder of the node's range
// posts it, each time the node is looked at again, from lists of the API
// server as KubeVirt's: no replica caches every VMI on a node. Not exactly
// one virt-handler DaemonSet is an error, as in KubeVirt.
func (c *Controller) reportOrphans(ctx context.Context, node *corev1.Node) error {
	if !c.rt.Holds(c.env.Ranges.OfValue(node.Name)) {
		return nil
	}
	vmis, err := c.env.KubeVirt.VirtualMachineInstances(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: virtv1.NodeNameLabel + "=" + node.Name})
	if err != nil {
		return fmt.Errorf("list the VMIs on node %s: %w", node.Name, err)
	}
	if !slices.ContainsFunc(vmis.Items, func(v virtv1.VirtualMachineInstance) bool { return v.IsRunning() || v.IsScheduled() }) {
		return nil
	}
	handlers, err := c.env.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + node.Name, LabelSelector: virtHandlerSelector,
	})
	if err != nil {
		return fmt.Errorf("list virt-handler's pods on node %s: %w", node.Name, err)
	}
	if len(handlers.Items) > 0 {
		return nil
	}
	sets, err := c.env.Kube.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: virtHandlerSelector})
	if err != nil {
		return fmt.Errorf("list virt-handler's DaemonSet: %w", err)
	}
	if len(sets.Items) != 1 {
		return fmt.Errorf("node %s: %d DaemonSets labelled %s, want one", node.Name, len(sets.Items), virtHandlerSelector)
	}
	st := sets.Items[0].Status
	if st.DesiredNumberScheduled != st.CurrentNumberScheduled && st.DesiredNumberScheduled != st.NumberReady {
		return nil // still rolling out: a pod may yet come to the node
	}
	c.env.Recorder.Event(node, corev1.EventTypeWarning, ReasonNodeUnresponsive, msgOrphans)
	return nil
}

// hasLivePod reports whether a pod of the VMI on the node is alive as
// KubeVirt counts it: neither Succeeded nor Failed, and not every
// container terminated (a pod can hang in termination without
// virt-handler to unmount its disks).
func hasLivePod(h held, node string) bool {
	for _, pod := range kinds.PodsOf(h.Range, h.Object) {
		if pod.Spec.NodeName != node || kinds.PodFinished(pod) {
			continue
		}
		if !allTerminated(pod.Status.ContainerStatuses) {
			return true
		}
	}
	return false
}

func allTerminated(statuses []corev1.ContainerStatus) bool {
	for _, s := range statuses {
		if s.State.Terminated == nil {
			return false
		}
	}
	return len(statuses) > 0
}

// failUnresponsive moves the VMI to Failed with the reason
// NodeUnresponsive, as KubeVirt's node controller does, with the cached
// resourceVersion as a precondition. Where KubeVirt's patch writes phase
// and reason only, the transition is recorded too, as virtshard records
// every phase it moves a VMI to (bench/differential/differences.go).
func (c *Controller) failUnresponsive(ctx context.Context, h held) error {
	vmi := h.Object
	failed := vmi.DeepCopy()
	if !vmistatus.Fail(failed, metav1.NewTime(c.env.Clock.Now())) {
		return nil
	}
	failed.Status.Reason = ReasonNodeUnresponsive
	body, err := patch.Merge(vmi, failed)
	if err != nil {
		return err
	}
	err = c.rt.Write(ctx, h.Range.Index, func(ctx context.Context) error {
		_, err := c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("fail VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	c.env.Recorder.Eventf(vmi, corev1.EventTypeNormal, ReasonNodeUnresponsive, "virt-handler on node %s is not responsive, marking VMI as failed", vmi.Status.NodeName)
	return nil
}
