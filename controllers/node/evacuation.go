package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// Evacuation, as KubeVirt v1.8.1's evacuation controller
// (pkg/virt-controller/watch/drain/evacuation): the VMIs to move off a
// node are all of them while the node carries the drain taint, else those
// virt-api's eviction admitter marked (status.evacuationNodeName, set when
// a drain evicts the launcher pod) and that have not left or begun to. Each
// that wants a live migration on eviction, can migrate and has no
// migration under way gets a kubevirt-evacuation- migration.
//
// Only as many are created as the migration limits leave room for, a VMI
// that cannot migrate is told so in an event while there is room, and the
// node is looked at again in 5 s while there is none. With the
// MigrationPriorityQueue gate (beta, off unless the KubeVirt CR lists it)
// every one of them gets its migration at once, with the system-critical
// priority (system-maintenance when the descheduler evicted it), and the
// limits apply when migrations start.

// Requeue delays of KubeVirt's evacuation controller.
const (
	evacuationNoRoomRecheck     = 5 * time.Second
	evacuationNotMigratableTell = time.Minute
	// evacuationPodRecheck: virtshard's, for a VMI whose migration ended
	// in the last evacuationRecheck and whose second pod (a failed
	// evacuation's target) has not ended yet. KubeVirt looks at the node
	// again on the VMI's next update; virtshard does not look on every VMI
	// update, so it looks again shortly, for that long at most (a pod
	// that never ends is no reason to look every second).
	evacuationPodRecheck = time.Second
)

// The events of evacuations, KubeVirt's.
const (
	notMigratableMessage = "VirtualMachineInstance is not migrateable"
	reasonFailedCreate   = "FailedCreate"
	reasonCreated        = "SuccessfulCreate"
)

// evacuationPrefix is KubeVirt's GenerateName of evacuation migrations.
const evacuationPrefix = "kubevirt-evacuation-"

// evacuating reports whether the node's VMIs, or some of them, are to
// leave it.
func evacuating(node *corev1.Node, vmis []held, taintKey string) bool {
	return drained(node, taintKey) || len(markedToLeave(node.Name, vmis)) > 0
}

// markedToLeave are the VMIs marked for eviction off the node that are
// still on it and not migrating.
func markedToLeave(node string, vmis []held) []held {
	var out []held
	now := time.Now()
	for _, h := range vmis {
		s := h.Object.Status
		if s.EvacuationNodeName != "" && s.EvacuationNodeName == node && !vmistatus.Migrating(h.Object, now) {
			out = append(out, h)
		}
	}
	return out
}

// evacuate creates the node's evacuation migrations and returns when to
// look at the node again.
func (c *Controller) evacuate(ctx context.Context, node *corev1.Node, vmis []held) (time.Duration, error) {
	leaving := vmis
	if !drained(node, c.drainTaintKey()) {
		leaving = markedToLeave(node.Name, vmis)
	}
	cfg := c.env.ClusterConfig.Current()
	candidates, cannot, podsEnding := c.sortCandidates(cfg, leaving)
	recheck := evacuationRecheck
	if podsEnding {
		recheck = evacuationPodRecheck
	}
	if len(candidates) == 0 && len(cannot) == 0 {
		return recheck, nil
	}
	if !cfg.MigrationPriorityQueueEnabled() {
		room := c.room(cfg, node.Name, vmis)
		if room <= 0 {
			return evacuationNoRoomRecheck, nil
		}
		take := min(room, len(candidates))
		told := min(room-take, len(cannot))
		for _, h := range cannot[:told] {
			c.evacuations.Event(h.Object, corev1.EventTypeNormal, reasonFailedCreate, notMigratableMessage)
		}
		if take == 0 {
			if told > 0 {
				// Keeps the events from expiring while the VMIs stay.
				return evacuationNotMigratableTell, nil
			}
			return recheck, nil
		}
		candidates = candidates[:take]
	}
	var errs []error
	for _, d := range candidates {
		if err := c.createEvacuation(ctx, cfg, node.Name, d); err != nil {
			errs = append(errs, err)
		}
	}
	return recheck, errors.Join(errs...)
}

// sortCandidates splits the VMIs to leave into those to migrate now and
// those that cannot migrate, as KubeVirt's filterRunningNonMigratingVMIs:
// VMIs going away, not migrated on eviction (their eviction strategy, or
// the cluster's), with a migration under way or a second pod still there
// are neither; podsEnding reports a VMI left out only for a second pod.
func (c *Controller) sortCandidates(cfg *clusterconfig.Config, leaving []held) (candidates []migration.Decided, cannot []held, podsEnding bool) {
	for _, h := range leaving {
		vmi := h.Object
		if !c.rt.Holds(h.Range.Index) || vmi.IsFinal() || vmi.DeletionTimestamp != nil || !migratesOnEviction(cfg, vmi) {
			continue
		}
		if !vmistatus.Migratable(vmi) {
			cannot = append(cannot, h)
			continue
		}
		known := kinds.MigrationsOf(c.env.Caches, vmi.Namespace+"/"+vmi.Name)
		if kinds.AnyUnfinished(known) || behindItsMigration(vmi, known) {
			continue
		}
		if activePods(h) > 1 {
			podsEnding = podsEnding || justEnded(known, time.Now())
			continue
		}
		candidates = append(candidates, migration.Decided{Found: h, Known: known})
	}
	return candidates, cannot, podsEnding
}

// justEnded: the newest of known is final, and became so within the last
// evacuationRecheck.
func justEnded(known []*virtv1.VirtualMachineInstanceMigration, now time.Time) bool {
	newest := newestOf(known)
	if newest == nil || !newest.IsFinal() {
		return false
	}
	ts := newest.Status.PhaseTransitionTimestamps
	return len(ts) > 0 && now.Sub(ts[len(ts)-1].PhaseTransitionTimestamp.Time) < evacuationRecheck
}

// newestOf is the migration of known created last, or nil.
func newestOf(known []*virtv1.VirtualMachineInstanceMigration) *virtv1.VirtualMachineInstanceMigration {
	var newest *virtv1.VirtualMachineInstanceMigration
	for _, m := range known {
		if newest == nil || newest.CreationTimestamp.Before(&m.CreationTimestamp) {
			newest = m
		}
	}
	return newest
}

// behindItsMigration: the VMI's newest migration (of known) succeeded, but
// the cached VMI does not show it completed. The VMIs and the migrations
// come through different watches, and the node is looked at the moment an
// evacuation ends: the VMI has most likely left the node already, and a
// second evacuation would migrate it again. The next look at the node
// sees it.
func behindItsMigration(vmi *virtv1.VirtualMachineInstance, known []*virtv1.VirtualMachineInstanceMigration) bool {
	newest := newestOf(known)
	if newest == nil || newest.Status.Phase != virtv1.MigrationSucceeded {
		return false
	}
	ms := vmi.Status.MigrationState
	return ms == nil || ms.MigrationUID != newest.UID || !ms.Completed
}

// migratesOnEviction: the VMI's eviction strategy, or else the cluster's,
// asks for a live migration (LiveMigrateIfPossible only while it can).
func migratesOnEviction(cfg *clusterconfig.Config, vmi *virtv1.VirtualMachineInstance) bool {
	strategy := vmi.Spec.EvictionStrategy
	if strategy == nil {
		strategy = cfg.EvictionStrategy()
	}
	switch ptr.Deref(strategy, virtv1.EvictionStrategyNone) {
	case virtv1.EvictionStrategyLiveMigrate:
		return true
	case virtv1.EvictionStrategyLiveMigrateIfPossible:
		return vmistatus.Migratable(vmi)
	}
	return false
}

// activePods counts the VMI's pods that have not terminated.
func activePods(h held) int {
	n := 0
	for _, pod := range kinds.PodsOf(h.Range, h.Object) {
		if !kinds.PodFinished(pod) {
			n++
		}
	}
	return n
}

// room is how many more migrations the limits leave for the node: in the
// cluster, less the running migrations (every replica caches them all),
// and out of the node, less those running from it. KubeVirt counts the
// latter by the names of the VMIs on the node; a replica knows only its
// own VMIs there, so it counts the running migrations of those and the
// running evacuations off the node. The migration controller holds the
// limits at the start of a migration whatever is created here.
func (c *Controller) room(cfg *clusterconfig.Config, node string, vmis []held) int {
	limits := c.opts.MigrationLimits.Over(cfg.Migrations())
	onNode := map[string]bool{}
	for _, h := range vmis {
		onNode[h.Object.Namespace+"/"+h.Object.Name] = true
	}
	running, fromNode := 0, 0
	for _, m := range kinds.Migrations.All(c.env.Caches).List() {
		if !m.IsRunning() {
			continue
		}
		running++
		if onNode[m.Namespace+"/"+m.Spec.VMIName] || m.Annotations[virtv1.EvacuationMigrationAnnotation] == node {
			fromNode++
		}
	}
	return min(limits.PerCluster-running, limits.PerNode-fromNode)
}

// createEvacuation creates the VMI's evacuation migration off node.
func (c *Controller) createEvacuation(ctx context.Context, cfg *clusterconfig.Config, node string, d migration.Decided) error {
	vmi := d.Object
	created, err := migration.CreateSystem(ctx, c.env, c.rt, d, evacuation(cfg, vmi, node))
	if err != nil {
		c.evacuations.Eventf(vmi, corev1.EventTypeWarning, reasonFailedCreate, "Error creating a Migration: %v", err)
		return fmt.Errorf("create evacuation migration of %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	if created != nil {
		c.evacuations.Eventf(vmi, corev1.EventTypeNormal, reasonCreated, "Created Migration %s", created.Name)
	}
	return nil
}

// evacuation is the VMI's evacuation migration off node: KubeVirt's
// kubevirt-evacuation- migration, annotated with the node, system-critical
// under the priority queue (system-maintenance when the descheduler asked).
func evacuation(cfg *clusterconfig.Config, vmi *virtv1.VirtualMachineInstance, node string) migration.System {
	s := migration.System{
		Prefix:      evacuationPrefix,
		NameParts:   []string{node},
		Annotations: map[string]string{virtv1.EvacuationMigrationAnnotation: node},
	}
	if cfg.MigrationPriorityQueueEnabled() {
		s.Priority = ptr.To(virtv1.PrioritySystemCritical)
		if vmi.Annotations[virtv1.EvictionSourceAnnotation] == "descheduler" {
			s.Priority = ptr.To(virtv1.PrioritySystemMaintenance)
		}
	}
	return s
}
