package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/shard"
)

// Indexes of a node's launcher pods: by the UID of their VMI, and by
// their VMI's namespace/name (a VMI that left the node is known by name).
const (
	podsByVMI   = "vmiUID"
	podsByOwner = "owner"
)

// agent is one node's virt-handler: its VMIs (running there, or the target
// of a migration to it) and its launcher pods.
type agent struct {
	h    *Handler
	node string
	// vmis run on the node, targets migrate to it.
	vmis, targets, pods cache.SharedIndexInformer
	recorder            record.EventRecorder

	cancel context.CancelFunc
	done   sync.WaitGroup
}

func (h *Handler) newAgent(node string) (*agent, error) {
	kv, kube := h.opts.KubeVirt, h.opts.Kube
	vmiInformer := func(label string) cache.SharedIndexInformer {
		selector := label + "=" + node
		vmis := kv.VirtualMachineInstances(metav1.NamespaceAll)
		lw := listWatch(func(o *metav1.ListOptions) { o.LabelSelector = selector }, vmis.List, vmis.Watch)
		informer := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, kv), &virtv1.VirtualMachineInstance{}, 0, cache.Indexers{})
		_ = informer.SetTransform(shard.TrimForCache) // fails only on a started informer
		return informer
	}
	pods := kube.CoreV1().Pods(metav1.NamespaceAll)
	podSelector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	podLW := listWatch(func(o *metav1.ListOptions) {
		o.FieldSelector = podSelector
		o.LabelSelector = virtv1.AppLabel + "=virt-launcher"
	}, pods.List, pods.Watch)
	a := &agent{
		h:       h,
		node:    node,
		vmis:    vmiInformer(virtv1.NodeNameLabel),
		targets: vmiInformer(virtv1.MigrationTargetNodeNameLabel),
		pods: cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(podLW, kube), &corev1.Pod{}, 0,
			cache.Indexers{
				podsByVMI: func(obj any) ([]string, error) {
					return []string{obj.(*corev1.Pod).Labels[virtv1.CreatedByLabel]}, nil
				},
				podsByOwner: func(obj any) ([]string, error) {
					pod := obj.(*corev1.Pod)
					if ref := metav1.GetControllerOf(pod); ref != nil {
						return []string{pod.Namespace + "/" + ref.Name}, nil
					}
					return nil, nil
				},
			}),
		recorder: h.recorder(node),
	}
	// Managed fields are most of a launcher pod's bytes and nothing here
	// reads them; an update without them keeps the server's.
	_ = a.pods.SetTransform(shard.TrimForCache)
	enqueueVMI := func(obj any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			h.queue.Add(key{node: node, vmi: k})
		}
	}
	// A launcher pod's VMI is its controller.
	enqueuePod := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "VirtualMachineInstance" {
			h.queue.Add(key{node: node, vmi: pod.Namespace + "/" + ref.Name})
		}
	}
	for _, x := range []struct {
		informer cache.SharedIndexInformer
		enqueue  func(any)
	}{{a.vmis, enqueueVMI}, {a.targets, enqueueVMI}, {a.pods, enqueuePod}} {
		if _, err := x.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    x.enqueue,
			UpdateFunc: func(_, obj any) { x.enqueue(obj) },
			DeleteFunc: x.enqueue,
		}); err != nil {
			return nil, fmt.Errorf("node %s: %w", node, err)
		}
	}
	return a, nil
}

func (a *agent) start(ctx context.Context) {
	ctx, a.cancel = context.WithCancel(ctx)
	for _, informer := range []cache.SharedIndexInformer{a.vmis, a.targets, a.pods} {
		a.done.Go(func() { informer.RunWithContext(ctx) })
	}
	a.done.Go(func() { a.heartbeat(ctx) })
}

func (a *agent) stop() {
	a.cancel()
	a.done.Wait()
}

func (a *agent) synced() bool {
	return a.vmis.HasSynced() && a.targets.HasSynced() && a.pods.HasSynced()
}

// TSCFrequency is every simulated node's TSC frequency in Hz, as
// virt-handler's node labeller reports a host's.
const TSCFrequency int64 = 2_400_000_000

// heartbeat writes the node's virt-handler heartbeat now and then every
// interval, as virt-handler does: the node is schedulable for VMIs, and
// virt-controller's node controller reads the time.
func (a *agent) heartbeat(ctx context.Context) {
	ticker := a.h.opts.Clock.NewTicker(a.h.opts.HeartbeatInterval)
	defer ticker.Stop()
	for {
		if err := a.beat(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Heartbeat failed", "node", a.node)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

func (a *agent) beat(ctx context.Context) error {
	now := a.h.opts.Clock.Now().UTC().Format(time.RFC3339)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": map[string]string{virtv1.NodeSchedulable: "true",
			// virt-handler's node labeller's, for the TSC frequency hints.
			virtv1.CPUTimerLabel + "tsc-frequency": strconv.FormatInt(TSCFrequency, 10),
			virtv1.CPUTimerLabel + "tsc-scalable":  "false",
			// A CPU feature every simulated host has: a VMI may require it.
			virtv1.CPUFeatureLabel + "invtsc": "true"},
		"annotations": map[string]string{virtv1.VirtHandlerHeartbeat: now},
	}})
	if err != nil {
		return err
	}
	_, err = a.h.opts.Kube.CoreV1().Nodes().Patch(ctx, a.node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
