// Package vmi is virtshard's VMI controller: what KubeVirt's virt-controller
// does for VirtualMachineInstances — render and create the virt-launcher pod,
// follow it through scheduling, and hand the VMI to the node agent — run by
// every replica over only the shard ranges it holds.
//
// Per held range it runs a VMI informer (shard selector on the VMI's uid)
// and a launcher-pod informer (range label); cluster-wide it keeps
// metadata-only PVCs and the (few) migrations. Event handlers only enqueue;
// workers reconcile from the caches, create pods with expectations, and send
// status through the batcher, checking the shard fence before every write.
package vmi
