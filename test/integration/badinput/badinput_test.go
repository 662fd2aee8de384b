// Package badinput_test feeds three replicas malformed and hostile objects,
// side by side with good VMIs: each bad object gets a clear condition and
// event (or is refused by the API server, or is harmless and runs), no
// replica panics or loops hot, and the good VMIs keep flowing.
package badinput_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	migrationsv1 "kubevirt.io/api/migrations/v1alpha1"
	poolv1 "kubevirt.io/api/pool/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/virtshard/virtshard/bench/cdi"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/controllers/pool"
	"github.com/virtshard/virtshard/controllers/replicaset"
	vmctl "github.com/virtshard/virtshard/controllers/vm"
	"github.com/virtshard/virtshard/controllers/vmi"
	"github.com/virtshard/virtshard/shard"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

type env struct {
	t        *testing.T
	ns       string
	kube     kubernetes.Interface
	kv       *kubevirt.Clientset
	replicas map[string]*controllertest.Replica
}

// A case creates its objects and returns a check, polled until it holds.
// The check returns "" when it holds, else what it is waiting for. A nil
// check means the API server refused the object: nothing to watch.
type badCase struct {
	name   string
	create func(e *env) (check func(ctx context.Context) string)
}

const foreignFinalizer = "example.com/keep"

func TestBadInput(t *testing.T) {
	ns, kube, kv := controllertest.Clients(t)
	e := &env{t: t, ns: ns, kube: kube, kv: kv}
	logs := captureV0Logs(t)
	e.replicas = controllertest.StartN(t, e.ns, 3, nil)

	// Good VMIs created alongside the bad ones must all run.
	const good = 10
	for i := range good {
		e.createVMI(workload.VMI(fmt.Sprintf("good-%d", i)))
	}

	var wg sync.WaitGroup
	for _, c := range cases() {
		wg.Go(func() {
			t.Run(c.name, func(t *testing.T) {
				check := c.create(&env{t: t, ns: e.ns, kube: e.kube, kv: e.kv})
				if check == nil {
					return
				}
				var waiting string
				err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
					got := check(ctx)
					if ctx.Err() == nil {
						// A check cut short by the deadline must not hide
						// what the one before it was waiting for.
						waiting = got
					}
					return got == "", nil
				})
				if err != nil {
					t.Errorf("after 2 minutes: %s", waiting)
				}
			})
		})
	}
	wg.Wait()

	for i := range good {
		e.waitPhase(fmt.Sprintf("good-%d", i), virtv1.Running)
	}

	// No hot loop: once everything settled, the queues barely move.
	before := e.queueTotals()
	if before["adds"] == 0 {
		t.Fatal("no workqueue adds counted at all: the hot-loop check would prove nothing")
	}
	nodes := e.nodeVersions()
	time.Sleep(20 * time.Second)
	after := e.queueTotals()
	// A change of a node (its status, which the kubelet's stand-in renews,
	// or the virt-handler heartbeat) is one every replica's node and
	// topology controllers look at, and the node controller then looks
	// again when the heartbeat would go stale: up to two requeues per node
	// change per replica, whichever 20 s the quiet falls on. Those are not
	// a loop; anything beyond them is.
	changed := 0
	for node, version := range e.nodeVersions() {
		if version != nodes[node] {
			changed++
		}
	}
	explained := float64(2 * changed * len(e.replicas))
	if adds := after["adds"] - before["adds"] - explained; adds > 200 {
		t.Errorf("%v items were queued in 20 s of quiet beyond %v node changes: a hot loop", adds, changed)
	}
	if retries := after["retries"] - before["retries"] - explained; retries > 20 {
		t.Errorf("%v retries in 20 s of quiet beyond %v node changes: a hot loop", retries, changed)
	}
	t.Logf("%v adds and %v retries while the cases ran; in 20 s of quiet after: %v adds, %v retries (3 replicas, %d nodes changed)",
		before["adds"], before["retries"], after["adds"]-before["adds"], after["retries"]-before["retries"], changed)
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if q, ok := strings.CutPrefix(k, "adds "); ok && after[k] > before[k] {
			t.Logf("  queue %s: %v adds in the quiet", q, after[k]-before[k])
		}
	}

	checkV0Logs(t, logs, clustertest.Config(t))
}

// secret is carried by every object the cases create (an annotation, and a
// cloud-init password in one case): object contents that must never reach
// the replicas' V(0) logs, which carry names only.
var secret = fmt.Sprintf("s3cr3t-%d", time.Now().UnixNano())

func withSecret(meta *metav1.ObjectMeta) {
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations["example.com/token"] = secret
}

// captureV0Logs tees what the in-process replicas log at verbosity 0.
func captureV0Logs(t *testing.T) *syncBuffer {
	var flags flag.FlagSet
	klog.InitFlags(&flags)
	if err := flags.Set("v", "0"); err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	klog.LogToStderr(false)
	klog.SetOutput(io.MultiWriter(os.Stderr, buf))
	t.Cleanup(func() {
		klog.Flush()
		klog.LogToStderr(true)
	})
	return buf
}

// checkV0Logs fails on object contents or the replicas' credentials in the
// V(0) logs, after checking that the capture saw the replicas log at all.
func checkV0Logs(t *testing.T, captured *syncBuffer, cfg *rest.Config) {
	klog.Flush()
	logs := captured.String()
	if !strings.Contains(logs, `"Replica started"`) {
		t.Fatalf("captured no replica logs at V(0) (%d bytes): the log check would prove nothing", len(logs))
	}
	forbidden := map[string]string{"an object's annotation or cloud-init password": secret}
	if cfg.BearerToken != "" {
		forbidden["the bearer token"] = cfg.BearerToken
	}
	key := cfg.KeyData
	if len(key) == 0 && cfg.KeyFile != "" {
		var err error
		if key, err = os.ReadFile(cfg.KeyFile); err != nil {
			t.Fatal(err)
		}
	}
	if lines := strings.Split(string(key), "\n"); len(lines) > 2 {
		forbidden["the client key"] = lines[1] // a line of the key's base64 body
	}
	for what, value := range forbidden {
		if strings.Contains(logs, value) {
			t.Errorf("the replicas' V(0) logs carry %s", what)
		}
	}
	t.Logf("V(0) logs: %d lines, %d bytes, checked for %d forbidden values", strings.Count(logs, "\n"), len(logs), len(forbidden))
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func cases() []badCase {
	memory := func(q string) func(*virtv1.VirtualMachineInstance) {
		return func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(q)}
		}
	}
	iface := func(name string) virtv1.Interface {
		return virtv1.Interface{Name: name, InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}}}
	}
	pod := func(name string) virtv1.Network {
		return virtv1.Network{Name: name, NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}
	}
	networks := func(ifaces []virtv1.Interface, nets []virtv1.Network) func(*virtv1.VirtualMachineInstance) {
		return func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces, v.Spec.Networks = ifaces, nets
		}
	}
	invalidNetwork := func(name string, mutate func(*virtv1.VirtualMachineInstance)) badCase {
		return badCase{name, func(e *env) func(context.Context) string {
			return e.blockedVMI(name, mutate, vmi.ReasonInvalidNetwork)
		}}
	}
	invalidSpec := func(name string, mutate func(*virtv1.VirtualMachineInstance)) badCase {
		return badCase{name, func(e *env) func(context.Context) string {
			return e.blockedVMI(name, mutate, vmi.ReasonInvalidSpec)
		}}
	}
	return []badCase{
		invalidSpec("no-memory", func(v *virtv1.VirtualMachineInstance) { v.Spec.Domain.Resources = virtv1.ResourceRequirements{} }),
		invalidSpec("negative-memory", memory("-1Mi")),
		invalidSpec("zero-memory", memory("0")),
		invalidSpec("memory-below-minimum", memory("512k")),
		invalidSpec("absurd-memory", memory("1E3000")),
		invalidSpec("memory-beyond-64-bits", memory("16Ei")),
		invalidSpec("volume-without-source", func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Volumes = []virtv1.Volume{{Name: "disk"}}
		}),
		{"unknown-volume-type", func(e *env) func(context.Context) string {
			// A volume type this API version does not know: the API server
			// prunes it, and the volume arrives with no source.
			v := workload.VMI("unknown-volume-type")
			v.Namespace = e.ns
			raw := fmt.Sprintf(`{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":%q,"namespace":%q},`+
				`"spec":{"domain":{"devices":{},"resources":{"requests":{"memory":"64Mi"}}},`+
				`"tolerations":[{"key":"kwok.x-k8s.io/node","operator":"Exists","effect":"NoSchedule"}],`+
				`"volumes":[{"name":"disk","nfs":{"server":"x","path":"/"}}]}}`, v.Name, e.ns)
			err := e.kv.RESTClient().Post().AbsPath("/apis/kubevirt.io/v1/namespaces", e.ns, "virtualmachineinstances").
				Body([]byte(raw)).Do(context.Background()).Error()
			if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
				e.t.Logf("refused by the API server: %v", err)
				return nil
			} else if err != nil {
				e.t.Fatal(err)
			}
			return e.blocked(v.Name, vmi.ReasonInvalidSpec)
		}},
		invalidNetwork("interface-without-network", networks([]virtv1.Interface{iface("default"), iface("eth1")}, []virtv1.Network{pod("default")})),
		invalidNetwork("network-without-interface", networks([]virtv1.Interface{iface("default")},
			[]virtv1.Network{pod("default"), {Name: "blue", NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{NetworkName: "blue"}}}})),
		invalidNetwork("duplicate-interface-names", networks([]virtv1.Interface{iface("default"), iface("default")}, []virtv1.Network{pod("default")})),
		invalidNetwork("two-pod-networks", networks([]virtv1.Interface{iface("a"), iface("b")}, []virtv1.Network{pod("a"), pod("b")})),
		invalidNetwork("multus-without-network-name", networks([]virtv1.Interface{iface("default"), iface("m")},
			[]virtv1.Network{pod("default"), {Name: "m", NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{}}}})),
		{"name-at-the-length-limit", func(e *env) func(context.Context) string {
			name := strings.Repeat("n", 253)
			e.createVMI(workload.VMI(name))
			return e.running(name)
		}},
		{"foreign-finalizer", func(e *env) func(context.Context) string {
			v := workload.VMI("foreign-finalizer")
			v.Finalizers = []string{foreignFinalizer}
			e.createVMI(v)
			e.waitPhase(v.Name, virtv1.Running)
			if err := e.kv.VirtualMachineInstances(e.ns).Delete(context.Background(), v.Name, metav1.DeleteOptions{}); err != nil {
				e.t.Fatal(err)
			}
			e.t.Cleanup(func() { e.removeFinalizers(v.Name) })
			// Ours is removed and the pod deleted; the foreign one is left.
			return func(ctx context.Context) string {
				got, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, v.Name, metav1.GetOptions{})
				if err != nil {
					return fmt.Sprintf("VMI: %v (it must wait for the foreign finalizer)", err)
				}
				if !slices.Equal(got.Finalizers, []string{foreignFinalizer}) {
					return fmt.Sprintf("finalizers %v, want only %s", got.Finalizers, foreignFinalizer)
				}
				if n := e.launcherPods(ctx, got.UID); n != 0 {
					return fmt.Sprintf("%d launcher pods left", n)
				}
				return ""
			}
		}},
		{"launcher-pod-range-label-removed", func(e *env) func(context.Context) string {
			return e.editLauncherPod("pod-label-removed", `{"metadata":{"labels":{"virtshard.io/range":null}}}`)
		}},
		{"launcher-pod-range-label-changed", func(e *env) func(context.Context) string {
			return e.editLauncherPod("pod-label-changed", `{"metadata":{"labels":{"virtshard.io/range":"63000"}}}`)
		}},
		{"credentials-in-cloud-init", func(e *env) func(context.Context) string {
			// Harmless to the controllers; the secret must stay out of their logs.
			v := workload.VMI("cloud-init-secret")
			for _, vol := range v.Spec.Volumes {
				if vol.CloudInitNoCloud != nil {
					vol.CloudInitNoCloud.UserData = "#cloud-config\npassword: " + secret + "\n"
				}
			}
			e.createVMI(v)
			return e.running(v.Name)
		}},
		{"vmi-range-label-garbage", func(e *env) func(context.Context) string {
			v := workload.VMI("range-label-garbage")
			v.Labels[shard.LabelRange] = "banana"
			e.createVMI(v)
			return e.running(v.Name)
		}},
		{"vmi-range-label-other-range", func(e *env) func(context.Context) string {
			v := workload.VMI("range-label-other")
			v.Labels[shard.LabelRange] = "7"
			e.createVMI(v)
			return e.running(v.Name)
		}},
		{"vm-template-changes-mid-start", func(e *env) func(context.Context) string {
			vm := e.createVM("template-changes", virtv1.RunStrategyAlways)
			patch := `{"spec":{"template":{"spec":{"domain":{"resources":{"requests":{"memory":"96Mi"}}}}}}}`
			if _, err := e.kv.VirtualMachines(e.ns).Patch(context.Background(), vm.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				e.t.Fatal(err)
			}
			running := e.running(vm.Name)
			return func(ctx context.Context) string {
				if w := running(ctx); w != "" {
					return w
				}
				list, err := e.kv.VirtualMachineInstances(e.ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return err.Error()
				}
				n := 0
				for _, v := range list.Items {
					if metav1.IsControlledBy(&v, vm) {
						n++
					}
				}
				if n != 1 {
					return fmt.Sprintf("%d VMIs of the VM, want 1", n)
				}
				return ""
			}
		}},
		{"vm-invalid-run-strategy", func(e *env) func(context.Context) string {
			vm, err := e.tryCreateVM("bad-strategy", "Sometimes")
			if apierrors.IsInvalid(err) {
				e.t.Logf("refused by the API server: %v", err)
				return nil
			} else if err != nil {
				e.t.Fatal(err)
			}
			// KubeVirt's syncRunStrategy reports an unknown strategy so.
			return e.vmFailure(vm.Name, "FailedCreate")
		}},
		{"replica-set-selector-misses-its-template", func(e *env) func(context.Context) string {
			// virt-api refuses it; a cluster without its webhook does not.
			set := &virtv1.VirtualMachineInstanceReplicaSet{
				ObjectMeta: metav1.ObjectMeta{Name: "set-misses"},
				Spec: virtv1.VirtualMachineInstanceReplicaSetSpec{
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
					Template: &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
						Spec: workload.AsWritten("member").Spec},
				},
			}
			if _, err := e.kv.ReplicaSets(e.ns).Create(context.Background(), set, metav1.CreateOptions{}); err != nil {
				e.t.Fatal(err)
			}
			return func(ctx context.Context) string {
				got, err := e.kv.ReplicaSets(e.ns).Get(ctx, set.Name, metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				if !slices.ContainsFunc(got.Status.Conditions, func(c virtv1.VirtualMachineInstanceReplicaSetCondition) bool {
					return c.Type == virtv1.VirtualMachineInstanceReplicaSetReplicaFailure && c.Reason == replicaset.ReasonInvalidSpec
				}) {
					return fmt.Sprintf("no ReplicaFailure %s: %+v", replicaset.ReasonInvalidSpec, got.Status.Conditions)
				}
				if !e.hasEvent(ctx, set.Name, replicaset.ReasonInvalidSpec) {
					return "no event " + replicaset.ReasonInvalidSpec
				}
				if vmis, err := e.kv.VirtualMachineInstances(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"}); err != nil || len(vmis.Items) != 0 {
					return fmt.Sprintf("members of an invalid set: %v", err)
				}
				return ""
			}
		}},
		{"pool-selector-misses-its-template", func(e *env) func(context.Context) string {
			// virt-api refuses it; a cluster without its webhook does not.
			p := &poolv1.VirtualMachinePool{
				ObjectMeta: metav1.ObjectMeta{Name: "pool-misses"},
				Spec: poolv1.VirtualMachinePoolSpec{
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
					VirtualMachineTemplate: &poolv1.VirtualMachineTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web-pool"}},
						Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyHalted),
							Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: workload.AsWritten("member").Spec}}},
				},
			}
			if _, err := e.kv.Pools(e.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				e.t.Fatal(err)
			}
			return func(ctx context.Context) string {
				got, err := e.kv.Pools(e.ns).Get(ctx, p.Name, metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				if !slices.ContainsFunc(got.Status.Conditions, func(c poolv1.VirtualMachinePoolCondition) bool {
					return c.Type == poolv1.VirtualMachinePoolReplicaFailure && c.Reason == pool.ReasonInvalidSpec
				}) {
					return fmt.Sprintf("no ReplicaFailure %s: %+v", pool.ReasonInvalidSpec, got.Status.Conditions)
				}
				if !e.hasEvent(ctx, p.Name, pool.ReasonInvalidSpec) {
					return "no event " + pool.ReasonInvalidSpec
				}
				if vms, err := e.kv.VirtualMachines(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web-pool"}); err != nil || len(vms.Items) != 0 {
					return fmt.Sprintf("VMs of an invalid pool: %v", err)
				}
				return ""
			}
		}},
		{"pool-of-negative-replicas", func(e *env) func(context.Context) string {
			labels := map[string]string{"app": "negative-pool"}
			p := &poolv1.VirtualMachinePool{
				ObjectMeta: metav1.ObjectMeta{Name: "pool-negative"},
				Spec: poolv1.VirtualMachinePoolSpec{Replicas: ptr.To[int32](-1), Selector: &metav1.LabelSelector{MatchLabels: labels},
					VirtualMachineTemplate: &poolv1.VirtualMachineTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyHalted),
							Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: workload.AsWritten("member").Spec}}},
				},
			}
			_, err := e.kv.Pools(e.ns).Create(context.Background(), p, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				e.t.Fatalf("a pool of -1 replicas: %v, want it refused by the API server (the CRD's minimum 0)", err)
			}
			e.t.Logf("refused by the API server: %v", err)
			return nil
		}},
		{"vm-clones-a-disk-it-may-not-read", func(e *env) func(context.Context) string {
			// A template cloning another namespace's claim: the VM's service
			// account may not, so no DataVolume is made (CDI's own check).
			vm := &virtv1.VirtualMachine{
				ObjectMeta: metav1.ObjectMeta{Name: "cloner"},
				Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyAlways),
					Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: workload.AsWritten("cloner").Spec},
					DataVolumeTemplates: []virtv1.DataVolumeTemplateSpec{{ObjectMeta: metav1.ObjectMeta{Name: "cloner-root"},
						Spec: cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "kube-system", Name: "their-disk"}},
							Storage: &cdiv1.StorageSpec{}}}}},
			}
			if _, err := e.kv.VirtualMachines(e.ns).Create(context.Background(), vm, metav1.CreateOptions{}); err != nil {
				e.t.Fatal(err)
			}
			dvs := dynamic.NewForConfigOrDie(clustertest.Config(e.t)).Resource(cdi.DataVolumes).Namespace(e.ns)
			return func(ctx context.Context) string {
				// The condition only: KubeVirt's event is the reason's below.
				got, err := e.kv.VirtualMachines(e.ns).Get(ctx, vm.Name, metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				if !slices.ContainsFunc(got.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
					return c.Type == virtv1.VirtualMachineFailure && c.Reason == "FailedCreate" && strings.Contains(c.Message, "not authorized")
				}) {
					return fmt.Sprintf("no Failure condition FailedCreate saying why: %+v", got.Status.Conditions)
				}
				if !e.hasEvent(ctx, vm.Name, vmctl.ReasonUnauthorizedDataVolumeCreate) {
					return "no event " + vmctl.ReasonUnauthorizedDataVolumeCreate
				}
				if _, err := dvs.Get(ctx, "cloner-root", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Sprintf("the unauthorized clone's DataVolume: %v", err)
				}
				return ""
			}
		}},
		{"vm-names-a-missing-instancetype", func(e *env) func(context.Context) string {
			vm := typedVM("untyped", "no-such-type")
			if _, err := e.kv.VirtualMachines(e.ns).Create(context.Background(), vm, metav1.CreateOptions{}); err != nil {
				e.t.Fatal(err)
			}
			return func(ctx context.Context) string {
				// KubeVirt's FailedFindInstancetype: a condition, no event.
				return e.vmFailureSaying(ctx, vm.Name, "FailedFindInstancetype", `"no-such-type" not found`)
			}
		}},
		{"vm-template-conflicts-with-its-instancetype", func(e *env) func(context.Context) string {
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "instancetype.kubevirt.io/v1beta1",
				"kind": "VirtualMachineInstancetype", "metadata": map[string]any{"name": "fixed", "annotations": map[string]any{"example.com/token": secret}},
				"spec": map[string]any{"cpu": map[string]any{"guest": int64(2)}, "memory": map[string]any{"guest": "64Mi"}}}}
			if _, err := dynamic.NewForConfigOrDie(clustertest.Config(e.t)).Resource(caches.InstancetypeGVR).Namespace(e.ns).
				Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
				e.t.Fatal(err)
			}
			vm := typedVM("conflicted", "fixed")
			vm.Spec.Template.Spec.Domain.CPU = &virtv1.CPU{Sockets: 4}
			if _, err := e.kv.VirtualMachines(e.ns).Create(context.Background(), vm, metav1.CreateOptions{}); err != nil {
				e.t.Fatal(err)
			}
			return func(ctx context.Context) string {
				if msg := e.vmFailureSaying(ctx, vm.Name, "FailedCreate", "spec.template.spec.domain.cpu.sockets conflicts with selected instance type"); msg != "" {
					return msg
				}
				if !e.hasEvent(ctx, vm.Name, "FailedCreate") {
					return "no event FailedCreate"
				}
				return ""
			}
		}},
		{"vm-name-taken-by-foreign-vmi", func(e *env) func(context.Context) string {
			// Controlled by another owner, a real one that the garbage
			// collector keeps: an orphan would be adopted, as KubeVirt does.
			owner, err := e.kube.CoreV1().ConfigMaps(e.ns).Create(context.Background(),
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "taken-owner"}}, metav1.CreateOptions{})
			if err != nil {
				e.t.Fatal(err)
			}
			taken := workload.VMI("taken")
			taken.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}
			e.createVMI(taken)
			vm := e.createVM("taken", virtv1.RunStrategyAlways)
			return e.vmFailure(vm.Name, "FailedCreate")
		}},
		{"migration-of-missing-vmi", func(e *env) func(context.Context) string {
			return e.failedMigration("no-such-vmi", "migrate-missing", migration.ReasonVMINotFound)
		}},
		{"migration-of-vmi-not-running", func(e *env) func(context.Context) string {
			// A VMI that cannot run (no memory) stays Pending.
			v := workload.Bare("never-runs")
			v.Spec.Domain.Resources = virtv1.ResourceRequirements{}
			e.createVMI(v)
			if w := e.blocked(v.Name, vmi.ReasonInvalidSpec); w != nil {
				if err := e.poll(w); err != nil {
					e.t.Fatal(err)
				}
			}
			return e.failedMigration(v.Name, "migrate-not-running", migration.ReasonVMINotRunning)
		}},
		{"migration-policy-selecting-nothing", func(e *env) func(context.Context) string {
			// A policy no VMI matches: migrations go on with the KubeVirt
			// CR's configuration and name no policy.
			p := &migrationsv1.MigrationPolicy{ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-nothing", Annotations: map[string]string{"example.com/token": secret}},
				Spec: migrationsv1.MigrationPolicySpec{Selectors: &migrationsv1.Selectors{
					VirtualMachineInstanceSelector: migrationsv1.LabelSelector{"no-vmi-has": "this-label"}},
					BandwidthPerMigration: ptr.To(resource.MustParse("1Mi"))}}
			if _, err := e.kv.MigrationPolicies().Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				e.t.Fatal(err)
			}
			e.t.Cleanup(func() { _ = e.kv.MigrationPolicies().Delete(context.Background(), p.Name, metav1.DeleteOptions{}) })
			v := workload.VMI("unpoliced")
			e.createVMI(v)
			e.waitPhase(v.Name, virtv1.Running)
			e.createMigration("unpoliced-migration", v.Name)
			return func(ctx context.Context) string {
				m, err := e.kv.Migrations(e.ns).Get(ctx, "unpoliced-migration", metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				if m.Status.Phase != virtv1.MigrationSucceeded {
					return fmt.Sprintf("migration is %q", m.Status.Phase)
				}
				got, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, v.Name, metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				if ms := got.Status.MigrationState; ms == nil || ms.MigrationPolicyName != nil || ms.MigrationConfiguration == nil ||
					ms.MigrationConfiguration.BandwidthPerMigration == nil || ms.MigrationConfiguration.BandwidthPerMigration.Cmp(resource.MustParse("1Mi")) == 0 {
					return fmt.Sprintf("migration state %+v: want the CR's configuration and no policy", ms)
				}
				return ""
			}
		}},
		{"live-update-beyond-max-sockets", func(e *env) func(context.Context) string {
			vm := e.createVM("too-many-sockets", virtv1.RunStrategyAlways)
			if err := e.poll(e.running(vm.Name)); err != nil {
				e.t.Fatal(err)
			}
			// KubeVirt caps a VMI at 4 × its sockets at start (maxSockets).
			patch := []byte(`{"spec":{"template":{"spec":{"domain":{"cpu":{"sockets":64}}}}}}`)
			if _, err := e.kv.VirtualMachines(e.ns).Patch(context.Background(), vm.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				e.t.Fatal(err)
			}
			return func(ctx context.Context) string {
				if w := e.vmConditionSaying(ctx, vm.Name, virtv1.VirtualMachineRestartRequired,
					"CPU sockets updated in template spec to a value higher than what's available"); w != "" {
					return w
				}
				v, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, vm.Name, metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				if v.Status.Phase != virtv1.Running || (v.Spec.Domain.CPU != nil && v.Spec.Domain.CPU.Sockets > v.Spec.Domain.CPU.MaxSockets) {
					return fmt.Sprintf("VMI %s with CPU %+v: want it Running as it was", v.Status.Phase, v.Spec.Domain.CPU)
				}
				return ""
			}
		}},
		{"volume-move-of-a-shareable-disk", func(e *env) func(context.Context) string {
			// KubeVirt's ValidateVolumes: a shareable disk cannot move with
			// a migration; the VM asks for a restart and the VMI keeps its
			// claim.
			vm := e.createVolumeVM("shared-mover", virtv1.UpdateVolumesStrategyMigration, true)
			e.moveVolume(vm, `{"name":"data","persistentVolumeClaim":{"claimName":"shared-mover-new"}}`)
			return func(ctx context.Context) string {
				if w := e.vmConditionSaying(ctx, vm.Name, virtv1.VirtualMachineRestartRequired, "invalid volumes to update with migration: shareable: [data]"); w != "" {
					return w
				}
				return e.volumeKept(ctx, vm.Name)
			}
		}},
		{"volume-move-to-a-missing-datavolume", func(e *env) func(context.Context) string {
			// The destination does not exist: the VMI says so (VolumesChange
			// False, as KubeVirt's handleVolumeUpdateRequest) and keeps its
			// claim; nothing migrates.
			vm := e.createVolumeVM("lost-mover", virtv1.UpdateVolumesStrategyMigration, false)
			e.moveVolume(vm, `{"name":"data","dataVolume":{"name":"no-such-datavolume"}}`)
			return func(ctx context.Context) string {
				v, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, vm.Name, metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				if !slices.ContainsFunc(v.Status.Conditions, func(c virtv1.VirtualMachineInstanceCondition) bool {
					return c.Type == virtv1.VirtualMachineInstanceVolumesChange && c.Status == corev1.ConditionFalse &&
						strings.Contains(c.Message, "One of the destination volumes doesn't exist")
				}) {
					return fmt.Sprintf("no VolumesChange=False saying the destination is missing: %+v", v.Status.Conditions)
				}
				return e.volumeKept(ctx, vm.Name)
			}
		}},
		{"volume-update-strategy-unknown", func(e *env) func(context.Context) string {
			// virt-api refuses it; a cluster without its webhook does not.
			// The VM runs; a volume change is refused with KubeVirt's error.
			vm := e.createVolumeVM("teleporter", "Teleport", false)
			e.moveVolume(vm, `{"name":"data","persistentVolumeClaim":{"claimName":"teleporter-new"}}`)
			return func(ctx context.Context) string {
				if w := e.vmConditionSaying(ctx, vm.Name, virtv1.VirtualMachineFailure, "updateVolumes strategy not recognized: Teleport"); w != "" {
					return w
				}
				return e.volumeKept(ctx, vm.Name)
			}
		}},
		{"evacuation-of-non-migratable-vmi", func(e *env) func(context.Context) string {
			// virt-api's admitter refuses such an eviction; a VMI marked all
			// the same (a user, an older admitter) is told, not migrated.
			v := workload.VMI("cannot-leave")
			v.Spec.EvictionStrategy = ptr.To(virtv1.EvictionStrategyLiveMigrate)
			v.Spec.Domain.Features = &virtv1.Features{HypervPassthrough: &virtv1.HyperVPassthrough{Enabled: ptr.To(true)}}
			e.createVMI(v)
			e.waitPhase(v.Name, virtv1.Running)
			var node string
			if err := e.poll(func(ctx context.Context) string {
				got, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, v.Name, metav1.GetOptions{})
				if err != nil || got.Status.NodeName == "" || !slices.ContainsFunc(got.Status.Conditions, func(c virtv1.VirtualMachineInstanceCondition) bool {
					return c.Type == virtv1.VirtualMachineInstanceIsMigratable
				}) {
					return "no node or migratability reported yet"
				}
				node = got.Status.NodeName
				return ""
			}); err != nil {
				e.t.Fatal(err)
			}
			mark := fmt.Appendf(nil, `[{"op":"add","path":"/status/evacuationNodeName","value":%q}]`, node)
			if _, err := e.kv.VirtualMachineInstances(e.ns).Patch(context.Background(), v.Name, types.JSONPatchType, mark, metav1.PatchOptions{}); err != nil {
				e.t.Fatal(err)
			}
			return func(ctx context.Context) string {
				if !e.hasEventSaying(ctx, v.Name, "FailedCreate", "VirtualMachineInstance is not migrateable") {
					return "no event saying the VMI is not migrateable"
				}
				migrations, err := e.kv.Migrations(e.ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return err.Error()
				}
				for _, m := range migrations.Items {
					if m.Spec.VMIName == v.Name {
						return "a migration was created for it: " + m.Name
					}
				}
				got, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, v.Name, metav1.GetOptions{})
				if err != nil || got.Status.Phase != virtv1.Running || got.Status.NodeName != node {
					return fmt.Sprintf("VMI %v, %v: want it Running on %s", got.Status.Phase, err, node)
				}
				return ""
			}
		}},
		{"two-migrations-of-one-vmi", func(e *env) func(context.Context) string {
			v := workload.VMI("migrated-twice")
			e.createVMI(v)
			e.waitPhase(v.Name, virtv1.Running)
			for _, name := range []string{"twice-a", "twice-b"} {
				e.createMigration(name, v.Name)
			}
			return func(ctx context.Context) string {
				succeeded := 0
				for _, name := range []string{"twice-a", "twice-b"} {
					m, err := e.kv.Migrations(e.ns).Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return err.Error()
					}
					if !m.IsFinal() {
						return fmt.Sprintf("migration %s is %s", name, m.Status.Phase)
					}
					if m.Status.Phase == virtv1.MigrationSucceeded {
						succeeded++
					}
				}
				if succeeded == 0 {
					return "neither migration succeeded"
				}
				got, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, v.Name, metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				if got.Status.Phase != virtv1.Running {
					return fmt.Sprintf("VMI after the migrations is %s: %+v", got.Status.Phase, got.Status.Conditions)
				}
				return ""
			}
		}},
	}
}

func (e *env) createVMI(v *virtv1.VirtualMachineInstance) {
	e.t.Helper()
	withSecret(&v.ObjectMeta)
	if _, err := e.kv.VirtualMachineInstances(e.ns).Create(context.Background(), v, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create VMI %.40s: %v", v.Name, err)
	}
}

// blockedVMI creates a VMI changed by mutate and expects it blocked for
// reason, or refused by the API server.
func (e *env) blockedVMI(name string, mutate func(*virtv1.VirtualMachineInstance), reason string) func(context.Context) string {
	v := workload.Bare(name)
	mutate(v)
	withSecret(&v.ObjectMeta)
	_, err := e.kv.VirtualMachineInstances(e.ns).Create(context.Background(), v, metav1.CreateOptions{})
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		e.t.Logf("refused by the API server: %v", err)
		return nil
	} else if err != nil {
		e.t.Fatal(err)
	}
	return e.blocked(name, reason)
}

// blocked holds when the VMI has Synchronized=False for reason, an event
// with that reason, and no launcher pod.
func (e *env) blocked(name, reason string) func(context.Context) string {
	return func(ctx context.Context) string {
		v, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		i := slices.IndexFunc(v.Status.Conditions, func(c virtv1.VirtualMachineInstanceCondition) bool {
			return c.Type == virtv1.VirtualMachineInstanceSynchronized && c.Status == corev1.ConditionFalse && c.Reason == reason
		})
		if i < 0 {
			return fmt.Sprintf("no Synchronized=False %s condition: %+v", reason, v.Status.Conditions)
		}
		if !e.hasEvent(ctx, name, reason) {
			return "no event " + reason
		}
		if n := e.launcherPods(ctx, v.UID); n != 0 {
			return fmt.Sprintf("%d launcher pods for a blocked VMI", n)
		}
		return ""
	}
}

func (e *env) running(name string) func(context.Context) string {
	return func(ctx context.Context) string {
		v, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if v.Status.Phase != virtv1.Running {
			return fmt.Sprintf("VMI %.40s is %q", name, v.Status.Phase)
		}
		return ""
	}
}

func (e *env) poll(check func(context.Context) string) error {
	var waiting string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		waiting = check(ctx)
		return waiting == "", nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", waiting, err)
	}
	return nil
}

func (e *env) waitPhase(name string, phase virtv1.VirtualMachineInstancePhase) {
	e.t.Helper()
	if err := e.poll(e.running(name)); err != nil {
		e.t.Fatalf("waiting for %.40s to be %s: %v", name, phase, err)
	}
}

func (e *env) hasEvent(ctx context.Context, name, reason string) bool {
	return e.hasEventSaying(ctx, name, reason, "")
}

// hasEventSaying: an event about name with reason whose message contains
// message.
func (e *env) hasEventSaying(ctx context.Context, name, reason, message string) bool {
	events, err := e.kube.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return false
	}
	return slices.ContainsFunc(events.Items, func(ev corev1.Event) bool { return ev.Reason == reason && strings.Contains(ev.Message, message) })
}

func (e *env) launcherPods(ctx context.Context, uid types.UID) int {
	pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: virtv1.CreatedByLabel + "=" + string(uid)})
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// editLauncherPod runs a VMI, patches its launcher pod as a user might, and
// expects the VMI to keep running on that pod, its range label restored
// and the restore reported.
func (e *env) editLauncherPod(name, patch string) func(context.Context) string {
	e.createVMI(workload.VMI(name))
	e.waitPhase(name, virtv1.Running)
	v, err := e.kv.VirtualMachineInstances(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	pods, err := e.kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: virtv1.CreatedByLabel + "=" + string(v.UID)})
	if err != nil || len(pods.Items) != 1 {
		e.t.Fatalf("launcher pods of %s: %d, %v", name, len(pods.Items), err)
	}
	want := pods.Items[0].Labels[shard.LabelRange]
	if _, err := e.kube.CoreV1().Pods(e.ns).Patch(context.Background(), pods.Items[0].Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return func(ctx context.Context) string {
		got, err := e.kube.CoreV1().Pods(e.ns).Get(ctx, pods.Items[0].Name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if got.Labels[shard.LabelRange] != want {
			return fmt.Sprintf("range label %q, want it restored to %q", got.Labels[shard.LabelRange], want)
		}
		if !e.hasEvent(ctx, name, vmi.ReasonRangeLabelRestored) {
			return "no event " + vmi.ReasonRangeLabelRestored
		}
		if w := e.running(name)(ctx); w != "" {
			return w
		}
		return ""
	}
}

func (e *env) tryCreateVM(name string, strategy virtv1.VirtualMachineRunStrategy) (*virtv1.VirtualMachine, error) {
	template := workload.AsWritten(name)
	withSecret(&template.ObjectMeta)
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: &strategy,
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: template.ObjectMeta, Spec: template.Spec}},
	}
	return e.kv.VirtualMachines(e.ns).Create(context.Background(), vm, metav1.CreateOptions{})
}

func (e *env) createVM(name string, strategy virtv1.VirtualMachineRunStrategy) *virtv1.VirtualMachine {
	e.t.Helper()
	vm, err := e.tryCreateVM(name, strategy)
	if err != nil {
		e.t.Fatal(err)
	}
	return vm
}

func (e *env) vmFailure(name, reason string) func(context.Context) string {
	return func(ctx context.Context) string {
		vm, err := e.kv.VirtualMachines(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if !slices.ContainsFunc(vm.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
			return c.Type == virtv1.VirtualMachineFailure && c.Status == corev1.ConditionTrue && c.Reason == reason
		}) {
			return fmt.Sprintf("no Failure condition %s: %+v", reason, vm.Status.Conditions)
		}
		if !e.hasEvent(ctx, name, reason) {
			return "no event " + reason
		}
		return ""
	}
}

func (e *env) createMigration(name, vmiName string) {
	e.t.Helper()
	m := &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmiName}}
	if _, err := e.kv.Migrations(e.ns).Create(context.Background(), m, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// failedMigration creates a migration of vmiName and expects it Failed
// for reason, with an event.
func (e *env) failedMigration(vmiName, name, reason string) func(context.Context) string {
	e.createMigration(name, vmiName)
	return func(ctx context.Context) string {
		m, err := e.kv.Migrations(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if m.Status.Phase != virtv1.MigrationFailed {
			return fmt.Sprintf("migration is %q", m.Status.Phase)
		}
		if !slices.ContainsFunc(m.Status.Conditions, func(c virtv1.VirtualMachineInstanceMigrationCondition) bool { return c.Reason == reason }) {
			return fmt.Sprintf("no condition with reason %s: %+v", reason, m.Status.Conditions)
		}
		// The event says it as KubeVirt's does, in its own words.
		if !e.hasEvent(ctx, name, "FailedMigration") {
			return "no FailedMigration event"
		}
		return ""
	}
}

func (e *env) removeFinalizers(name string) {
	_, _ = e.kv.VirtualMachineInstances(e.ns).Patch(context.Background(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
}

// queueTotals sums the replicas' workqueue adds and retries, and the adds
// of each queue ("adds <queue>").
// nodeVersions are the nodes' resource versions.
func (e *env) nodeVersions() map[string]string {
	nodes, err := e.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = n.ResourceVersion
	}
	return out
}

func (e *env) queueTotals() map[string]float64 {
	out := map[string]float64{}
	for _, r := range e.replicas {
		out["adds"] += sum(e.t, r.Registry, "virtshard_workqueue_adds_total")
		out["retries"] += sum(e.t, r.Registry, "virtshard_workqueue_retries_total")
		families, err := r.Registry.Gather()
		if err != nil {
			e.t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() != "virtshard_workqueue_adds_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "name" {
						out["adds "+l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return out
}

func sum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// typedVM is a running VM named name whose template names the namespaced
// instance type instancetype and sets no sizes of its own.
func typedVM(name, instancetype string) *virtv1.VirtualMachine {
	template := workload.AsWritten(name)
	template.Spec.Domain.Resources, template.Spec.Domain.CPU = virtv1.ResourceRequirements{}, nil
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyAlways),
			Instancetype: &virtv1.InstancetypeMatcher{Name: instancetype, Kind: "VirtualMachineInstancetype"},
			Template:     &virtv1.VirtualMachineInstanceTemplateSpec{Spec: template.Spec}},
	}
	withSecret(&vm.ObjectMeta)
	return vm
}

// createVolumeVM creates a running VM whose disk "data" is the bound
// claim <name>-old (shareable if asked), with the given
// updateVolumesStrategy, and a second bound claim <name>-new; it returns
// once the VMI runs.
func (e *env) createVolumeVM(name string, strategy virtv1.UpdateVolumesStrategy, shareable bool) *virtv1.VirtualMachine {
	e.t.Helper()
	for _, claim := range []string{name + "-old", name + "-new"} {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: ptr.To(cdi.StorageClassImmediate),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if _, err := e.kube.CoreV1().PersistentVolumeClaims(e.ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	template := workload.AsWritten(name)
	withSecret(&template.ObjectMeta)
	template.Spec.Domain.Devices.Disks = append(template.Spec.Domain.Devices.Disks, virtv1.Disk{Name: "data", Shareable: ptr.To(shareable),
		DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}})
	template.Spec.Volumes = append(template.Spec.Volumes, virtv1.Volume{Name: "data", VolumeSource: virtv1.VolumeSource{
		PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: name + "-old"}}}})
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyAlways), UpdateVolumesStrategy: &strategy,
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: template.ObjectMeta, Spec: template.Spec}}}
	vm, err := e.kv.VirtualMachines(e.ns).Create(context.Background(), vm, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.poll(e.running(vm.Name)); err != nil {
		e.t.Fatal(err)
	}
	return vm
}

// moveVolume replaces the template's volume "data" (the last) with the
// volume in JSON.
func (e *env) moveVolume(vm *virtv1.VirtualMachine, volume string) {
	e.t.Helper()
	patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/template/spec/volumes/%d","value":%s}]`, len(vm.Spec.Template.Spec.Volumes)-1, volume)
	if _, err := e.kv.VirtualMachines(e.ns).Patch(context.Background(), vm.Name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// volumeKept holds when the VM's VMI still runs on its first claim and no
// migration of it was made.
func (e *env) volumeKept(ctx context.Context, name string) string {
	v, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	i := slices.IndexFunc(v.Spec.Volumes, func(vol virtv1.Volume) bool { return vol.Name == "data" })
	if v.Status.Phase != virtv1.Running || i < 0 || v.Spec.Volumes[i].PersistentVolumeClaim == nil || v.Spec.Volumes[i].PersistentVolumeClaim.ClaimName != name+"-old" {
		return fmt.Sprintf("VMI %s with volumes %+v: want it Running on %s-old", v.Status.Phase, v.Spec.Volumes, name)
	}
	migrations, err := e.kv.Migrations(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, m := range migrations.Items {
		if m.Spec.VMIName == name {
			return "a migration was created for it: " + m.Name
		}
	}
	return ""
}

// vmConditionSaying holds when the VM has a True condition of type t whose
// message has text.
func (e *env) vmConditionSaying(ctx context.Context, name string, t virtv1.VirtualMachineConditionType, text string) string {
	got, err := e.kv.VirtualMachines(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if !slices.ContainsFunc(got.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
		return c.Type == t && c.Status == corev1.ConditionTrue && strings.Contains(c.Message, text)
	}) {
		return fmt.Sprintf("no %s condition saying %q: %+v", t, text, got.Status.Conditions)
	}
	return ""
}

// vmFailureSaying is "" once VM name has a Failure condition of reason
// whose message holds text and no VMI, else what is missing.
func (e *env) vmFailureSaying(ctx context.Context, name, reason, text string) string {
	got, err := e.kv.VirtualMachines(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	if !slices.ContainsFunc(got.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
		return c.Type == virtv1.VirtualMachineFailure && c.Reason == reason && strings.Contains(c.Message, text)
	}) {
		return fmt.Sprintf("no Failure condition %s saying %q: %+v", reason, text, got.Status.Conditions)
	}
	if _, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return fmt.Sprintf("VMI of the failed VM: %v", err)
	}
	return ""
}
