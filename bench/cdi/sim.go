package cdi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// The resources of CDI's kinds.
var (
	DataVolumes    = cdiv1.SchemeGroupVersion.WithResource("datavolumes")
	DataSources    = cdiv1.SchemeGroupVersion.WithResource("datasources")
	StorageProfile = cdiv1.SchemeGroupVersion.WithResource("storageprofiles")
	CDIConfigs     = cdiv1.SchemeGroupVersion.WithResource("cdiconfigs")
	CDIs           = cdiv1.SchemeGroupVersion.WithResource("cdis")
)

// The provisioner and the StorageClasses it provisions for, which the
// local cluster installs (bench/cdi/storageclasses.yaml). Neither is the
// cluster's default class, so that claims of no class (the differential
// scenarios' own) stay as they are; a DataVolume of no class gets the
// Immediate one unless the cluster has a default.
const (
	Provisioner                      = "sim.cdi.virtshard.io"
	StorageClassImmediate            = "sim-immediate"
	StorageClassWaitForFirstConsumer = "sim-wffc"
)

// UserAgent tells the simulation's requests from a real CDI's.
const UserAgent = "cdi-controller (virtshard simulation)"

// Defaults of Options.
const (
	DefaultWorkers = 4
	// DefaultTransferDuration is how long a DataVolume takes from a bound
	// claim to Succeeded: a quarter scheduled, the rest in progress.
	DefaultTransferDuration = 4 * time.Second
	// progressInterval is how often a transfer's progress is written.
	progressInterval = time.Second
	// restartInterval is how often a failing importer restarts.
	restartInterval = 10 * time.Second
)

// Options configure a Sim.
type Options struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	Workers int
	// TransferDuration is how long a DataVolume's transfer takes once its
	// claim is bound.
	TransferDuration time.Duration
	Clock            clock.Clock
}

// Sim plays CDI's controllers, a provisioner, and the CSI snapshot
// controller and snapshotter of that provisioner's driver.
type Sim struct {
	opts Options

	dataVolumes, dataSources             cache.SharedIndexInformer
	claims, volumes, classes             cache.SharedIndexInformer
	snapshots, contents, snapshotClasses cache.SharedIndexInformer

	dvQueue, claimQueue, snapshotQueue workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// bound is when each DataVolume's claim was first seen Bound, by
	// DataVolume UID.
	bound map[types.UID]time.Time
}

// New returns a Sim; Run starts it.
func New(opts Options) (*Sim, error) {
	if opts.Kube == nil || opts.Dynamic == nil {
		return nil, errors.New("cdi: clients are required")
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.TransferDuration <= 0 {
		opts.TransferDuration = DefaultTransferDuration
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	queue := func(name string) workqueue.TypedRateLimitingInterface[string] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
	}
	return &Sim{opts: opts, dvQueue: queue("cdi-datavolumes"), claimQueue: queue("cdi-provisioner"), snapshotQueue: queue("csi-snapshotter"),
		bound: map[types.UID]time.Time{}}, nil
}

// Run plays CDI until ctx is done.
func (s *Sim) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	defer s.dvQueue.ShutDown()
	defer s.claimQueue.ShutDown()
	defer s.snapshotQueue.ShutDown()
	kube := informers.NewSharedInformerFactory(s.opts.Kube, 0)
	s.claims = kube.Core().V1().PersistentVolumeClaims().Informer()
	s.volumes = kube.Core().V1().PersistentVolumes().Informer()
	s.classes = kube.Storage().V1().StorageClasses().Informer()
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(s.opts.Dynamic, 0)
	s.dataVolumes = dyn.ForResource(DataVolumes).Informer()
	s.dataSources = dyn.ForResource(DataSources).Informer()
	s.snapshots = dyn.ForResource(VolumeSnapshots).Informer()
	s.contents = dyn.ForResource(VolumeSnapshotContents).Informer()
	s.snapshotClasses = dyn.ForResource(VolumeSnapshotClasses).Informer()

	enqueue := func(q workqueue.TypedRateLimitingInterface[string]) func(any) {
		return func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				q.Add(key)
			}
		}
	}
	handlers := []struct {
		informer cache.SharedIndexInformer
		handler  func(any)
	}{
		{s.dataVolumes, enqueue(s.dvQueue)},
		{s.claims, func(obj any) {
			enqueue(s.claimQueue)(obj)
			// A claim's DataVolume is its controller; its snapshots wait
			// for it to be bound.
			if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
				if ref := metav1.GetControllerOf(pvc); ref != nil && ref.Kind == "DataVolume" {
					s.dvQueue.Add(pvc.Namespace + "/" + ref.Name)
				}
				s.eachSnapshotOf(pvc, s.snapshotQueue.Add)
			}
		}},
		{s.snapshots, func(obj any) {
			enqueue(s.snapshotQueue)(obj)
			// Its content goes with it; the claims restored from it wait
			// until it is ready.
			if vs, ok := deletedObject(obj).(*unstructured.Unstructured); ok {
				s.snapshotQueue.Add(contentKey + "snapcontent-" + string(vs.GetUID()))
				s.eachClaimFrom(vs, s.claimQueue.Add)
			}
		}},
		{s.contents, func(obj any) {
			if content, ok := deletedObject(obj).(*unstructured.Unstructured); ok {
				s.snapshotQueue.Add(contentKey + content.GetName())
			}
		}},
		{s.volumes, func(obj any) {
			if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.Status.Phase == corev1.VolumeReleased {
				s.claimQueue.Add(releasedKey + pv.Name)
			}
		}},
		{s.classes, func(obj any) {
			if class, ok := obj.(*storagev1.StorageClass); ok {
				if err := s.ensureProfile(ctx, class); err != nil {
					logger.Error(err, "Cannot write the StorageProfile", "class", class.Name)
				}
			}
		}},
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: h.handler, UpdateFunc: func(_, obj any) { h.handler(obj) }, DeleteFunc: h.handler,
		}); err != nil {
			return err
		}
	}
	// The informers stop before Run returns, whyever it does.
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		kube.Shutdown()
		dyn.Shutdown()
	}()
	kube.Start(ctx.Done())
	dyn.Start(ctx.Done())
	for _, synced := range []cache.InformerSynced{s.claims.HasSynced, s.volumes.HasSynced, s.classes.HasSynced,
		s.dataVolumes.HasSynced, s.dataSources.HasSynced, s.snapshots.HasSynced, s.contents.HasSynced, s.snapshotClasses.HasSynced} {
		if !cache.WaitForCacheSync(ctx.Done(), synced) {
			return ctx.Err()
		}
	}
	if err := s.ensureSingletons(ctx); err != nil {
		return err
	}
	logger.Info("Simulated CDI starting", "provisioner", Provisioner, "workers", s.opts.Workers)
	var workers sync.WaitGroup
	for range s.opts.Workers {
		workers.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) { s.work(ctx, s.dvQueue, s.syncDataVolume) }, time.Second)
		})
		workers.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) { s.work(ctx, s.claimQueue, s.syncClaim) }, time.Second)
		})
		workers.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				s.work(ctx, s.snapshotQueue, func(ctx context.Context, key string) (time.Duration, error) { return 0, s.syncSnapshot(ctx, key) })
			}, time.Second)
		})
	}
	<-ctx.Done()
	s.dvQueue.ShutDown()
	s.claimQueue.ShutDown()
	s.snapshotQueue.ShutDown()
	workers.Wait()
	return nil
}

func (s *Sim) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) (time.Duration, error)) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		after, err := sync(ctx, key)
		switch {
		case err != nil:
			klog.FromContext(ctx).V(2).Info("Sync failed, retrying", "key", key, "err", err)
			q.AddRateLimited(key)
		case after > 0:
			q.Forget(key)
			q.AddAfter(key, after)
		default:
			q.Forget(key)
		}
		q.Done(key)
	}
}

// syncDataVolume makes a DataVolume's claim and writes its status.
func (s *Sim) syncDataVolume(ctx context.Context, key string) (time.Duration, error) {
	obj, exists, err := s.dataVolumes.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return 0, err
	}
	dv := &cdiv1.DataVolume{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, dv); err != nil {
		return 0, fmt.Errorf("read DataVolume %s: %w", key, err)
	}
	if dv.DeletionTimestamp != nil {
		s.forget(dv.UID)
		return 0, nil
	}
	o := observed{took: s.opts.TransferDuration, now: metav1.NewTime(s.opts.Clock.Now())}
	if cached, ok, _ := s.claims.GetIndexer().GetByKey(key); ok {
		o.claim = cached.(*corev1.PersistentVolumeClaim)
	} else {
		claim := claimFor(dv, s.defaultClass())
		if source, ok := s.cloneSource(dv); ok && (source.Namespace == "" || source.Namespace == dv.Namespace) {
			claim.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: source.Name}
		}
		created, err := s.opts.Kube.CoreV1().PersistentVolumeClaims(dv.Namespace).Create(ctx, claim, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			// The cache is behind: the claim's event brings the DataVolume back.
		case err != nil:
			return 0, fmt.Errorf("create the claim of DataVolume %s: %w", key, err)
		default:
			o.claim = created
		}
	}
	if o.claim != nil && o.claim.Spec.StorageClassName != nil {
		if c, ok, _ := s.classes.GetIndexer().GetByKey(*o.claim.Spec.StorageClassName); ok {
			o.class = c.(*storagev1.StorageClass)
		}
	}
	o.boundFor, o.restarts = s.progress(dv, o.claim)
	st, again := statusOf(dv, o)
	if !apiequality.Semantic.DeepEqual(st, dv.Status) {
		dv.Status = st
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(dv)
		if err != nil {
			return 0, err
		}
		if _, err := s.opts.Dynamic.Resource(DataVolumes).Namespace(dv.Namespace).UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("write the status of DataVolume %s: %w", key, err)
		}
	}
	switch {
	case !again:
		return 0, nil
	case hasAnnotation(dv, ImportErrorAnnotation):
		return restartInterval, nil
	case o.claim != nil && o.claim.Status.Phase == corev1.ClaimBound:
		return progressInterval, nil
	}
	return 0, nil // the claim's events bring it back
}

// progress is how long dv's claim has been bound, and how many times a
// failing importer restarted by now: one per restartInterval, counted
// from the time alone, so that a sync its own status write brings does
// not count one more.
func (s *Sim) progress(dv *cdiv1.DataVolume, claim *corev1.PersistentVolumeClaim) (time.Duration, int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if claim == nil || claim.Status.Phase != corev1.ClaimBound {
		return 0, 0
	}
	now := s.opts.Clock.Now()
	since, ok := s.bound[dv.UID]
	if !ok {
		since, s.bound[dv.UID] = now, now
	}
	boundFor := now.Sub(since)
	var restarts int32
	if hasAnnotation(dv, ImportErrorAnnotation) {
		restarts = int32(boundFor / restartInterval)
	}
	return boundFor, restarts
}

func hasAnnotation(dv *cdiv1.DataVolume, key string) bool {
	_, ok := dv.Annotations[key]
	return ok
}

func (s *Sim) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.bound, uid)
}

// cloneSource is the PVC a clone DataVolume copies: its pvc source, or
// the pvc of the DataSource its sourceRef names.
func (s *Sim) cloneSource(dv *cdiv1.DataVolume) (cdiv1.DataVolumeSourcePVC, bool) {
	if dv.Spec.Source != nil && dv.Spec.Source.PVC != nil {
		return *dv.Spec.Source.PVC, true
	}
	ref := dv.Spec.SourceRef
	if ref == nil || ref.Kind != cdiv1.DataVolumeDataSource {
		return cdiv1.DataVolumeSourcePVC{}, false
	}
	ns := dv.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = *ref.Namespace
	}
	obj, ok, _ := s.dataSources.GetIndexer().GetByKey(ns + "/" + ref.Name)
	if !ok {
		return cdiv1.DataVolumeSourcePVC{}, false
	}
	source := &cdiv1.DataSource{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, source); err != nil || source.Spec.Source.PVC == nil {
		return cdiv1.DataVolumeSourcePVC{}, false
	}
	return *source.Spec.Source.PVC, true
}

// defaultClass is the StorageClass marked default, else the Immediate
// one of the provisioner.
func (s *Sim) defaultClass() string {
	for _, obj := range s.classes.GetIndexer().List() {
		class := obj.(*storagev1.StorageClass)
		if class.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			return class.Name
		}
	}
	return StorageClassImmediate
}

// createOrKeep creates obj under gvr, with status (a pointer), unless it
// exists. Where the kind has a status subresource (StorageProfiles; not
// CDI's own resource nor CDIConfig) the create drops the status, and it
// is written after.
func (s *Sim) createOrKeep(ctx context.Context, gvr schema.GroupVersionResource, obj runtime.Object, status any) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return err
	}
	u["status"] = st
	client := s.opts.Dynamic.Resource(gvr)
	created, err := client.Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", gvr.Resource, err)
	}
	if got, _, _ := unstructured.NestedMap(created.Object, "status"); len(got) != 0 || len(st) == 0 {
		return nil
	}
	created.Object["status"] = st
	if _, err := client.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("write the status of %s %s: %w", gvr.Resource, created.GetName(), err)
	}
	return nil
}
