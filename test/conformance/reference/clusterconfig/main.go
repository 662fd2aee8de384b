// Command clusterconfig runs KubeVirt v1.8.1's own pkg/virt-config on
// cases.yaml and writes what virt-controller's ClusterConfig makes of each
// CR: whether it accepted the configuration, the effective
// KubeVirtConfiguration, and the value of every accessor virtshard
// reproduces. TestMatchesKubeVirt holds package clusterconfig against its
// output, kubevirt-v1.8.1.json.
//
// It is part of the conformance reference module, which carries
// kubevirt.io/kubevirt and its replace directives; make generate runs it:
//
//	go run ./clusterconfig ../../../controllers/clusterconfig/testdata/cases.yaml \
//	  > ../../../controllers/clusterconfig/testdata/kubevirt-v1.8.1.json
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"

	k8sv1 "k8s.io/api/core/v1"
	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"kubevirt.io/kubevirt/pkg/testutils"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	fg "kubevirt.io/kubevirt/pkg/virt-config/featuregate"
)

type testCase struct {
	Name     string       `json:"name"`
	KubeVirt *v1.KubeVirt `json:"kubevirt,omitempty"`
}

type result struct {
	Name      string                    `json:"name"`
	Valid     bool                      `json:"valid"`
	Config    *v1.KubeVirtConfiguration `json:"config"`
	Accessors map[string]any            `json:"accessors"`
}

type output struct {
	// GateStates is featuregate.FeatureGateInfo for every gate constant.
	GateStates map[string]string `json:"gateStates"`
	Cases      []result          `json:"cases"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: reference CASES.yaml")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "reference:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cases []testCase
	if err := yaml.UnmarshalStrict(data, &cases); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	out := output{GateStates: gateStates()}
	for _, tc := range cases {
		cc, kv := clusterConfig(tc.KubeVirt)
		// GetConfig first: GetMigrationConfiguration writes into it.
		r := result{Name: tc.Name, Config: cc.GetConfig().DeepCopy()}
		r.Valid = kv == nil || cc.GetResourceVersion() == kv.ResourceVersion
		r.Accessors = accessors(cc)
		out.Cases = append(out.Cases, r)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// clusterConfig is virt-controller's ClusterConfig for a cluster whose only
// KubeVirt CR is kv, deployed in namespace kubevirt; none when kv is nil.
func clusterConfig(kv *v1.KubeVirt) (*virtconfig.ClusterConfig, *v1.KubeVirt) {
	if kv == nil {
		crds, _ := testutils.NewFakeInformerFor(&extv1.CustomResourceDefinition{})
		kvs, _ := testutils.NewFakeInformerFor(&v1.KubeVirt{})
		cc, err := virtconfig.NewClusterConfigWithCPUArch(crds, kvs, "kubevirt", "amd64")
		if err != nil {
			panic(err)
		}
		return cc, nil
	}
	kv.Namespace, kv.Name = "kubevirt", "kubevirt"
	cc, _, _ := testutils.NewFakeClusterConfigUsingKVWithCPUArch(kv, "amd64")
	return cc, kv
}

var (
	arches         = []string{"amd64", "arm64", "s390x", ""}
	supportTypes   = []v1.SupportContainerType{v1.HotplugAttachment, v1.ContainerDisk, v1.VirtioFS, v1.SideCar, v1.VMExport, v1.GuestConsoleLog}
	supportNames   = []k8sv1.ResourceName{k8sv1.ResourceCPU, k8sv1.ResourceMemory}
	annotationKeys = []string{v1.EmulatorThreadCompleteToEvenParity, v1.VGADisplayForEFIGuestsX86Annotation}
)

func accessors(cc *virtconfig.ClusterConfig) map[string]any {
	a := map[string]any{
		"imagePullPolicy":                    cc.GetImagePullPolicy(),
		"memoryOvercommit":                   cc.GetMemoryOvercommit(),
		"cpuAllocationRatio":                 cc.GetCPUAllocationRatio(),
		"additionalGuestMemoryOverheadRatio": cc.GetConfig().AdditionalGuestMemoryOverheadRatio,
		"cpuRequest":                         cc.GetCPURequest(),
		"cpuModel":                           cc.GetCPUModel(),
		"defaultRuntimeClass":                cc.GetDefaultRuntimeClass(),
		"selinuxLauncherType":                cc.GetSELinuxLauncherType(),
		"vmStateStorageClass":                cc.GetVMStateStorageClass(),
		"allowEmulation":                     cc.AllowEmulation(),
		"nodeSelectors":                      cc.GetNodeSelectors(),
		"permittedHostDevices":               cc.GetPermittedHostDevices(),
		"evictionStrategy":                   cc.GetConfig().EvictionStrategy,
		"networkBindings":                    cc.GetNetworkBindings(),
		"defaultNetworkInterface":            cc.GetDefaultNetworkInterface(),
		"obsoleteCPUModels":                  cc.GetObsoleteCPUModels(),
		"migrations":                         cc.GetMigrationConfiguration(),
		"defaultArchitecture":                cc.GetDefaultArchitecture(),
		"clusterCPUArch":                     cc.GetClusterCPUArch(),
		"virtLauncherVerbosity":              cc.GetVirtLauncherVerbosity(),
		"virtControllerVerbosity":            cc.GetVirtControllerVerbosity(""),
		"virtControllerVerbosity/node01":     cc.GetVirtControllerVerbosity("node01"),
		"diskVerification":                   cc.GetDiskVerification(),
		"hypervisor":                         cc.GetHypervisor(),
		"maxHotplugRatio":                    cc.GetMaxHotplugRatio(),
		"maximumCpuSockets":                  cc.GetMaximumCpuSockets(),
		"maximumGuestMemory":                 cc.GetMaximumGuestMemory(),
		"vmRolloutStrategyLiveUpdate":        cc.IsVMRolloutStrategyLiveUpdate(),
		"instancetypeReferencePolicy":        cc.GetInstancetypeReferencePolicy(),
		"minimumClusterTSCFrequency":         cc.GetMinimumClusterTSCFrequency(),
		"serialConsoleLogDisabled":           cc.IsSerialConsoleLogDisabled(),
		"freePageReportingDisabled":          cc.IsFreePageReportingDisabled(),
		"memBalloonStatsPeriod":              cc.GetMemBalloonStatsPeriod(),
		"smbios":                             cc.GetSMBIOS(),
		"supportedGuestAgentVersions":        cc.GetSupportedAgentVersions(),
		"lessPVCSpaceToleration":             cc.GetLessPVCSpaceToleration(),
		"minimumReservePVCBytes":             cc.GetMinimumReservePVCBytes(),
		"mediatedDevicesHandlingDisabled":    cc.MediatedDevicesHandlingDisabled(),
	}
	kv := cc.GetConfigFromKubeVirtCR()
	a["kubeVirtPresent"] = kv != nil
	for _, key := range annotationKeys {
		present := false
		if kv != nil {
			_, present = kv.Annotations[key]
		}
		a["annotation/"+key] = present
	}
	for _, arch := range arches {
		a["machineType/"+arch] = cc.GetMachineType(arch)
		a["ovmfPath/"+arch] = cc.GetOVMFPath(arch)
		a["emulatedMachines/"+arch] = cc.GetEmulatedMachines(arch)
	}
	for _, t := range supportTypes {
		for _, n := range supportNames {
			a[fmt.Sprintf("supportContainerRequest/%s/%s", t, n)] = quantity(cc.GetSupportContainerRequest(t, n))
			a[fmt.Sprintf("supportContainerLimit/%s/%s", t, n)] = quantity(cc.GetSupportContainerLimit(t, n))
		}
	}
	// Every parameterless ...Enabled() bool helper: the feature gates and
	// the rest.
	v := reflect.ValueOf(cc)
	for i := 0; i < v.NumMethod(); i++ {
		m := v.Type().Method(i)
		if strings.HasSuffix(m.Name, "Enabled") && m.Type.NumIn() == 1 && m.Type.NumOut() == 1 && m.Type.Out(0).Kind() == reflect.Bool {
			a["method/"+m.Name] = v.Method(i).Call(nil)[0].Bool()
		}
	}
	return a
}

func quantity(q *resource.Quantity) any {
	if q == nil {
		return nil
	}
	return q.String()
}

func gateStates() map[string]string {
	names := []string{
		// active.go
		fg.ExpandDisksGate, fg.CPUManager, fg.IgnitionGate, fg.HypervStrictCheckGate, fg.SidecarGate,
		fg.HostDevicesGate, fg.SnapshotGate, fg.VMExportGate, fg.HotplugVolumesGate, fg.HostDiskGate,
		fg.UtilityVolumesGate, fg.DownwardMetricsFeatureGate, fg.Root, fg.WorkloadEncryptionSEV,
		fg.WorkloadEncryptionTDX, fg.VSOCKGate, fg.KubevirtSeccompProfile, fg.PersistentReservation,
		fg.AlignCPUsGate, fg.NodeRestrictionGate, fg.ImageVolume, fg.LibvirtHooksServerAndClient,
		fg.IncrementalBackupGate, fg.VirtIOFSStorageVolumeGate, fg.GPUsWithDRAGate, fg.HostDevicesWithDRAGate,
		fg.PCINUMAAwareTopologyEnabled, fg.DecentralizedLiveMigration, fg.ObjectGraph,
		fg.DeclarativeHotplugVolumesGate, fg.SecureExecution, fg.VideoConfig, fg.PanicDevicesGate,
		fg.PasstBinding, fg.MigrationPriorityQueue, fg.ConfigurableHypervisor,
		fg.PodSecondaryInterfaceNamingUpgrade, fg.ExternalNetResourceInjection, fg.RebootPolicy, fg.Template,
		fg.VmiMemoryOverheadReport, fg.ContainerPathVolumesGate, fg.OptOutRoleAggregation, fg.LiveUpdateNADRef,
		fg.ReservedOverheadMemlock,
		// inactive.go
		fg.LiveMigrationGate, fg.SRIOVLiveMigrationGate, fg.NonRoot, fg.PSA, fg.CPUNodeDiscoveryGate,
		fg.NUMAFeatureGate, fg.GPUGate, fg.VMLiveUpdateFeaturesGate, fg.CommonInstancetypesDeploymentGate,
		fg.HotplugNetworkIfacesGate, fg.BochsDisplayForEFIGuests, fg.AutoResourceLimitsGate,
		fg.DockerSELinuxMCSWorkaround, fg.NetworkBindingPlugingsGate, fg.DynamicPodInterfaceNamingGate,
		fg.PasstGate, fg.MacvtapGate, fg.PasstIPStackMigration, fg.VirtIOFSGate, fg.VolumesUpdateStrategy,
		fg.VolumeMigration, fg.DisableCustomSELinuxPolicy, fg.ClusterProfiler, fg.VMPersistentState,
		fg.InstancetypeReferencePolicy, fg.MultiArchitecture, fg.VirtIOFSConfigVolumesGate,
		fg.DisableMediatedDevicesHandling,
	}
	states := map[string]string{}
	for _, n := range names {
		if info := fg.FeatureGateInfo(n); info != nil {
			states[n] = string(info.State)
		}
	}
	return states
}
