// Package replicaset is virtshard's VirtualMachineInstanceReplicaSet
// controller: what KubeVirt v1.8.1's virt-controller does for VMI replica
// sets (pkg/virt-controller/watch/replicaset) — keep spec.replicas VMIs of
// the template alive, delete finished ones, adopt matching orphans and
// release members that no longer match, and report replicas, ready
// replicas, the label selector and the Paused and ReplicaFailure
// conditions.
//
// A replica set is placed by its own key, and so is each VMI it creates:
// the members spread over every replica, which run their pods and status.
// Each member carries the set's range as its fleet's (shard.StampFleetRange),
// and the replica that holds the set counts, names, scales and deletes its
// members from that view (kinds.FleetVMIs). Orphans, which carry no fleet
// label, are found with a live list of those that match the selector, and
// enlisted (shard.Enlist) into the view (docs/controller.md).
package replicaset
