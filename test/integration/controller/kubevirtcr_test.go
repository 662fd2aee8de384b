package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/cmd/virtshard-controller/app"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

// crEnv is a test's replicas and the KubeVirt CR they follow, in the
// test's own namespace (--kubevirt-namespace), so that no other test's
// replicas see it.
type crEnv struct {
	t        *testing.T
	ns       string
	kube     kubernetes.Interface
	kv       *kubevirt.Clientset
	crs      dynamic.ResourceInterface
	replicas map[string]*controllertest.Replica
}

// The running replicas follow the KubeVirt CR without a restart: a feature
// gate turned on reaches the launcher pods of VMIs created afterwards, not
// those of VMIs created before; parallelMigrationsPerCluster lowered to 1
// lets one migration run at a time, raised to 3 lets more run at once, and
// each migration records the configuration it was handed over with.
func TestReplicasFollowTheKubeVirtCRWithoutRestart(t *testing.T) {
	ns, kube, kv := controllertest.Clients(t)
	e := &crEnv{t: t, ns: ns, kube: kube, kv: kv,
		crs: dynamic.NewForConfigOrDie(clustertest.Config(t)).Resource(clusterconfig.KubeVirtResource).Namespace(ns)}
	e.replicas = controllertest.StartN(t, ns, 2, func(o *app.Options) { o.KubeVirtNamespace = ns })
	e.createKubeVirt()

	t.Run("a feature gate reaches VMIs created after it", func(t *testing.T) {
		e.t = t
		before := e.launcherPod(e.createVMI("before"))
		if v, ok := before.Annotations[virtv1.MemoryOverheadAnnotationBytes]; ok {
			t.Fatalf("launcher pod %s has %s=%s before the gate is on", before.Name, virtv1.MemoryOverheadAnnotationBytes, v)
		}
		e.patchConfiguration(`{"developerConfiguration":{"featureGates":["VmiMemoryOverheadReport"]}}`)
		after := e.launcherPod(e.createVMI("after"))
		v, ok := after.Annotations[virtv1.MemoryOverheadAnnotationBytes]
		if bytes, err := strconv.ParseInt(v, 10, 64); !ok || err != nil || bytes <= 0 {
			t.Errorf("launcher pod %s of a VMI created after the gate: %s=%q, want a positive byte count", after.Name, virtv1.MemoryOverheadAnnotationBytes, v)
		}
		if pod := e.launcherPod(e.vmi("before")); pod.Annotations[virtv1.MemoryOverheadAnnotationBytes] != "" {
			t.Errorf("the launcher pod %s of the VMI created before the gate gained its annotation", pod.Name)
		}
	})

	t.Run("parallelMigrationsPerCluster bounds the running replicas", func(t *testing.T) {
		e.t = t
		var vmis []string
		for i := range 4 {
			vmi := workload.VMI(fmt.Sprintf("mig-%d", i))
			workload.Spread(vmi)
			if _, err := kv.VirtualMachineInstances(ns).Create(context.Background(), vmi, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			vmis = append(vmis, vmi.Name)
		}
		for _, name := range vmis {
			e.waitVMI(name, time.Minute, func(vmi *virtv1.VirtualMachineInstance) bool { return vmi.Status.Phase == virtv1.Running })
		}
		for _, limit := range []int{1, 3} {
			e.patchConfiguration(fmt.Sprintf(`{"migrations":{"parallelMigrationsPerCluster":%d}}`, limit))
			most := e.migrateAll(fmt.Sprintf("limit-%d", limit), vmis, limit)
			t.Logf("parallelMigrationsPerCluster %d: at most %d of %d migrations in flight", limit, most, len(vmis))
			if most > limit {
				t.Errorf("%d migrations in flight at once, parallelMigrationsPerCluster %d", most, limit)
			}
			if limit > 1 && most < 2 {
				t.Errorf("at most %d migration in flight after the limit was raised to %d: the raise did not apply", most, limit)
			}
		}
	})
}

// createKubeVirt creates the CR as virt-operator leaves it, with a status
// phase: KubeVirt ignores a CR without one.
func (e *crEnv) createKubeVirt() {
	e.t.Helper()
	ctx := context.Background()
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
		"metadata": map[string]any{"name": "kubevirt"},
		"spec":     map[string]any{"configuration": map[string]any{}},
	}}
	created, err := e.crs.Create(ctx, cr, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create KubeVirt CR: %v", err)
	}
	e.applied(func() {
		if err := unstructured.SetNestedField(created.Object, string(virtv1.KubeVirtPhaseDeployed), "status", "phase"); err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.crs.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			e.t.Fatalf("set the KubeVirt CR's phase: %v", err)
		}
	})
}

// patchConfiguration merges patch into the CR's spec.configuration and
// waits until every replica applied it.
func (e *crEnv) patchConfiguration(patch string) {
	e.t.Helper()
	e.applied(func() {
		body := fmt.Sprintf(`{"spec":{"configuration":%s}}`, patch)
		if _, err := e.crs.Patch(context.Background(), "kubevirt", types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			e.t.Fatalf("patch the KubeVirt CR with %s: %v", patch, err)
		}
	})
}

// applied runs write, a change of the CR, and waits until every replica
// has parsed a new version of it since (its
// virtshard_clusterconfig_updates_total{result="applied"} went up): the
// CR's only writer is the test, so that version is the one written.
func (e *crEnv) applied(write func()) {
	e.t.Helper()
	before := map[string]float64{}
	for id, r := range e.replicas {
		before[id] = e.appliedCount(r)
	}
	start := time.Now()
	write()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for id, r := range e.replicas {
			if e.appliedCount(r) <= before[id] {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		e.t.Fatal("the replicas did not apply the KubeVirt CR's change within 10 s")
	}
	e.t.Logf("every replica applied the KubeVirt CR's change %s after it was written", time.Since(start).Round(time.Millisecond))
}

func (e *crEnv) appliedCount(r *controllertest.Replica) float64 {
	list, err := r.Registry.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	families := map[string]*dto.MetricFamily{}
	for _, f := range list {
		families[f.GetName()] = f
	}
	return replicas.Sum(families, "virtshard_clusterconfig_updates_total", map[string]string{"result": "applied"})
}

func (e *crEnv) createVMI(name string) *virtv1.VirtualMachineInstance {
	e.t.Helper()
	vmi, err := e.kv.VirtualMachineInstances(e.ns).Create(context.Background(), workload.VMI(name), metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return vmi
}

func (e *crEnv) vmi(name string) *virtv1.VirtualMachineInstance {
	e.t.Helper()
	vmi, err := e.kv.VirtualMachineInstances(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return vmi
}

// launcherPod waits up to 10 s for the VMI's launcher pod.
func (e *crEnv) launcherPod(vmi *virtv1.VirtualMachineInstance) *corev1.Pod {
	e.t.Helper()
	var pod *corev1.Pod
	selector := virtv1.CreatedByLabel + "=" + string(vmi.UID)
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		pod = &pods.Items[0]
		return true, nil
	}); err != nil {
		e.t.Fatalf("no launcher pod for VMI %s within 10 s", vmi.Name)
	}
	return pod
}

func (e *crEnv) waitVMI(name string, timeout time.Duration, done func(*virtv1.VirtualMachineInstance) bool) {
	e.t.Helper()
	var last *virtv1.VirtualMachineInstance
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		vmi, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = vmi
		return done(vmi), nil
	}); err != nil {
		e.t.Fatalf("VMI %s not as expected within %s: %+v", name, timeout, last.Status)
	}
}

// migrateAll migrates every VMI at once, samples every 100 ms how many
// migrations are in flight (a target pod exists and the migration is not
// final) until all are final, and returns the most seen at once. Each must
// succeed, recording the limit it was handed over with.
func (e *crEnv) migrateAll(prefix string, vmis []string, limit int) int {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	most, samples := 0, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Pods first: a migration whose pod is seen is then seen at
			// least as late, so one over before another's pod was created
			// is never counted with it.
			pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: virtv1.MigrationJobLabel})
			if err != nil {
				continue
			}
			migrations, err := e.kv.Migrations(e.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			final := map[string]bool{}
			for _, m := range migrations.Items {
				final[string(m.UID)] = m.IsFinal()
			}
			inFlight := 0
			for _, pod := range pods.Items {
				if isFinal, known := final[pod.Labels[virtv1.MigrationJobLabel]]; known && !isFinal {
					inFlight++
				}
			}
			mu.Lock()
			most, samples = max(most, inFlight), samples+1
			mu.Unlock()
		}
	}()
	for _, vmi := range vmis {
		m := &virtv1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + vmi},
			Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi},
		}
		if _, err := e.kv.Migrations(e.ns).Create(context.Background(), m, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	var final []virtv1.VirtualMachineInstanceMigration
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		final = final[:0]
		for _, vmi := range vmis {
			m, err := e.kv.Migrations(e.ns).Get(ctx, prefix+"-"+vmi, metav1.GetOptions{})
			if err != nil || !m.IsFinal() {
				return false, nil
			}
			final = append(final, *m)
		}
		return true, nil
	}); err != nil {
		e.t.Fatalf("%s: the migrations not all final within 2 minutes", prefix)
	}
	cancel()
	<-done
	for _, m := range final {
		if m.Status.Phase != virtv1.MigrationSucceeded {
			e.t.Errorf("migration %s is %s: %+v", m.Name, m.Status.Phase, m.Status.Conditions)
			continue
		}
		var got uint32
		if ms := m.Status.MigrationState; ms != nil && ms.MigrationConfiguration != nil && ms.MigrationConfiguration.ParallelMigrationsPerCluster != nil {
			got = *ms.MigrationConfiguration.ParallelMigrationsPerCluster
		}
		if int(got) != limit {
			raw, _ := json.Marshal(m.Status.MigrationState)
			e.t.Errorf("migration %s was handed over with parallelMigrationsPerCluster %d, want %d: %s", m.Name, got, limit, raw)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if samples < 10 || most == 0 {
		e.t.Errorf("%s: %d samples, at most %d in flight: the sampler measured nothing", prefix, samples, most)
	}
	return most
}
