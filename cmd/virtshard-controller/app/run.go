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
	"k8s.io/utils/clock"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/events"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/template"
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
	tmpl := template.DefaultOptions()
	tmpl.LauncherImage = o.LauncherImage
	tmpl.SidecarShimImage = o.SidecarShimImage
	tmpl.ImagePullSecret, tmpl.QEMUTimeout = o.ImagePullSecret, o.LauncherQEMUTimeout
	tmpl.SyncedLabels, tmpl.SyncedAnnotations = o.SyncedLabels, o.SyncedAnnotations
	env := &sharded.Env{
		Kube: c.kube, KubeVirt: c.kv, Metadata: c.meta, Dynamic: c.dyn,
		Ranges: ranges, Caches: rangeCaches, Objects: caches.NewTemplateObjects(c.kube, c.meta, c.dyn, o.Watch),
		ClusterConfig: clusterConfig, Template: tmpl,
		ReplicaNamespace: o.Namespace, Name: o.Name,
		Recorder: recorder, RecorderFor: recorder.For, Registry: registry, Clock: clock.RealClock{},
	}
	ctrls, err := o.startControllers(env, manager, sharded.NewMetrics(registry))
	if err != nil {
		return err
	}
	rangeCaches.RegisterMetrics(registry)
	stopServing, err := o.serve(registry, c.kube, manager.Ready)
	if err != nil {
		return err
	}
	defer stopServing()

	var wg sync.WaitGroup
	var configErr error
	wg.Go(func() { configErr = clusterConfig.Run(controllerCtx) })
	if err := startCaches(ctx, controllerCtx, stopControllers, env, clusterConfig.HasSynced, ctrls); err != nil {
		stopControllers()
		wg.Wait()
		if errors.Is(err, errStoppedStarting) {
			return configErr // stopped before it started: nothing to hand off
		}
		return errors.Join(err, configErr)
	}
	var runErr error
	wg.Go(func() { runErr = ctrls.run(controllerCtx) })
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
		HandoffWait:   o.HandoffWait,
		Handler:       handler,
		Metrics:       metrics,
	})
}

// controller is one running controller: its runtime and worker count.
type controller struct {
	rt      *sharded.Runtime
	workers int
}

type replicaControllers []controller

// startControllers builds every declared controller on env; each
// registers with the range caches, which the manager hands ranges to once
// it runs.
func (o *Options) startControllers(env *sharded.Env, fence sharded.Fence, metrics *sharded.Metrics) (replicaControllers, error) {
	var ctrls replicaControllers
	for _, d := range o.declarations() {
		rt := sharded.New(sharded.Config{Name: d.Name, Ranges: env.Ranges.Count(), Fence: fence, Clock: env.Clock, Metrics: metrics})
		if err := rt.Start(env, d); err != nil {
			return nil, err
		}
		workers, ok := o.Workers[d.Name]
		if !ok {
			workers = d.Workers
		}
		ctrls = append(ctrls, controller{rt: rt, workers: workers})
	}
	return ctrls, nil
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
// controllers could not render a pod. Then every controller follows its
// cluster-wide kinds. If ctx (the replica's run) ends first, it stops the
// controllers' context and returns errStoppedStarting.
func startCaches(ctx, controllerCtx context.Context, stop func(), env *sharded.Env, configSynced cache.InformerSynced, ctrls replicaControllers) error {
	started := make(chan error, 1)
	go func() {
		started <- func() error {
			if err := env.Caches.RunCluster(controllerCtx); err != nil {
				return err
			}
			if err := env.Objects.Run(controllerCtx); err != nil {
				return err
			}
			if !cache.WaitForNamedCacheSync("kubevirt-config", controllerCtx.Done(), configSynced) {
				return fmt.Errorf("KubeVirt CR cache did not sync: %w", controllerCtx.Err())
			}
			for _, c := range ctrls {
				if err := c.rt.Follow(controllerCtx); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
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
func (c replicaControllers) run(ctx context.Context) error {
	errs := make([]error, len(c))
	var wg sync.WaitGroup
	for i, ctrl := range c {
		wg.Go(func() { errs[i] = ctrl.rt.RunWorkers(ctx, ctrl.workers) })
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
