package shard_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/virtshard/virtshard/shard"
	"github.com/virtshard/virtshard/test/clustertest"
)

// ignoreShardSelector makes the cluster look like a server without the
// ShardedListAndWatch feature: the parameter never reaches it, so it
// returns everything, exactly as an older server ignores an unknown one.
type ignoreShardSelector struct{ next http.RoundTripper }

func (t ignoreShardSelector) RoundTrip(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	if q.Has("shardSelector") {
		r = r.Clone(r.Context())
		q.Del("shardSelector")
		r.URL.RawQuery = q.Encode()
	}
	return t.next.RoundTrip(r)
}

var vmiResource = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}

// informerCase is one resource and selection the range informers are tried with.
type informerCase struct {
	name     string
	resource string
	// create makes an object; it returns its metadata.
	create func(ctx context.Context, ns, name string, label int) (metav1.Object, error)
	lw     func(cfg *rest.Config, ns string) cache.ListerWatcher
	object runtime.Object
	byKey  bool
}

func informerCases(t *testing.T) []informerCase {
	core := kubernetes.NewForConfigOrDie(clustertest.Config(t))
	dyn := dynamic.NewForConfigOrDie(clustertest.Config(t))
	newPod := func(ctx context.Context, ns, name string, label int) (metav1.Object, error) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{shard.LabelRange: strconv.Itoa(label)}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "pause"}}},
		}
		return core.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	}
	podLW := func(cfg *rest.Config, ns string) cache.ListerWatcher {
		return cache.NewListWatchFromClient(kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient(), "pods", ns, fields.Everything())
	}
	return []informerCase{
		{name: "Pods by uid", resource: "pods", create: newPod, lw: podLW, object: &corev1.Pod{}, byKey: true},
		{name: "Pods by range label", resource: "pods", create: newPod, lw: podLW, object: &corev1.Pod{}, byKey: false},
		{
			name: "VMIs by uid", resource: "virtualmachineinstances", byKey: true, object: &unstructured.Unstructured{},
			create: func(ctx context.Context, ns, name string, _ int) (metav1.Object, error) {
				vmi := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
					"metadata": map[string]any{"name": name},
					"spec":     map[string]any{"domain": map[string]any{"devices": map[string]any{}}},
				}}
				return dyn.Resource(vmiResource).Namespace(ns).Create(ctx, vmi, metav1.CreateOptions{})
			},
			lw: func(cfg *rest.Config, ns string) cache.ListerWatcher {
				client := dynamic.NewForConfigOrDie(cfg).Resource(vmiResource).Namespace(ns)
				return &cache.ListWatch{
					ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
						return client.List(ctx, o)
					},
					WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
						return client.Watch(ctx, o)
					},
				}
			},
		},
	}
}

func TestShardedInformerHoldsExactlyTheOwnedObjects(t *testing.T) {
	ranges, err := shard.NewRanges(8, shard.KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	owned := shard.NewSet(8, 1, 2, 5)
	servers := []struct {
		name    string
		filters bool
		config  func(t *testing.T) *rest.Config
	}{
		{"sharding server", true, func(t *testing.T) *rest.Config { return clustertest.Config(t) }},
		{"server without the feature gate", false, func(t *testing.T) *rest.Config { return clustertest.UnshardedConfig(t) }},
		{"selector stripped in transit", false, func(t *testing.T) *rest.Config {
			cfg := clustertest.Config(t)
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return ignoreShardSelector{rt} })
			return cfg
		}},
	}
	for _, server := range servers {
		for _, tc := range informerCases(t) {
			serverFilters := server.filters
			t.Run(tc.name+"/"+server.name, func(t *testing.T) {
				ns := clustertest.Namespace(t)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				cfg := server.config(t)
				by := ranges.ByLabel
				if tc.byKey {
					by = ranges.ByKey
				}
				rangeOf := func(obj metav1.Object) int {
					if tc.byKey {
						return ranges.Of(obj)
					}
					i, _ := ranges.Labelled(obj)
					return i
				}
				mine := func(obj metav1.Object, label int) bool {
					if tc.byKey {
						return owned.Has(ranges.Of(obj))
					}
					return owned.Has(label)
				}

				want := map[string]bool{}
				create := func(i int) (bool, error) {
					label := i % 8
					obj, err := tc.create(ctx, ns, fmt.Sprintf("obj-%03d", i), label)
					if err != nil {
						return false, err
					}
					if mine(obj, label) {
						want[obj.GetName()] = true
						return true, nil
					}
					return false, nil
				}
				// Objects before the informer starts reach it through its
				// initial list, objects after through its watch.
				for i := range 24 {
					if _, err := create(i); err != nil {
						t.Fatal(err)
					}
				}

				// One shared watch serves an informer per owned range, as
				// a replica's caches do.
				metrics := shard.NewMetrics(prometheus.NewRegistry())
				shared := shard.NewSharedWatch(tc.lw(cfg, ns), 8, by, tc.resource, metrics)
				informers := map[int]cache.SharedIndexInformer{}
				for _, i := range owned.List() {
					informer, err := shared.NewInformer(i, tc.object, cache.Indexers{}, shard.TrimForCache)
					if err != nil {
						t.Fatal(err)
					}
					informers[i] = informer
					go informer.RunWithContext(ctx)
					if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
						t.Fatalf("range %d's informer did not sync", i)
					}
				}
				assertRanges(t, informers, want, rangeOf)

				last := ""
				for i := 24; i < 48 || last == ""; i++ {
					in, err := create(i)
					if err != nil {
						t.Fatal(err)
					}
					if in && i >= 47 {
						last = fmt.Sprintf("obj-%03d", i)
					}
				}
				// The watch delivers in order: once the last owned object is
				// in, every earlier event has been handled.
				if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
					for _, informer := range informers {
						if _, ok, _ := informer.GetStore().GetByKey(ns + "/" + last); ok {
							return true, nil
						}
					}
					return false, nil
				}); err != nil {
					t.Fatalf("%s never reached an informer", last)
				}
				assertRanges(t, informers, want, rangeOf)

				dropped := metrics.FilterDropped(tc.resource)
				switch {
				case serverFilters && dropped != 0:
					t.Errorf("the guard dropped %v objects although the server filters", dropped)
				case !serverFilters && tc.byKey && dropped == 0:
					t.Error("the server ignored the shard selector but the guard dropped nothing")
				}
				t.Logf("guard dropped %v objects", dropped)
			})
		}
	}
}

// assertRanges checks that the range informers together hold exactly want,
// each object in its own range's informer only, without managed fields.
func assertRanges(t *testing.T, informers map[int]cache.SharedIndexInformer, want map[string]bool, rangeOf func(metav1.Object) int) {
	t.Helper()
	got := map[string]bool{}
	for i, informer := range informers {
		for _, obj := range informer.GetStore().List() {
			m := obj.(metav1.Object)
			if got[m.GetName()] {
				t.Errorf("%s is in two ranges' informers", m.GetName())
			}
			got[m.GetName()] = true
			if r := rangeOf(m); r != i {
				t.Errorf("%s of range %d is in range %d's informer", m.GetName(), r, i)
			}
			if len(m.GetManagedFields()) != 0 {
				t.Errorf("%s kept its managed fields in the cache", m.GetName())
			}
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("informers hold %v, want exactly %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
}
