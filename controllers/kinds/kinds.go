// Package kinds declares the kinds of object the replica's controllers
// share, as the range caches serve them (caches.Kind): what each lists and
// watches, how an object finds its range (shard.Placement), what the cache
// keeps of it, and the indexes every reader may use. A kind only one
// controller reads is declared in that controller's package instead.
//
// It declares; it must not act on objects.
package kinds

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
	migrationsv1 "kubevirt.io/api/migrations/v1alpha1"
	"slices"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/shard"
)

// Indexes the kinds keep for every reader.
const (
	// ByVMIUID indexes launcher pods (and migration target pods) by the UID
	// of the VMI that created them.
	ByVMIUID = "vmiUID"
	// ByVMIName indexes migrations by the namespace/name of their VMI.
	ByVMIName = "vmiName"
)

// VMIs are VirtualMachineInstances: on their VM's range when a VM created
// them (it stamps its range label), else on their own (a replica set's
// members too: the set sees them through FleetVMIs).
var VMIs = caches.Kind[*virtv1.VirtualMachineInstance]{
	Resource:  "virtualmachineinstances",
	Placement: shard.OwnersRangeOrOwnKey,
	ListWatch: func(c caches.Clients, ns string) cache.ListerWatcher {
		vmis := c.KubeVirt.VirtualMachineInstances(ns)
		return caches.ListWatchOf(vmis.List, vmis.Watch)
	},
	Trim: shard.TrimForCache,
}

// LauncherPods are the pods the controllers create for VMIs (launcher and
// migration target pods), on their VMI's range by the label stamped on
// them, trimmed to what the controllers read (TrimPod). Pods nobody
// stamped are not cached at all.
var LauncherPods = caches.Kind[*corev1.Pod]{
	Resource:  "pods",
	Placement: shard.OwnersRange,
	ListWatch: func(c caches.Clients, ns string) cache.ListerWatcher {
		pods := c.Kube.CoreV1().Pods(ns)
		return caches.ListWatchOf(pods.List, pods.Watch)
	},
	Trim: TrimPod,
	Indexers: cache.Indexers{ByVMIUID: func(obj any) ([]string, error) {
		return []string{obj.(*corev1.Pod).Labels[virtv1.CreatedByLabel]}, nil
	}},
}

// VMs are VirtualMachines, on their own range (a pool's too: the pool sees
// them through FleetVMs); a VM made by a version that stamped its pool's
// range label stays on the pool's range.
var VMs = caches.Kind[*virtv1.VirtualMachine]{
	Resource:  "virtualmachines",
	Placement: shard.OwnersRangeOrOwnKey,
	ListWatch: func(c caches.Clients, ns string) cache.ListerWatcher {
		vms := c.KubeVirt.VirtualMachines(ns)
		return caches.ListWatchOf(vms.List, vms.Watch)
	},
	Trim: shard.TrimForCache,
}

// FleetVMIs are the VMIs of fleets as their fleets see them: a replica
// set's members and the VMIs of a pool's VMs, selected by the fleet's range
// label (shard.FleetsRange), trimmed to what a fleet reads (trimFleetVMI).
// The VMIs themselves are acted on where VMIs are placed, so a fleet's
// work spreads over every replica; the fleet's replica counts, names and
// scales its members from this view.
var FleetVMIs = caches.Kind[*virtv1.VirtualMachineInstance]{
	Resource:  "fleet-virtualmachineinstances",
	Placement: shard.FleetsRange,
	ListWatch: VMIs.ListWatch,
	Trim:      trimFleetVMI,
}

// trimFleetVMI keeps of a fleet's VMI what its fleet reads: its metadata
// but for managed fields and annotations, its phase and its conditions.
func trimFleetVMI(obj any) (any, error) {
	v, ok := obj.(*virtv1.VirtualMachineInstance)
	if !ok {
		return obj, nil // a tombstone
	}
	kept := &virtv1.VirtualMachineInstance{TypeMeta: v.TypeMeta, ObjectMeta: v.ObjectMeta}
	kept.ManagedFields, kept.Annotations = nil, nil
	kept.Status.Phase, kept.Status.Conditions = v.Status.Phase, v.Status.Conditions
	return kept, nil
}

// FleetVMs are a pool's VMs as the pool sees them, whole (the pool
// compares and rewrites their specs), by the pool's range label
// (shard.FleetsRange); the VMs themselves are placed by their own keys.
var FleetVMs = caches.Kind[*virtv1.VirtualMachine]{
	Resource:  "fleet-virtualmachines",
	Placement: shard.FleetsRange,
	ListWatch: VMs.ListWatch,
	Trim:      shard.TrimForCache,
}

// Migrations are VirtualMachineInstanceMigrations: few, cached whole by
// every replica, which acts on those of the VMIs it holds.
var Migrations = caches.Kind[*virtv1.VirtualMachineInstanceMigration]{
	Resource:  "virtualmachineinstancemigrations",
	Placement: shard.ClusterWide,
	ListWatch: func(c caches.Clients, ns string) cache.ListerWatcher {
		migrations := c.KubeVirt.Migrations(ns)
		return cache.ToListWatcherWithWatchListSemantics(caches.ListWatchOf(migrations.List, migrations.Watch), c.KubeVirt)
	},
	Trim: shard.TrimForCache,
	Indexers: cache.Indexers{ByVMIName: func(obj any) ([]string, error) {
		m := obj.(*virtv1.VirtualMachineInstanceMigration)
		return []string{m.Namespace + "/" + m.Spec.VMIName}, nil
	}},
}

// Nodes are cluster-scoped and few: every replica caches all of them,
// trimmed (trimNode), and acts only on its own VMIs on them.
var Nodes = caches.Kind[*corev1.Node]{
	Resource:  "nodes",
	Placement: shard.ClusterWide,
	ListWatch: func(c caches.Clients, _ string) cache.ListerWatcher {
		nodes := c.Kube.CoreV1().Nodes()
		return cache.ToListWatcherWithWatchListSemantics(caches.ListWatchOf(nodes.List, nodes.Watch), c.Kube)
	},
	Trim: trimNode,
}

// MigrationPolicies are the cluster's MigrationPolicies
// (migrations.kubevirt.io), which every replica caches whole: a migration
// carries the configuration of the one that matches its VMI.
var MigrationPolicies = caches.Kind[*migrationsv1.MigrationPolicy]{
	Resource:  "migrationpolicies",
	Placement: shard.ClusterWide,
	ListWatch: func(c caches.Clients, _ string) cache.ListerWatcher {
		policies := c.KubeVirt.MigrationPolicies()
		return cache.ToListWatcherWithWatchListSemantics(caches.ListWatchOf(policies.List, policies.Watch), c.KubeVirt)
	},
	Trim: shard.TrimForCache,
}

// trimNode keeps what the controllers read of a node: its metadata (less
// managed fields), taints and conditions. Images and volumes can be most of
// a node object.
func trimNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	node.ManagedFields = nil
	node.Status = corev1.NodeStatus{Conditions: node.Status.Conditions}
	return node, nil
}

// PodsOf returns the cached pods vmi created in range r: its launcher pods
// and its migrations' target pods (read only).
func PodsOf(r *caches.Range, vmi *virtv1.VirtualMachineInstance) []*corev1.Pod {
	pods, _ := LauncherPods.In(r).ByIndex(ByVMIUID, string(vmi.UID)) // the index is the kind's own
	return pods
}

// PodFinished reports whether pod ran to its end (Succeeded or Failed).
func PodFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// UnfinishedMigration reports whether the VMI has a migration that has not
// ended (KubeVirt's ActiveMigrationExistsForVMI).
func UnfinishedMigration(c *caches.Ranges, vmi *virtv1.VirtualMachineInstance) bool {
	return AnyUnfinished(MigrationsOf(c, vmi.Namespace+"/"+vmi.Name))
}

// AnyUnfinished reports whether one of ms has not ended.
func AnyUnfinished(ms []*virtv1.VirtualMachineInstanceMigration) bool {
	return slices.ContainsFunc(ms, func(m *virtv1.VirtualMachineInstanceMigration) bool { return !m.IsFinal() })
}

// MigrationsOf returns the cached migrations of the VMI namespace/name.
func MigrationsOf(c *caches.Ranges, vmiKey string) []*virtv1.VirtualMachineInstanceMigration {
	ms, _ := Migrations.All(c).ByIndex(ByVMIName, vmiKey)
	return ms
}
