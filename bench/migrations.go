package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/controllers/migration"
)

// MigrationStats is what the migrations scenario measures once its VMIs
// run: every migration created at once, sampled every 100 ms until all are
// final.
type MigrationStats struct {
	Migrations int `json:"migrations"`
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
	// MigrationsPerSecond is the migrations over the time from the first
	// create call to the last migration seen final.
	MigrationsPerSecond float64 `json:"migrationsPerSecond"`
	// DurationSeconds is per migration, from its create call returning to
	// the bench seeing it final.
	DurationSeconds Percentiles `json:"durationSeconds"`
	// MaxInFlightCluster and MaxOutboundPerNode are the most migrations the
	// samples saw in flight (target pod created, not final), in the cluster
	// and out of one node, against the limits.
	MaxInFlightCluster int `json:"maxInFlightCluster"`
	MaxOutboundPerNode int `json:"maxOutboundPerNode"`
	LimitPerCluster    int `json:"limitPerCluster"`
	LimitPerNode       int `json:"limitPerNode"`
	Samples            int `json:"samples"`
	// WritesPerMigration are the controllers' writes during the migration
	// phase (after the burst's were counted), by verb and resource, events
	// and Leases aside, divided by the migrations. The report's replica stats (peak RSS, CPU) are
	// read after this phase, so they cover it too.
	WritesPerMigration WritesPerVMI `json:"writesPerMigration"`
}

// migrations runs the VMIs, then migrates --migrations of them at once.
func (r *vmiRun) migrations(ctx context.Context) (*Report, error) {
	rep, err := r.burst(ctx, false)
	if err != nil {
		return nil, err
	}
	count := r.o.Migrations
	if count == 0 {
		count = max(r.vmis/5, 1)
	}
	before, err := r.controllerWrites(ctx)
	if err != nil {
		return nil, err
	}
	stats, err := r.migrate(ctx, count)
	if err != nil {
		return nil, err
	}
	replicaStats, after, err := r.fleet.stats(ctx)
	if err != nil {
		return nil, err
	}
	rep.ReplicaStats = replicaStats
	stats.WritesPerMigration = perMigration(deltas(before, after), count)
	rep.Migration = stats
	return rep, nil
}

// migrationWrite says whether a "verb resource" write counts towards a
// migration: everything the controllers write but events and the shard's
// Leases (pods, VMIs, the migrations' status and finalizers, the permits'
// ConfigMap).
func migrationWrite(key string) bool {
	resource := replicas.WriteResource(key)
	return resource != "events" && resource != "leases"
}

// perMigration divides the writes (by "verb resource") that count towards
// a migration among migrations.
func perMigration(writes map[string]float64, migrations int) WritesPerVMI {
	out := WritesPerVMI{ByVerbResource: map[string]float64{}}
	for key, v := range writes {
		if migrationWrite(key) && v > 0 {
			out.ByVerbResource[key] = v / float64(max(migrations, 1))
			out.Total += v / float64(max(migrations, 1))
		}
	}
	return out
}

// controllerWrites reads the live replicas' write counters now.
func (r *vmiRun) controllerWrites(ctx context.Context) (map[string]float64, error) {
	_, writes, err := r.fleet.stats(ctx)
	return writes, err
}

// migrationSampler keeps what the samples saw.
type migrationSampler struct {
	mu      sync.Mutex
	source  map[types.UID]string // migration → its VMI's node when created
	sent    map[types.UID]time.Time
	final   map[types.UID]time.Time
	phase   map[types.UID]virtv1.VirtualMachineInstanceMigrationPhase
	maxAll  int
	maxNode int
	samples int
}

func (r *vmiRun) migrate(ctx context.Context, count int) (*MigrationStats, error) {
	vmis, err := r.kv.VirtualMachineInstances(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(vmis.Items, func(a, b virtv1.VirtualMachineInstance) int { return cmp.Compare(a.Name, b.Name) })
	if len(vmis.Items) < count {
		return nil, fmt.Errorf("%d VMIs to migrate, %d exist", count, len(vmis.Items))
	}
	s := &migrationSampler{source: map[types.UID]string{}, sent: map[types.UID]time.Time{},
		final: map[types.UID]time.Time{}, phase: map[types.UID]virtv1.VirtualMachineInstanceMigrationPhase{}}
	sampleCtx, stop := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { r.sampleMigrations(sampleCtx, s); close(sampled) }()
	defer func() { stop(); <-sampled }()

	start := time.Now()
	r.logf("migrations: migrating %d of %d VMIs at once", count, len(vmis.Items))
	sem := make(chan struct{}, max(r.o.Creators, 1))
	var wg sync.WaitGroup
	var createErr error
	var errOnce sync.Once
	for _, vmi := range vmis.Items[:count] {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			m, err := r.kv.Migrations(r.ns).Create(ctx, &virtv1.VirtualMachineInstanceMigration{
				ObjectMeta: metav1.ObjectMeta{Name: "mig-" + vmi.Name},
				Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
			}, metav1.CreateOptions{})
			if err != nil {
				errOnce.Do(func() { createErr = fmt.Errorf("create migration of %s: %w", vmi.Name, err) })
				return
			}
			s.mu.Lock()
			s.source[m.UID], s.sent[m.UID] = vmi.Status.NodeName, time.Now()
			s.mu.Unlock()
		})
	}
	wg.Wait()
	if createErr != nil {
		return nil, createErr
	}
	deadline := time.Now().Add(r.o.timeout(count))
	for {
		s.mu.Lock()
		done := len(s.final)
		s.mu.Unlock()
		if done == count {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%d of %d migrations final at the deadline", done, count)
		}
		if r.progress != nil {
			fmt.Fprintf(r.progress, "%7s migrations final %d/%d\n", time.Since(start).Round(time.Second), done, count)
		}
		time.Sleep(5 * time.Second)
	}
	stop()
	<-sampled
	return s.stats(start, count), nil
}

// sampleMigrations samples the migrations in flight every 100 ms: pods
// first, then migrations, so a migration that ended before another's
// target pod existed is never counted with it.
func (r *vmiRun) sampleMigrations(ctx context.Context, s *migrationSampler) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pods, err := r.kube.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: virtv1.MigrationJobLabel})
		if err != nil {
			continue
		}
		list, err := r.kv.Migrations(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		now := time.Now()
		s.mu.Lock()
		final := map[types.UID]bool{}
		for _, m := range list.Items {
			final[m.UID] = m.IsFinal()
			if _, seen := s.final[m.UID]; m.IsFinal() && !seen {
				s.final[m.UID], s.phase[m.UID] = now, m.Status.Phase
			}
		}
		all, perNode := 0, map[string]int{}
		for _, pod := range pods.Items {
			uid := types.UID(pod.Labels[virtv1.MigrationJobLabel])
			if isFinal, known := final[uid]; known && !isFinal {
				all++
				perNode[s.source[uid]]++
			}
		}
		s.samples++
		s.maxAll = max(s.maxAll, all)
		for _, n := range perNode {
			s.maxNode = max(s.maxNode, n)
		}
		s.mu.Unlock()
	}
}

func (s *migrationSampler) stats(start time.Time, count int) *MigrationStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &MigrationStats{Migrations: count, MaxInFlightCluster: s.maxAll, MaxOutboundPerNode: s.maxNode, Samples: s.samples,
		LimitPerCluster: migration.DefaultLimits.PerCluster, LimitPerNode: migration.DefaultLimits.PerNode}
	var durations []time.Duration
	var last time.Time
	for uid, at := range s.final {
		switch s.phase[uid] {
		case virtv1.MigrationSucceeded:
			st.Succeeded++
		default:
			st.Failed++
		}
		if sent, ok := s.sent[uid]; ok {
			durations = append(durations, at.Sub(sent))
		}
		if at.After(last) {
			last = at
		}
	}
	slices.Sort(durations)
	st.DurationSeconds = percentiles(durations)
	if elapsed := last.Sub(start).Seconds(); elapsed > 0 {
		st.MigrationsPerSecond = float64(count) / elapsed
	}
	return st
}
