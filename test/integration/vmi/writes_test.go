package vmi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/test/controllertest"
)

// The writes test runs replicas as separate processes of the real binary and
// counts their writes as the bench does. Bursts, a killed replica and a
// graceful stop mid-run are the bench's throughput, scale, failover and
// rolling scenarios: make test runs them small (test/integration/bench) and
// holds them to the same writes bound, make bench at full size.

// maxWritesPerVMI is what the design allows a VMI on its way to Running:
// the launcher pod's create, the patch of its readiness-gate condition
// (KubeVirt's syncPausedConditionToPod: a pod cannot be created with
// status) and one VMI status patch, plus 5% for patches a conflict or a
// handoff repeats.
const maxWritesPerVMI = 3 * 1.05

// TestWritesPerVMIWhenIdle creates VMIs one by one on an idle system: the
// batcher writes promptly, and Scheduling rides along with the handoff.
func TestWritesPerVMIWhenIdle(t *testing.T) {
	const n = 10
	e := newEnv(t, 0)
	procs := controllertest.StartProcesses(t, e.ns, 3)
	// Idle: the replicas have shared out the ranges (a range moves to a
	// replica once its caches synced, a few seconds after it starts).
	controllertest.WaitShared(t, procs)
	for i := range n {
		e.create(workload.VMI(fmt.Sprintf("idle-%d", i)))
		time.Sleep(200 * time.Millisecond)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		byPhase, err := workload.Phases(ctx, e.kv, e.ns)
		return err == nil && byPhase[virtv1.Running] == n, nil
	}); err != nil {
		t.Fatalf("not all %d VMIs Running within 2 minutes", n)
	}
	w, events, all := controllerWrites(t, procs)
	t.Logf("idle: %.2f controller writes per VMI, %.2f events per VMI (%v)", w/n, events/n, all)
	if w/n > maxWritesPerVMI {
		t.Errorf("%.2f controller writes per VMI when idle, want at most %.2f", w/n, maxWritesPerVMI)
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
