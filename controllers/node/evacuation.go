package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
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
		if s.EvacuationNodeName != "" && s.EvacuationNodeName == node && !migrating(h.Object, now) {
			out = append(out, h)
		}
	}
	return out
}

// migrating: the VMI's migration state says one started and has not
// ended.
func migrating(vmi *virtv1.VirtualMachineInstance, now time.Time) bool {
	m := vmi.Status.MigrationState
	if m == nil || m.StartTimestamp == nil || m.StartTimestamp.After(now) {
		return false
	}
	return m.EndTimestamp == nil || m.EndTimestamp.After(now)
}

// evacuate creates the node's evacuation migrations and returns when to
// look at the node again.
func (c *Controller) evacuate(ctx context.Context, node *corev1.Node, vmis []held) (time.Duration, error) {
	leaving := vmis
	if !drained(node, c.drainTaintKey()) {
		leaving = markedToLeave(node.Name, vmis)
	}
	cfg := c.env.ClusterConfig.Current()
	candidates, cannot := c.sortCandidates(cfg, leaving)
	if len(candidates) == 0 && len(cannot) == 0 {
		return evacuationRecheck, nil
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
			return evacuationRecheck, nil
		}
		candidates = candidates[:take]
	}
	var errs []error
	for _, h := range candidates {
		if err := c.createEvacuation(ctx, cfg, node.Name, h); err != nil {
			errs = append(errs, err)
		}
	}
	return evacuationRecheck, errors.Join(errs...)
}

// sortCandidates splits the VMIs to leave into those to migrate now and
// those that cannot migrate, as KubeVirt's filterRunningNonMigratingVMIs:
// VMIs going away, not migrated on eviction (their eviction strategy, or
// the cluster's), with a migration under way or a second pod still there
// are neither.
func (c *Controller) sortCandidates(cfg *clusterconfig.Config, leaving []held) (candidates, cannot []held) {
	for _, h := range leaving {
		vmi := h.Object
		if !c.rt.Holds(h.Range.Index) || vmi.IsFinal() || vmi.DeletionTimestamp != nil || !migratesOnEviction(cfg, vmi) {
			continue
		}
		if !migratableNow(vmi) {
			cannot = append(cannot, h)
			continue
		}
		if hasUnfinishedMigration(c.env, vmi) || activePods(h) > 1 {
			continue
		}
		candidates = append(candidates, h)
	}
	return candidates, cannot
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
		return migratableNow(vmi)
	}
	return false
}

// migratableNow: the node agent says the VMI can live-migrate.
func migratableNow(vmi *virtv1.VirtualMachineInstance) bool {
	for _, cond := range vmi.Status.Conditions {
		if cond.Type == virtv1.VirtualMachineInstanceIsMigratable {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasUnfinishedMigration(env *sharded.Env, vmi *virtv1.VirtualMachineInstance) bool {
	for _, m := range kinds.MigrationsOf(env.Caches, vmi.Namespace+"/"+vmi.Name) {
		if !m.IsFinal() {
			return true
		}
	}
	return false
}

// activePods counts the VMI's pods that have not terminated.
func activePods(h held) int {
	n := 0
	for _, pod := range kinds.PodsOf(h.Range, h.Object) {
		if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
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
func (c *Controller) createEvacuation(ctx context.Context, cfg *clusterconfig.Config, node string, h held) error {
	vmi := h.Object
	taken := map[string]bool{}
	for _, m := range kinds.MigrationsOf(c.env.Caches, vmi.Namespace+"/"+vmi.Name) {
		taken[m.Name] = true
	}
	m := &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{
			Name:         evacuationName(vmi, node, taken),
			GenerateName: evacuationPrefix, // KubeVirt's, kept as a record beside the derived name
			Namespace:    vmi.Namespace,
			Annotations:  map[string]string{virtv1.EvacuationMigrationAnnotation: node},
		},
		Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
	}
	if cfg.MigrationPriorityQueueEnabled() {
		m.Spec.Priority = ptr.To(virtv1.PrioritySystemCritical)
		if vmi.Annotations[virtv1.EvictionSourceAnnotation] == "descheduler" {
			m.Spec.Priority = ptr.To(virtv1.PrioritySystemMaintenance)
		}
	}
	var created *virtv1.VirtualMachineInstanceMigration
	err := c.rt.Write(ctx, h.Range.Index, func(ctx context.Context) (err error) {
		created, err = c.env.KubeVirt.Migrations(vmi.Namespace).Create(ctx, m, metav1.CreateOptions{})
		return err
	})
	if errors.Is(err, sharded.ErrNotHeld) || apierrors.IsAlreadyExists(err) {
		return nil // another replica's now, or one that holds it created it
	}
	if err != nil {
		c.evacuations.Eventf(vmi, corev1.EventTypeWarning, reasonFailedCreate, "Error creating a Migration: %v", err)
		return fmt.Errorf("create evacuation migration of %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	c.evacuations.Eventf(vmi, corev1.EventTypeNormal, reasonCreated, "Created Migration %s", created.Name)
	return nil
}

// evacuationName is the name of the next evacuation migration of vmi off
// node: KubeVirt's GenerateName prefix, kubevirt-evacuation-, and a suffix
// derived from the VMI, the node and the first attempt whose name none of
// the VMI's migrations has (taken), so that two replicas deciding from the
// same migrations pick one name (sharded.ChildName).
func evacuationName(vmi *virtv1.VirtualMachineInstance, node string, taken map[string]bool) string {
	for attempt := 0; ; attempt++ {
		if name := sharded.ChildName(evacuationPrefix, string(vmi.UID), node, strconv.Itoa(attempt)); !taken[name] {
			return name
		}
	}
}
