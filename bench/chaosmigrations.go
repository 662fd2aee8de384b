package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/controllers/migration"
)

// The chaos scenario's cluster-wide decisions: beside the flow, a few VMIs
// with VSOCK are migrated over and over while the faults go on, so that
// every fault meets migrations being admitted against the cluster's limits
// (one permit table shared by the replicas) and VMIs being given CIDs (one
// allocation shared by the replicas).

// chaosMigratingVMIs is how many VMIs the chaos scenario keeps migrating.
const chaosMigratingVMIs = 100

// chaosMigratingLabel marks them.
const chaosMigratingLabel = "bench.virtshard.io/chaos-migrating"

// ChaosMigrations is what the migrations beside the chaos flow did.
type ChaosMigrations struct {
	VMIs int `json:"vmis"`
	// Created are the migrations whose create call succeeded. Of those
	// still there at the end (the controller keeps each VMI's five newest
	// finished ones), Succeeded, Failed, and Unfinished (not final 5
	// minutes after the faults).
	Created    int `json:"created"`
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
	Unfinished int `json:"unfinished"`
	// Migrations in flight, sampled every 250 ms, against the limits.
	MaxInFlightCluster int `json:"maxInFlightCluster"`
	MaxOutboundPerNode int `json:"maxOutboundPerNode"`
	LimitPerCluster    int `json:"limitPerCluster"`
	LimitPerNode       int `json:"limitPerNode"`
	Samples            int `json:"samples"`
	// CIDs are the VMIs of the run with a VSOCK CID; DuplicateCIDs the
	// CIDs more than one of them has.
	CIDs          int `json:"cids"`
	DuplicateCIDs int `json:"duplicateCIDs"`
}

// chaosMigrations runs the migrating VMIs until finish.
type chaosMigrations struct {
	r             *vmiRun
	sampler       *inFlightSampler
	stopMigrating context.CancelFunc
	stopSampling  context.CancelFunc
	sampled       chan struct{}
	migrated      chan error
	created       atomic.Int64
}

// startChaosMigrations creates the VMIs and starts migrating them once
// they run.
func (r *vmiRun) startChaosMigrations(ctx context.Context) (*chaosMigrations, error) {
	for i := range chaosMigratingVMIs {
		vmi := workload.VMI(fmt.Sprintf("chaos-mig-%03d", i))
		vmi.Labels[chaosMigratingLabel] = "true"
		vmi.Spec.Domain.Devices.AutoattachVSOCK = ptr.To(true)
		vmi.Spec.EvictionStrategy = ptr.To(virtv1.EvictionStrategyLiveMigrate)
		workload.Spread(vmi)
		for j := range vmi.Spec.TopologySpreadConstraints {
			vmi.Spec.TopologySpreadConstraints[j].NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyHonor)
		}
		if _, err := r.kv.VirtualMachineInstances(r.ns).Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create %s: %w", vmi.Name, err)
		}
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	migrateCtx, stopMigrating := context.WithCancel(ctx)
	c := &chaosMigrations{r: r, sampler: &inFlightSampler{kube: r.kube, kv: r.kv, ns: r.ns}, stopMigrating: stopMigrating,
		stopSampling: stopSampling, sampled: make(chan struct{}), migrated: make(chan error, 1)}
	go func() { c.sampler.run(sampleCtx); close(c.sampled) }()
	go func() { c.migrated <- c.migrate(migrateCtx) }()
	return c, nil
}

// migrate migrates every migrating VMI that runs and has no migration
// under way, every 2 s, until ctx ends.
func (c *chaosMigrations) migrate(ctx context.Context) error {
	selector := labels.SelectorFromSet(labels.Set{chaosMigratingLabel: "true"}).String()
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		vmis, err := c.r.kv.VirtualMachineInstances(c.r.ns).List(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		migrations, err := c.r.kv.Migrations(c.r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		busy := map[string]bool{}
		for _, m := range migrations.Items {
			if !m.IsFinal() {
				busy[m.Spec.VMIName] = true
			}
		}
		for _, v := range vmis.Items {
			if v.Status.Phase != virtv1.Running || busy[v.Name] || v.Status.MigrationState != nil && !v.Status.MigrationState.Completed && !v.Status.MigrationState.Failed {
				continue
			}
			m := &virtv1.VirtualMachineInstanceMigration{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "chaos-mig-"},
				Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: v.Name},
			}
			// Refusals under a partition or an API server restart are the
			// faults': the next round tries again.
			if _, err := c.r.kv.Migrations(c.r.ns).Create(ctx, m, metav1.CreateOptions{}); err == nil {
				c.created.Add(1)
			}
		}
		return false, nil
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// finish stops migrating once the faults are over, waits up to 5 minutes
// until every migration is final, and counts.
func (c *chaosMigrations) finish(ctx context.Context) (*ChaosMigrations, error) {
	r := c.r
	run := &ChaosMigrations{VMIs: chaosMigratingVMIs, LimitPerCluster: migration.DefaultLimits.PerCluster, LimitPerNode: migration.DefaultLimits.PerNode}
	c.stopMigrating()
	if err := <-c.migrated; err != nil {
		return nil, err
	}
	var list *virtv1.VirtualMachineInstanceMigrationList
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := r.kv.Migrations(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		list = l
		for _, m := range l.Items {
			if !m.IsFinal() {
				return false, nil
			}
		}
		return true, nil
	})
	c.stopSampling()
	<-c.sampled
	if list == nil {
		return nil, fmt.Errorf("chaos migrations: could not list them")
	}
	run.Created = int(c.created.Load())
	for _, m := range list.Items {
		switch {
		case m.Status.Phase == virtv1.MigrationSucceeded:
			run.Succeeded++
		case m.Status.Phase == virtv1.MigrationFailed:
			run.Failed++
		case !m.IsFinal():
			run.Unfinished++
		}
	}
	run.MaxInFlightCluster, run.MaxOutboundPerNode, run.Samples = c.sampler.maxCluster, c.sampler.maxNode, c.sampler.samples
	vmis, err := r.kv.VirtualMachineInstances(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	holders := map[uint32]int{}
	for _, v := range vmis.Items {
		if v.Status.VSOCKCID != nil {
			run.CIDs++
			if holders[*v.Status.VSOCKCID]++; holders[*v.Status.VSOCKCID] == 2 {
				run.DuplicateCIDs++
			}
		}
	}
	return run, nil
}
