// Package vm is virtshard's VirtualMachine controller: what KubeVirt's
// virt-controller does for VirtualMachines — keep the VM's VMI running or
// stopped as its run strategy says, restart it after failures with a capped
// crash-loop backoff, and report the VM's printable status, readiness and
// conditions — run by every replica over only the ranges it holds.
//
// A VM's VMI carries the VM's range label, so the replica that holds a VM
// also holds its VMI (shard.Ranges.Owner); both come from the shared range
// caches (package caches). The controller creates and deletes VMIs with
// expectations, checks the shard fence before every write, and writes the
// VM's status only when it changed, with the cached resourceVersion as a
// precondition (virt-api and users append state change requests to it).
//
// It does not touch launcher pods: the VMI controller owns those.
package vm
