// Package pool is virtshard's VirtualMachinePool controller: what KubeVirt
// v1.8.1's virt-controller does for pools of VMs (pkg/virt-controller/watch/pool)
// — keep spec.replicas VMs named <pool>-<index>, each from the pool's
// template with its index applied to its DataVolume templates (and, if
// asked, its ConfigMap and Secret references), record the spec each VM was
// made from in a ControllerRevision, and report replicas, ready replicas
// and the pool's conditions.
//
// It also heals VMs that keep failing to start, scales in by the pool's
// selection policy, rewrites VMs made from an older template and restarts
// the VMIs started from one (maxUnavailable at a time), and prunes the
// revisions nothing is at. Scale-in state preservation is not built.
//
// A pool is placed by its own key, and so is each of its VMs (their VMIs
// follow their VM's range): the VMs spread over every replica. Each VM
// carries the pool's range as its fleet's (shard.StampFleetRange), and
// passes it on to its VMI, and the replica that holds the pool reads them
// from that view (kinds.FleetVMs, kinds.FleetVMIs); the pool's revisions
// carry its range label and live on its range.
package pool
