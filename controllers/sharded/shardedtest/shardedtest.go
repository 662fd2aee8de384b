// Package shardedtest is the test kit of controllers on the sharded
// runtime, in sample-controller's style: a declared controller over fake
// clientsets, its range caches real informers over the fakes, every range
// held by a fence the test can cut; a test syncs one item and asserts the
// API calls the fakes recorded.
//
// It lives beside the runtime, not under test/, so that every controller's
// unit tests may import it without the product importing test support.
// Product code must not import it.
package shardedtest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	virtv1 "kubevirt.io/api/core/v1"
	migrationsv1 "kubevirt.io/api/migrations/v1alpha1"
	poolv1 "kubevirt.io/api/pool/v1beta1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/fencetest"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/shard"
)

// RangeCount is the number of ranges of a fixture.
const RangeCount = 4

// Ranges are a fixture's ranges: RangeCount of them, by uid.
func Ranges(t testing.TB) shard.Ranges {
	t.Helper()
	ranges, err := shard.NewRanges(RangeCount, shard.KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	return ranges
}

// Fence is the kit's fence (package fencetest).
type Fence = fencetest.Fence

// Holding is a fence that holds only the given ranges.
func Holding(ranges ...int) *Fence { return fencetest.Holding(ranges...) }

// StaticConfig is a KubeVirt CR configuration that never changes.
type StaticConfig struct{ Config *clusterconfig.Config }

// Current implements sharded.ClusterConfig.
func (s StaticConfig) Current() *clusterconfig.Config { return s.Config }

// OnChange implements sharded.ClusterConfig: it never changes.
func (StaticConfig) OnChange(func(*clusterconfig.Config)) {}

// ChangingConfig is a KubeVirt CR configuration a test changes (Set).
type ChangingConfig struct {
	mu      sync.Mutex
	current *clusterconfig.Config
	fns     []func(*clusterconfig.Config)
}

// NewChangingConfig starts at cfg.
func NewChangingConfig(cfg *clusterconfig.Config) *ChangingConfig {
	return &ChangingConfig{current: cfg}
}

// Current implements sharded.ClusterConfig.
func (c *ChangingConfig) Current() *clusterconfig.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

// OnChange implements sharded.ClusterConfig.
func (c *ChangingConfig) OnChange(fn func(*clusterconfig.Config)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, fn)
}

// Set makes cfg current and tells those who asked, as the watcher does.
func (c *ChangingConfig) Set(cfg *clusterconfig.Config) {
	c.mu.Lock()
	c.current = cfg
	fns := c.fns
	c.mu.Unlock()
	for _, fn := range fns {
		fn(cfg)
	}
}

// Cluster is what a fixture's fakes hold and serve.
type Cluster struct {
	// Objects go to the fake that serves them: kubevirt.io objects to the
	// KubeVirt fake, unstructured ones (DataVolumes) to the dynamic fake,
	// which then serves CDI, everything else to the Kubernetes fake.
	Objects []runtime.Object
	// Config is the KubeVirt CR's configuration; nil: KubeVirt's defaults.
	Config sharded.ClusterConfig
	// Clock drives the controller's time; nil: the real clock.
	Clock clock.WithTicker
	// Held, when set, are the only ranges the fixture acquires; the others
	// are dropped from the fence too.
	Held []int
	// Replica, when set, is another fixture whose fakes this one shares:
	// a second replica over the same cluster. Objects are then ignored.
	Replica *Fixture
}

// Fixture is a declared controller over fake clientsets.
type Fixture struct {
	T        testing.TB
	Kube     *kubefake.Clientset
	KubeVirt *kvfake.Clientset
	Dynamic  *dynamicfake.FakeDynamicClient
	Ranges   shard.Ranges
	Fence    *Fence
	Recorder *record.FakeRecorder
	// EventSources are the sources the controller's events were asked to
	// come from (Env.RecorderFor); all of them record into Recorder.
	EventSources []string
	Env          *sharded.Env
	Runtime      *sharded.Runtime
}

// Start builds the declared controller over fakes holding c.Objects, runs
// the cluster-wide caches, acquires the ranges, runs the controller's
// background loop (not its workers: a test syncs items itself), and
// forgets the actions the informers made.
func Start(t testing.TB, decl sharded.Declaration, c Cluster) *Fixture {
	t.Helper()
	var kubeObjects, kvObjects, unstructuredObjects []runtime.Object
	for _, obj := range c.Objects {
		switch obj.(type) {
		case *virtv1.VirtualMachineInstance, *virtv1.VirtualMachine, *virtv1.VirtualMachineInstanceMigration, *virtv1.VirtualMachineInstanceReplicaSet, *poolv1.VirtualMachinePool,
			*migrationsv1.MigrationPolicy:
			kvObjects = append(kvObjects, obj)
		case *unstructured.Unstructured:
			unstructuredObjects = append(unstructuredObjects, obj)
		default:
			kubeObjects = append(kubeObjects, obj)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f := &Fixture{T: t, Ranges: Ranges(t), Fence: &Fence{}, Recorder: record.NewFakeRecorder(100)}
	if other := c.Replica; other != nil {
		f.Kube, f.KubeVirt, f.Dynamic = other.Kube, other.KubeVirt, other.Dynamic
	} else {
		f.Kube, f.KubeVirt = kubefake.NewClientset(kubeObjects...), kvfake.NewClientset(kvObjects...)
		// As the API server, a create stamps the creation time (a target
		// pod's timeouts count from it).
		f.Kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if pod, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod); ok { // not an eviction
				pod.CreationTimestamp = metav1.Now()
			}
			return false, nil, nil
		})
		f.Dynamic = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{caches.DataVolumeGVR: "DataVolumeList",
				caches.DataVolumeGVR.GroupVersion().WithResource("cdis"):       "CDIList",
				caches.DataVolumeGVR.GroupVersion().WithResource("cdiconfigs"): "CDIConfigList",
				caches.InstancetypeGVR: "VirtualMachineInstancetypeList", caches.ClusterInstancetypeGVR: "VirtualMachineClusterInstancetypeList",
				caches.PreferenceGVR: "VirtualMachinePreferenceList", caches.ClusterPreferenceGVR: "VirtualMachineClusterPreferenceList"},
			unstructuredObjects...)
		// CDI is served when the test brings unstructured objects, the
		// instance types when it brings one of them.
		if len(unstructuredObjects) > 0 {
			f.Kube.Resources = []*metav1.APIResourceList{{GroupVersion: caches.DataVolumeGVR.GroupVersion().String(),
				APIResources: []metav1.APIResource{{Name: caches.DataVolumeGVR.Resource, Namespaced: true, Kind: "DataVolume"}}}}
		}
		if slices.ContainsFunc(unstructuredObjects, func(o runtime.Object) bool {
			return o.GetObjectKind().GroupVersionKind().Group == caches.InstancetypeGVR.Group
		}) {
			f.Kube.Resources = append(f.Kube.Resources, &metav1.APIResourceList{GroupVersion: caches.InstancetypeGVR.GroupVersion().String(),
				APIResources: []metav1.APIResource{{Name: caches.InstancetypeGVR.Resource, Namespaced: true}}})
		}
	}
	// The namespace cache is metadata only: the cluster's namespaces as such.
	var namespaces []runtime.Object
	for _, obj := range kubeObjects {
		if ns, ok := obj.(*corev1.Namespace); ok {
			namespaces = append(namespaces, &metav1.PartialObjectMetadata{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: ns.ObjectMeta})
		}
	}
	mdScheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(mdScheme); err != nil {
		t.Fatal(err)
	}
	md := metadatafake.NewSimpleMetadataClient(mdScheme, namespaces...)
	config := c.Config
	if config == nil {
		config = StaticConfig{clusterconfig.DefaultConfig("amd64")}
	}
	clk := c.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	rangeCaches := caches.NewRanges(caches.Config{Kube: f.Kube, KubeVirt: f.KubeVirt, Ranges: f.Ranges})
	objects := caches.NewTemplateObjects(f.Kube, md, f.Dynamic, "")
	f.Env = &sharded.Env{
		Kube: f.Kube, KubeVirt: f.KubeVirt, Metadata: md, Dynamic: f.Dynamic,
		Ranges: f.Ranges, Caches: rangeCaches, Objects: objects, ClusterConfig: config, Template: template.DefaultOptions(),
		ReplicaNamespace: "virtshard", Name: "virtshard",
		Recorder: f.Recorder, Registry: prometheus.NewRegistry(), Clock: clk,
		RecorderFor: func(component string) record.EventRecorder {
			f.EventSources = append(f.EventSources, component)
			return f.Recorder
		},
	}
	f.Runtime = sharded.New(sharded.Config{Name: decl.Name, Ranges: f.Ranges.Count(), Fence: f.Fence, Clock: clk})
	if err := f.Runtime.Start(f.Env, decl); err != nil {
		t.Fatal(err)
	}
	if err := rangeCaches.RunCluster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := objects.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Runtime.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	held := c.Held
	if held == nil {
		for i := range f.Ranges.Count() {
			held = append(held, i)
		}
	}
	for i := range f.Ranges.Count() {
		if !slices.Contains(held, i) {
			f.Fence.Drop(i)
			continue
		}
		if err := rangeCaches.Acquired(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	go f.Runtime.RunBackground(ctx)
	f.Kube.ClearActions()
	f.KubeVirt.ClearActions()
	return f
}

// StartController is Start for a controller built by build, which returns
// the controller itself (for the test to sync) beside what the runtime runs.
func StartController[C any](t testing.TB, name string, build func(*sharded.Env, *sharded.Runtime) (C, *sharded.Controller, error), c Cluster) (*Fixture, C) {
	t.Helper()
	var built C
	f := Start(t, sharded.Declaration{Name: name, New: func(env *sharded.Env, rt *sharded.Runtime) (*sharded.Controller, error) {
		var (
			declared *sharded.Controller
			err      error
		)
		built, declared, err = build(env, rt)
		return declared, err
	}}, c)
	return f, built
}

// Range is range i's caches.
func (f *Fixture) Range(i int) *caches.Range { return f.Env.Caches.Get(i) }

// KubeWrites are the writes the Kubernetes fake recorded ("create pods").
func (f *Fixture) KubeWrites() []string { return kvfake.Writes(f.Kube.Actions()) }

// KubeVirtWrites are the writes the KubeVirt fake recorded.
func (f *Fixture) KubeVirtWrites() []string { return kvfake.Writes(f.KubeVirt.Actions()) }

// WaitForKubeVirtWrites waits until the KubeVirt fake recorded exactly
// want: writes a controller sends from its own goroutine (a status
// batcher).
func (f *Fixture) WaitForKubeVirtWrites(want ...string) {
	f.T.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return slices.Equal(f.KubeVirtWrites(), want), nil
	})
	if err != nil {
		f.T.Fatalf("KubeVirt writes %q, want %q", f.KubeVirtWrites(), want)
	}
}

// Events drains the events recorded so far.
func (f *Fixture) Events() []string {
	var out []string
	for {
		select {
		case e := <-f.Recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
