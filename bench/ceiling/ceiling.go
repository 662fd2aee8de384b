package ceiling

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Options of one ceiling run.
type Options struct {
	// Count is how many objects to create.
	Count int
	// Concurrency is how many creators run at once.
	Concurrency int
	// Namespace is created for the run and deleted after it.
	Namespace string
	// Timeout bounds the whole run.
	Timeout time.Duration
}

// Result of one run.
type Result struct {
	Count       int           `json:"count"`
	Concurrency int           `json:"concurrency"`
	Duration    time.Duration `json:"durationNanos"`
	// PerSecond is Count divided by the time from the first create to the
	// last object observed Running.
	PerSecond float64 `json:"perSecond"`
	// CreatePerSecond is the rate the creators achieved on their own.
	CreatePerSecond float64 `json:"createPerSecond"`
	// Latency percentiles from each create call returning to the watch
	// observing the object Running.
	P50 time.Duration `json:"p50Nanos"`
	P95 time.Duration `json:"p95Nanos"`
	P99 time.Duration `json:"p99Nanos"`
}

// workload is what a ceiling run creates and waits for.
type workload struct {
	create  func(ctx context.Context, i int) (name string, err error)
	lw      cache.ListerWatcher
	example runtime.Object
	running func(obj any) (name string, ok bool)
}

// Pods creates opts.Count plain pods that tolerate kwok's node taint and
// waits for all of them to be Running: the scheduler's and kwok's limit.
func Pods(ctx context.Context, client kubernetes.Interface, opts Options) (Result, error) {
	return run(ctx, client, opts, workload{
		create: func(ctx context.Context, i int) (string, error) {
			pod, err := client.CoreV1().Pods(opts.Namespace).Create(ctx, newPod(fmt.Sprintf("pod-%06d", i)), metav1.CreateOptions{})
			if err != nil {
				return "", err
			}
			return pod.Name, nil
		},
		lw:      cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "pods", opts.Namespace, fields.Everything()),
		example: &corev1.Pod{},
		running: func(obj any) (string, bool) {
			pod, ok := obj.(*corev1.Pod)
			return pod.GetName(), ok && pod.Status.Phase == corev1.PodRunning
		},
	})
}

func run(ctx context.Context, client kubernetes.Interface, opts Options, w workload) (Result, error) {
	if opts.Count <= 0 || opts.Concurrency <= 0 {
		return Result{}, fmt.Errorf("count and concurrency must be positive, got %d and %d", opts.Count, opts.Concurrency)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return Result{}, fmt.Errorf("create namespace %s: %w", opts.Namespace, err)
	}
	defer func() {
		// Best effort: the namespace controller removes the objects in the
		// background. It looks again at a namespace with terminating pods
		// only after half their grace period: delete them without one.
		_ = client.CoreV1().Pods(opts.Namespace).DeleteCollection(context.Background(),
			metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		_ = client.CoreV1().Namespaces().Delete(context.Background(), opts.Namespace, metav1.DeleteOptions{})
	}()

	var (
		mu       sync.Mutex
		created  = make(map[string]time.Time, opts.Count)
		running  = make(map[string]time.Time, opts.Count)
		allReady = make(chan struct{})
	)
	observe := func(obj any) {
		name, ok := w.running(obj)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, seen := running[name]; seen {
			return
		}
		running[name] = time.Now()
		if len(running) == opts.Count {
			close(allReady)
		}
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: w.lw,
		ObjectType:    w.example,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    observe,
			UpdateFunc: func(_, obj any) { observe(obj) },
		},
	})
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return Result{}, fmt.Errorf("watch did not sync: %w", ctx.Err())
	}

	start := time.Now()
	var next atomic.Int64
	var createErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range opts.Concurrency {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(opts.Count) || ctx.Err() != nil {
					return
				}
				name, err := w.create(ctx, int(i))
				if err != nil {
					err = fmt.Errorf("create object %d: %w", i, err)
					createErr.CompareAndSwap(nil, &err)
					cancel()
					return
				}
				mu.Lock()
				created[name] = time.Now()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	createDone := time.Since(start)
	if errp := createErr.Load(); errp != nil {
		return Result{}, *errp
	}

	select {
	case <-allReady:
	case <-ctx.Done():
		mu.Lock()
		n := len(running)
		mu.Unlock()
		return Result{}, fmt.Errorf("%d of %d Running before the deadline: %w", n, opts.Count, ctx.Err())
	}

	mu.Lock()
	defer mu.Unlock()
	var last time.Time
	latencies := make([]time.Duration, 0, opts.Count)
	for name, at := range running {
		if at.After(last) {
			last = at
		}
		// An object can be seen Running before its create call returned to us.
		latencies = append(latencies, max(0, at.Sub(created[name])))
	}
	slices.Sort(latencies)
	total := last.Sub(start)
	return Result{
		Count:           opts.Count,
		Concurrency:     opts.Concurrency,
		Duration:        total,
		PerSecond:       float64(opts.Count) / total.Seconds(),
		CreatePerSecond: float64(opts.Count) / createDone.Seconds(),
		P50:             Percentile(latencies, 0.50),
		P95:             Percentile(latencies, 0.95),
		P99:             Percentile(latencies, 0.99),
	}, nil
}

// Percentile returns the nearest-rank percentile q (0 < q ≤ 1) of sorted.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

var kwokToleration = corev1.Toleration{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// newPod is the smallest pod the scheduler places on a kwok node.
func newPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "pod-ceiling"}},
		Spec: corev1.PodSpec{
			Containers:    []corev1.Container{{Name: "main", Image: "pause"}},
			NodeSelector:  map[string]string{"type": "kwok"},
			Tolerations:   []corev1.Toleration{kwokToleration},
			RestartPolicy: corev1.RestartPolicyNever,
		},
	}
}

// WaitGone waits until namespace no longer exists, so runs do not overlap.
func WaitGone(ctx context.Context, client kubernetes.Interface, namespace string) error {
	return wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}
