package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/bench/kubevirt"
	"github.com/virtshard/virtshard/bench/proc"
)

// runKubeVirt is the kubevirt scenario: the throughput burst driven
// through KubeVirt v1.8.1's own virt-controller, with the same workload
// and measurements as virtshard's runs. No virtshard replica runs: both
// would act on the same VMIs. The floor is left to the throughput runs:
// virt-controller acts on every namespace, the floor's too.
func (r *vmiRun) runKubeVirt(ctx context.Context, suffix string) (*Report, error) {
	logDir := filepath.Join(r.copts.Workdir(), "logs", "bench-"+suffix)
	r.logf("%s: starting KubeVirt's virt-controller (log in %s)", r.scenario, logDir)
	c, err := kubevirt.Start(ctx, r.copts, kubevirt.Options{LogDir: logDir})
	if err != nil {
		return nil, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = c.Stop(stopCtx)
	}()
	r.ctrl = &kubevirtUnderTest{c: c}
	rep, err := r.burst(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("%w (virt-controller's log: %s)", err, c.LogPath())
	}
	return rep, nil
}

// kubevirtUnderTest measures KubeVirt's virt-controller as the fleet
// measures replicas: one process, no ranges.
type kubevirtUnderTest struct{ c *kubevirt.Controller }

func (k *kubevirtUnderTest) waitSettled(context.Context, time.Duration) error { return nil }

func (k *kubevirtUnderTest) rangeCount() int { return 0 }

func (k *kubevirtUnderTest) activeRanges(context.Context) (int, string) {
	return -1, "virt-controller"
}

// stats reads its CPU time and peak RSS from /proc and its writes from its
// own kubevirt_rest_client_requests_total.
func (k *kubevirtUnderTest) stats(ctx context.Context) ([]ReplicaStats, map[string]float64, error) {
	families, err := k.c.Scrape(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("scrape virt-controller: %w", err)
	}
	cpu, err := proc.CPUSeconds(k.c.Pid())
	if err != nil {
		return nil, nil, err
	}
	rss, err := proc.PeakRSSBytes(k.c.Pid())
	if err != nil {
		return nil, nil, err
	}
	return []ReplicaStats{{Name: "virt-controller", PeakRSSBytes: rss, CPUSeconds: cpu}}, kubevirt.Writes(families), nil
}

// restart stops virt-controller and starts it again with opts, as
// virt-operator's rollout of a release replaces it, and returns how long
// it took until the new process led.
func (k *kubevirtUnderTest) restart(ctx context.Context, copts cluster.Options, opts kubevirt.Options) (time.Duration, error) {
	start := time.Now()
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := k.c.Stop(stopCtx); err != nil {
		return 0, fmt.Errorf("stop virt-controller: %w", err)
	}
	c, err := kubevirt.Start(ctx, copts, opts)
	if err != nil {
		return 0, err
	}
	k.c = c
	return time.Since(start), nil
}
