// Package workloadupdate is virtshard's workload updater: what KubeVirt's
// (pkg/virt-controller/watch/workload-updater) does once a new release's
// virt-launcher is installed, or a running VM's change waits for a
// migration.
//
// It finds the running VMIs whose launcher is not the image the controller
// renders now (status.launcherContainerImageVersion), and those with a CPU,
// memory or volume change that needs a migration (the VM controller's
// conditions); counts them into the KubeVirt CR's
// status.outdatedVirtualMachineInstanceWorkloads and
// kubevirt_vmi_number_of_outdated; and, as the CR's
// spec.workloadUpdateStrategy allows, migrates them
// (kubevirt-workload-update-* migrations, within parallelMigrationsPerCluster)
// or evicts their launcher pods (batchEvictionSize per
// batchEvictionInterval, 10 per minute by default). A change called off
// (the abortion annotation, or a change gone before the target domain was
// ready) has its migration deleted. Nothing happens without a KubeVirt CR
// or while virt-operator deploys.
//
// KubeVirt's runs once, over the whole cluster. Here each replica runs it
// over the VMIs of the ranges it acts on, and the cluster-wide parts are
// shared (docs/sharding.md, "Workload updates"):
//   - the count: each replica writes its ranges' counts into one record,
//     a ConfigMap of the replicas' namespace, and the sum goes to the CR;
//   - the evictions of the last interval are in that record too: a
//     replica is granted, through a conditional update, what leaves at
//     most batchEvictionSize within any batchEvictionInterval, so the
//     cluster evicts no faster than the CR allows;
//   - the migrations: each replica creates its share of the room the
//     cluster-wide limit leaves (every replica caches all migrations),
//     and the migration controller's permits hold the limit.
package workloadupdate
