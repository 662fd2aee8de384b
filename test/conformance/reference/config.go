package main

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/testutils"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
)

const (
	// clusterArch is the architecture virt-operator records in the CR's
	// status.defaultArchitecture (its own runtime.GOARCH, see
	// operatorutil.SetDefaultArchitecture) and the one the cluster config is
	// built for; fixed so that the output does not depend on the host.
	clusterArch = "amd64"

	kubeVirtNamespace = "kubevirt"
	kubeVirtName      = "kubevirt"
)

// newClusterConfig builds virt-controller's view of the KubeVirt CR kv, or of
// a CR with an empty configuration when kv is nil.
func newClusterConfig(kv *v1.KubeVirt) (*virtconfig.ClusterConfig, error) {
	if kv == nil {
		kv = &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: kubeVirtNamespace, Name: kubeVirtName}}
	}
	kv = kv.DeepCopy()
	if kv.Namespace == "" {
		kv.Namespace = kubeVirtNamespace
	}
	if kv.Name == "" {
		kv.Name = kubeVirtName
	}
	// ClusterConfig looks the CR up in the namespace it was built for, which
	// testutils fixes to "kubevirt".
	if kv.Namespace != kubeVirtNamespace {
		return nil, fmt.Errorf("KubeVirt CR must be in namespace %q, not %q", kubeVirtNamespace, kv.Namespace)
	}
	// GetConfigFromKubeVirtCR ignores a CR whose status.phase is empty and
	// then serves built-in defaults; a deployed CR has phase Deployed
	// (testutils sets it too). status.defaultArchitecture is what
	// virt-operator writes: spec's architectureConfiguration.defaultArchitecture
	// when set, else its own architecture.
	kv.Status.Phase = v1.KubeVirtPhaseDeployed
	if arch := kv.Spec.Configuration.ArchitectureConfiguration; arch != nil && arch.DefaultArchitecture != "" {
		kv.Status.DefaultArchitecture = arch.DefaultArchitecture
	} else if kv.Status.DefaultArchitecture == "" {
		kv.Status.DefaultArchitecture = clusterArch
	}

	clusterConfig, _, _ := testutils.NewFakeClusterConfigUsingKVWithCPUArch(kv, clusterArch)
	if err := checkConfigApplied(clusterConfig, kv); err != nil {
		return nil, err
	}
	return clusterConfig, nil
}

// checkConfigApplied fails when ClusterConfig rejected the CR's configuration:
// GetConfig then only logs and silently serves the built-in defaults, which
// would make a corpus case exercise something other than what it says. It
// repeats GetConfig's merge (the CR's configuration as JSON over the
// defaults) and compares.
func checkConfigApplied(clusterConfig *virtconfig.ClusterConfig, kv *v1.KubeVirt) error {
	defaults, _, _ := testutils.NewFakeClusterConfigUsingKVWithCPUArch(&v1.KubeVirt{
		ObjectMeta: metav1.ObjectMeta{Namespace: kubeVirtNamespace, Name: kubeVirtName},
	}, clusterArch)
	want := defaults.GetConfig().DeepCopy()
	overrides, err := json.Marshal(&kv.Spec.Configuration)
	if err != nil {
		return fmt.Errorf("marshal KubeVirt configuration: %w", err)
	}
	if err := json.Unmarshal(overrides, want); err != nil {
		return fmt.Errorf("merge KubeVirt configuration: %w", err)
	}
	if want.ArchitectureConfiguration == nil {
		want.ArchitectureConfiguration = &v1.ArchConfiguration{}
	}
	want.ArchitectureConfiguration.DefaultArchitecture = kv.Status.DefaultArchitecture
	if !equality.Semantic.DeepEqual(want, clusterConfig.GetConfig()) {
		return fmt.Errorf("KubeVirt CR configuration was rejected by virt-config (see its log above); KubeVirt would fall back to defaults")
	}
	return nil
}
