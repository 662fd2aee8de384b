package clusterconfig

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"
)

// DefaultNamespace is where KubeVirt is installed unless told otherwise.
const DefaultNamespace = "kubevirt"

// KubeVirtResource is the KubeVirt CR's resource.
var KubeVirtResource = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "kubevirts"}

// Options configure a Watcher.
type Options struct {
	// Namespace holds the KubeVirt CR; DefaultNamespace when empty.
	Namespace string
	// Arch is the controller's CPU architecture; runtime.GOARCH when empty.
	Arch string
	// Metrics, if set, count the configurations parsed.
	Metrics *Metrics
}

// Watcher keeps the cluster configuration current from the KubeVirt CR in
// one namespace, as virt-controller's ClusterConfig does: the defaults until
// a CR is in use; a CR's configuration as soon as it changes; the last valid
// configuration when a CR's is invalid or the CR goes away.
//
// Reads (Current) are lock-free. Updates run on the informer's handler
// goroutine: they only read the cache and parse, no API calls, so the
// handlers apply them directly instead of going through a workqueue.
type Watcher struct {
	informer  cache.SharedIndexInformer
	namespace string
	arch      string
	metrics   *Metrics
	logger    klog.Logger

	current atomic.Pointer[Config]
	synced  atomic.Bool

	// mu serialises updates and guards the fields below it.
	mu sync.Mutex
	// validRV and invalidRV are the CR versions last parsed as valid and as
	// invalid; either one seen again is not parsed again.
	validRV, invalidRV string
	// err is why the CR in use was rejected; nil when it was not.
	err error

	// cbMu guards callbacks apart from mu, so a callback may register
	// another.
	cbMu      sync.Mutex
	callbacks []func(*Config)
}

// NewWatcher returns a Watcher of the KubeVirt CRs that client lists in
// opts.Namespace. Until Run has synced, Current is DefaultConfig.
func NewWatcher(client dynamic.Interface, opts Options) (*Watcher, error) {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.Arch == "" {
		opts.Arch = runtime.GOARCH
	}
	w := &Watcher{
		informer: dynamicinformer.NewFilteredDynamicInformer(client, KubeVirtResource, opts.Namespace, 0,
			cache.Indexers{}, nil).Informer(),
		namespace: opts.Namespace,
		arch:      opts.Arch,
		metrics:   opts.Metrics,
		logger:    klog.Background().WithName("clusterconfig"),
	}
	w.current.Store(DefaultConfig(opts.Arch))
	// KubeVirt's ClusterConfig handles no deletes: GetConfig simply stops
	// finding the CR. Handling them lets the annotations go with the CR.
	if _, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.update() },
		UpdateFunc: func(any, any) { w.update() },
		DeleteFunc: func(any) { w.update() },
	}); err != nil {
		return nil, fmt.Errorf("add KubeVirt event handler: %w", err)
	}
	return w, nil
}

// Current is the configuration in effect. The Config is immutable: hold it
// for a whole sync to read one consistent view.
func (w *Watcher) Current() *Config { return w.current.Load() }

// HasSynced reports whether the KubeVirt cache synced and Current reflects
// it.
func (w *Watcher) HasSynced() bool { return w.synced.Load() }

// Err is why the configuration of the KubeVirt CR in use was rejected, nil
// when it was accepted or there is no CR.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// OnChange registers fn to be called with each new configuration whose
// effective settings or CR annotations differ from the previous one. Calls
// are sequential, in the order of the changes, on the informer's goroutine:
// fn must not block. Unlike KubeVirt's SetConfigModifiedCallback, fn is not
// called at registration and not for CR updates that change nothing
// effective (status writes); read Current for the initial state.
func (w *Watcher) OnChange(fn func(*Config)) {
	w.cbMu.Lock()
	defer w.cbMu.Unlock()
	w.callbacks = append(w.callbacks, fn)
}

// Run starts the informer, waits for it to sync, and keeps the
// configuration current until ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	// The handlers run only once the informer starts, below.
	w.logger = klog.FromContext(ctx).WithName("clusterconfig")
	go w.informer.RunWithContext(ctx)
	if !cache.WaitForNamedCacheSync("clusterconfig", ctx.Done(), w.informer.HasSynced) {
		return fmt.Errorf("kubevirt cache did not sync: %w", ctx.Err())
	}
	w.update()
	w.synced.Store(true)
	<-ctx.Done()
	return nil
}

// update recomputes the configuration from the cache, stores it and tells
// the callbacks if it changed.
func (w *Watcher) update() {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.current.Load()
	next := w.next(prev, selectKubeVirt(w.informer.GetStore().List(), w.namespace))
	w.current.Store(next)
	if sameView(prev, next) {
		return
	}
	w.cbMu.Lock()
	callbacks := slices.Clone(w.callbacks)
	w.cbMu.Unlock()
	for _, fn := range callbacks {
		fn(next)
	}
}

// next is the configuration after prev given the CR in use (nil: none).
// It follows ClusterConfig.GetConfig: no CR or a version already parsed
// keeps the last valid configuration; a new version is parsed, and kept if
// valid.
func (w *Watcher) next(prev *Config, obj *unstructured.Unstructured) *Config {
	if obj == nil {
		if w.err != nil {
			w.metrics.clearInvalid()
		}
		w.err = nil
		return prev.withKubeVirt(nil)
	}
	rv := obj.GetResourceVersion()
	if rv != "" && (rv == w.validRV || rv == w.invalidRV) {
		return prev.withKubeVirt(metaOnly(obj))
	}
	kv := &virtv1.KubeVirt{}
	err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, kv)
	var cfg *Config
	if err == nil {
		cfg, err = FromKubeVirt(kv, w.arch)
	} else {
		err = fmt.Errorf("convert KubeVirt %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	w.metrics.observe(err)
	if err != nil {
		w.invalidRV, w.err = rv, err
		w.logger.V(2).Info("Invalid cluster configuration, keeping the last valid one", "kubevirt", klog.KObj(obj),
			"resourceVersion", rv, "lastValidResourceVersion", prev.ResourceVersion(), "err", err)
		return prev.withKubeVirt(metaOnly(obj))
	}
	w.validRV, w.err = rv, nil
	w.logger.V(2).Info("Applied cluster configuration", "kubevirt", klog.KObj(obj), "resourceVersion", rv)
	return cfg
}

// selectKubeVirt returns, of the cached objs, the CR KubeVirt would read
// (GetConfigFromKubeVirtCR): one in namespace, not being deleted, whose status has a phase
// (virt-operator has taken it up). KubeVirt picks whichever such CR its store
// lists last when there are several, which virt-operator refuses to install
// anyway; this picks the oldest, then by name, to be deterministic.
func selectKubeVirt(objs []any, namespace string) *unstructured.Unstructured {
	var best *unstructured.Unstructured
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || u.GetNamespace() != namespace || u.GetDeletionTimestamp() != nil {
			continue
		}
		if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase == "" {
			continue
		}
		if best == nil || older(u, best) {
			best = u
		}
	}
	return best
}

func older(a, b *unstructured.Unstructured) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetName() < b.GetName()
}

// metaOnly is the part of a CR withKubeVirt reads, taken without converting
// the whole CR, which may be what failed: its metadata, status and workload
// update strategy (left out if they do not convert either).
func metaOnly(u *unstructured.Unstructured) *virtv1.KubeVirt {
	kv := &virtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{
		Namespace: u.GetNamespace(), Name: u.GetName(), Annotations: u.GetAnnotations(),
	}}
	if st, ok, _ := unstructured.NestedMap(u.Object, "status"); ok {
		_ = k8sruntime.DefaultUnstructuredConverter.FromUnstructured(st, &kv.Status)
	}
	if s, ok, _ := unstructured.NestedMap(u.Object, "spec", "workloadUpdateStrategy"); ok {
		_ = k8sruntime.DefaultUnstructuredConverter.FromUnstructured(s, &kv.Spec.WorkloadUpdateStrategy)
	}
	return kv
}

// sameView reports whether a and b configure the cluster alike: the same
// effective settings, CR, annotations, workload update strategy and
// deployment state, whatever the resource version. The outdated count in
// the CR's status is left out: the workload updater writes it.
func sameView(a, b *Config) bool {
	return a.kubeVirt == b.kubeVirt && maps.Equal(a.annotations, b.annotations) &&
		a.workloads.Deployed == b.workloads.Deployed &&
		equality.Semantic.DeepEqual(a.workloads.Strategy, b.workloads.Strategy) &&
		equality.Semantic.DeepEqual(a.spec, b.spec)
}
