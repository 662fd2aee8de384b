package sharded_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
	"github.com/virtshard/virtshard/shard"
)

// counting declares a controller that counts the VMIs its handler hears
// added and the ranges it forgets.
type counting struct {
	added, forgotten atomic.Int32
}

func (c *counting) declare(*sharded.Env, *sharded.Runtime) (*counting, *sharded.Controller, error) {
	return c, &sharded.Controller{
		Watches: []sharded.Watch{sharded.On(kinds.VMIs, sharded.Events[*virtv1.VirtualMachineInstance]{
			Keys:  sharded.ItsOwnKey[*virtv1.VirtualMachineInstance],
			Added: func(int, string, *virtv1.VirtualMachineInstance) { c.added.Add(1) },
		}, nil)},
		Sync:   func(context.Context, sharded.Item) (time.Duration, error) { return 0, nil },
		Forget: func(int) { c.forgotten.Add(1) },
	}, nil
}

// A range handed off and taken back with its caches kept hears each event
// once: the release removed the handlers its acquisition added.
func TestARangeTakenBackWithItsCachesKeptHearsEachEventOnce(t *testing.T) {
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-a"}}
	f, c := shardedtest.StartController(t, "counting", (&counting{}).declare, shardedtest.Cluster{Objects: []runtime.Object{vmi}})
	rng := f.Ranges.Of(vmi)
	waitFor(t, "the replay of the VMI", func() bool { return c.added.Load() == 1 })

	ctx := context.Background()
	f.Env.Caches.Keep(rng)
	f.Env.Caches.Releasing(ctx, rng, shard.ReasonExpiry)
	if n := c.forgotten.Load(); n != 1 {
		t.Errorf("range forgotten %d times at its release, want once", n)
	}
	if err := f.Env.Caches.Acquired(ctx, rng); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replay to the new handler", func() bool { return c.added.Load() == 2 })

	// A VMI of the same range, added now, is heard by one handler.
	other := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}}
	for i := 0; ; i++ {
		other.UID = types.UID(fmt.Sprintf("uid-b-%d", i))
		if f.Ranges.Of(other) == rng {
			break
		}
	}
	if _, err := f.KubeVirt.VirtualMachineInstances("ns").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new VMI's event", func() bool { return c.added.Load() >= 3 })
	time.Sleep(100 * time.Millisecond) // a second handler, if any, hears it at the same time
	if n := c.added.Load(); n != 3 {
		t.Errorf("%d adds heard, want 3: a handler of the first tenure still hears the range", n)
	}
}

func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return done(), nil
	}); err != nil {
		t.Fatalf("%s within 10 s", what)
	}
}

// A declared OnConfig queues its items when the KubeVirt CR's
// configuration changes, from the moment the controller follows it.
func TestAConfigChangeQueuesTheItemsOnConfigNames(t *testing.T) {
	config := shardedtest.NewChangingConfig(clusterconfig.DefaultConfig("amd64"))
	f, _ := shardedtest.StartController(t, "config", func(*sharded.Env, *sharded.Runtime) (any, *sharded.Controller, error) {
		return nil, &sharded.Controller{
			Watches: []sharded.Watch{sharded.OnConfig(func(*clusterconfig.Config) []sharded.Item {
				return []sharded.Item{{Range: sharded.Cluster, Key: "node-1"}}
			})},
			Sync: func(context.Context, sharded.Item) (time.Duration, error) { return 0, nil },
		}, nil
	}, shardedtest.Cluster{Config: config})
	if n := f.Runtime.Len(); n != 0 {
		t.Fatalf("%d items queued before any change", n)
	}
	config.Set(clusterconfig.DefaultConfig("amd64"))
	if n := f.Runtime.Len(); n != 1 {
		t.Errorf("%d items queued after a change, want the one OnConfig names", n)
	}
}

// A controller that declares an event source records under it, as each of
// KubeVirt's controllers records under its own.
func TestADeclaredEventSourceIsTheControllersRecorder(t *testing.T) {
	var got record.EventRecorder
	f := shardedtest.Start(t, sharded.Declaration{Name: "sourced", EventSource: "virtualmachine-controller",
		New: func(env *sharded.Env, _ *sharded.Runtime) (*sharded.Controller, error) {
			got = env.Recorder
			return &sharded.Controller{Sync: func(context.Context, sharded.Item) (time.Duration, error) { return 0, nil }}, nil
		}}, shardedtest.Cluster{})
	if !slices.Equal(f.EventSources, []string{"virtualmachine-controller"}) || got == nil {
		t.Errorf("event sources asked %v (recorder %v), want virtualmachine-controller's", f.EventSources, got)
	}
}
