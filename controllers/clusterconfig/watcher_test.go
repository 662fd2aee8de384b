package clusterconfig

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// watcherEnv is a Watcher over a fake dynamic client, running until the
// test ends.
type watcherEnv struct {
	t       *testing.T
	client  *dynamicfake.FakeDynamicClient
	watcher *Watcher

	mu      sync.Mutex
	changes []*Config
}

func startWatcher(t *testing.T, objs ...*virtv1.KubeVirt) *watcherEnv {
	t.Helper()
	var initial []k8sruntime.Object
	for _, kv := range objs {
		initial = append(initial, toUnstructured(t, kv))
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(),
		map[schema.GroupVersionResource]string{KubeVirtResource: "KubeVirtList"}, initial...)
	// The fake's watch does not replay what happened before it started:
	// updates must wait for it.
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("kubevirts", func(k8stesting.Action) (bool, watch.Interface, error) {
		once.Do(func() { close(watching) })
		return false, nil, nil
	})
	w, err := NewWatcher(client, Options{Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	env := &watcherEnv{t: t, client: client, watcher: w}
	w.OnChange(func(c *Config) {
		env.mu.Lock()
		defer env.mu.Unlock()
		env.changes = append(env.changes, c)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	env.eventually("the watcher synced and watches", func() bool {
		select {
		case <-watching:
			return w.HasSynced()
		default:
			return false
		}
	})
	return env
}

func toUnstructured(t *testing.T, kv *virtv1.KubeVirt) *unstructured.Unstructured {
	t.Helper()
	m, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(kv)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion("kubevirt.io/v1")
	u.SetKind("KubeVirt")
	return u
}

func (e *watcherEnv) update(kv *virtv1.KubeVirt) {
	e.t.Helper()
	_, err := e.client.Resource(KubeVirtResource).Namespace(kv.Namespace).Update(context.Background(), toUnstructured(e.t, kv), metav1.UpdateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *watcherEnv) changeCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.changes)
}

// eventually waits up to five seconds for cond.
func (e *watcherEnv) eventually(what string, cond func() bool) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		e.t.Fatalf("waiting until %s: %v", what, err)
	}
}

func TestWatcherServesTheDefaultsWithoutAKubeVirtCR(t *testing.T) {
	e := startWatcher(t)
	c := e.watcher.Current()
	expect(t, c.Configuration(), Defaults("amd64"))
	expect(t, c.KubeVirt(), "")
	expect(t, e.changeCount(), 0)
}

func TestWatcherIgnoresACRWithoutPhase(t *testing.T) {
	kv := kubeVirt(virtv1.KubeVirtConfiguration{ImagePullPolicy: "Always"})
	kv.Status.Phase = ""
	e := startWatcher(t, kv)
	expect(t, string(e.watcher.Current().ImagePullPolicy()), "IfNotPresent")
	expect(t, e.watcher.Current().KubeVirt(), "")
}

func TestWatcherAppliesACRUpdateAndTellsCallbacks(t *testing.T) {
	kv := kubeVirt(dev(virtv1.DeveloperConfiguration{MemoryOvercommit: 150}))
	kv.ResourceVersion = "1"
	e := startWatcher(t, kv)
	expect(t, e.watcher.Current().MemoryOvercommit(), 150)
	expect(t, e.watcher.Current().ResourceVersion(), "1")
	before := e.changeCount()

	kv = kv.DeepCopy()
	kv.ResourceVersion = "2"
	kv.Spec.Configuration.DeveloperConfiguration.FeatureGates = []string{"Root"}
	e.update(kv)
	e.eventually("the update is applied", func() bool { return e.watcher.Current().RootEnabled() })
	e.eventually("a callback saw it", func() bool { return e.changeCount() == before+1 })
	e.mu.Lock()
	last := e.changes[len(e.changes)-1]
	e.mu.Unlock()
	if last != e.watcher.Current() {
		t.Errorf("the callback got a configuration other than Current")
	}
	expect(t, last.ResourceVersion(), "2")
	expect(t, last.MemoryOvercommit(), 150)
}

func TestWatcherKeepsTheLastValidConfigurationOfAnInvalidCR(t *testing.T) {
	kv := kubeVirt(virtv1.KubeVirtConfiguration{ImagePullPolicy: "Always"})
	kv.ResourceVersion = "1"
	e := startWatcher(t, kv)
	expect(t, string(e.watcher.Current().ImagePullPolicy()), "Always")

	invalid := kv.DeepCopy()
	invalid.ResourceVersion = "2"
	invalid.Spec.Configuration.ImagePullPolicy = "invalid"
	invalid.Annotations = map[string]string{virtv1.EmulatorThreadCompleteToEvenParity: ""}
	e.update(invalid)
	e.eventually("the CR is rejected", func() bool { return e.watcher.Err() != nil })
	c := e.watcher.Current()
	expect(t, string(c.ImagePullPolicy()), "Always")
	expect(t, c.ResourceVersion(), "1")
	// Annotations come from the current CR, valid or not, as in KubeVirt.
	expect(t, c.EmulatorThreadCompleteToEvenParity(), true)

	fixed := kv.DeepCopy()
	fixed.ResourceVersion = "3"
	fixed.Spec.Configuration.ImagePullPolicy = "Never"
	e.update(fixed)
	e.eventually("the fixed CR is applied", func() bool { return e.watcher.Current().ImagePullPolicy() == "Never" })
	expect(t, e.watcher.Err(), error(nil))
}

func TestWatcherKeepsTheConfigurationWhenTheCRGoesAway(t *testing.T) {
	kv := kubeVirt(virtv1.KubeVirtConfiguration{ImagePullPolicy: "Always"})
	kv.ResourceVersion = "1"
	kv.Annotations = map[string]string{"a": "b"}
	e := startWatcher(t, kv)
	err := e.client.Resource(KubeVirtResource).Namespace("kubevirt").Delete(context.Background(), "kubevirt", metav1.DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.eventually("the CR is gone", func() bool { return e.watcher.Current().KubeVirt() == "" })
	c := e.watcher.Current()
	expect(t, string(c.ImagePullPolicy()), "Always")
	_, ok := c.Annotation("a")
	expect(t, ok, false)
}

func TestWatcherDoesNotCallBackForUpdatesThatChangeNothingEffective(t *testing.T) {
	kv := kubeVirt(virtv1.KubeVirtConfiguration{})
	kv.ResourceVersion = "1"
	e := startWatcher(t, kv)
	before := e.changeCount()

	status := kv.DeepCopy()
	status.ResourceVersion = "2"
	status.Status.ObservedGeneration = ptr64(2)
	e.update(status)
	e.eventually("the new version is seen", func() bool { return e.watcher.Current().ResourceVersion() == "2" })
	expect(t, e.changeCount(), before)
}

func TestSelectKubeVirtPrefersTheOldestLiveCRWithAPhase(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(1000, 0))
	t1 := metav1.NewTime(time.Unix(2000, 0))
	mk := func(name string, created metav1.Time, phase virtv1.KubeVirtPhase, deleting bool) *virtv1.KubeVirt {
		kv := kubeVirt(virtv1.KubeVirtConfiguration{})
		kv.Name, kv.CreationTimestamp, kv.Status.Phase = name, created, phase
		if deleting {
			kv.DeletionTimestamp = &t1
			kv.Finalizers = []string{"x"}
		}
		return kv
	}
	tests := []struct {
		name string
		objs []*virtv1.KubeVirt
		want string
	}{
		{"no CR selects none", nil, ""},
		{"a CR without phase is not selected", []*virtv1.KubeVirt{mk("a", t0, "", false)}, ""},
		{"a CR being deleted is not selected", []*virtv1.KubeVirt{mk("a", t0, virtv1.KubeVirtPhaseDeployed, true)}, ""},
		{"a Deploying CR is selected", []*virtv1.KubeVirt{mk("a", t0, virtv1.KubeVirtPhaseDeploying, false)}, "a"},
		{"the oldest of two CRs is selected", []*virtv1.KubeVirt{mk("new", t1, "Deployed", false), mk("old", t0, "Deployed", false)}, "old"},
		{"CRs created together are ordered by name", []*virtv1.KubeVirt{mk("b", t0, "Deployed", false), mk("a", t0, "Deployed", false)}, "a"},
		{"a CR in another namespace is not selected", []*virtv1.KubeVirt{func() *virtv1.KubeVirt {
			kv := mk("a", t0, "Deployed", false)
			kv.Namespace = "other"
			return kv
		}()}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []any
			for _, kv := range tt.objs {
				objs = append(objs, toUnstructured(t, kv))
			}
			got := ""
			if u := selectKubeVirt(objs, "kubevirt"); u != nil {
				got = u.GetName()
			}
			expect(t, got, tt.want)
		})
	}
}

func ptr64(v int64) *int64 { return &v }

// The workload updater follows the CR's strategy and deployment state:
// their changes call back, even on a CR whose configuration is invalid; the
// outdated count, which the updater itself writes, does not.
func TestWatcherFollowsTheWorkloadUpdateStrategyAndDeployment(t *testing.T) {
	kv := kubeVirt(virtv1.KubeVirtConfiguration{})
	kv.ResourceVersion = "1"
	e := startWatcher(t, kv)
	expect(t, e.watcher.Current().Workloads().Deployed, true)

	counted := kv.DeepCopy()
	counted.ResourceVersion = "2"
	counted.Status.OutdatedVirtualMachineInstanceWorkloads = ptr.To(4)
	before := e.changeCount()
	e.update(counted)
	e.eventually("the count is seen", func() bool {
		n := e.watcher.Current().Workloads().Outdated
		return n != nil && *n == 4
	})
	expect(t, e.changeCount(), before)

	updating := counted.DeepCopy()
	updating.ResourceVersion = "3"
	updating.Status.TargetDeploymentID = "next"
	updating.Spec.WorkloadUpdateStrategy.WorkloadUpdateMethods = []virtv1.WorkloadUpdateMethod{virtv1.WorkloadUpdateMethodEvict}
	updating.Spec.Configuration.ImagePullPolicy = "invalid"
	e.update(updating)
	e.eventually("the update is seen", func() bool { return !e.watcher.Current().Workloads().Deployed })
	expect(t, e.changeCount(), before+1)
	expect(t, e.watcher.Current().Workloads().Strategy.WorkloadUpdateMethods[0], virtv1.WorkloadUpdateMethodEvict)
}
