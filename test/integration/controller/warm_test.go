package controller_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/shard"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
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
			if _, err := activeUntil(procs, shard.DefaultRangeCount, time.Minute); err != nil {
				t.Fatalf("the replicas did not act on every range: %v", err)
			}

			procs[0].Kill()
			prepared, err := activeUntil(procs[1:], shard.DefaultRangeCount, time.Minute)
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

// activeUntil polls procs every 200 ms, one scrape each, until they act
// on want ranges together, and returns the most ranges they had prepared at
// once in the meantime.
func activeUntil(procs []*replicas.Replica, want int, timeout time.Duration) (maxPrepared int, err error) {
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		active, prepared := 0.0, 0.0
		for _, r := range procs {
			if families, err := r.Metrics(ctx); err == nil {
				active += replicas.Sum(families, "virtshard_shard_ranges_active", nil)
				prepared += replicas.Sum(families, "virtshard_shard_ranges_prepared", nil)
			}
		}
		maxPrepared = max(maxPrepared, int(prepared))
		return int(active) == want, nil
	})
	return maxPrepared, err
}
