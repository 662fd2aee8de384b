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
	registry := o.Registry
	if registry == nil {
		registry = prometheus.NewRegistry()
	}
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	queuemetrics.Register(registry)

	stopProfiling, err := profiling.Start(profiling.Options{ServerAddress: o.PyroscopeAddress, Replica: o.Identity, UploadRate: o.PyroscopeUploadRate})
	if err != nil {
		return err
	}
	defer func() { _ = stopProfiling() }()

	cfg, err := o.restConfig()
	if err != nil {
		return err
	}
	clientmetrics.NewWrites(registry).Instrument(cfg)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		return err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	key, _ := shard.ParseKey(o.ShardKey)
	ranges, err := shard.NewRanges(o.RangeCount, key)
	if err != nil {
		return err
	}
	shardMetrics := shard.NewMetrics(registry)

	tmpl := template.DefaultOptions()
	tmpl.LauncherImage = o.LauncherImage
	tmpl.SidecarShimImage = o.SidecarShimImage
	tmpl.RangeLabel = shard.LabelRange
	clusterConfig, err := clusterconfig.NewWatcher(dyn, clusterconfig.Options{
		Namespace: o.KubeVirtNamespace, Arch: runtime.GOARCH, Metrics: clusterconfig.NewMetrics(registry),
	})
	if err != nil {
		return err
	}
	templateObjects := caches.NewTemplateObjects(kube, meta, o.Watch)
	// The controllers outlive ctx: the manager hands every range off
	// before they stop.
	controllerCtx, stopController := context.WithCancel(klog.NewContext(context.Background(), logger))
	recorder := events.NewRecorder(controllerCtx, kubevirt.Scheme, kube.CoreV1(), events.Options{Metrics: events.NewMetrics(registry)})
	defer func() {
		stopController()
		recorder.Stop()
	}()
	reconcileMetrics := sharded.NewMetrics(registry)
	cachesConfig := caches.Config{Kube: kube, KubeVirt: kv, Namespace: o.Watch, Ranges: ranges, Metrics: shardMetrics}
	rangeCaches, clusterCaches := caches.NewRanges(cachesConfig), caches.NewCluster(cachesConfig)
	// The manager is the controllers' fence; they register with the
	// range caches it hands ranges to before it runs.
	// Without warm caches the manager sees a plain Handler, no Preparer.
	var handler shard.Handler = rangeCaches
	if !o.WarmCaches {
		handler = struct{ shard.Handler }{rangeCaches}
	}
	manager, err := shard.NewManager(shard.Config{
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
		Metrics:       shardMetrics,
	})
	if err != nil {
		return err
	}
	controller, err := vmi.New(vmi.Config{
		Kube: kube, KubeVirt: kv, Metadata: meta, Dynamic: dyn,
		Fence:            manager,
		Namespace:        o.Watch,
		Ranges:           ranges,
		Caches:           rangeCaches,
		Cluster:          clusterCaches,
		Options:          tmpl,
		ClusterConfig:    clusterConfig,
		Objects:          templateObjects,
		LazyStatusWait:   o.LazyStatus,
		BusyStatusWait:   o.BusyStatus,
		BusyDepth:        o.BusyDepth,
		UrgentStatusWait: o.UrgentStatus,
		StatusWorkers:    o.StatusWorkers,
		Metrics:          vmi.NewMetrics(registry),
		ShardMetrics:     shardMetrics,
		StatusMetrics:    status.NewMetrics(registry),
		Recorder:         recorder,
		ReconcileMetrics: reconcileMetrics,
	})
	if err != nil {
		return err
	}
	vmi.RegisterGauges(registry, controller)
	vmController, err := vm.New(vm.Config{
		Kube: kube, KubeVirt: kv,
		Fence:            manager,
		Ranges:           ranges,
		Caches:           rangeCaches,
		MaxStartBackoff:  o.MaxStartBackoff,
		Recorder:         recorder,
		ReconcileMetrics: reconcileMetrics,
	})
	if err != nil {
		return err
	}
	migrationController, err := migration.New(migration.Config{
		Kube: kube, KubeVirt: kv,
		Fence:                manager,
		Ranges:               ranges,
		Caches:               rangeCaches,
		Cluster:              clusterCaches,
		Namespace:            o.Namespace,
		Name:                 o.Name,
		Limits:               migration.Limits{PerCluster: o.MigrationsPerCluster, PerNode: o.OutboundMigrationsPerNode},
		UnschedulableTimeout: o.MigrationUnschedulableTimeout,
		PendingTimeout:       o.MigrationPendingTimeout,
		Options:              tmpl,
		ClusterConfig:        clusterConfig,
		Objects:              templateObjects,
		Recorder:             recorder,
		ReconcileMetrics:     reconcileMetrics,
	})
	if err != nil {
		return err
	}
	nodeController, err := node.New(node.Config{
		Kube: kube, KubeVirt: kv,
		Fence:            manager,
		Ranges:           ranges,
		Caches:           rangeCaches,
		Cluster:          clusterCaches,
		GracePeriod:      o.NodeGracePeriod,
		DrainTaintKey:    o.DrainTaintKey,
		ClusterConfig:    clusterConfig,
		Recorder:         recorder,
		ReconcileMetrics: reconcileMetrics,
	})
	if err != nil {
		return err
	}

	server, err := serving.Start(serving.Options{
		Address:  o.Address,
		Listener: o.Listener,
		Secure:   o.SecureServing,
		Client:   kube,
		CertFile: o.TLSCertFile,
		KeyFile:  o.TLSKeyFile,
		Pprof:    o.Pprof,
		Metrics:  promhttp.HandlerFor(registry, promhttp.HandlerOpts{}),
		Ready:    manager.Ready,
	})
	if err != nil {
		return fmt.Errorf("serve on %s: %w", o.Address, err)
	}
	defer func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()

	var wg sync.WaitGroup
	if err := clusterCaches.Run(controllerCtx); err != nil {
		return err
	}
	if err := templateObjects.Run(controllerCtx); err != nil {
		return err
	}
	var configErr error
	wg.Go(func() { configErr = clusterConfig.Run(controllerCtx) })
	if !cache.WaitForNamedCacheSync("kubevirt-config", controllerCtx.Done(), clusterConfig.HasSynced) {
		stopController()
		wg.Wait()
		return fmt.Errorf("KubeVirt CR cache did not sync: %w", errors.Join(configErr, ctx.Err()))
	}
	started := make(chan error, 1)
	go func() { started <- controller.Start(controllerCtx) }()
	select {
	case err := <-started:
		if err != nil {
			stopController()
			wg.Wait()
			return errors.Join(err, configErr)
		}
	case <-ctx.Done():
		stopController()
		<-started
		wg.Wait()
		return configErr
	}
	// Every controller's error is kept, whichever ends first.
	var runMu sync.Mutex
	var runErrs []error
	run := func(f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				runMu.Lock()
				defer runMu.Unlock()
				runErrs = append(runErrs, err)
			}
		})
	}
	run(func() error { return controller.Run(controllerCtx, o.Workers) })
	run(func() error { return vmController.Run(controllerCtx, o.Workers) })
	run(func() error { return migrationController.Run(controllerCtx, o.Workers) })
	run(func() error { return nodeController.Run(controllerCtx, o.Workers) })
	logger.Info("Replica started", "namespace", o.Namespace, "ranges", o.RangeCount, "shardKey", o.ShardKey)
	// The manager hands every range off (Releasing) before it returns; only
	// then do the controller's workers stop.
	err = manager.Run(ctx)
	stopController()
	wg.Wait()
	logger.Info("Replica stopped")
	return errors.Join(err, errors.Join(runErrs...), configErr)
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
