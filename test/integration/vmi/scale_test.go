package vmi_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/test/controllertest"
)

// The scale tests run replicas as separate processes of the real binary,
// so that one can be killed (SIGKILL) like a crashed pod.

func startProcesses(t *testing.T, ns string, n int) []*replicas.Replica {
	t.Helper()
	return controllertest.StartProcesses(t, ns, n)
}

// createVMIs creates n VMIs with 16 concurrent creators in the background;
// the channel yields the outcome.
func createVMIs(e *env, n int) <-chan error {
	done := make(chan error, 1)
	go func() {
		var created atomic.Int64
		done <- workload.Create(context.Background(), e.kv, workload.Options{Namespace: e.ns, Count: n, Concurrency: 16, Prefix: "vmi"}, &created)
	}()
	return done
}

// waitCreated waits until at least n VMIs exist.
func waitCreated(t *testing.T, e *env, n int) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		byPhase, err := workload.Phases(ctx, e.kv, e.ns)
		total := 0
		for _, c := range byPhase {
			total += c
		}
		return err == nil && total >= n, nil
	}); err != nil {
		t.Fatalf("%d VMIs were not created", n)
	}
}

// waitAllRunning waits for the creators, then until n VMIs are Running,
// logging progress.
func waitAllRunning(t *testing.T, e *env, created <-chan error, n int, timeout time.Duration) {
	t.Helper()
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		byPhase, err := workload.Phases(ctx, e.kv, e.ns)
		if err != nil {
			return false, nil
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
	withPod, duplicates, err := workload.LauncherPods(context.Background(), e.kube, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	if withPod != n || duplicates != 0 {
		t.Errorf("%d of %d VMIs have a launcher pod, %d duplicates; want one each", withPod, n, duplicates)
	}
}

// controllerWrites sums the replicas' pod and VMI writes, and their event
// creates beside them.
func controllerWrites(t *testing.T, procs []*replicas.Replica) (writesTotal, events float64, all map[string]float64) {
	t.Helper()
	all = map[string]float64{}
	for _, p := range procs {
		families, err := p.Metrics(context.Background())
		if err != nil {
			t.Fatalf("scrape %s: %v", p.ID, err)
		}
		for k, v := range replicas.Writes(families) {
			all[k] += v
			if replicas.ControllerWrite(k) {
				writesTotal += v
			}
		}
	}
	return writesTotal, all["create events"], all
}

// maxWritesPerVMI is what the design allows a VMI on its way to Running:
// the launcher pod's create, the patch of its readiness-gate condition
// (KubeVirt's syncPausedConditionToPod: a pod cannot be created with
// status) and one VMI status patch, plus 5% for patches a conflict or a
// handoff repeats.
const maxWritesPerVMI = 3 * 1.05

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
	procs := startProcesses(t, e.ns, 3)
	start := time.Now()
	waitAllRunning(t, e, createVMIs(e, n), n, 10*time.Minute)
	t.Logf("%d VMIs Running %s after the first create", n, time.Since(start).Round(time.Millisecond))
	assertOneLauncherPodEach(t, e, n)

	controller, eventsCreated, total := controllerWrites(t, procs)
	perVMI := controller / float64(n)
	t.Logf("writes by resource and verb: %v", total)
	t.Logf("controller writes per VMI (pods and VMIs): %.2f; events per VMI: %.2f", perVMI, eventsCreated/float64(n))
	if perVMI > maxWritesPerVMI {
		t.Errorf("%.2f controller writes per VMI on the way to Running, want at most %.2f", perVMI, maxWritesPerVMI)
	}
}

// TestWritesPerVMIWhenIdle creates VMIs one by one on an idle system: the
// batcher writes promptly, and Scheduling rides along with the handoff.
func TestWritesPerVMIWhenIdle(t *testing.T) {
	const n = 10
	e := newEnv(t, 0)
	procs := startProcesses(t, e.ns, 3)
	for i := range n {
		e.create(workload.VMI(fmt.Sprintf("idle-%d", i)))
		time.Sleep(200 * time.Millisecond)
	}
	created := make(chan error, 1)
	created <- nil
	waitAllRunning(t, e, created, n, 2*time.Minute)
	w, events, all := controllerWrites(t, procs)
	t.Logf("idle: %.2f controller writes per VMI, %.2f events per VMI (%v)", w/n, events/n, all)
	if w/n > maxWritesPerVMI {
		t.Errorf("%.2f controller writes per VMI when idle, want at most %.2f", w/n, maxWritesPerVMI)
	}
}

// TestKilledReplicaMidRunLosesNoVMI kills one of three replicas (SIGKILL:
// no handoff) while VMIs are being created. 600 VMIs put about 130 into the
// killed replica's ranges after the kill, waiting for the takeover; the
// bench's failover and chaos scenarios do the same at scale.
func TestKilledReplicaMidRunLosesNoVMI(t *testing.T) {
	const n = 600
	e := newEnv(t, 0)
	procs := startProcesses(t, e.ns, 3)
	created := createVMIs(e, n)
	waitCreated(t, e, n/3)
	procs[1].Kill()
	t.Logf("killed %s", procs[1].ID)
	waitAllRunning(t, e, created, n, 10*time.Minute)
	assertOneLauncherPodEach(t, e, n)
}

// TestGracefulStopMidRunHandsOff stops one of three replicas (SIGTERM)
// while VMIs are being created: its ranges move with their pending status
// flushed, and every VMI still runs with one launcher pod.
func TestGracefulStopMidRunHandsOff(t *testing.T) {
	const n = 300
	e := newEnv(t, 0)
	procs := startProcesses(t, e.ns, 3)
	created := createVMIs(e, n)
	waitCreated(t, e, n/3)
	stopped := time.Now()
	procs[0].Stop(30 * time.Second)
	t.Logf("%s stopped gracefully in %s", procs[0].ID, time.Since(stopped).Round(time.Millisecond))
	if !procs[0].Exited() {
		t.Errorf("%s did not exit", procs[0].ID)
	}
	waitAllRunning(t, e, created, n, 5*time.Minute)
	assertOneLauncherPodEach(t, e, n)
}
