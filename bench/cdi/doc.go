// Package cdi is the local cluster's simulated CDI (Containerized Data
// Importer, v1.64.0, the version KubeVirt v1.8.1 builds against): what CDI
// writes that KubeVirt's controllers read, played at the API level beside
// the simulated virt-handler, with no importer pods and no data.
//
//   - DataVolumes get their claim (a PVC of the DataVolume's name, owned by
//     it) and move through the phases KubeVirt acts on: Pending, or
//     WaitForFirstConsumer while a claim of a WaitForFirstConsumer class
//     has no node; then ImportScheduled, ImportInProgress with its
//     progress, and Succeeded (CloneScheduled and CloneInProgress for a
//     clone, UploadScheduled and UploadReady for an upload), with CDI's
//     Bound, Running and Ready conditions.
//   - A provisioner makes the PersistentVolume of every claim of its
//     StorageClasses (StorageClassImmediate, StorageClassWaitForFirstConsumer)
//     once the class lets it (at once, or once the scheduler chose the
//     claim's node) and the claim's dataSource, if any, is there; the
//     cluster's own PersistentVolume controller binds them, and deletes
//     nothing: released volumes are deleted here.
//   - CDI's singletons KubeVirt reads: the CDI resource, CDIConfig "config"
//     (the filesystem overhead) and a StorageProfile per StorageClass.
//
// A DataVolume is told to fail by an annotation: ImportErrorAnnotation
// makes its importer fail over and over as CDI's does (Running False with
// reason Error, the restart count growing), FailedAnnotation puts it in
// phase Failed; HeldAnnotation holds its transfer half way.
//
// It must not decide anything KubeVirt's controllers decide; the local
// cluster starts it in the simulated virt-handler's process (bench/cluster).
package cdi
