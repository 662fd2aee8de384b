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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Options of one pod-ceiling run.
type Options struct {
	// Pods is how many pods to create.
	Pods int
	// Concurrency is how many creators run at once.
	Concurrency int
	// Namespace is created for the run and deleted after it.
	Namespace string
	// Timeout bounds the whole run.
	Timeout time.Duration
}

// Result of one pod-ceiling run.
type Result struct {
	Pods        int           `json:"pods"`
	Concurrency int           `json:"concurrency"`
	Duration    time.Duration `json:"durationNanos"`
	// PodsPerSecond is Pods divided by the time from the first create to the
	// last pod observed Running.
	PodsPerSecond float64 `json:"podsPerSecond"`
	// CreatePerSecond is the rate the creators achieved on their own.
	CreatePerSecond float64 `json:"createPerSecond"`
	// Latency percentiles from each pod's create call returning to the watch
	// observing it Running.
	P50 time.Duration `json:"p50Nanos"`
	P95 time.Duration `json:"p95Nanos"`
	P99 time.Duration `json:"p99Nanos"`
}

// Run creates opts.Pods pods that tolerate kwok's node taint and waits for all
// of them to be Running.
func Run(ctx context.Context, client kubernetes.Interface, opts Options) (Result, error) {
	if opts.Pods <= 0 || opts.Concurrency <= 0 {
		return Result{}, fmt.Errorf("pods and concurrency must be positive, got %d and %d", opts.Pods, opts.Concurrency)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return Result{}, fmt.Errorf("create namespace %s: %w", opts.Namespace, err)
	}
	defer func() {
		// Best effort: the namespace controller removes the pods in the background.
		_ = client.CoreV1().Namespaces().Delete(context.Background(), opts.Namespace, metav1.DeleteOptions{})
	}()

	var (
		mu       sync.Mutex
		created  = make(map[string]time.Time, opts.Pods)
		running  = make(map[string]time.Time, opts.Pods)
		allReady = make(chan struct{})
	)
	observe := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Status.Phase != corev1.PodRunning {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, seen := running[pod.Name]; seen {
			return
		}
		running[pod.Name] = time.Now()
		if len(running) == opts.Pods {
			close(allReady)
		}
	}
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "pods", opts.Namespace, fields.Everything())
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    observe,
			UpdateFunc: func(_, obj any) { observe(obj) },
		},
	})
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return Result{}, fmt.Errorf("pod watch did not sync: %w", ctx.Err())
	}

	start := time.Now()
	var next atomic.Int64
	var createErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range opts.Concurrency {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(opts.Pods) || ctx.Err() != nil {
					return
				}
				pod := newPod(fmt.Sprintf("pod-%06d", i))
				if _, err := client.CoreV1().Pods(opts.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					err = fmt.Errorf("create pod %s: %w", pod.Name, err)
					createErr.CompareAndSwap(nil, &err)
					cancel()
					return
				}
				mu.Lock()
				created[pod.Name] = time.Now()
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
		return Result{}, fmt.Errorf("%d of %d pods Running before the deadline: %w", n, opts.Pods, ctx.Err())
	}

	mu.Lock()
	defer mu.Unlock()
	var last time.Time
	latencies := make([]time.Duration, 0, opts.Pods)
	for name, at := range running {
		if at.After(last) {
			last = at
		}
		// A pod can be seen Running before its create call returned to us.
		latencies = append(latencies, max(0, at.Sub(created[name])))
	}
	slices.Sort(latencies)
	total := last.Sub(start)
	return Result{
		Pods:            opts.Pods,
		Concurrency:     opts.Concurrency,
		Duration:        total,
		PodsPerSecond:   float64(opts.Pods) / total.Seconds(),
		CreatePerSecond: float64(opts.Pods) / createDone.Seconds(),
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

// newPod is the smallest pod the scheduler places on a kwok node.
func newPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "pod-ceiling"}},
		Spec: corev1.PodSpec{
			Containers:   []corev1.Container{{Name: "main", Image: "pause"}},
			NodeSelector: map[string]string{"type": "kwok"},
			Tolerations: []corev1.Toleration{{
				Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
			}},
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
