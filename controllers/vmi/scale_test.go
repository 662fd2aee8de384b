package vmi_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/bench/replicas"
)

// The scale tests run replicas as separate processes of the real binary,
// so that one can be killed (SIGKILL) like a crashed pod.

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

func controllerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := cluster.FindRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "virtshard-controller-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "virtshard-controller")
		out, err := exec.Command("go", "build", "-o", binary, filepath.Join(root, "cmd", "virtshard-controller")).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build virtshard-controller: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// startProcess starts a replica process watching ns; test cleanup stops it.
func startProcess(t *testing.T, ns, id string) *replicas.Replica {
	t.Helper()
	r, err := replicas.Start(replicas.Options{
		Binary: controllerBinary(t), Kubeconfig: kubeconfig(t), Namespace: ns, WatchNamespace: ns, LogDir: t.TempDir(),
	}, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(15 * time.Second) })
	return r
}

// writes scrapes a replica's API writes by "resource verb".
func writes(t *testing.T, r *replicas.Replica) map[string]float64 {
	t.Helper()
	families, err := r.Metrics(context.Background())
	if err != nil {
		t.Fatalf("scrape %s: %v", r.ID, err)
	}
	out := map[string]float64{}
	for _, name := range []string{"virtshard_status_patch_conflicts_total", "virtshard_shard_handoffs_total"} {
		out[name] = replicas.Sum(families, name, nil)
	}
	for _, m := range families["virtshard_api_writes_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		out[labels["resource"]+" "+labels["verb"]] += m.GetCounter().GetValue()
	}
	return out
}

// createVMIs creates n VMIs with 16 concurrent creators.
func createVMIs(t *testing.T, e *env, n int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if _, err := e.kv.VirtualMachineInstances(e.ns).Create(context.Background(), newVMI(fmt.Sprintf("vmi-%05d", i)), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create VMI: %v", err)
	}
}

// waitAllRunning waits until n VMIs are Running, logging progress.
func waitAllRunning(t *testing.T, e *env, n int, timeout time.Duration) {
	t.Helper()
	last := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := e.kv.VirtualMachineInstances(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		byPhase := map[virtv1.VirtualMachineInstancePhase]int{}
		for _, v := range list.Items {
			byPhase[v.Status.Phase]++
		}
		if time.Since(last) > 10*time.Second {
			t.Logf("VMIs by phase: %v", byPhase)
			last = time.Now()
		}
		return byPhase[virtv1.Running] == n, nil
	})
	if err != nil {
		t.Fatalf("not all %d VMIs Running within %s", n, timeout)
	}
}

// assertOneLauncherPodEach checks there is exactly one launcher pod per VMI.
func assertOneLauncherPodEach(t *testing.T, e *env, n int) {
	t.Helper()
	pods, err := e.kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: virtv1.AppLabel + "=virt-launcher"})
	if err != nil {
		t.Fatal(err)
	}
	perVMI := map[string]int{}
	for _, p := range pods.Items {
		perVMI[p.Labels[virtv1.CreatedByLabel]]++
	}
	duplicates := 0
	for _, c := range perVMI {
		duplicates += c - 1
	}
	if len(perVMI) != n || duplicates != 0 {
		t.Errorf("%d launcher pods for %d VMIs (%d with a pod), %d duplicates; want one each", len(pods.Items), n, len(perVMI), duplicates)
	}
}

func scaleCount(t *testing.T) int {
	if s := os.Getenv("VIRTSHARD_SCALE_VMIS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 2000
}

func TestTwoThousandVMIsWithThreeReplicas(t *testing.T) {
	n := scaleCount(t)
	e := newEnv(t, 0)
	var procs []*replicas.Replica
	for i := range 3 {
		procs = append(procs, startProcess(t, e.ns, fmt.Sprintf("replica-%d", i)))
	}
	start := time.Now()
	createVMIs(t, e, n)
	waitAllRunning(t, e, n, 10*time.Minute)
	t.Logf("%d VMIs Running %s after the first create", n, time.Since(start).Round(time.Millisecond))
	assertOneLauncherPodEach(t, e, n)

	controller, eventsCreated, total := controllerWrites(t, procs)
	perVMI := controller / float64(n)
	t.Logf("writes by resource and verb: %v", total)
	t.Logf("controller writes per VMI (pods and VMIs): %.2f; events per VMI: %.2f", perVMI, eventsCreated/float64(n))
	if perVMI > 2.5 {
		t.Errorf("%.2f controller writes per VMI on the way to Running, want at most 2.5", perVMI)
	}
}

// controllerWrites sums pod and VMI writes over replicas, and events beside.
func controllerWrites(t *testing.T, procs []*replicas.Replica) (writesTotal, events float64, all map[string]float64) {
	all = map[string]float64{}
	for _, p := range procs {
		for k, v := range writes(t, p) {
			all[k] += v
		}
	}
	for k, v := range all {
		if resource := strings.Fields(k)[0]; resource == "pods" || resource == "virtualmachineinstances" {
			writesTotal += v
		}
	}
	return writesTotal, all["events create"], all
}

// TestWritesPerVMIWhenIdle creates VMIs one by one on an idle system: the
// batcher writes promptly, and Scheduling rides along with the handoff.
func TestWritesPerVMIWhenIdle(t *testing.T) {
	const n = 10
	e := newEnv(t, 0)
	var procs []*replicas.Replica
	for i := range 3 {
		procs = append(procs, startProcess(t, e.ns, fmt.Sprintf("replica-%d", i)))
	}
	for i := range n {
		e.create(newVMI(fmt.Sprintf("idle-%d", i)))
		time.Sleep(200 * time.Millisecond)
	}
	waitAllRunning(t, e, n, 2*time.Minute)
	w, events, all := controllerWrites(t, procs)
	t.Logf("idle: %.2f controller writes per VMI, %.2f events per VMI (%v)", w/n, events/n, all)
	if w/n > 2.5 {
		t.Errorf("%.2f controller writes per VMI when idle, want at most 2.5", w/n)
	}
}

func TestKilledReplicaMidRunLosesNoVMI(t *testing.T) {
	n := scaleCount(t)
	e := newEnv(t, 0)
	var procs []*replicas.Replica
	for i := range 3 {
		procs = append(procs, startProcess(t, e.ns, fmt.Sprintf("replica-%d", i)))
	}
	created := make(chan struct{})
	go func() { createVMIs(t, e, n); close(created) }()
	// Kill one replica (SIGKILL: no handoff) once a third of the VMIs exist.
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.kv.VirtualMachineInstances(e.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) >= n/3, nil
	}); err != nil {
		t.Fatal("VMIs were not created")
	}
	procs[1].Kill()
	t.Logf("killed %s", procs[1].ID)
	<-created
	waitAllRunning(t, e, n, 10*time.Minute)
	assertOneLauncherPodEach(t, e, n)
}

// TestGracefulStopMidRunHandsOff stops one of three replicas (SIGTERM)
// while VMIs are being created: its ranges move with their pending status
// flushed, and every VMI still runs with one launcher pod.
func TestGracefulStopMidRunHandsOff(t *testing.T) {
	const n = 300
	e := newEnv(t, 0)
	var procs []*replicas.Replica
	for i := range 3 {
		procs = append(procs, startProcess(t, e.ns, fmt.Sprintf("replica-%d", i)))
	}
	created := make(chan struct{})
	go func() { createVMIs(t, e, n); close(created) }()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.kv.VirtualMachineInstances(e.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) >= n/3, nil
	}); err != nil {
		t.Fatal("VMIs were not created")
	}
	stopped := time.Now()
	procs[0].Stop(30 * time.Second)
	t.Logf("%s stopped gracefully in %s", procs[0].ID, time.Since(stopped).Round(time.Millisecond))
	if !procs[0].Exited() {
		t.Errorf("%s did not exit", procs[0].ID)
	}
	<-created
	waitAllRunning(t, e, n, 5*time.Minute)
	assertOneLauncherPodEach(t, e, n)
}
