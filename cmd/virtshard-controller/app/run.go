package app

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/events"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/controllers/node"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/status"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/controllers/vm"
	"github.com/virtshard/virtshard/controllers/vmi"
	"github.com/virtshard/virtshard/replica/clientmetrics"
	"github.com/virtshard/virtshard/replica/profiling"
	"github.com/virtshard/virtshard/replica/queuemetrics"
	"github.com/virtshard/virtshard/replica/serving"
	"github.com/virtshard/virtshard/shard"
)

// Run runs the replica until ctx is done, then hands its ranges off.
func (o *Options) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("identity", o.Identity)
	ctx = klog.NewContext(ctx, logger)
	registry := o.registry()
	stopProfiling, err := profiling.Start(profiling.Options{ServerAddress: o.PyroscopeAddress, Replica: o.Identity, UploadRate: o.PyroscopeUploadRate})
	if err != nil {
		return err
	}
	defer func() { _ = stopProfiling() }()

	c, err := o.clients(registry)
	if err != nil {
		return err
	}
	key, _ := shard.ParseKey(o.ShardKey)
	ranges, err := shard.NewRanges(o.RangeCount, key)
	if err != nil {
		return err
	}
	shardMetrics := shard.NewMetrics(registry)
	cachesConfig := caches.Config{Kube: c.kube, KubeVirt: c.kv, Namespace: o.Watch, Ranges: ranges, Metrics: shardMetrics}
	rangeCaches := caches.NewRanges(cachesConfig)
	manager, err := o.manager(c.kube, ranges, rangeCaches, shardMetrics)
	if err != nil {
		return err
	}
	clusterConfig, err := clusterconfig.NewWatcher(c.dyn, clusterconfig.Options{
		Namespace: o.KubeVirtNamespace, Arch: runtime.GOARCH, Metrics: clusterconfig.NewMetrics(registry),
	})
	if err != nil {
		return err
	}
	// The controllers outlive ctx: the manager hands every range off
	// before they stop.
	controllerCtx, stopControllers := context.WithCancel(klog.NewContext(context.Background(), logger))
	recorder := events.NewRecorder(controllerCtx, kubevirt.Scheme, c.kube.CoreV1(), events.Options{Metrics: events.NewMetrics(registry)})
	defer func() {
		stopControllers()
		recorder.Stop()
	}()
	w := wiring{
		clients: c, ranges: ranges, fence: manager, rangeCaches: rangeCaches, cluster: caches.NewCluster(cachesConfig),
		objects: caches.NewTemplateObjects(c.kube, c.meta, c.dyn, o.Watch), clusterConfig: clusterConfig, recorder: recorder,
		registry: registry, shardMetrics: shardMetrics, reconcileMetrics: sharded.NewMetrics(registry),
	}
	ctrls, err := o.controllers(w)
	if err != nil {
		return err
	}
	stopServing, err := o.serve(registry, c.kube, manager.Ready)
	if err != nil {
		return err
	}
	defer stopServing()

	var wg sync.WaitGroup
	var configErr error
	wg.Go(func() { configErr = clusterConfig.Run(controllerCtx) })
	if err := startCaches(ctx, controllerCtx, stopControllers, w, ctrls); err != nil {
		stopControllers()
		wg.Wait()
		if errors.Is(err, errStoppedStarting) {
			return configErr // stopped before it started: nothing to hand off
		}
		return errors.Join(err, configErr)
	}
	var runErr error
	wg.Go(func() { runErr = ctrls.run(controllerCtx, o.Workers) })
	logger.Info("Replica started", "namespace", o.Namespace, "ranges", o.RangeCount, "shardKey", o.ShardKey)
	// The manager hands every range off (Releasing) before it returns; only
	// then do the controllers' workers stop.
	err = manager.Run(ctx)
	stopControllers()
	wg.Wait()
	logger.Info("Replica stopped")
	return errors.Join(err, runErr, configErr)
}

func (o *Options) registry() *prometheus.Registry {
	registry := o.Registry
	if registry == nil {
		registry = prometheus.NewRegistry()
	}
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	queuemetrics.Register(registry)
	return registry
}

// clients are the replica's API clients; their writes are counted
// client-side (virtshard_api_writes_total).
type clients struct {
	kube kubernetes.Interface
	kv   *kubevirt.Clientset
	meta metadata.Interface
	dyn  dynamic.Interface
}

func (o *Options) clients(registry prometheus.Registerer) (clients, error) {
	cfg, err := o.restConfig()
	if err != nil {
		return clients{}, err
	}
	clientmetrics.NewWrites(registry).Instrument(cfg)
	var c clients
	var errs [4]error
	c.kube, errs[0] = kubernetes.NewForConfig(cfg)
	c.kv, errs[1] = kubevirt.NewForConfig(cfg)
	c.meta, errs[2] = metadata.NewForConfig(cfg)
	c.dyn, errs[3] = dynamic.NewForConfig(cfg)
	return c, errors.Join(errs[:]...)
}

// manager is the replica's shard manager, which hands ranges to the range
// caches and is every controller's fence.
func (o *Options) manager(kube kubernetes.Interface, ranges shard.Ranges, rangeCaches *caches.Ranges, metrics *shard.Metrics) (*shard.Manager, error) {
	// Without warm caches the manager sees a plain Handler, no Preparer.
	var handler shard.Handler = rangeCaches
	if !o.WarmCaches {
		handler = struct{ shard.Handler }{rangeCaches}
	}
	return shard.NewManager(shard.Config{
		Client:        kube,
		Namespace:     o.Namespace,
		Name:          o.Name,
		Identity:      o.Identity,
		Ranges:        ranges,
		LeaseDuration: o.LeaseDuration,
		RenewDeadline: o.RenewDeadline,
		RetryPeriod:   o.RetryPeriod,
		SuspectAfter:  o.SuspectAfter,
		Handler:       handler,
		Metrics:       metrics,
	})
}

// wiring is what the replica gives its controllers.
type wiring struct {
	clients
	ranges           shard.Ranges
	fence            sharded.Fence
	rangeCaches      *caches.Ranges
	cluster          *caches.Cluster
	objects          *caches.TemplateObjects
	clusterConfig    *clusterconfig.Watcher
	recorder         *events.Recorder
	registry         *prometheus.Registry
	shardMetrics     *shard.Metrics
	reconcileMetrics *sharded.Metrics
}

// replicaControllers are the replica's controllers.
type replicaControllers struct {
	vmi       *vmi.Controller
	vm        *vm.Controller
	migration *migration.Controller
	node      *node.Controller
}

// controllers builds every controller; each registers with the range
// caches, which the manager hands ranges to once it runs.
func (o *Options) controllers(w wiring) (*replicaControllers, error) {
	tmpl := template.DefaultOptions()
	tmpl.LauncherImage = o.LauncherImage
	tmpl.SidecarShimImage = o.SidecarShimImage
	tmpl.RangeLabel = shard.LabelRange
	var c replicaControllers
	var err error
	c.vmi, err = vmi.New(vmi.Config{
		Kube: w.kube, KubeVirt: w.kv, Metadata: w.meta,
		Fence:            w.fence,
		Namespace:        o.Watch,
		Ranges:           w.ranges,
		Caches:           w.rangeCaches,
		Cluster:          w.cluster,
		Options:          tmpl,
		ClusterConfig:    w.clusterConfig,
		Objects:          w.objects,
		LazyStatusWait:   o.LazyStatus,
		BusyStatusWait:   o.BusyStatus,
		BusyDepth:        o.BusyDepth,
		UrgentStatusWait: o.UrgentStatus,
		StatusWorkers:    o.StatusWorkers,
		Metrics:          vmi.NewMetrics(w.registry),
		ShardMetrics:     w.shardMetrics,
		StatusMetrics:    status.NewMetrics(w.registry),
		Recorder:         w.recorder,
		ReconcileMetrics: w.reconcileMetrics,
	})
	if err != nil {
		return nil, err
	}
	vmi.RegisterGauges(w.registry, c.vmi)
	c.vm, err = vm.New(vm.Config{
		Kube: w.kube, KubeVirt: w.kv,
		Fence:            w.fence,
		Ranges:           w.ranges,
		Caches:           w.rangeCaches,
		MaxStartBackoff:  o.MaxStartBackoff,
		Recorder:         w.recorder,
		ReconcileMetrics: w.reconcileMetrics,
	})
	if err != nil {
		return nil, err
	}
	c.migration, err = migration.New(migration.Config{
		Kube: w.kube, KubeVirt: w.kv,
		Fence:                w.fence,
		Ranges:               w.ranges,
		Caches:               w.rangeCaches,
		Cluster:              w.cluster,
		Namespace:            o.Namespace,
		Name:                 o.Name,
		Limits:               migration.Limits{PerCluster: o.MigrationsPerCluster, PerNode: o.OutboundMigrationsPerNode},
		UnschedulableTimeout: o.MigrationUnschedulableTimeout,
		PendingTimeout:       o.MigrationPendingTimeout,
		Options:              tmpl,
		ClusterConfig:        w.clusterConfig,
		Objects:              w.objects,
		Recorder:             w.recorder,
		ReconcileMetrics:     w.reconcileMetrics,
	})
	if err != nil {
		return nil, err
	}
	c.node, err = node.New(node.Config{
		Kube: w.kube, KubeVirt: w.kv,
		Fence:            w.fence,
		Ranges:           w.ranges,
		Caches:           w.rangeCaches,
		Cluster:          w.cluster,
		GracePeriod:      o.NodeGracePeriod,
		DrainTaintKey:    o.DrainTaintKey,
		ClusterConfig:    w.clusterConfig,
		Recorder:         w.recorder,
		ReconcileMetrics: w.reconcileMetrics,
	})
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// serve starts the replica's HTTP endpoint and returns its stop.
func (o *Options) serve(registry *prometheus.Registry, kube kubernetes.Interface, ready func() bool) (func(), error) {
	server, err := serving.Start(serving.Options{
		Address:  o.Address,
		Listener: o.Listener,
		Secure:   o.SecureServing,
		Client:   kube,
		CertFile: o.TLSCertFile,
		KeyFile:  o.TLSKeyFile,
		Pprof:    o.Pprof,
		Metrics:  promhttp.HandlerFor(registry, promhttp.HandlerOpts{}),
		Ready:    ready,
	})
	if err != nil {
		return nil, fmt.Errorf("serve on %s: %w", o.Address, err)
	}
	return func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}, nil
}

// errStoppedStarting: the replica was stopped while its caches started.
var errStoppedStarting = errors.New("stopped while starting")

// startCaches runs the cluster-wide caches on controllerCtx and waits for
// them, and for the KubeVirt CR, before any range is taken: until then the
// controllers could not render a pod. If ctx (the replica's run) ends
// first, it stops the controllers' context and returns errStoppedStarting.
func startCaches(ctx, controllerCtx context.Context, stop func(), w wiring, c *replicaControllers) error {
	if err := w.cluster.Run(controllerCtx); err != nil {
		return err
	}
	if err := w.objects.Run(controllerCtx); err != nil {
		return err
	}
	if !cache.WaitForNamedCacheSync("kubevirt-config", controllerCtx.Done(), w.clusterConfig.HasSynced) {
		return fmt.Errorf("KubeVirt CR cache did not sync: %w", ctx.Err())
	}
	started := make(chan error, 1)
	go func() { started <- c.vmi.Start(controllerCtx) }()
	select {
	case err := <-started:
		return err
	case <-ctx.Done():
		stop()
		<-started
		return errStoppedStarting
	}
}

// run runs every controller until ctx is done and returns all their
// errors, whichever ends first.
func (c *replicaControllers) run(ctx context.Context, workers int) error {
	runs := []func(context.Context, int) error{c.vmi.Run, c.vm.Run, c.migration.Run, c.node.Run}
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, run := range runs {
		wg.Go(func() { errs[i] = run(ctx, workers) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (o *Options) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("client config: %w", err)
	}
	cfg.QPS = float32(o.QPS)
	cfg.Burst = o.Burst
	cfg.UserAgent = "virtshard-controller/" + o.Identity
	if o.AdjustConfig != nil {
		o.AdjustConfig(cfg)
	}
	return cfg, nil
}
