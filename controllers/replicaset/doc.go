// Package replicaset is virtshard's VirtualMachineInstanceReplicaSet
// controller: what KubeVirt v1.8.1's virt-controller does for VMI replica
// sets (pkg/virt-controller/watch/replicaset) — keep spec.replicas VMIs of
// the template alive, delete finished ones, adopt matching orphans and
// release members that no longer match, and report replicas, ready
// replicas, the label selector and the Paused and ReplicaFailure
// conditions.
//
// A replica set is placed by its own key; the VMIs it creates carry its
// range label (shard.StampRange), so the replica that holds the set holds
// every member and counts them from its range cache. Orphans are the
// exception: a VMI a user created on its own lives on its own key's range,
// which another replica may hold, so the set finds unlabelled orphans
// that match its selector with a live list (docs/controller.md).
package replicaset
