// Package migration is virtshard's live migration controller: what
// KubeVirt's virt-controller does for VirtualMachineInstanceMigrations —
// create the target launcher pod away from the source node, hand the
// migration to the node agents through the VMI's status.migrationState, and
// follow it to Succeeded or Failed — run by the replica that holds the
// migrating VMI's range.
//
// KubeVirt's limits (parallelMigrationsPerCluster, parallelOutboundMigrationsPerNode)
// hold across all replicas together: a migration takes a permit from one
// cluster-wide table (a ConfigMap, written only with the resourceVersion it
// was read at) before its target pod is created, and gives it back only
// once its final phase is written. Permits belong to migrations, not to
// replicas, so a replica dying or a range moving changes nothing: the next
// owner finds the permit and goes on. The limits are the KubeVirt CR's
// (clusterconfig), read at every grant, unless the replica overrides them.
// See docs/migrations.md.
//
// It does not create launcher pods for VMIs (the VMI controller does) and
// does not play the node side (virt-handler does; in tests and the bench,
// the simulated one of bench/handler).
package migration
