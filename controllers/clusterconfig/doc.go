// Package clusterconfig owns virtshard's view of the cluster configuration:
// the effective kubevirt.io/api KubeVirtConfiguration that KubeVirt v1.8.1's
// virt-controller derives from the KubeVirt CR (pkg/virt-config), and the
// typed accessors its template service, controllers and defaulting code read
// it through.
//
// It reproduces pkg/virt-config's semantics, not its code:
//   - Defaults is defaultClusterConfig, field by field.
//   - FromKubeVirt is setConfigFromKubeVirt plus validateConfig: the CR's
//     spec.configuration JSON-merged over the defaults (encoding/json's
//     rules are the merge rules), DefaultArchitecture from the CR's status,
//     and an error for what KubeVirt rejects.
//   - Config.FeatureGateEnabled is isFeatureGateEnabled over v1.8.1's gate
//     registry (featuregate/active.go, inactive.go): GA gates always on,
//     every other name on when listed.
//   - Watcher is GetConfig/GetConfigFromKubeVirtCR over an informer: it uses
//     a CR in its namespace that is not being deleted and has a status
//     phase, keeps the last valid configuration when a CR's is invalid or
//     the CR goes away, and serves the defaults before any CR.
//
// Where it differs from KubeVirt on purpose (a deterministic choice among
// several CRs, callbacks only on effective changes, no mutation of the shared
// configuration) the doc comment of the function concerned says so.
//
// It must not write to the API server or act on any object, must not import
// kubevirt.io/kubevirt (KubeVirt's code is only a reference), and does not
// watch CRDs: ClusterConfig's HasDataVolumeAPI and the like belong to
// whoever needs them.
package clusterconfig
