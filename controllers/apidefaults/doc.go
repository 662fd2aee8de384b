// Package apidefaults applies the defaults that virt-api's mutating webhook
// gives a VirtualMachineInstance on CREATE, for VMIs that never pass through
// virt-api: hand-written VMIs rendered with `virtshard-render --api-defaults`
// and local clusters that run without virt-api.
//
// It owns one function, Apply, which mirrors KubeVirt v1.8.1's
// VMIsMutator.Mutate create branch (virt-api's vmi-mutator.go):
// ApplyNewVMIMutations — pkg/defaults' SetDefaultVirtualMachineInstance, the
// PCI topology version annotation, the EmulatorThreadCompleteToEvenParity
// annotation and the non-root runtime user — followed by the foreground-delete
// finalizer, phase Pending and its transition timestamp. Where KubeVirt calls
// kubevirt.io/api's generated SetObjectDefaults_VirtualMachineInstance, so
// does Apply. The result is what the API server would store: the webhook's
// patch is JSON, so Apply ends with a JSON round trip (timestamps to whole
// seconds, empty lists dropped, no pointers shared with the cluster
// configuration or kubevirt.io/api's package-level booleans).
//
// Where KubeVirt would dereference a configuration field a KubeVirt CR set
// to null (networkConfiguration, its permitBridgeInterfaceOnPodNetwork,
// cpuRequest), Apply returns an error or reads the field as unset instead.
//
// VirtualMachineInstancePresets, which Mutate applies before anything else,
// are deprecated (KubeVirt warns they "will be removed in v2") and are not
// applied: a VMI that needs one must carry its fields itself.
//
// It must not import kubevirt.io/kubevirt (the main module does not carry
// it), must not read the cluster other than through the Cluster interface,
// must not modify what Cluster returns, and must not add behaviour of its
// own: any difference from virt-api's output is a bug. The table tests take
// their cases and expected values from KubeVirt's own tests; the
// conformance corpus (test/conformance), defaulted by KubeVirt's code, is
// the wider check.
package apidefaults
