package cluster_test

// These tests pin how kube-apiserver v1.37.2 serves KEP-5866 sharded LIST and
// WATCH (feature gate ShardedListAndWatch) for a built-in resource and for a
// custom resource, so that a behaviour change in a later server is noticed.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/test/clustertest"
)

// lowerHalf is the hash range [0, 2^63) of object.metadata.uid.
var lowerHalf = sharding.ShardRangeRequirement{Key: "object.metadata.uid", Start: "0x0000000000000000", End: "0x8000000000000000"}

// shardedResource abstracts the calls the tests make, for Pods and VMIs alike.
type shardedResource struct {
	name string
	// echoesShardInfo is whether the server sets ListMeta.ShardInfo.
	echoesShardInfo bool
	create          func(ctx context.Context, ns, name string) (metav1.Object, error)
	list            func(ctx context.Context, ns string, opts metav1.ListOptions) (metav1.ListInterface, []metav1.Object, error)
	watch           func(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error)
}

func shardedResources(t *testing.T) []shardedResource {
	cfg := clustertest.Config(t)
	core := kubernetes.NewForConfigOrDie(cfg)
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return []shardedResource{
		{
			name:            "Pods",
			echoesShardInfo: true,
			create: func(ctx context.Context, ns, name string) (metav1.Object, error) {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "pause"}}},
				}
				return core.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			},
			list: func(ctx context.Context, ns string, opts metav1.ListOptions) (metav1.ListInterface, []metav1.Object, error) {
				l, err := core.CoreV1().Pods(ns).List(ctx, opts)
				if err != nil {
					return nil, nil, err
				}
				return l, objects(l.Items), nil
			},
			watch: func(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
				return core.CoreV1().Pods(ns).Watch(ctx, opts)
			},
		},
		{
			name:            "VirtualMachineInstances",
			echoesShardInfo: false,
			create: func(ctx context.Context, ns, name string) (metav1.Object, error) {
				return kv.VirtualMachineInstances(ns).Create(ctx, minimalVMI(name), metav1.CreateOptions{})
			},
			list: func(ctx context.Context, ns string, opts metav1.ListOptions) (metav1.ListInterface, []metav1.Object, error) {
				l, err := kv.VirtualMachineInstances(ns).List(ctx, opts)
				if err != nil {
					return nil, nil, err
				}
				return l, objects(l.Items), nil
			},
			watch: func(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
				return kv.VirtualMachineInstances(ns).Watch(ctx, opts)
			},
		},
	}
}

func objects[T any, PT interface {
	*T
	metav1.Object
}](items []T) []metav1.Object {
	out := make([]metav1.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// minimalVMI is the smallest VMI KubeVirt's CRD schema accepts.
func minimalVMI(name string) *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: virtv1.VirtualMachineInstanceSpec{
			Domain: virtv1.DomainSpec{
				Resources: virtv1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
			},
		},
	}
}

func inRange(t *testing.T, obj metav1.Object, req sharding.ShardRangeRequirement) bool {
	t.Helper()
	ok, err := sharding.NewSelector(req).Matches(obj.(runtime.Object))
	if err != nil {
		t.Fatalf("match %s: %v", obj.GetName(), err)
	}
	return ok
}

func names(objs []metav1.Object) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.GetName()
	}
	slices.Sort(out)
	return out
}

// createUntilInRange creates at least n objects and keeps going until the
// last one created hashes into req, so that a filtered watch delivering that
// last object proves it has delivered every earlier event too.
func createUntilInRange(t *testing.T, ctx context.Context, r shardedResource, ns string, n int, req sharding.ShardRangeRequirement) []metav1.Object {
	t.Helper()
	var created []metav1.Object
	for i := 0; i < n || !inRange(t, created[len(created)-1], req); i++ {
		obj, err := r.create(ctx, ns, fmt.Sprintf("obj-%03d", i))
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		created = append(created, obj)
	}
	return created
}

func TestShardedListReturnsExactlyTheObjectsInRange(t *testing.T) {
	for _, r := range shardedResources(t) {
		t.Run(r.name, func(t *testing.T) {
			ctx := context.Background()
			ns := clustertest.Namespace(t)
			created := createUntilInRange(t, ctx, r, ns, 40, lowerHalf)

			var want []metav1.Object
			for _, obj := range created {
				if inRange(t, obj, lowerHalf) {
					want = append(want, obj)
				}
			}
			if len(want) == 0 || len(want) == len(created) {
				t.Fatalf("%d of %d objects in range: the test needs both sides", len(want), len(created))
			}

			selector := sharding.NewSelector(lowerHalf).String()
			list, got, err := r.list(ctx, ns, metav1.ListOptions{ShardSelector: selector})
			if err != nil {
				t.Fatalf("sharded list: %v", err)
			}
			if !slices.Equal(names(got), names(want)) {
				t.Errorf("sharded list returned %v, want %v", names(got), names(want))
			}

			info := list.(interface{ GetShardInfo() *metav1.ShardInfo }).GetShardInfo()
			switch {
			case r.echoesShardInfo && (info == nil || info.Selector != selector):
				t.Errorf("ListMeta.ShardInfo = %+v, want the selector %q echoed", info, selector)
			case !r.echoesShardInfo && info != nil:
				t.Errorf("ListMeta.ShardInfo = %+v: the server now echoes it for custom resources; "+
					"update this test and the client-side guard's assumptions", info)
			}
		})
	}
}

func TestShardedWatchDeliversExactlyTheObjectsInRange(t *testing.T) {
	for _, r := range shardedResources(t) {
		t.Run(r.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ns := clustertest.Namespace(t)

			// Start the watch at the namespace's current (empty) state.
			list, _, err := r.list(ctx, ns, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			w, err := r.watch(ctx, ns, metav1.ListOptions{
				ShardSelector:   sharding.NewSelector(lowerHalf).String(),
				ResourceVersion: list.GetResourceVersion(),
			})
			if err != nil {
				t.Fatalf("sharded watch: %v", err)
			}
			defer w.Stop()

			created := createUntilInRange(t, ctx, r, ns, 40, lowerHalf)
			want := map[string]bool{}
			for _, obj := range created {
				if inRange(t, obj, lowerHalf) {
					want[obj.GetName()] = true
				}
			}
			last := created[len(created)-1].GetName()

			got := map[string]bool{}
			for !got[last] {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						t.Fatalf("watch closed after %d events", len(got))
					}
					// Pods may also be MODIFIED (the scheduler reports them
					// unschedulable); nothing is deleted here.
					obj, ok := ev.Object.(metav1.Object)
					if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
						t.Fatalf("unexpected %s event of %T", ev.Type, ev.Object)
					}
					got[obj.GetName()] = true
				case <-ctx.Done():
					t.Fatalf("watch delivered %d objects and not %s before the deadline", len(got), last)
				}
			}
			if !maps.Equal(got, want) {
				t.Errorf("sharded watch delivered %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			}
		})
	}
}
