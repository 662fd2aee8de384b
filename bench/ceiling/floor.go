package ceiling

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	virtv1 "kubevirt.io/api/core/v1"

	realistic "github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/template"
)

// handoffWorkers send the floor's hand-offs in parallel.
const handoffWorkers = 16

// Floor is what any virt-controller must do per VMI, done by the bench
// with no controller: for each of opts.Count realistic VMIs, create its
// launcher pod (KubeVirt's, as virtshard renders it) right after the VMI,
// and once the pod runs, hand the VMI off to its node in one write
// (Scheduled, the node name and its label) and label the pod with its
// node, as KubeVirt labels every launcher pod; the simulated virt-handler
// then starts it. VMIs/s to Running is this machine's physical limit for
// any controller: it pays for the VMI, the pod, the scheduler, kwok and the
// node side, and for no controller work but those three writes.
func Floor(ctx context.Context, client kubernetes.Interface, kv *kubevirt.Clientset, opts Options) (Result, error) {
	vmis := kv.VirtualMachineInstances(opts.Namespace)
	pods := client.CoreV1().Pods(opts.Namespace)
	cfg := clusterconfig.DefaultConfig("amd64")

	// The hand-off, once per VMI, when its pod is seen Running.
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	var mu sync.Mutex
	placed := map[string]*corev1.Pod{} // VMI name → its pod, once Running
	informer := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) },
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return pods.Watch(ctx, o)
		},
	}, &corev1.Pod{}, 0, cache.Indexers{})
	onPod := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		ref := metav1.GetControllerOf(pod)
		if !ok || ref == nil || pod.Status.Phase != corev1.PodRunning {
			return
		}
		mu.Lock()
		_, seen := placed[ref.Name]
		placed[ref.Name] = pod
		mu.Unlock()
		if !seen {
			queue.Add(ref.Name)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, obj any) { onPod(obj) }}); err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go informer.RunWithContext(ctx)
	for range handoffWorkers {
		go func() {
			for {
				name, quit := queue.Get()
				if quit {
					return
				}
				mu.Lock()
				pod := placed[name]
				mu.Unlock()
				if err := handOff(ctx, vmis, name, pod.Spec.NodeName); err != nil {
					utilruntime.HandleErrorWithContext(ctx, err, "Floor hand-off failed", "vmi", name)
				}
				if err := labelNode(ctx, pods, pod.Name, pod.Spec.NodeName); err != nil {
					utilruntime.HandleErrorWithContext(ctx, err, "Floor pod label failed", "pod", pod.Name)
				}
				queue.Done(name)
			}
		}()
	}

	return run(ctx, client, opts, workload{
		create: func(ctx context.Context, i int) (string, error) {
			vmi := realistic.VMI(fmt.Sprintf("vmi-%06d", i))
			// No controller removes the VMI controller's finalizer here:
			// without it the namespace goes when the run is over.
			vmi.Finalizers = nil
			vmi, err := vmis.Create(ctx, vmi, metav1.CreateOptions{})
			if err != nil {
				return "", err
			}
			pod, err := template.Render(vmi, 0, template.DefaultOptions(), cfg, nil)
			if err != nil {
				return "", fmt.Errorf("render the launcher pod of %s: %w", vmi.Name, err)
			}
			if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				return "", err
			}
			return vmi.Name, nil
		},
		lw: &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return vmis.List(ctx, o) },
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return vmis.Watch(ctx, o)
			},
		},
		example: &virtv1.VirtualMachineInstance{},
		running: func(obj any) (string, bool) {
			vmi, ok := obj.(*virtv1.VirtualMachineInstance)
			return vmi.GetName(), ok && vmi.Status.Phase == virtv1.Running
		},
	})
}

// handOff is the one write a controller must make for a VMI whose pod
// runs: phase Scheduled on the pod's node. A merge patch: the VMI CRD has
// no status subresource.
func handOff(ctx context.Context, vmis kubevirt.VirtualMachineInstanceInterface, name, node string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]string{virtv1.NodeNameLabel: node}},
		"status":   map[string]any{"phase": virtv1.Scheduled, "nodeName": node},
	})
	if err != nil {
		return err
	}
	_, err = vmis.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// labelNode labels a launcher pod with its node, as KubeVirt's VMI
// controller does once the VMI is scheduled.
func labelNode(ctx context.Context, pods corev1client.PodInterface, name, node string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{virtv1.NodeNameLabel: node}}})
	if err != nil {
		return err
	}
	_, err = pods.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
