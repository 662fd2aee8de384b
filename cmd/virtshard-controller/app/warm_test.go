package app_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/virtshard/virtshard/bench/cluster/clustertest"
	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/controllers/controllertest"
	"github.com/virtshard/virtshard/shard"
)

// After a kill -9, the survivors warm the dead replica's ranges before
// they can take them (virtshard_shard_ranges_prepared > 0), unless
// --warm-caches=false; either way the ranges are taken over.
func TestWarmCachesFlag(t *testing.T) {
	for _, warm := range []bool{true, false} {
		name := "warm"
		if !warm {
			name = "cold"
		}
		t.Run(name, func(t *testing.T) {
			ns := clustertest.Namespace(t)
			arg := "--warm-caches=true"
			if !warm {
				arg = "--warm-caches=false"
			}
			procs := controllertest.StartProcesses(t, ns, 3, arg)
			if _, err := sumUntil(procs, "virtshard_shard_ranges_active", shard.DefaultRangeCount, time.Minute); err != nil {
				t.Fatalf("the replicas did not act on every range: %v", err)
			}

			procs[0].Kill()
			prepared, err := sumUntil(procs[1:], "virtshard_shard_ranges_active", shard.DefaultRangeCount, time.Minute)
			if err != nil {
				t.Fatalf("the dead replica's ranges were not taken over: %v", err)
			}
			switch {
			case warm && prepared == 0:
				t.Error("no survivor warmed a range before the takeover")
			case !warm && prepared > 0:
				t.Errorf("survivors warmed up to %d ranges with --warm-caches=false", prepared)
			}
			t.Logf("%s: up to %d ranges prepared at once by the survivors", arg, prepared)
		})
	}
}

// sumUntil polls procs every 200 ms until the sum of the gauge name over
// them is want, and returns the most ranges they had prepared at once in
// the meantime.
func sumUntil(procs []*replicas.Replica, name string, want int, timeout time.Duration) (maxPrepared int, err error) {
	sum := func(ctx context.Context, gauge string) int {
		total := 0.0
		for _, r := range procs {
			if families, err := r.Metrics(ctx); err == nil {
				total += replicas.Sum(families, gauge, nil)
			}
		}
		return int(total)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		maxPrepared = max(maxPrepared, sum(ctx, "virtshard_shard_ranges_prepared"))
		return sum(ctx, name) == want, nil
	})
	return maxPrepared, err
}
