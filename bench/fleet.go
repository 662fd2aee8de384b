package bench

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/virtshard/virtshard/bench/proc"
	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/controllers/kinds"
)

// fleet is a set of controller replica processes, as a StatefulSet would
// run them: replica i is named virtshard-i and keeps its name on restart.
type fleet struct {
	opts    replicas.Options
	ranges  int
	mu      sync.Mutex
	members []*replicas.Replica
	// profiles collects each replica's CPU profile while it runs (nil: off).
	profiles *profiles
	// kubeconfigs, when set, gives replica i its own kubeconfig.
	kubeconfigs []string
}

// startFleet starts n replicas and waits until they hold every range.
// kubeconfigs, when not nil, gives each replica its own.
func startFleet(ctx context.Context, opts replicas.Options, n, ranges int, profiles *profiles, kubeconfigs []string) (*fleet, error) {
	f := &fleet{opts: opts, ranges: ranges, members: make([]*replicas.Replica, n), profiles: profiles, kubeconfigs: kubeconfigs}
	for i := range n {
		if err := f.start(i); err != nil {
			f.stop()
			return nil, err
		}
	}
	if _, err := f.waitOwned(ctx, time.Minute); err != nil {
		f.stop()
		return nil, err
	}
	return f, nil
}

func (f *fleet) name(i int) string { return "virtshard-" + strconv.Itoa(i) }

func (f *fleet) start(i int) error {
	opts := f.opts
	if f.kubeconfigs != nil {
		opts.Kubeconfig = f.kubeconfigs[i]
	}
	r, err := replicas.Start(opts, f.name(i))
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.members[i] = r
	f.mu.Unlock()
	if f.profiles != nil {
		f.profiles.collect(r)
	}
	return nil
}

func (f *fleet) member(i int) *replicas.Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.members[i]
}

func (f *fleet) live() []*replicas.Replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*replicas.Replica
	for _, r := range f.members {
		if r != nil && !r.Exited() {
			out = append(out, r)
		}
	}
	return out
}

// stop hands off and stops every replica, as a scale-down to zero would.
func (f *fleet) stop() {
	var wg sync.WaitGroup
	for _, r := range f.live() {
		wg.Go(func() { r.Stop(15 * time.Second) })
	}
	wg.Wait()
}

// roll restarts every replica in turn with opts, highest ordinal first, as
// a StatefulSet rolling update does: SIGTERM, wait until the others hold
// every range (a handoff, whose seconds it returns), start the replica
// again and wait until it holds ranges. retire, when not nil, is called
// with each replica just before its SIGTERM.
func (f *fleet) roll(ctx context.Context, opts replicas.Options, logf func(string, ...any), retire func(*replicas.Replica)) ([]float64, error) {
	var handoffs []float64
	for i := len(f.members) - 1; i >= 0; i-- {
		old := f.member(i)
		if retire != nil {
			retire(old)
		}
		logf("rolling: SIGTERM %s", old.ID)
		stopped := time.Now()
		done := make(chan struct{})
		go func() { old.Stop(30 * time.Second); close(done) }()
		if _, err := f.waitOwnedWithout(ctx, old.ID, time.Minute); err != nil {
			return handoffs, err
		}
		handoffs = append(handoffs, time.Since(stopped).Seconds())
		<-done
		f.opts = opts
		if err := f.start(i); err != nil {
			return handoffs, err
		}
		if err := f.waitHolding(ctx, f.name(i), time.Minute); err != nil {
			return handoffs, err
		}
	}
	return handoffs, nil
}

// owned returns the ranges each live replica acts on (lease held, caches
// synced), by name; a replica that does not answer counts as holding none.
// They are asked at once: a frozen replica takes its scrape's timeout.
func (f *fleet) owned(ctx context.Context) map[string]int {
	out := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range f.live() {
		wg.Go(func() {
			families, err := r.Metrics(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			out[r.ID] = int(replicas.Sum(families, "virtshard_shard_ranges_active", nil))
		})
	}
	wg.Wait()
	return out
}

// waitSettled waits until every range is active and no range has moved for
// 3 s: after a restart, ranges move back to the new replica one by one.
func (f *fleet) waitSettled(ctx context.Context, timeout time.Duration) error {
	var last map[string]int
	var since time.Time
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		owned := f.owned(ctx)
		total := 0
		for _, n := range owned {
			total += n
		}
		if total != f.ranges || !maps.Equal(owned, last) {
			last, since = owned, time.Now()
			return false, nil
		}
		return time.Since(since) >= 3*time.Second, nil
	})
}

// waitOwned polls every 50 ms until the live replicas together hold every
// range and returns how long that took.
func (f *fleet) waitOwned(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	return f.waitOwnedWithout(ctx, "", timeout)
}

// waitOwnedWithout is waitOwned not counting replica leaving, which may
// still be handing its ranges off.
func (f *fleet) waitOwnedWithout(ctx context.Context, leaving string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		total := 0
		for id, n := range f.owned(ctx) {
			if id != leaving {
				total += n
			}
		}
		return total == f.ranges, nil
	})
	if err != nil {
		return 0, fmt.Errorf("replicas did not hold all %d ranges within %s: %v", f.ranges, timeout, f.owned(ctx))
	}
	return time.Since(start), nil
}

// waitHolding waits until replica id holds ranges and all ranges are held:
// a restarted replica has rejoined.
func (f *fleet) waitHolding(ctx context.Context, id string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		owned := f.owned(ctx)
		total := 0
		for _, n := range owned {
			total += n
		}
		return owned[id] > 0 && total == f.ranges, nil
	})
}

// activeRanges is how many ranges the live replicas act on together, and
// the progress display's view of the shard map: the ranges of each.
func (f *fleet) activeRanges(ctx context.Context) (active int, line string) {
	owned := f.owned(ctx)
	parts := make([]string, 0, len(f.members))
	for i := range f.members {
		if n, ok := owned[f.name(i)]; ok {
			active += n
			parts = append(parts, fmt.Sprintf("%d:%d", i, n))
		} else {
			parts = append(parts, fmt.Sprintf("%d:-", i))
		}
	}
	return active, "ranges " + strings.Join(parts, " ")
}

// underTest is the controller a VMI run drives.
type underTest interface {
	// waitSettled waits until no range has moved for a while.
	waitSettled(ctx context.Context, timeout time.Duration) error
	// stats are each process's figures and their API writes by "verb
	// resource", at the end of a run.
	stats(ctx context.Context) ([]ReplicaStats, map[string]float64, error)
	// activeRanges is how many ranges are acted on now, and a progress line.
	activeRanges(ctx context.Context) (int, string)
	// rangeCount is how many ranges there are; 0 without ranges.
	rangeCount() int
}

var _ underTest = (*fleet)(nil)

func (f *fleet) rangeCount() int { return f.ranges }

// ReplicaStats are one replica's figures at the end of a run.
type ReplicaStats struct {
	Name         string  `json:"name"`
	OwnedRanges  int     `json:"ownedRanges"`
	PeakRSSBytes int64   `json:"peakRSSBytes"`
	CPUSeconds   float64 `json:"cpuSeconds"`
	CachedVMIs   int     `json:"cachedVMIs"`
	CachedVMs    int     `json:"cachedVMs,omitempty"`
	// ViewedMembers are the fleets' VMIs and VMs in the views of the fleets
	// this replica holds (copies; each member is also cached where it is
	// acted on).
	ViewedMembers int `json:"viewedMembers,omitempty"`
	// WatchRestarts and Relists count the watches and lists its sharded
	// informers opened after their first, over all resources.
	WatchRestarts int `json:"watchRestarts"`
	Relists       int `json:"relists"`
}

// stats measures every live replica with one scrape each: its own metrics
// for ranges, cache sizes and API writes (added up by "verb resource"),
// /proc for CPU and memory.
func (f *fleet) stats(ctx context.Context) ([]ReplicaStats, map[string]float64, error) {
	var stats []ReplicaStats
	writes := map[string]float64{}
	for _, r := range f.live() {
		s, w, err := replicaStats(ctx, r)
		if err != nil {
			return nil, nil, err
		}
		stats = append(stats, s)
		for key, v := range w {
			writes[key] += v
		}
	}
	return stats, writes, nil
}

// replicaStats measures one replica as stats does.
func replicaStats(ctx context.Context, r *replicas.Replica) (ReplicaStats, map[string]float64, error) {
	families, err := r.Metrics(ctx)
	if err != nil {
		return ReplicaStats{}, nil, fmt.Errorf("scrape %s: %w", r.ID, err)
	}
	cpu, err := proc.CPUSeconds(r.PID())
	if err != nil {
		return ReplicaStats{}, nil, err
	}
	rss, err := proc.PeakRSSBytes(r.PID())
	if err != nil {
		return ReplicaStats{}, nil, err
	}
	return ReplicaStats{
		Name:         r.ID,
		OwnedRanges:  int(replicas.Sum(families, "virtshard_shard_ranges_owned", nil)),
		PeakRSSBytes: rss,
		CPUSeconds:   cpu,
		CachedVMIs:   int(replicas.Sum(families, "virtshard_informer_cached_objects", map[string]string{"resource": "virtualmachineinstances"})),
		CachedVMs:    int(replicas.Sum(families, "virtshard_informer_cached_objects", map[string]string{"resource": "virtualmachines"})),
		ViewedMembers: int(replicas.Sum(families, "virtshard_informer_cached_objects", map[string]string{"resource": kinds.FleetVMIs.Resource}) +
			replicas.Sum(families, "virtshard_informer_cached_objects", map[string]string{"resource": kinds.FleetVMs.Resource})),
		WatchRestarts: int(replicas.Sum(families, "virtshard_shard_watch_restarts_total", nil)),
		Relists:       int(replicas.Sum(families, "virtshard_shard_relists_total", nil)),
	}, replicas.Writes(families), nil
}
