package handler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/virtshard/virtshard/client/kubevirt"
)

// StoppedAnnotation marks a node whose kubelet and virt-handler stopped
// (kwok's node-stopped Stage makes it NotReady): its agent stops, writing
// nothing more for its VMIs and no heartbeat.
const StoppedAnnotation = "virtshard.io/node-stopped"

// FailMigrationAnnotation on a VMI makes its migrations fail: the source
// reports the failure, with the annotation's value as the reason, when the
// domain would have reached the target, and the target never sees it.
const FailMigrationAnnotation = "virtshard.io/fail-migration"

// MigrationDurationAnnotation on a VMI sets how long its migrations'
// domains take to reach the target (a Go duration, "20s"), in place of
// Options.MigrationDuration.
const MigrationDurationAnnotation = "virtshard.io/migration-duration"

// UserAgent is the simulated virt-handler's user agent: the API server's
// records tell its requests from the real one's.
const UserAgent = "virt-handler (virtshard simulation)"

// Defaults of Options.
const (
	DefaultWorkers = 16
	// DefaultHeartbeatInterval is virt-handler's heartbeat period.
	DefaultHeartbeatInterval = time.Minute
	// DefaultMigrationDuration is how long a simulated migration's domain
	// takes to reach its target: long enough that migrations overlap, as
	// real ones do, so the limits on migrations in flight are exercised.
	DefaultMigrationDuration = time.Second
)

// Options configure a Handler.
type Options struct {
	Kube     kubernetes.Interface
	KubeVirt kubevirt.Interface
	// NodeSelector selects the nodes whose virt-handler this one plays.
	NodeSelector string
	// Workers sync VMIs in parallel, over every node.
	Workers int
	// HeartbeatInterval is how often each node's heartbeat is written.
	HeartbeatInterval time.Duration
	// MigrationDuration is how long a migration's domain takes to reach
	// its target once the source started sending it.
	MigrationDuration time.Duration
	// Clock is the clock of the timestamps written and of the heartbeat.
	Clock clock.WithTicker
	// Recorder, when set, gives each node's event recorder; by default
	// events go to the API server as virt-handler's do (component
	// virt-handler, the node as host).
	Recorder func(node string) record.EventRecorder
}

// key names one VMI as one node's agent sees it.
type key struct {
	node string
	// vmi is namespace/name.
	vmi string
}

// Handler plays virt-handler for every selected node.
type Handler struct {
	opts  Options
	queue workqueue.TypedRateLimitingInterface[key]

	mu    sync.Mutex
	nodes map[string]*agent
}

// New returns a Handler; Run starts it.
func New(opts Options) (*Handler, error) {
	if opts.Kube == nil || opts.KubeVirt == nil {
		return nil, errors.New("handler: clients are required")
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if opts.MigrationDuration <= 0 {
		opts.MigrationDuration = DefaultMigrationDuration
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Handler{
		opts: opts,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "virt-handler"}),
		nodes: map[string]*agent{},
	}, nil
}

// Run plays the selected nodes' virt-handlers until ctx is done.
func (h *Handler) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	defer h.queue.ShutDown()
	if h.opts.Recorder == nil {
		// client-go's own recorder, as virt-handler uses: under load it
		// drops events as the real one does.
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: h.opts.Kube.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		h.opts.Recorder = func(node string) record.EventRecorder {
			return broadcaster.NewRecorder(kubevirt.Scheme, corev1.EventSource{Component: "virt-handler", Host: node})
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(h.opts.Kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = h.opts.NodeSelector }))
	nodes := factory.Core().V1().Nodes().Informer()
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { h.nodeChanged(ctx, obj.(*corev1.Node)) },
		UpdateFunc: func(_, obj any) { h.nodeChanged(ctx, obj.(*corev1.Node)) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if node, ok := obj.(*corev1.Node); ok {
				h.stopAgent(node.Name)
			}
		},
	}); err != nil {
		return fmt.Errorf("node handler: %w", err)
	}
	factory.Start(ctx.Done())
	defer func() {
		factory.Shutdown()
		h.mu.Lock()
		names := make([]string, 0, len(h.nodes))
		for name := range h.nodes {
			names = append(names, name)
		}
		h.mu.Unlock()
		for _, name := range names {
			h.stopAgent(name)
		}
	}()
	logger.Info("Simulated virt-handler starting", "nodeSelector", h.opts.NodeSelector, "workers", h.opts.Workers)
	var workers sync.WaitGroup
	for range h.opts.Workers {
		workers.Go(func() { wait.UntilWithContext(ctx, h.work, time.Second) })
	}
	<-ctx.Done()
	h.queue.ShutDown()
	workers.Wait()
	return nil
}

// nodeChanged starts a node's agent, or stops it once the node is marked
// stopped.
func (h *Handler) nodeChanged(ctx context.Context, node *corev1.Node) {
	if _, stopped := node.Annotations[StoppedAnnotation]; stopped {
		h.stopAgent(node.Name)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.nodes[node.Name]; ok {
		return
	}
	a, err := h.newAgent(node.Name)
	if err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Cannot start a node's agent", "node", node.Name)
		return
	}
	h.nodes[node.Name] = a
	a.start(ctx)
}

func (h *Handler) stopAgent(name string) {
	h.mu.Lock()
	a := h.nodes[name]
	delete(h.nodes, name)
	h.mu.Unlock()
	if a != nil {
		a.stop()
	}
}

func (h *Handler) recorder(node string) record.EventRecorder { return h.opts.Recorder(node) }

func (h *Handler) agent(name string) *agent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nodes[name]
}

func (h *Handler) work(ctx context.Context) {
	for h.next(ctx) {
	}
}

func (h *Handler) next(ctx context.Context) bool {
	k, quit := h.queue.Get()
	if quit {
		return false
	}
	defer h.queue.Done(k)
	a := h.agent(k.node)
	if a == nil {
		h.queue.Forget(k) // the node stopped: its VMIs are left as they are
		return true
	}
	after, err := a.sync(ctx, k.vmi)
	switch {
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Sync failed, retrying", "node", k.node, "vmi", k.vmi, "err", err)
		h.queue.AddRateLimited(k)
	case after > 0:
		h.queue.Forget(k)
		h.queue.AddAfter(k, after)
	default:
		h.queue.Forget(k)
	}
	return true
}

// listWatch adapts a typed list and watch to an informer's ListerWatcher,
// with opts' selectors applied to every call.
func listWatch[L runtime.Object](tweak func(*metav1.ListOptions),
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return watchFn(ctx, o)
		},
	}
}
