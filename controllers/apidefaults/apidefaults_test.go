package apidefaults

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// Cases and expected values come from KubeVirt v1.8.1's own tests:
// pkg/virt-api/webhooks/mutating-webhook/mutators/vmi-mutator_test.go
// (mutator) and pkg/defaults/defaults_test.go, named after their entries.

var testNow = metav1.NewTime(time.Date(2026, time.January, 2, 3, 4, 5, 0, time.UTC))

const testFirmwareUUID = "5d307ca9-b3ef-428c-8861-06e72d69f223"

// fakeCluster is a Cluster over a literal configuration.
type fakeCluster struct {
	config      *virtv1.KubeVirtConfiguration
	gates       []string
	annotations map[string]string
}

func (c *fakeCluster) Configuration() *virtv1.KubeVirtConfiguration { return c.config }
func (c *fakeCluster) FeatureGateEnabled(name string) bool          { return slices.Contains(c.gates, name) }
func (c *fakeCluster) KubeVirtAnnotations() map[string]string       { return c.annotations }

// newCluster holds the parts of KubeVirt's defaultClusterConfig
// (pkg/virt-config/configuration.go) that defaults read, for a cluster whose
// virt-operator runs on arch.
func newCluster(arch string) *fakeCluster {
	cpuRequest := resource.MustParse("100m")
	eviction := virtv1.EvictionStrategyNone
	permitSlirp, permitBridge := false, true
	rollout := virtv1.VMRolloutStrategyLiveUpdate
	return &fakeCluster{config: &virtv1.KubeVirtConfiguration{
		ImagePullPolicy:  k8sv1.PullIfNotPresent,
		CPURequest:       &cpuRequest,
		CPUModel:         "",
		EvictionStrategy: &eviction,
		DeveloperConfiguration: &virtv1.DeveloperConfiguration{
			MemoryOvercommit:   100,
			CPUAllocationRatio: 10,
		},
		NetworkConfiguration: &virtv1.NetworkConfiguration{
			NetworkInterface:                  string(virtv1.BridgeInterface),
			DeprecatedPermitSlirpInterface:    &permitSlirp,
			PermitBridgeInterfaceOnPodNetwork: &permitBridge,
		},
		ArchitectureConfiguration: &virtv1.ArchConfiguration{
			Amd64: &virtv1.ArchSpecificConfiguration{
				OVMFPath:         "/usr/share/OVMF",
				EmulatedMachines: []string{"q35*", "pc-q35*"},
				MachineType:      "q35",
			},
			Arm64: &virtv1.ArchSpecificConfiguration{
				OVMFPath:         "/usr/share/AAVMF",
				EmulatedMachines: []string{"virt*"},
				MachineType:      "virt",
			},
			S390x: &virtv1.ArchSpecificConfiguration{
				OVMFPath:         "",
				EmulatedMachines: []string{"s390-ccw-virtio*"},
				MachineType:      "s390-ccw-virtio",
			},
			DefaultArchitecture: arch,
		},
		LiveUpdateConfiguration: &virtv1.LiveUpdateConfiguration{MaxHotplugRatio: 4},
		VMRolloutStrategy:       &rollout,
	}}
}

// newVMI is the mutator tests' VMI: a label and empty resources. The
// firmware UUID is fixed, as KubeVirt would otherwise generate one.
func newVMI() *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "testvmi",
			Namespace: "default",
			Labels:    map[string]string{"test": "test"},
		},
		Spec: virtv1.VirtualMachineInstanceSpec{
			Domain: virtv1.DomainSpec{
				Firmware: &virtv1.Firmware{UUID: testFirmwareUUID},
			},
		},
	}
}

func ptr[T any](v T) *T { return &v }

func quantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func TestApplyDefaultsMinimalVMICompletely(t *testing.T) {
	tests := []struct {
		name string
		arch string
		want func(*virtv1.VirtualMachineInstance)
	}{
		{
			name: "an amd64 VMI gets q35, host-model, one socket growing to four and the bridged pod network",
			arch: archAMD64,
			want: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.CPU.MaxSockets = 4
			},
		},
		{
			name: "an arm64 VMI gets virt, host-passthrough, UEFI without secure boot and no hotplug",
			arch: archARM64,
			want: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Machine.Type = "virt"
				vmi.Spec.Domain.CPU.Model = virtv1.CPUModeHostPassthrough
				vmi.Spec.Domain.Firmware.Bootloader = &virtv1.Bootloader{EFI: &virtv1.EFI{SecureBoot: ptr(false)}}
			},
		},
		{
			name: "an s390x VMI gets s390-ccw-virtio with ACPI disabled",
			arch: archS390X,
			want: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Machine.Type = "s390-ccw-virtio"
				vmi.Spec.Domain.Features.ACPI.Enabled = ptr(false)
				vmi.Spec.Domain.CPU.MaxSockets = 4
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := newVMI()
			if err := Apply(vmi, newCluster(tt.arch), testNow); err != nil {
				t.Fatalf("Apply: %v", err)
			}

			want := &virtv1.VirtualMachineInstance{
				ObjectMeta: metav1.ObjectMeta{
					Name:        "testvmi",
					Namespace:   "default",
					Labels:      map[string]string{"test": "test"},
					Annotations: map[string]string{virtv1.PciTopologyVersionAnnotation: virtv1.PciTopologyVersionV3},
					Finalizers:  []string{virtv1.VirtualMachineInstanceFinalizer},
				},
				Spec: virtv1.VirtualMachineInstanceSpec{
					Architecture:     tt.arch,
					EvictionStrategy: ptr(virtv1.EvictionStrategyNone),
					Domain: virtv1.DomainSpec{
						Firmware: &virtv1.Firmware{UUID: testFirmwareUUID},
						Machine:  &virtv1.Machine{Type: "q35"},
						Memory:   &virtv1.Memory{},
						CPU:      &virtv1.CPU{Sockets: 1, Cores: 1, Threads: 1, Model: virtv1.DefaultCPUModel},
						Features: &virtv1.Features{ACPI: virtv1.FeatureState{Enabled: ptr(true)}},
						Devices: virtv1.Devices{
							Interfaces: []virtv1.Interface{*virtv1.DefaultBridgeNetworkInterface()},
						},
					},
					Networks: []virtv1.Network{*virtv1.DefaultPodNetwork()},
				},
				Status: virtv1.VirtualMachineInstanceStatus{
					Phase: virtv1.Pending,
					PhaseTransitionTimestamps: []virtv1.VirtualMachineInstancePhaseTransitionTimestamp{
						{Phase: virtv1.Pending, PhaseTransitionTimestamp: testNow},
					},
					RuntimeUser:        nonRootUser,
					CurrentCPUTopology: &virtv1.CPUTopology{Sockets: 1, Cores: 1, Threads: 1},
				},
			}
			tt.want(want)
			if diff := cmp.Diff(want, vmi); diff != "" {
				t.Errorf("Apply() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApply(t *testing.T) {
	const (
		cpuModelFromConfig    = "Haswell"
		machineTypeFromConfig = "pc-q35-3.0"
	)
	configurableDefaults := func(c *fakeCluster) {
		c.config.CPUModel = cpuModelFromConfig
		c.config.CPURequest = quantity("800m")
		c.config.ArchitectureConfiguration.Amd64.MachineType = machineTypeFromConfig
		c.config.ArchitectureConfiguration.Arm64.MachineType = machineTypeFromConfig
		c.config.ArchitectureConfiguration.S390x.MachineType = machineTypeFromConfig
	}
	type modelMachineRequests struct {
		Model, Machine string
		CPURequest     resource.Quantity
		MemoryRequest  int64
	}
	modelMachineAndRequests := func(vmi *virtv1.VirtualMachineInstance) any {
		return modelMachineRequests{
			Model:         vmi.Spec.Domain.CPU.Model,
			Machine:       vmi.Spec.Domain.Machine.Type,
			CPURequest:    *vmi.Spec.Domain.Resources.Requests.Cpu(),
			MemoryRequest: vmi.Spec.Domain.Resources.Requests.Memory().Value(),
		}
	}
	zeroCPU := *resource.NewQuantity(0, resource.DecimalSI)
	volumes := func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Volumes }
	containerDisk := func(name, image string, policy k8sv1.PullPolicy) virtv1.Volume {
		return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{
			ContainerDisk: &virtv1.ContainerDiskSource{Image: image, ImagePullPolicy: policy},
		}}
	}
	withVolumes := func(vols ...virtv1.Volume) func(*virtv1.VirtualMachineInstance) {
		return func(vmi *virtv1.VirtualMachineInstance) { vmi.Spec.Volumes = vols }
	}
	type topology struct{ Sockets, Cores, Threads uint32 }
	cpuTopology := func(vmi *virtv1.VirtualMachineInstance) any {
		cpu := vmi.Spec.Domain.CPU
		return topology{cpu.Sockets, cpu.Cores, cpu.Threads}
	}
	statusTopology := func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Status.CurrentCPUTopology }
	maxSockets := func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.CPU.MaxSockets }
	maxGuest := func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Memory.MaxGuest }
	guestString := func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Memory.Guest.String() }
	interfacesAndNetworks := func(vmi *virtv1.VirtualMachineInstance) any {
		return []any{vmi.Spec.Domain.Devices.Interfaces, vmi.Spec.Networks}
	}
	annotation := func(key string) func(*virtv1.VirtualMachineInstance) any {
		return func(vmi *virtv1.VirtualMachineInstance) any {
			v, ok := vmi.Annotations[key]
			return []any{v, ok}
		}
	}
	parityCluster := func(gate string, annotations map[string]string) func(*fakeCluster) {
		return func(c *fakeCluster) {
			if gate != "" {
				c.gates = []string{gate}
			}
			c.annotations = annotations
		}
	}
	parity := map[string]string{virtv1.EmulatorThreadCompleteToEvenParity: ""}
	isolateEmulatorThread := func(isolate bool) func(*virtv1.VirtualMachineInstance) {
		return func(vmi *virtv1.VirtualMachineInstance) {
			vmi.Spec.Domain.CPU = &virtv1.CPU{IsolateEmulatorThread: isolate}
		}
	}
	withCPU := func(cpu *virtv1.CPU) func(*virtv1.VirtualMachineInstance) {
		return func(vmi *virtv1.VirtualMachineInstance) { vmi.Spec.Domain.CPU = cpu }
	}
	withGuest := func(guest, max string) func(*virtv1.VirtualMachineInstance) {
		return func(vmi *virtv1.VirtualMachineInstance) {
			vmi.Spec.Domain.Memory = &virtv1.Memory{Guest: quantity(guest)}
			if max != "" {
				vmi.Spec.Domain.Memory.MaxGuest = quantity(max)
			}
		}
	}
	liveUpdate := func(live virtv1.LiveUpdateConfiguration) func(*fakeCluster) {
		return func(c *fakeCluster) {
			// A CR's liveUpdateConfiguration is merged over the default
			// maxHotplugRatio of 4, as GetConfig's JSON merge does.
			if live.MaxHotplugRatio == 0 {
				live.MaxHotplugRatio = 4
			}
			c.config.LiveUpdateConfiguration = &live
		}
	}
	withDisk := func(disk virtv1.Disk) func(*virtv1.VirtualMachineInstance) {
		return func(vmi *virtv1.VirtualMachineInstance) {
			vmi.Spec.Volumes = []virtv1.Volume{containerDisk("a", "test:latest", "")}
			vmi.Spec.Domain.Devices.Disks = []virtv1.Disk{disk}
		}
	}
	firstDiskDevice := func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Devices.Disks[0].DiskDevice }

	tests := []struct {
		name    string
		arch    string // "" keeps the cluster's default architecture
		cluster func(*fakeCluster)
		vmi     func(*virtv1.VirtualMachineInstance)
		got     func(*virtv1.VirtualMachineInstance) any
		want    any
	}{
		// mutator: should apply defaults on VMI create when arch is known.
		{
			name: "applies amd64 defaults when the VMI names amd64",
			arch: archAMD64,
			got:  modelMachineAndRequests,
			want: modelMachineRequests{virtv1.DefaultCPUModel, "q35", zeroCPU, 0},
		},
		{
			name: "applies arm64 defaults when the VMI names arm64",
			arch: archARM64,
			got:  modelMachineAndRequests,
			want: modelMachineRequests{virtv1.CPUModeHostPassthrough, "virt", zeroCPU, 0},
		},
		{
			name: "applies s390x defaults when the VMI names s390x",
			arch: archS390X,
			got:  modelMachineAndRequests,
			want: modelMachineRequests{virtv1.DefaultCPUModel, "s390-ccw-virtio", zeroCPU, 0},
		},
		// mutator: should apply defaults on VMI create when arch is unknown.
		{
			name:    "applies arm64 defaults when the cluster's default architecture is arm64",
			cluster: func(c *fakeCluster) { c.config.ArchitectureConfiguration.DefaultArchitecture = archARM64 },
			got:     modelMachineAndRequests,
			want:    modelMachineRequests{virtv1.CPUModeHostPassthrough, "virt", zeroCPU, 0},
		},
		{
			name:    "applies s390x defaults when the cluster's default architecture is s390x",
			cluster: func(c *fakeCluster) { c.config.ArchitectureConfiguration.DefaultArchitecture = archS390X },
			got:     modelMachineAndRequests,
			want:    modelMachineRequests{virtv1.DefaultCPUModel, "s390-ccw-virtio", zeroCPU, 0},
		},
		{
			name: "takes the architecture from the cluster when the VMI names none",
			got:  func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Architecture },
			want: archAMD64,
		},
		// mutator: should apply configurable defaults on VMI create.
		{
			name:    "applies the cluster's CPU model, machine type and CPU request on amd64",
			arch:    archAMD64,
			cluster: configurableDefaults,
			got:     modelMachineAndRequests,
			want:    modelMachineRequests{cpuModelFromConfig, machineTypeFromConfig, resource.MustParse("800m"), 0},
		},
		{
			name:    "applies the cluster's CPU model, machine type and CPU request on s390x",
			arch:    archS390X,
			cluster: configurableDefaults,
			got:     modelMachineAndRequests,
			want:    modelMachineRequests{cpuModelFromConfig, machineTypeFromConfig, resource.MustParse("800m"), 0},
		},
		{
			name:    "keeps host-passthrough over the cluster's CPU model on arm64",
			arch:    archARM64,
			cluster: configurableDefaults,
			got:     modelMachineAndRequests,
			want:    modelMachineRequests{virtv1.CPUModeHostPassthrough, machineTypeFromConfig, resource.MustParse("800m"), 0},
		},
		// mutator: it should ... (container disk pull policies).
		{
			name: "sets the ImagePullPolicy to IfNotPresent if sha256",
			vmi:  withVolumes(containerDisk("a", "test@sha256:9c2b78e11c25b3fd0b24b0ed684a112052dff03eee4ca4bdcc4f3168f9a14396", "")),
			got:  volumes,
			want: []virtv1.Volume{containerDisk("a", "test@sha256:9c2b78e11c25b3fd0b24b0ed684a112052dff03eee4ca4bdcc4f3168f9a14396", k8sv1.PullIfNotPresent)},
		},
		{
			name: "sets the ImagePullPolicy to Always if :latest is specified",
			vmi:  withVolumes(containerDisk("a", "test:latest", "")),
			got:  volumes,
			want: []virtv1.Volume{containerDisk("a", "test:latest", k8sv1.PullAlways)},
		},
		{
			name: "sets the ImagePullPolicy to Always if no tag or shasum is specified",
			vmi:  withVolumes(containerDisk("a", "test", "")),
			got:  volumes,
			want: []virtv1.Volume{containerDisk("a", "test", k8sv1.PullAlways)},
		},
		{
			name: "sets the ImagePullPolicy to IfNotPresent if arbitrary tags are specified",
			vmi:  withVolumes(containerDisk("a", "test:notlatest", "")),
			got:  volumes,
			want: []virtv1.Volume{containerDisk("a", "test:notlatest", k8sv1.PullIfNotPresent)},
		},
		{
			name: "sets the right ImagePullPolicy on a mixture of sources",
			vmi: withVolumes(
				containerDisk("a", "test:notlatest", ""),
				containerDisk("b", "test:latest", ""),
				containerDisk("c", "test:latest", k8sv1.PullNever),
				containerDisk("d", "test", k8sv1.PullIfNotPresent),
				containerDisk("e", "test:notlatest", ""),
			),
			got: volumes,
			want: []virtv1.Volume{
				containerDisk("a", "test:notlatest", k8sv1.PullIfNotPresent),
				containerDisk("b", "test:latest", k8sv1.PullAlways),
				containerDisk("c", "test:latest", k8sv1.PullNever),
				containerDisk("d", "test", k8sv1.PullIfNotPresent),
				containerDisk("e", "test:notlatest", k8sv1.PullIfNotPresent),
			},
		},
		// mutator: should add the default network interface.
		{
			name: "adds the default network interface as bridge",
			got: func(vmi *virtv1.VirtualMachineInstance) any {
				return vmi.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod
			},
			want: virtv1.InterfaceBindingMethod{Bridge: &virtv1.InterfaceBridge{}},
		},
		{
			name: "adds the default network interface as masquerade",
			cluster: func(c *fakeCluster) {
				c.config.NetworkConfiguration.NetworkInterface = string(virtv1.MasqueradeInterface)
			},
			got: func(vmi *virtv1.VirtualMachineInstance) any {
				return vmi.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod
			},
			want: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}},
		},
		// mutator: should not add the default interfaces if.
		{
			name: "does not add the default interfaces if interfaces and networks are non-empty",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Interfaces = []virtv1.Interface{{Name: "a"}}
				vmi.Spec.Networks = []virtv1.Network{{Name: "b"}}
			},
			got:  interfacesAndNetworks,
			want: []any{[]virtv1.Interface{{Name: "a"}}, []virtv1.Network{{Name: "b"}}},
		},
		{
			name: "does not add the default interfaces if interfaces is non-empty",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Interfaces = []virtv1.Interface{{Name: "a"}}
				vmi.Spec.Networks = []virtv1.Network{}
			},
			got:  interfacesAndNetworks,
			want: []any{[]virtv1.Interface{{Name: "a"}}, []virtv1.Network(nil)},
		},
		{
			name: "does not add the default interfaces if networks is non-empty",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Interfaces = []virtv1.Interface{}
				vmi.Spec.Networks = []virtv1.Network{{Name: "b"}}
			},
			got:  interfacesAndNetworks,
			want: []any{[]virtv1.Interface(nil), []virtv1.Network{{Name: "b"}}},
		},
		{
			name: "does not add the default interface when autoattachPodInterface is false",
			vmi:  func(vmi *virtv1.VirtualMachineInstance) { vmi.Spec.Domain.Devices.AutoattachPodInterface = ptr(false) },
			got:  interfacesAndNetworks,
			want: []any{[]virtv1.Interface(nil), []virtv1.Network(nil)},
		},
		// mutator: should add a missing volume disk.
		{
			name: "adds a missing volume disk",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Disks = []virtv1.Disk{{Name: "present-vol"}}
				vmi.Spec.Volumes = []virtv1.Volume{{Name: "present-vol"}, {Name: "missing-vol"}}
			},
			got: func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Devices.Disks },
			want: []virtv1.Disk{
				{Name: "present-vol", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSATA}}},
				{Name: "missing-vol", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSATA}}},
			},
		},
		// mutator: should set defaults for input devices.
		{
			name: "sets defaults for input devices",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Inputs = []virtv1.Input{{Name: "default-0"}}
			},
			got:  func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Devices.Inputs },
			want: []virtv1.Input{{Name: "default-0", Bus: virtv1.InputBusUSB, Type: virtv1.InputTypeTablet}},
		},
		// mutator: should not override specified properties with defaults on VMI create.
		{
			name: "does not override specified properties with defaults on VMI create",
			cluster: func(c *fakeCluster) {
				c.config.CPUModel = cpuModelFromConfig
				c.config.MachineType = machineTypeFromConfig
				c.config.CPURequest = quantity("800m")
			},
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Resources.Requests = k8sv1.ResourceList{
					k8sv1.ResourceCPU:    resource.MustParse("600m"),
					k8sv1.ResourceMemory: resource.MustParse("512Mi"),
				}
				vmi.Spec.Domain.CPU = &virtv1.CPU{Model: "EPYC"}
				vmi.Spec.Domain.Machine = &virtv1.Machine{Type: "q35"}
			},
			got: func(vmi *virtv1.VirtualMachineInstance) any {
				return []any{vmi.Spec.Domain.CPU.Model, vmi.Spec.Domain.Machine.Type, vmi.Spec.Domain.Resources.Requests}
			},
			want: []any{"EPYC", "q35", k8sv1.ResourceList{
				k8sv1.ResourceCPU:    resource.MustParse("600m"),
				k8sv1.ResourceMemory: resource.MustParse("512Mi"),
			}},
		},
		{
			name:    "uses the deprecated cluster-wide machine type over the per-architecture one",
			cluster: func(c *fakeCluster) { c.config.MachineType = machineTypeFromConfig },
			got:     func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Machine.Type },
			want:    machineTypeFromConfig,
		},
		// mutator: should (not) copy the EmulatorThreadCompleteToEvenParity annotation.
		{
			name:    "does not copy the EmulatorThreadCompleteToEvenParity annotation when the AlignCPUs featureGate is disabled",
			cluster: parityCluster("", parity),
			vmi:     isolateEmulatorThread(true),
			got:     annotation(virtv1.EmulatorThreadCompleteToEvenParity),
			want:    []any{"", false},
		},
		{
			name:    "does not copy the EmulatorThreadCompleteToEvenParity annotation when it is not set on the kubevirt CR",
			cluster: parityCluster(featureGateAlignCPUs, nil),
			vmi:     isolateEmulatorThread(true),
			got:     annotation(virtv1.EmulatorThreadCompleteToEvenParity),
			want:    []any{"", false},
		},
		{
			name:    "does not copy the EmulatorThreadCompleteToEvenParity annotation when isolateEmulatorThread is disabled on the VMI spec",
			cluster: parityCluster(featureGateAlignCPUs, parity),
			vmi:     isolateEmulatorThread(false),
			got:     annotation(virtv1.EmulatorThreadCompleteToEvenParity),
			want:    []any{"", false},
		},
		{
			name:    "copies the EmulatorThreadCompleteToEvenParity annotation to the VMI, always empty",
			cluster: parityCluster(featureGateAlignCPUs, map[string]string{virtv1.EmulatorThreadCompleteToEvenParity: "ignored"}),
			vmi:     isolateEmulatorThread(true),
			got:     annotation(virtv1.EmulatorThreadCompleteToEvenParity),
			want:    []any{"", true},
		},
		// mutator: PCI topology version.
		{
			name: "sets the PCI topology version v3 annotation on a new VMI",
			got:  annotation(virtv1.PciTopologyVersionAnnotation),
			want: []any{virtv1.PciTopologyVersionV3, true},
		},
		{
			name: "does not override an existing PCI topology version annotation",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Annotations = map[string]string{virtv1.PciTopologyVersionAnnotation: virtv1.PciTopologyVersionV2}
			},
			got:  annotation(virtv1.PciTopologyVersionAnnotation),
			want: []any{virtv1.PciTopologyVersionV2, true},
		},
		// mutator: should convert CPU requests/limits to sockets.
		{
			name: "converts CPU requests to sockets",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.CPU = &virtv1.CPU{Model: "EPYC"}
				vmi.Spec.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceCPU: resource.MustParse("2200m")}
			},
			got:  cpuTopology,
			want: topology{Sockets: 3, Cores: 1, Threads: 1},
		},
		{
			name: "converts fractional CPU requests to sockets, rounding up",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.CPU = &virtv1.CPU{Model: "EPYC"}
				vmi.Spec.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceCPU: resource.MustParse("2.3")}
			},
			got:  cpuTopology,
			want: topology{Sockets: 3, Cores: 1, Threads: 1},
		},
		{
			name: "converts CPU limits to sockets before requests",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceCPU: resource.MustParse("1")}
				vmi.Spec.Domain.Resources.Limits = k8sv1.ResourceList{k8sv1.ResourceCPU: resource.MustParse("4")}
			},
			got:  cpuTopology,
			want: topology{Sockets: 4, Cores: 1, Threads: 1},
		},
		// mutator: should apply foreground finalizer on VMI create.
		{
			name: "applies the foreground finalizer on VMI create",
			got:  func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Finalizers },
			want: []string{virtv1.VirtualMachineInstanceFinalizer},
		},
		// mutator: should copy cpu limits to requests if only limits are set.
		{
			name: "copies cpu limits to requests if only limits are set",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Resources = virtv1.ResourceRequirements{
					Requests: k8sv1.ResourceList{},
					Limits:   k8sv1.ResourceList{k8sv1.ResourceCPU: resource.MustParse("1")},
				}
			},
			got: func(vmi *virtv1.VirtualMachineInstance) any {
				return []string{vmi.Spec.Domain.Resources.Requests.Cpu().String(), vmi.Spec.Domain.Resources.Limits.Cpu().String()}
			},
			want: []string{"1", "1"},
		},
		// mutator: should always set memory.guest.
		{
			name: "sets memory.guest when requests are set",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("1Gi")}
			},
			got:  guestString,
			want: "1Gi",
		},
		{
			name: "sets memory.guest when limits are set",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Resources.Limits = k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("1Gi")}
			},
			got:  guestString,
			want: "1Gi",
		},
		{
			name: "sets memory.guest when both requests and limits are set",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Resources.Requests = k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("1Gi")}
				vmi.Spec.Domain.Resources.Limits = k8sv1.ResourceList{k8sv1.ResourceMemory: resource.MustParse("1Gi")}
			},
			got:  guestString,
			want: "1Gi",
		},
		{
			name: "sets memory.guest when only hugepages pagesize is set",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Memory = &virtv1.Memory{Hugepages: &virtv1.Hugepages{PageSize: "1Gi"}}
			},
			got:  guestString,
			want: "1Gi",
		},
		// mutator: should set the hyperv dependencies.
		{
			name: "sets the hyperv dependencies",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Features = &virtv1.Features{Hyperv: &virtv1.FeatureHyperv{
					SyNICTimer: &virtv1.SyNICTimer{FeatureState: virtv1.FeatureState{Enabled: ptr(true)}},
				}}
			},
			got: func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Features.Hyperv },
			want: &virtv1.FeatureHyperv{
				VPIndex:    &virtv1.FeatureState{Enabled: ptr(true)},
				SyNIC:      &virtv1.FeatureState{Enabled: ptr(true)},
				SyNICTimer: &virtv1.SyNICTimer{FeatureState: virtv1.FeatureState{Enabled: ptr(true)}},
			},
		},
		{
			name: "requires vmx for an eVMCS whose enabled is unset, after the API defaults enabled it and its VAPIC",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Features = &virtv1.Features{Hyperv: &virtv1.FeatureHyperv{EVMCS: &virtv1.FeatureState{}}}
			},
			got: func(vmi *virtv1.VirtualMachineInstance) any {
				return []any{vmi.Spec.Domain.Features.Hyperv, vmi.Spec.Domain.CPU.Features}
			},
			want: []any{
				&virtv1.FeatureHyperv{EVMCS: &virtv1.FeatureState{Enabled: ptr(true)}, VAPIC: &virtv1.FeatureState{Enabled: ptr(true)}},
				[]virtv1.CPUFeature{vmxFeature},
			},
		},
		// mutator: Root feature gate.
		{
			name:    "does not tag the vmi as non-root when the Root feature gate is enabled",
			cluster: func(c *fakeCluster) { c.gates = []string{featureGateRoot} },
			got:     func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Status.RuntimeUser },
			want:    uint64(0),
		},
		{
			name: "tags the vmi as non-root",
			got:  func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Status.RuntimeUser },
			want: uint64(nonRootUser),
		},
		// mutator: evictionStrategy should match the.
		{
			name: "keeps the evictionStrategy set in the VMI",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.EvictionStrategy = ptr(virtv1.EvictionStrategyLiveMigrate)
			},
			got:  func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.EvictionStrategy },
			want: ptr(virtv1.EvictionStrategyLiveMigrate),
		},
		{
			name:    "takes the evictionStrategy set cluster-wide",
			cluster: func(c *fakeCluster) { c.config.EvictionStrategy = ptr(virtv1.EvictionStrategyLiveMigrate) },
			got:     func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.EvictionStrategy },
			want:    ptr(virtv1.EvictionStrategyLiveMigrate),
		},
		{
			name:    "keeps the evictionStrategy set in the VMI if both cluster-wide and VMI are set",
			cluster: func(c *fakeCluster) { c.config.EvictionStrategy = ptr(virtv1.EvictionStrategyLiveMigrate) },
			vmi:     func(vmi *virtv1.VirtualMachineInstance) { vmi.Spec.EvictionStrategy = ptr(virtv1.EvictionStrategyNone) },
			got:     func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.EvictionStrategy },
			want:    ptr(virtv1.EvictionStrategyNone),
		},
		{
			name: "takes the default evictionStrategy if nothing is set",
			got:  func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.EvictionStrategy },
			want: ptr(virtv1.EvictionStrategyNone),
		},
		// mutator: should set guest memory status on VMI creation.
		{
			name: "sets the guest memory status on VMI creation",
			vmi:  withGuest("128Mi", ""),
			got:  func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Status.Memory },
			want: &virtv1.MemoryStatus{GuestAtBoot: quantity("128Mi"), GuestCurrent: quantity("128Mi"), GuestRequested: quantity("128Mi")},
		},
		// mutator: CPU topology.
		{
			name: "sets the default CPU topology in status when the VMI provides none",
			got:  statusTopology,
			want: &virtv1.CPUTopology{Sockets: 1, Cores: 1, Threads: 1},
		},
		{
			name: "copies a VMI provided full guest CPU topology to status",
			vmi:  withCPU(&virtv1.CPU{Sockets: 3, Cores: 3, Threads: 2}),
			got:  statusTopology,
			want: &virtv1.CPUTopology{Sockets: 3, Cores: 3, Threads: 2},
		},
		{
			name: "copies a VMI provided partial guest CPU topology to status",
			vmi:  withCPU(&virtv1.CPU{Sockets: 1, Cores: 1, Threads: 0}),
			got:  statusTopology,
			want: &virtv1.CPUTopology{Sockets: 1, Cores: 1, Threads: 0},
		},
		{
			name: "does not overwrite an existing CurrentCPUTopology within status",
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: 1, Cores: 1, Threads: 1}
				vmi.Spec.Domain.CPU = &virtv1.CPU{Sockets: 2, Cores: 1, Threads: 1}
			},
			got:  statusTopology,
			want: &virtv1.CPUTopology{Sockets: 1, Cores: 1, Threads: 1},
		},
		// mutator: configure CPU hotplug on supported arch (amd64, s390x).
		{
			name:    "uses the maximum sockets configured in cluster config when the VMI sets none",
			arch:    archAMD64,
			cluster: liveUpdate(virtv1.LiveUpdateConfiguration{MaxCpuSockets: ptr(uint32(10))}),
			got:     maxSockets,
			want:    uint32(10),
		},
		{
			name:    "prefers MaxCpuSockets from KV over MaxHotplugRatio on s390x",
			arch:    archS390X,
			cluster: liveUpdate(virtv1.LiveUpdateConfiguration{MaxCpuSockets: ptr(uint32(10)), MaxHotplugRatio: 2}),
			vmi:     withCPU(&virtv1.CPU{Sockets: 2}),
			got: func(vmi *virtv1.VirtualMachineInstance) any {
				return []uint32{vmi.Spec.Domain.CPU.Sockets, vmi.Spec.Domain.CPU.MaxSockets}
			},
			want: []uint32{2, 10},
		},
		{
			name: "keeps the VMI's max sockets when provided",
			arch: archAMD64,
			vmi:  withCPU(&virtv1.CPU{Sockets: 2, MaxSockets: 16}),
			got: func(vmi *virtv1.VirtualMachineInstance) any {
				return []uint32{vmi.Spec.Domain.CPU.Sockets, vmi.Spec.Domain.CPU.MaxSockets}
			},
			want: []uint32{2, 16},
		},
		{
			name:    "uses the hotplug ratio configured in cluster config when the VMI sets no max sockets",
			arch:    archS390X,
			cluster: liveUpdate(virtv1.LiveUpdateConfiguration{MaxHotplugRatio: 2}),
			got:     maxSockets,
			want:    uint32(2),
		},
		{
			name: "calculates max sockets as 4x the configured sockets when no max sockets is defined",
			arch: archAMD64,
			vmi:  withCPU(&virtv1.CPU{Sockets: 2}),
			got:  maxSockets,
			want: uint32(8),
		},
		{
			name: "calculates max sockets as 4x the configured sockets with an upper bound of 512 vCPUs",
			arch: archAMD64,
			vmi:  withCPU(&virtv1.CPU{Sockets: 32, Cores: 2, Threads: 3}),
			got:  maxSockets,
			want: uint32(85),
		},
		{
			name:    "sets MaxSockets to the number of sockets when MaxCpuSockets is lower",
			arch:    archS390X,
			cluster: liveUpdate(virtv1.LiveUpdateConfiguration{MaxCpuSockets: ptr(uint32(2))}),
			vmi:     withCPU(&virtv1.CPU{Sockets: 3}),
			got:     maxSockets,
			want:    uint32(3),
		},
		{
			name:    "leaves MaxSockets unset on arm64",
			arch:    archARM64,
			cluster: liveUpdate(virtv1.LiveUpdateConfiguration{MaxCpuSockets: ptr(uint32(10))}),
			got:     maxSockets,
			want:    uint32(0),
		},
		{
			name: "leaves MaxSockets unset when VM changes do not roll out live",
			arch: archAMD64,
			cluster: func(c *fakeCluster) {
				c.config.VMRolloutStrategy = ptr(virtv1.VMRolloutStrategyStage)
			},
			got:  maxSockets,
			want: uint32(0),
		},
		// mutator: configure Memory hotplug on supported arch (amd64).
		{
			name: "keeps the VMI's max guest when provided",
			arch: archAMD64,
			vmi:  withGuest("2Gi", "6Gi"),
			got:  maxGuest,
			want: quantity("6Gi"),
		},
		{
			name:    "uses maxGuest configured in cluster config when the VMI sets none",
			arch:    archAMD64,
			cluster: liveUpdate(virtv1.LiveUpdateConfiguration{MaxGuest: quantity("10Gi")}),
			vmi:     withGuest("1Gi", ""),
			got:     maxGuest,
			want:    quantity("10Gi"),
		},
		{
			name:    "prefers maxGuest from KV over MaxHotplugRatio",
			arch:    archAMD64,
			cluster: liveUpdate(virtv1.LiveUpdateConfiguration{MaxGuest: quantity("10Gi"), MaxHotplugRatio: 2}),
			vmi:     withGuest("1Gi", ""),
			got:     func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Memory },
			want:    &virtv1.Memory{Guest: quantity("1Gi"), MaxGuest: quantity("10Gi")},
		},
		{
			name: "calculates maxGuest as MaxHotplugRatio times the guest memory when no maxGuest is defined",
			arch: archAMD64,
			vmi:  withGuest("1Gi", ""),
			got:  maxGuest,
			want: quantity("4Gi"),
		},
		{
			name:    "uses the hotplug ratio configured in cluster config when the VMI sets no max guest",
			arch:    archAMD64,
			cluster: liveUpdate(virtv1.LiveUpdateConfiguration{MaxHotplugRatio: 2}),
			vmi:     withGuest("1Gi", ""),
			got:     maxGuest,
			want:    quantity("2Gi"),
		},
		{
			name: "leaves MaxGuest empty when realtime is configured",
			arch: archAMD64,
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				withGuest("1Gi", "")(vmi)
				vmi.Spec.Domain.CPU = &virtv1.CPU{DedicatedCPUPlacement: true, Realtime: &virtv1.Realtime{}}
			},
			got:  maxGuest,
			want: (*resource.Quantity)(nil),
		},
		{
			name: "leaves MaxGuest empty when launchSecurity is configured",
			arch: archAMD64,
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				withGuest("1Gi", "")(vmi)
				vmi.Spec.Domain.LaunchSecurity = &virtv1.LaunchSecurity{}
			},
			got:  maxGuest,
			want: (*resource.Quantity)(nil),
		},
		{
			name: "leaves MaxGuest empty when guest mapping passthrough is configured",
			arch: archAMD64,
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				withGuest("1Gi", "")(vmi)
				vmi.Spec.Domain.CPU = &virtv1.CPU{DedicatedCPUPlacement: true, NUMA: &virtv1.NUMA{GuestMappingPassthrough: &virtv1.NUMAGuestMappingPassthrough{}}}
				vmi.Spec.Domain.Memory.Hugepages = &virtv1.Hugepages{PageSize: "2Mi"}
			},
			got:  maxGuest,
			want: (*resource.Quantity)(nil),
		},
		{
			name: "leaves MaxGuest empty when guest memory is not set",
			arch: archAMD64,
			got:  maxGuest,
			want: (*resource.Quantity)(nil),
		},
		{
			name: "leaves MaxGuest empty when guest memory is not properly aligned",
			arch: archAMD64,
			vmi:  withGuest("123", ""),
			got:  maxGuest,
			want: (*resource.Quantity)(nil),
		},
		{
			name: "leaves MaxGuest empty when guest memory is less than 1Gi",
			arch: archAMD64,
			vmi:  withGuest("512Mi", ""),
			got:  maxGuest,
			want: (*resource.Quantity)(nil),
		},
		{
			name: "leaves MaxGuest empty when guest memory is not 1Gi aligned with 1Gi hugepages",
			arch: archAMD64,
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				withGuest("1536Mi", "")(vmi)
				vmi.Spec.Domain.Memory.Hugepages = &virtv1.Hugepages{PageSize: "1Gi"}
			},
			got:  maxGuest,
			want: (*resource.Quantity)(nil),
		},
		{
			name:    "leaves MaxGuest unset on arm64",
			arch:    archARM64,
			cluster: liveUpdate(virtv1.LiveUpdateConfiguration{MaxGuest: quantity("512Mi")}),
			got:     maxGuest,
			want:    (*resource.Quantity)(nil),
		},
		{
			name:    "leaves MaxGuest unset on s390x",
			arch:    archS390X,
			cluster: liveUpdate(virtv1.LiveUpdateConfiguration{MaxGuest: quantity("512Mi")}),
			vmi:     withGuest("1Gi", ""),
			got:     maxGuest,
			want:    (*resource.Quantity)(nil),
		},
		// mutator: should convert cpu model, AutoattachGraphicsDevice and UEFI boot on ARM64.
		{
			name: "converts the cpu model and UEFI boot on ARM64",
			arch: archARM64,
			got: func(vmi *virtv1.VirtualMachineInstance) any {
				return []any{vmi.Spec.Domain.CPU.Model, vmi.Spec.Domain.Firmware.Bootloader}
			},
			want: []any{virtv1.CPUModeHostPassthrough, &virtv1.Bootloader{EFI: &virtv1.EFI{SecureBoot: ptr(false)}}},
		},
		{
			name: "keeps a given bootloader on ARM64",
			arch: archARM64,
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Firmware.Bootloader = &virtv1.Bootloader{BIOS: &virtv1.BIOS{}}
			},
			got:  func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Firmware.Bootloader },
			want: &virtv1.Bootloader{BIOS: &virtv1.BIOS{}},
		},
		// mutator: should convert disk bus to virtio or scsi on ARM64.
		{
			name: "converts the disk bus of a Disk device to virtio on ARM64",
			arch: archARM64,
			vmi:  withDisk(virtv1.Disk{Name: "a"}),
			got:  firstDiskDevice,
			want: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}},
		},
		{
			name: "keeps the scsi bus of a Disk device on ARM64",
			arch: archARM64,
			vmi:  withDisk(virtv1.Disk{Name: "a", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSCSI}}}),
			got:  firstDiskDevice,
			want: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusSCSI}},
		},
		{
			name: "converts the bus of a CDRom device to virtio on ARM64, read-only with the tray closed",
			arch: archARM64,
			vmi:  withDisk(virtv1.Disk{Name: "a", DiskDevice: virtv1.DiskDevice{CDRom: &virtv1.CDRomTarget{}}}),
			got:  firstDiskDevice,
			want: virtv1.DiskDevice{CDRom: &virtv1.CDRomTarget{Bus: virtv1.DiskBusVirtio, ReadOnly: ptr(true), Tray: virtv1.TrayStateClosed}},
		},
		{
			name: "converts the bus of a LUN device to virtio on ARM64",
			arch: archARM64,
			vmi:  withDisk(virtv1.Disk{Name: "a", DiskDevice: virtv1.DiskDevice{LUN: &virtv1.LunTarget{}}}),
			got:  firstDiskDevice,
			want: virtv1.DiskDevice{LUN: &virtv1.LunTarget{Bus: virtv1.DiskBusVirtio}},
		},
		{
			name: "gives a watchdog the i6300esb model with action reset on amd64",
			arch: archAMD64,
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Watchdog = &virtv1.Watchdog{Name: "w"}
			},
			got:  func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Devices.Watchdog },
			want: &virtv1.Watchdog{Name: "w", WatchdogDevice: virtv1.WatchdogDevice{I6300ESB: &virtv1.I6300ESBWatchdog{Action: virtv1.WatchdogActionReset}}},
		},
		{
			name: "gives a watchdog the diag288 model with action reset on s390x",
			arch: archS390X,
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Watchdog = &virtv1.Watchdog{Name: "w"}
			},
			got:  func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Devices.Watchdog },
			want: &virtv1.Watchdog{Name: "w", WatchdogDevice: virtv1.WatchdogDevice{Diag288: &virtv1.Diag288Watchdog{Action: virtv1.WatchdogActionReset}}},
		},
		{
			name: "keeps ACPI enabled on s390x when the VMI enables it",
			arch: archS390X,
			vmi: func(vmi *virtv1.VirtualMachineInstance) {
				vmi.Spec.Domain.Features = &virtv1.Features{ACPI: virtv1.FeatureState{Enabled: ptr(true)}}
			},
			got:  func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Features.ACPI },
			want: virtv1.FeatureState{Enabled: ptr(true)},
		},
		{
			name: "writes the cluster's CPU request only for VMIs without dedicated CPUs",
			cluster: func(c *fakeCluster) {
				c.config.CPURequest = quantity("800m")
			},
			vmi:  withCPU(&virtv1.CPU{DedicatedCPUPlacement: true}),
			got:  func(vmi *virtv1.VirtualMachineInstance) any { return vmi.Spec.Domain.Resources.Requests },
			want: k8sv1.ResourceList(nil),
		},
		{
			name: "stores the phase transition at the API's one-second precision",
			got: func(vmi *virtv1.VirtualMachineInstance) any {
				return vmi.Status.PhaseTransitionTimestamps
			},
			want: []virtv1.VirtualMachineInstancePhaseTransitionTimestamp{
				{Phase: virtv1.Pending, PhaseTransitionTimestamp: testNow},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cluster := newCluster(archAMD64)
			if tt.cluster != nil {
				tt.cluster(cluster)
			}
			vmi := newVMI()
			vmi.Spec.Architecture = tt.arch
			if tt.vmi != nil {
				tt.vmi(vmi)
			}
			// A clock reading with nanoseconds: the stored one has none.
			now := metav1.NewTime(testNow.Add(123456789 * time.Nanosecond))
			if err := Apply(vmi, cluster, now); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if diff := cmp.Diff(tt.want, tt.got(vmi)); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApplyRejects(t *testing.T) {
	tests := []struct {
		name    string
		cluster func(*fakeCluster)
		want    error
	}{
		{
			name: "rejects adding a default deprecated slirp interface",
			cluster: func(c *fakeCluster) {
				c.config.NetworkConfiguration.NetworkInterface = string(virtv1.DeprecatedSlirpInterface)
				c.config.NetworkConfiguration.DeprecatedPermitSlirpInterface = ptr(true)
			},
			want: ErrSlirpDeprecated,
		},
		{
			name: "rejects a default bridge interface the cluster does not permit on the pod network",
			cluster: func(c *fakeCluster) {
				c.config.NetworkConfiguration.PermitBridgeInterfaceOnPodNetwork = ptr(false)
			},
			want: ErrBridgeNotPermitted,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cluster := newCluster(archAMD64)
			tt.cluster(cluster)
			vmi := newVMI()
			before := vmi.DeepCopy()
			err := Apply(vmi, cluster, testNow)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Apply() error = %v, want %v", err, tt.want)
			}
			if diff := cmp.Diff(before, vmi); diff != "" {
				t.Errorf("Apply changed the rejected VMI (-before +after):\n%s", diff)
			}
		})
	}
}

func TestApplyGeneratesFirmwareUUID(t *testing.T) {
	vmi := newVMI()
	vmi.Spec.Domain.Firmware = nil
	if err := Apply(vmi, newCluster(archAMD64), testNow); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if vmi.Spec.Domain.Firmware == nil || vmi.Spec.Domain.Firmware.UUID == "" {
		t.Errorf("firmware = %+v, want a generated UUID", vmi.Spec.Domain.Firmware)
	}
}

func TestApplySharesNothingWithTheCluster(t *testing.T) {
	cluster := newCluster(archAMD64)
	cluster.config.LiveUpdateConfiguration.MaxGuest = quantity("8Gi")
	want := cluster.config.DeepCopy()
	vmi := newVMI()
	vmi.Spec.Domain.Memory = &virtv1.Memory{Guest: quantity("2Gi")}
	if err := Apply(vmi, cluster, testNow); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	*vmi.Spec.EvictionStrategy = virtv1.EvictionStrategyLiveMigrate
	vmi.Spec.Domain.Memory.MaxGuest.Set(1)
	*vmi.Spec.Domain.Features.ACPI.Enabled = false
	vmi.Status.Memory.GuestCurrent.Set(1)
	if diff := cmp.Diff(want, cluster.config); diff != "" {
		t.Errorf("writing the VMI changed the cluster configuration (-want +got):\n%s", diff)
	}
	if got := vmi.Spec.Domain.Memory.Guest.String(); got != "2Gi" {
		t.Errorf("writing status.memory changed spec.domain.memory.guest to %s", got)
	}
	// kubevirt.io/api's defaults point Enabled at a package-level true.
	again := newVMI()
	if err := Apply(again, newCluster(archAMD64), testNow); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if !*again.Spec.Domain.Features.ACPI.Enabled {
		t.Error("writing one VMI's ACPI disabled ACPI for the next")
	}
}

// The hyperv cases call the dependency resolution directly, as KubeVirt's
// tests call SetHypervFeatureDependencies.
func TestHypervDependencies(t *testing.T) {
	monitor := virtv1.CPUFeature{Name: "monitor", Policy: "require"}
	tests := []struct {
		name    string
		cpu     *virtv1.CPU
		hyperv  *virtv1.FeatureHyperv
		want    *virtv1.FeatureHyperv // nil: unchanged
		wantCPU *virtv1.CPU
	}{
		{
			name:   "does not mutate VMIs with empty HyperV configuration",
			hyperv: &virtv1.FeatureHyperv{},
		},
		{
			name: "does not mutate VMIs with hyperv configuration without deps",
			hyperv: &virtv1.FeatureHyperv{
				Relaxed: &virtv1.FeatureState{Enabled: ptr(true)},
				Runtime: &virtv1.FeatureState{Enabled: ptr(true)},
				Reset:   &virtv1.FeatureState{Enabled: ptr(true)},
			},
		},
		{
			name: "mutates VMIs with hyperv configuration to fix deps",
			hyperv: &virtv1.FeatureHyperv{
				Relaxed:    &virtv1.FeatureState{Enabled: ptr(true)},
				SyNICTimer: &virtv1.SyNICTimer{FeatureState: virtv1.FeatureState{Enabled: ptr(true)}},
			},
			want: &virtv1.FeatureHyperv{
				Relaxed:    &virtv1.FeatureState{Enabled: ptr(true)},
				VPIndex:    &virtv1.FeatureState{Enabled: ptr(true)},
				SyNIC:      &virtv1.FeatureState{Enabled: ptr(true)},
				SyNICTimer: &virtv1.SyNICTimer{FeatureState: virtv1.FeatureState{Enabled: ptr(true)}},
			},
		},
		{
			name: "partially mutates VMIs with explicit hyperv configuration and stops before vmx",
			hyperv: &virtv1.FeatureHyperv{
				VPIndex:    &virtv1.FeatureState{Enabled: ptr(false)},
				SyNICTimer: &virtv1.SyNICTimer{FeatureState: virtv1.FeatureState{Enabled: ptr(true)}},
				EVMCS:      &virtv1.FeatureState{Enabled: ptr(true)},
			},
			want: &virtv1.FeatureHyperv{
				VPIndex:    &virtv1.FeatureState{Enabled: ptr(false)},
				SyNIC:      &virtv1.FeatureState{Enabled: ptr(true)},
				SyNICTimer: &virtv1.SyNICTimer{FeatureState: virtv1.FeatureState{Enabled: ptr(true)}},
				EVMCS:      &virtv1.FeatureState{Enabled: ptr(true)},
				VAPIC:      &virtv1.FeatureState{Enabled: ptr(true)},
			},
		},
		{
			name:   "does not modify the cpu feature if hyperV doesn't contain EVMCS",
			hyperv: &virtv1.FeatureHyperv{Relaxed: &virtv1.FeatureState{Enabled: ptr(true)}},
		},
		{
			name:   "does not modify the cpu feature if EVMCS is explicitly false",
			hyperv: &virtv1.FeatureHyperv{EVMCS: &virtv1.FeatureState{Enabled: ptr(false)}},
		},
		{
			name:    "modifies the cpu feature if hyperV does contain EVMCS",
			hyperv:  &virtv1.FeatureHyperv{EVMCS: &virtv1.FeatureState{}},
			wantCPU: &virtv1.CPU{Features: []virtv1.CPUFeature{vmxFeature}},
		},
		{
			name:    "modifies the cpu feature if EVMCS is explicitly true",
			hyperv:  &virtv1.FeatureHyperv{EVMCS: &virtv1.FeatureState{Enabled: ptr(true)}},
			want:    &virtv1.FeatureHyperv{EVMCS: &virtv1.FeatureState{Enabled: ptr(true)}, VAPIC: &virtv1.FeatureState{Enabled: ptr(true)}},
			wantCPU: &virtv1.CPU{Features: []virtv1.CPUFeature{vmxFeature}},
		},
		{
			name:    "modifies the cpu feature if hyperV does contain EVMCS and cpu sockets",
			cpu:     &virtv1.CPU{Sockets: 2},
			hyperv:  &virtv1.FeatureHyperv{EVMCS: &virtv1.FeatureState{}},
			wantCPU: &virtv1.CPU{Sockets: 2, Features: []virtv1.CPUFeature{vmxFeature}},
		},
		{
			name:    "modifies the cpu feature if hyperV does contain EVMCS and 0 cpu features",
			cpu:     &virtv1.CPU{Features: []virtv1.CPUFeature{}},
			hyperv:  &virtv1.FeatureHyperv{EVMCS: &virtv1.FeatureState{}},
			wantCPU: &virtv1.CPU{Features: []virtv1.CPUFeature{vmxFeature}},
		},
		{
			name:    "modifies the cpu feature if hyperV does contain EVMCS and 1 different cpu feature",
			cpu:     &virtv1.CPU{Features: []virtv1.CPUFeature{monitor}},
			hyperv:  &virtv1.FeatureHyperv{EVMCS: &virtv1.FeatureState{}},
			wantCPU: &virtv1.CPU{Features: []virtv1.CPUFeature{monitor, vmxFeature}},
		},
		{
			name:    "modifies the cpu feature if hyperV does contain EVMCS and disabled vmx cpu feature",
			cpu:     &virtv1.CPU{Features: []virtv1.CPUFeature{{Name: "vmx", Policy: "disabled"}}},
			hyperv:  &virtv1.FeatureHyperv{EVMCS: &virtv1.FeatureState{}},
			wantCPU: &virtv1.CPU{Features: []virtv1.CPUFeature{vmxFeature}},
		},
		{
			name:    "keeps the cpu feature if hyperV does contain EVMCS and enabled vmx cpu feature",
			cpu:     &virtv1.CPU{Features: []virtv1.CPUFeature{vmxFeature}},
			hyperv:  &virtv1.FeatureHyperv{EVMCS: &virtv1.FeatureState{}},
			wantCPU: &virtv1.CPU{Features: []virtv1.CPUFeature{vmxFeature}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{
				CPU:      tt.cpu.DeepCopy(),
				Features: &virtv1.Features{Hyperv: tt.hyperv.DeepCopy()},
			}}
			setHypervDependencies(spec)
			want := tt.want
			if want == nil {
				want = tt.hyperv
			}
			if diff := cmp.Diff(want, spec.Domain.Features.Hyperv); diff != "" {
				t.Errorf("hyperv mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCPU, spec.Domain.CPU); diff != "" {
				t.Errorf("cpu mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHypervDependenciesLeaveVMIsWithoutHypervAlone(t *testing.T) {
	spec := &virtv1.VirtualMachineInstanceSpec{}
	setHypervDependencies(spec)
	if diff := cmp.Diff(&virtv1.VirtualMachineInstanceSpec{}, spec); diff != "" {
		t.Errorf("spec changed (-want +got):\n%s", diff)
	}
}
