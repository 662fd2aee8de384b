package clusterconfig

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// reference is testdata/kubevirt-v1.8.1.json, what KubeVirt's own
// pkg/virt-config makes of testdata/cases.yaml (make generate runs test/conformance/reference/clusterconfig).
type reference struct {
	GateStates map[string]string `json:"gateStates"`
	Cases      []struct {
		Name      string          `json:"name"`
		Valid     bool            `json:"valid"`
		Config    json.RawMessage `json:"config"`
		Accessors map[string]any  `json:"accessors"`
	} `json:"cases"`
}

type referenceCase struct {
	Name     string           `json:"name"`
	KubeVirt *virtv1.KubeVirt `json:"kubevirt,omitempty"`
}

func loadReference(t *testing.T) ([]referenceCase, reference) {
	t.Helper()
	data, err := os.ReadFile("testdata/cases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cases []referenceCase
	if err := yaml.UnmarshalStrict(data, &cases); err != nil {
		t.Fatal(err)
	}
	data, err = os.ReadFile("testdata/kubevirt-v1.8.1.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Cases) != len(cases) {
		t.Fatalf("%d cases but %d reference results: regenerate testdata/kubevirt-v1.8.1.json", len(cases), len(ref.Cases))
	}
	return cases, ref
}

func TestMatchesKubeVirt(t *testing.T) {
	cases, ref := loadReference(t)
	for i, tc := range cases {
		want := ref.Cases[i]
		t.Run(tc.Name, func(t *testing.T) {
			if want.Name != tc.Name {
				t.Fatalf("reference case %d is %q: regenerate testdata/kubevirt-v1.8.1.json", i, want.Name)
			}
			// The Watcher's path, from a cluster on the defaults.
			w := &Watcher{namespace: DefaultNamespace, arch: "amd64", logger: klog.Background()}
			c := DefaultConfig("amd64")
			if tc.KubeVirt != nil {
				kv := tc.KubeVirt.DeepCopy()
				kv.Namespace, kv.Name, kv.ResourceVersion = "kubevirt", "kubevirt", "1"
				kv.Status.Phase = virtv1.KubeVirtPhaseDeployed
				c = w.next(c, toUnstructured(t, kv))
			}
			if valid := w.err == nil; valid != want.Valid {
				t.Errorf("valid = %v (%v), KubeVirt: %v", valid, w.err, want.Valid)
			}
			if diff := cmp.Diff(normalize(t, want.Config), normalize(t, c.Configuration())); diff != "" {
				t.Errorf("effective configuration (-KubeVirt +virtshard):\n%s", diff)
			}
			got := accessors(t, c, want.Accessors)
			if diff := cmp.Diff(normalize(t, want.Accessors), normalize(t, got)); diff != "" {
				t.Errorf("accessors (-KubeVirt +virtshard):\n%s", diff)
			}
		})
	}
}

func TestGateStatesMatchKubeVirt(t *testing.T) {
	_, ref := loadReference(t)
	got := map[string]string{}
	for name, s := range gateStates {
		got[name] = string(s)
	}
	if diff := cmp.Diff(ref.GateStates, got); diff != "" {
		t.Errorf("gate states (-KubeVirt +virtshard):\n%s", diff)
	}
}

// otherGateHelpers are KubeVirt's ClusterConfig gate helpers this package
// has no method for, with the gate each reads (pkg/virt-config/
// feature-gates.go); their reference values hold FeatureGateEnabled.
var otherGateHelpers = map[string]string{
	"ExpandDisksEnabled":                "ExpandDisks",
	"CPUManagerEnabled":                 "CPUManager",
	"NUMAEnabled":                       "NUMA",
	"DownwardMetricsEnabled":            "DownwardMetrics",
	"IgnitionEnabled":                   "ExperimentalIgnitionSupport",
	"CPUNodeDiscoveryEnabled":           "CPUNodeDiscovery",
	"SidecarEnabled":                    "Sidecar",
	"GPUPassthroughEnabled":             "GPU",
	"HostDiskEnabled":                   "HostDisk",
	"VirtiofsStorageEnabled":            "EnableVirtioFsStorageVolumes",
	"HostDevicesPassthroughEnabled":     "HostDevices",
	"WorkloadEncryptionSEVEnabled":      "WorkloadEncryptionSEV",
	"WorkloadEncryptionTDXEnabled":      "WorkloadEncryptionTDX",
	"VSOCKEnabled":                      "VSOCK",
	"KubevirtSeccompProfileEnabled":     "KubevirtSeccompProfile",
	"PersistentReservationEnabled":      "PersistentReservation",
	"MultiArchitectureEnabled":          "MultiArchitecture",
	"VideoConfigEnabled":                "VideoConfig",
	"NodeRestrictionEnabled":            "NodeRestriction",
	"ObjectGraphEnabled":                "ObjectGraph",
	"SecureExecutionEnabled":            "SecureExecution",
	"PanicDevicesEnabled":               "PanicDevices",
	"DecentralizedLiveMigrationEnabled": "DecentralizedLiveMigration",
	"PCINUMAAwareTopologyEnabled":       "PCINUMAAwareTopology",
	"RebootPolicyEnabled":               "RebootPolicy",
	"TemplateEnabled":                   "Template",
	"OptOutRoleAggregationEnabled":      "OptOutRoleAggregation",
	"ReservedOverheadMemlockEnabled":    "ReservedOverheadMemlock",
}

// accessors mirrors testdata/reference's function of the same name, key for
// key. The ...Enabled helpers are matched by name through reflection, on
// the keys KubeVirt reported; each of this package's must be among them,
// and each of KubeVirt's must be this package's or in otherGateHelpers.
func accessors(t *testing.T, c *Config, kubeVirt map[string]any) map[string]any {
	a := map[string]any{
		"imagePullPolicy":                    c.ImagePullPolicy(),
		"memoryOvercommit":                   c.MemoryOvercommit(),
		"cpuAllocationRatio":                 c.CPUAllocationRatio(),
		"additionalGuestMemoryOverheadRatio": c.AdditionalGuestMemoryOverheadRatio(),
		"cpuRequest":                         c.CPURequest(),
		"cpuModel":                           c.CPUModel(),
		"defaultRuntimeClass":                c.DefaultRuntimeClass(),
		"selinuxLauncherType":                c.SELinuxLauncherType(),
		"vmStateStorageClass":                c.VMStateStorageClass(),
		"allowEmulation":                     c.AllowEmulation(),
		"nodeSelectors":                      c.NodeSelectors(),
		"permittedHostDevices":               c.PermittedHostDevices(),
		"evictionStrategy":                   c.EvictionStrategy(),
		"networkBindings":                    c.NetworkBindings(),
		"defaultNetworkInterface":            c.DefaultNetworkInterface(),
		"obsoleteCPUModels":                  c.ObsoleteCPUModels(),
		"migrations":                         c.Migrations(),
		"defaultArchitecture":                c.DefaultArchitecture(),
		"clusterCPUArch":                     c.ClusterCPUArch(),
		"virtLauncherVerbosity":              c.VirtLauncherVerbosity(),
		"virtControllerVerbosity":            c.VirtControllerVerbosity(""),
		"virtControllerVerbosity/node01":     c.VirtControllerVerbosity("node01"),
		"diskVerification":                   c.DiskVerification(),
		"hypervisor":                         c.Hypervisor(),
		"maxHotplugRatio":                    c.MaxHotplugRatio(),
		"maximumCpuSockets":                  c.MaximumCpuSockets(),
		"maximumGuestMemory":                 c.MaximumGuestMemory(),
		"vmRolloutStrategyLiveUpdate":        c.IsVMRolloutStrategyLiveUpdate(),
		"instancetypeReferencePolicy":        c.InstancetypeReferencePolicy(),
		"minimumClusterTSCFrequency":         c.MinimumClusterTSCFrequency(),
		"serialConsoleLogDisabled":           c.IsSerialConsoleLogDisabled(),
		"freePageReportingDisabled":          c.IsFreePageReportingDisabled(),
		"memBalloonStatsPeriod":              c.MemBalloonStatsPeriod(),
		"smbios":                             c.SMBIOS(),
		"supportedGuestAgentVersions":        c.SupportedGuestAgentVersions(),
		"lessPVCSpaceToleration":             c.LessPVCSpaceToleration(),
		"minimumReservePVCBytes":             c.MinimumReservePVCBytes(),
		"mediatedDevicesHandlingDisabled":    c.MediatedDevicesHandlingDisabled(),
		"kubeVirtPresent":                    c.KubeVirt() != "",
		"annotation/" + virtv1.EmulatorThreadCompleteToEvenParity:  c.EmulatorThreadCompleteToEvenParity(),
		"annotation/" + virtv1.VGADisplayForEFIGuestsX86Annotation: c.VGADisplayForEFIGuestsEnabled(),
	}
	for _, arch := range []string{"amd64", "arm64", "s390x", ""} {
		a["machineType/"+arch] = c.MachineType(arch)
		a["ovmfPath/"+arch] = c.OVMFPath(arch)
		a["emulatedMachines/"+arch] = c.EmulatedMachines(arch)
	}
	types := []virtv1.SupportContainerType{virtv1.HotplugAttachment, virtv1.ContainerDisk, virtv1.VirtioFS, virtv1.SideCar, virtv1.VMExport, virtv1.GuestConsoleLog}
	for _, typ := range types {
		res := c.SupportContainerResources(typ)
		for _, n := range []k8sv1.ResourceName{k8sv1.ResourceCPU, k8sv1.ResourceMemory} {
			req, lim := c.SupportContainerRequest(typ, n), c.SupportContainerLimit(typ, n)
			if q, ok := res.Requests[n]; quantity(req) != quantity(&q) && (ok || req != nil) {
				t.Errorf("SupportContainerResources(%s) request %s = %v, SupportContainerRequest = %v", typ, n, res.Requests[n], req)
			}
			if q, ok := res.Limits[n]; quantity(lim) != quantity(&q) && (ok || lim != nil) {
				t.Errorf("SupportContainerResources(%s) limit %s = %v, SupportContainerLimit = %v", typ, n, res.Limits[n], lim)
			}
			a[fmt.Sprintf("supportContainerRequest/%s/%s", typ, n)] = quantity(req)
			a[fmt.Sprintf("supportContainerLimit/%s/%s", typ, n)] = quantity(lim)
		}
	}
	v := reflect.ValueOf(c)
	for i := 0; i < v.NumMethod(); i++ {
		m := v.Type().Method(i)
		if !strings.HasSuffix(m.Name, "Enabled") || m.Type.NumIn() != 1 || m.Type.NumOut() != 1 || m.Type.Out(0).Kind() != reflect.Bool {
			continue
		}
		if _, ok := kubeVirt["method/"+m.Name]; !ok {
			t.Errorf("KubeVirt's ClusterConfig has no %s", m.Name)
			continue
		}
		a["method/"+m.Name] = v.Method(i).Call(nil)[0].Bool()
	}
	for name, gate := range otherGateHelpers {
		a["method/"+name] = c.FeatureGateEnabled(gate)
	}
	for key := range kubeVirt {
		if _, ok := a[key]; !ok && strings.HasPrefix(key, "method/") {
			t.Errorf("KubeVirt's %s is neither a method here nor in otherGateHelpers", strings.TrimPrefix(key, "method/"))
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

// normalize round-trips v through JSON, so that values of different Go
// types with the same JSON compare equal.
func normalize(t *testing.T, v any) any {
	t.Helper()
	data, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if data, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
