package template

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// The expected values below are KubeVirt v1.8.1's own test expectations
// (pkg/hypervisor/kvm/hypervisorbackend_test.go,
// pkg/network/resources/memory_test.go,
// pkg/virt-controller/services/template_test.go and renderresources_test.go,
// pkg/container-disk/container-disk_test.go), worked out by hand into
// exact quantities where KubeVirt's tests compute them.

// resourceTestCluster is a Cluster over a literal configuration.
type resourceTestCluster struct {
	cfg   virtv1.KubeVirtConfiguration
	gates []string
}

func (c *resourceTestCluster) Configuration() *virtv1.KubeVirtConfiguration { return &c.cfg }
func (c *resourceTestCluster) FeatureGateEnabled(name string) bool {
	return slices.Contains(c.gates, name)
}

// newResourceTestCluster has the defaults of KubeVirt's defaultClusterConfig
// that resources read: memoryOvercommit 100, cpuAllocationRatio 10, no
// emulation, KVM, no supportContainerResources.
func newResourceTestCluster(edits ...func(*resourceTestCluster)) *resourceTestCluster {
	c := &resourceTestCluster{cfg: virtv1.KubeVirtConfiguration{
		DeveloperConfiguration: &virtv1.DeveloperConfiguration{MemoryOvercommit: 100, CPUAllocationRatio: 10},
		NetworkConfiguration:   &virtv1.NetworkConfiguration{},
		Hypervisors:            []virtv1.HypervisorConfiguration{{Name: virtv1.KvmHypervisorName}},
	}}
	for _, edit := range edits {
		edit(c)
	}
	return c
}

func resourceTestQuota(namespace string, hard corev1.ResourceName) *corev1.ResourceQuota {
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "quota", Namespace: namespace},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{hard: resource.MustParse("900m")}},
	}
}

func resourceTestNamespace(name string, nsLabels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: nsLabels}}
}

func mebibytes(n int64) int64 { return n * 1024 * 1024 }

func TestMemoryOverhead(t *testing.T) {
	// hypervisorbackend_test's VMI: 1Gi requested, nothing else. Its
	// overhead is 2Mi page tables + 220Mi processes + 8Mi for one vCPU +
	// 8Mi IOThread + 32Mi video RAM.
	const base = 270
	plugin := func(memory string) virtv1.InterfaceBindingPlugin {
		return virtv1.InterfaceBindingPlugin{ComputeResourceOverhead: &virtv1.ResourceRequirementsWithoutClaims{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memory)},
		}}
	}
	execProbe := &virtv1.Probe{Handler: virtv1.Handler{Exec: &corev1.ExecAction{}}}
	tests := []struct {
		name    string
		vmi     func(*virtv1.VirtualMachineInstance)
		cluster func(*resourceTestCluster)
		want    int64
	}{
		{name: "a VMI requesting nothing in particular pays the base overhead", want: mebibytes(base)},
		{name: "a 2x2x2 topology is charged eight vCPUs", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &virtv1.CPU{Cores: 2, Threads: 2, Sockets: 2}
		}, want: mebibytes(base - 8 + 64)},
		{name: "without a topology the CPU limit counts the vCPUs", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("3")
			v.Spec.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5")}
		}, want: mebibytes(base - 8 + 40)},
		{name: "without a topology or limit the CPU request counts the vCPUs", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("3")
		}, want: mebibytes(base - 8 + 24)},
		{name: "no graphics device saves the video RAM", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.AutoattachGraphicsDevice = ptr.To(false)
		}, want: mebibytes(base - 32)},
		{name: "arm64 adds the UEFI flash devices", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Architecture = "arm64"
		}, want: mebibytes(base + 128)},
		{name: "s390x costs what amd64 does", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Architecture = "s390x"
		}, want: mebibytes(base)},
		{name: "a host device adds 1Gi for VFIO", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.HostDevices = []virtv1.HostDevice{{Name: "test"}}
		}, want: mebibytes(base + 1024)},
		{name: "a GPU adds 1Gi for VFIO", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.GPUs = []virtv1.GPU{{Name: "test"}}
		}, want: mebibytes(base + 1024)},
		{name: "an SR-IOV interface adds 1Gi for VFIO", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []virtv1.Interface{{Name: "test", InterfaceBindingMethod: virtv1.InterfaceBindingMethod{SRIOV: &virtv1.InterfaceSRIOV{}}}}
		}, want: mebibytes(base + 1024)},
		{name: "a downward metrics volume adds 1Mi", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Volumes = []virtv1.Volume{{VolumeSource: virtv1.VolumeSource{DownwardMetrics: &virtv1.DownwardMetricsVolumeSource{}}}}
		}, want: mebibytes(base + 1)},
		{name: "an exec liveness probe adds 110Mi", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.LivenessProbe = execProbe
		}, want: mebibytes(base + 110)},
		{name: "an exec readiness probe adds 110Mi", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.ReadinessProbe = execProbe
		}, want: mebibytes(base + 110)},
		{name: "both exec probes add 120Mi", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.LivenessProbe, v.Spec.ReadinessProbe = execProbe, execProbe
		}, want: mebibytes(base + 120)},
		{name: "SEV adds 256Mi", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.LaunchSecurity = &virtv1.LaunchSecurity{SEV: &virtv1.SEV{}}
		}, want: mebibytes(base + 256)},
		{name: "a TPM adds 53Mi for swtpm", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.TPM = &virtv1.TPMDevice{}
		}, want: mebibytes(base + 53)},
		{name: "dedicated CPUs add 100Mi", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &virtv1.CPU{Cores: 1, DedicatedCPUPlacement: true}
		}, want: mebibytes(base + 100)},
		{name: "a VMI wanting the Guaranteed QoS class adds 100Mi", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &virtv1.CPU{Cores: 1}
			v.Spec.Domain.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4")
			v.Spec.Domain.Resources.Limits = corev1.ResourceList{
				corev1.ResourceMemory: resource.MustParse("1Gi"),
				corev1.ResourceCPU:    resource.MustParse("4"),
			}
		}, want: mebibytes(base + 100)},
		{name: "a reserved overhead of 100G is added as is", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Memory = &virtv1.Memory{ReservedOverhead: &virtv1.ReservedOverhead{AddedOverhead: resource.NewScaledQuantity(100, resource.Giga)}}
		}, want: mebibytes(base) + 100_000_000_000},
		{name: "a zero reserved overhead changes nothing", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Memory = &virtv1.Memory{ReservedOverhead: &virtv1.ReservedOverhead{AddedOverhead: &resource.Quantity{}}}
		}, want: mebibytes(base)},
		// 283116 kB × 2.2 = 622855 kB more.
		{name: "an additional overhead ratio of 3.2 multiplies the overhead in kilobytes", cluster: func(c *resourceTestCluster) {
			c.cfg.AdditionalGuestMemoryOverheadRatio = ptr.To("3.2")
		}, want: mebibytes(base) + 622_855_000},
		{name: "an additional overhead ratio that is no float is ignored", cluster: func(c *resourceTestCluster) {
			c.cfg.AdditionalGuestMemoryOverheadRatio = ptr.To("no_float")
		}, want: mebibytes(base)},
		{name: "passt and a binding plugin add 250Mi and the plugin's request", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []virtv1.Interface{
				{Name: "default", InterfaceBindingMethod: virtv1.InterfaceBindingMethod{PasstBinding: &virtv1.InterfacePasstBinding{}}},
				{Name: "net1", Binding: &virtv1.PluginBinding{Name: "plugin1"}},
			}
		}, cluster: func(c *resourceTestCluster) {
			c.cfg.NetworkConfiguration.Binding = map[string]virtv1.InterfaceBindingPlugin{"plugin1": plugin("500Mi")}
		}, want: mebibytes(base + 750)},
		{name: "two interfaces of one plugin count the plugin once", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []virtv1.Interface{
				{Name: "net1", Binding: &virtv1.PluginBinding{Name: "plugin1"}},
				{Name: "net2", Binding: &virtv1.PluginBinding{Name: "plugin1"}},
			}
		}, cluster: func(c *resourceTestCluster) {
			c.cfg.NetworkConfiguration.Binding = map[string]virtv1.InterfaceBindingPlugin{"plugin1": plugin("500Mi")}
		}, want: mebibytes(base + 500)},
		{name: "two plugins add both requests and an unregistered plugin nothing", vmi: func(v *virtv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []virtv1.Interface{
				{Name: "net1", Binding: &virtv1.PluginBinding{Name: "plugin1"}},
				{Name: "net2", Binding: &virtv1.PluginBinding{Name: "plugin2"}},
				{Name: "net3", Binding: &virtv1.PluginBinding{Name: "non existent"}},
			}
		}, cluster: func(c *resourceTestCluster) {
			c.cfg.NetworkConfiguration.Binding = map[string]virtv1.InterfaceBindingPlugin{"plugin1": plugin("500Mi"), "plugin2": plugin("600Mi")}
		}, want: mebibytes(base + 1100)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := &virtv1.VirtualMachineInstance{Spec: virtv1.VirtualMachineInstanceSpec{
				Architecture: "amd64",
				Domain: virtv1.DomainSpec{Resources: virtv1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				}},
			}}
			if tt.vmi != nil {
				tt.vmi(vmi)
			}
			cluster := newResourceTestCluster()
			if tt.cluster != nil {
				tt.cluster(cluster)
			}
			got := MemoryOverhead(vmi, cluster)
			if got.Value() != tt.want {
				t.Errorf("MemoryOverhead = %d (%s), want %d", got.Value(), got.String(), tt.want)
			}
		})
	}
}

func TestMemoryOverheadWithHeadroomRatio(t *testing.T) {
	// hypervisorbackend_test's guest-to-request headroom: 1G and one CPU
	// requested; 1953125 B page tables + 268Mi.
	vmi := &virtv1.VirtualMachineInstance{Spec: virtv1.VirtualMachineInstanceSpec{Architecture: "amd64", Domain: virtv1.DomainSpec{
		Resources: virtv1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("1G"),
			corev1.ResourceCPU:    resource.MustParse("1"),
		}},
	}}}
	tests := []struct {
		ratio string
		want  int64
	}{
		{"1.0", 282_971_493},
		{"1.234", 282_971_493 + 66_215_000},  // 282972 kB × 0.234
		{"2.332", 282_971_493 + 376_918_000}, // 282972 kB × 1.332
	}
	for _, tt := range tests {
		t.Run("a ratio of "+tt.ratio+" scales the overhead", func(t *testing.T) {
			cluster := newResourceTestCluster(func(c *resourceTestCluster) { c.cfg.AdditionalGuestMemoryOverheadRatio = ptr.To(tt.ratio) })
			if got := MemoryOverhead(vmi, cluster); got.Value() != tt.want {
				t.Errorf("MemoryOverhead = %d, want %d", got.Value(), tt.want)
			}
		})
	}
}

// computeResourcesCase is one compute-container case: requests and limits
// hold the exact strings of the quantities checked; absent names must be
// missing from the limits.
type computeResourcesCase struct {
	name     string
	vmi      *virtv1.VirtualMachineInstance
	cluster  *resourceTestCluster
	objects  *StaticObjects
	networks map[string]string
	requests map[corev1.ResourceName]string
	limits   map[corev1.ResourceName]string
	absent   []corev1.ResourceName // from the limits
	claims   []corev1.ResourceClaim
	wantErr  string
}

func resourceTestVMI(namespace string, edit func(*virtv1.DomainSpec)) *virtv1.VirtualMachineInstance {
	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "testvmi", Namespace: namespace},
		Spec:       virtv1.VirtualMachineInstanceSpec{Architecture: "amd64"},
	}
	if edit != nil {
		edit(&vmi.Spec.Domain)
	}
	return vmi
}

func onArchitecture(vmi *virtv1.VirtualMachineInstance, arch string) *virtv1.VirtualMachineInstance {
	vmi.Spec.Architecture = arch
	return vmi
}

func withVMIAnnotation(vmi *virtv1.VirtualMachineInstance, key string) *virtv1.VirtualMachineInstance {
	vmi.Annotations = map[string]string{key: ""}
	return vmi
}

func resList(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func TestComputeResources(t *testing.T) {
	const (
		kvm    = corev1.ResourceName("devices.kubevirt.io/kvm")
		tun    = corev1.ResourceName("devices.kubevirt.io/tun")
		cpu    = corev1.ResourceCPU
		memory = corev1.ResourceMemory
	)
	hugepages := func(size string, guest *resource.Quantity, mem string) func(*virtv1.DomainSpec) {
		return func(d *virtv1.DomainSpec) {
			d.Memory = &virtv1.Memory{Hugepages: &virtv1.Hugepages{PageSize: size}, Guest: guest}
			d.Resources.Requests = resList("memory", mem)
			d.Resources.Limits = resList("memory", mem)
		}
	}
	emulatorThread := func(cores, ioThreads uint32) func(*virtv1.DomainSpec) {
		return func(d *virtv1.DomainSpec) {
			d.CPU = &virtv1.CPU{Cores: cores, DedicatedCPUPlacement: true, IsolateEmulatorThread: true}
			if ioThreads > 0 {
				d.IOThreadsPolicy = ptr.To(virtv1.IOThreadsPolicySupplementalPool)
				d.IOThreads = &virtv1.DiskIOThreads{SupplementalPoolThreadCount: ptr.To(ioThreads)}
			}
		}
	}
	constrained := func(d *virtv1.DomainSpec) {
		d.Resources.Requests = resList("cpu", "1m", "memory", "1G")
		d.Resources.Limits = resList("cpu", "2m", "memory", "2G")
	}
	permitted := func(c *resourceTestCluster) {
		c.cfg.PermittedHostDevices = &virtv1.PermittedHostDevices{
			PciHostDevices:  []virtv1.PciHostDevice{{ResourceName: "vendor.com/allowed_pci"}},
			MediatedDevices: []virtv1.MediatedHostDevice{{ResourceName: "vendor.com/allowed_mdev"}},
		}
	}
	draGPUs := func(d *virtv1.DomainSpec) {
		d.Devices.GPUs = []virtv1.GPU{
			{Name: "device-plugin-gpu", DeviceName: "nvidia-gpu"},
			{Name: "dra-gpu", ClaimRequest: &virtv1.ClaimRequest{ClaimName: ptr.To("gpu-claim"), RequestName: ptr.To("gpu-request")}},
		}
		d.Devices.HostDevices = []virtv1.HostDevice{
			{Name: "dra-host", ClaimRequest: &virtv1.ClaimRequest{ClaimName: ptr.To("hostdev-claim"), RequestName: ptr.To("hostdev-request")}},
		}
	}
	autoLimitsSelector := func(c *resourceTestCluster) {
		c.cfg.AutoCPULimitNamespaceLabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"testAutoLimits": "true"}}
	}
	ratioNamespace := func(ratio string) *StaticObjects {
		return &StaticObjects{
			Namespaces: []*corev1.Namespace{resourceTestNamespace("custom-ratio", map[string]string{virtv1.AutoMemoryLimitsRatioLabel: ratio})},
			Quotas:     []*corev1.ResourceQuota{resourceTestQuota("custom-ratio", corev1.ResourceLimitsMemory)},
		}
	}
	// 64M requested, no topology: 125000 B page tables + 268Mi.
	const smallRequest = "345143368" // 64M + 281143368

	tests := []computeResourcesCase{
		{
			// template_test "should add cpu and memory constraints to a template"
			name:     "user CPU and memory are kept and the overhead is added to memory on amd64",
			vmi:      resourceTestVMI("default", constrained),
			requests: map[corev1.ResourceName]string{cpu: "1m", memory: "1282971493", corev1.ResourceEphemeralStorage: "50M"},
			limits:   map[corev1.ResourceName]string{cpu: "2m", memory: "2282971493", kvm: "1", tun: "1"},
		},
		{
			name:     "user CPU and memory are kept and the overhead is added to memory on arm64",
			vmi:      onArchitecture(resourceTestVMI("default", constrained), "arm64"),
			requests: map[corev1.ResourceName]string{cpu: "1m", memory: "1417189221"},
			limits:   map[corev1.ResourceName]string{cpu: "2m", memory: "2417189221"},
		},
		{
			// "should overcommit guest overhead if selected"
			name: "overcommitGuestOverhead adds the overhead to the limit only",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Resources.OvercommitGuestOverhead = true
				d.Resources.Requests = resList("memory", "1G")
				d.Resources.Limits = resList("memory", "2G")
			}),
			requests: map[corev1.ResourceName]string{memory: "1G"},
			limits:   map[corev1.ResourceName]string{memory: "2282971493"},
		},
		{
			// "should not add unset resources": 362 MB, rounded up
			name: "three cores and 64M get the vCPU overhead and no memory limit",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.CPU = &virtv1.CPU{Cores: 3}
				d.Resources.Requests = resList("cpu", "1m", "memory", "64M")
			}),
			requests: map[corev1.ResourceName]string{cpu: "1m", memory: "361920584"},
			absent:   []corev1.ResourceName{memory, cpu},
		},
		{
			// "should calculate vmipod cpu request based on vcpus and cpu_allocation_ratio"
			name:     "three vCPUs request 300m at the default allocation ratio of 10",
			vmi:      resourceTestVMI("default", func(d *virtv1.DomainSpec) { d.CPU = &virtv1.CPU{Cores: 3} }),
			requests: map[corev1.ResourceName]string{cpu: "300m"},
			absent:   []corev1.ResourceName{cpu},
		},
		{
			name:     "three vCPUs request 3 CPUs at an allocation ratio of 1",
			vmi:      resourceTestVMI("default", func(d *virtv1.DomainSpec) { d.CPU = &virtv1.CPU{Cores: 3} }),
			cluster:  newResourceTestCluster(func(c *resourceTestCluster) { c.cfg.DeveloperConfiguration.CPUAllocationRatio = 1 }),
			requests: map[corev1.ResourceName]string{cpu: "3"},
		},
		{
			name: "an explicit CPU request overrides the allocation ratio",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.CPU = &virtv1.CPU{Cores: 5}
				d.Resources.Requests = resList("cpu", "150m")
			}),
			cluster:  newResourceTestCluster(func(c *resourceTestCluster) { c.cfg.DeveloperConfiguration.CPUAllocationRatio = 16 }),
			requests: map[corev1.ResourceName]string{cpu: "150m"},
		},
		{
			// memory overcommit 110: 1Gi × 100 / 110, then 268Mi overhead
			name:     "a guest memory is overcommitted by memoryOvercommit before the overhead is added",
			vmi:      resourceTestVMI("default", func(d *virtv1.DomainSpec) { d.Memory = &virtv1.Memory{Guest: ptr.To(resource.MustParse("1Gi"))} }),
			cluster:  newResourceTestCluster(func(c *resourceTestCluster) { c.cfg.DeveloperConfiguration.MemoryOvercommit = 110 }),
			requests: map[corev1.ResourceName]string{memory: "1257147298"},
		},
		{
			name:     "a guest memory without overcommit is requested whole",
			vmi:      resourceTestVMI("default", func(d *virtv1.DomainSpec) { d.Memory = &virtv1.Memory{Guest: ptr.To(resource.MustParse("1Gi"))} }),
			requests: map[corev1.ResourceName]string{memory: "1292Mi"},
		},
		{
			name: "a memory request is never overcommitted",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Memory = &virtv1.Memory{Guest: ptr.To(resource.MustParse("1Gi"))}
				d.Resources.Requests = resList("memory", "1Gi")
			}),
			cluster:  newResourceTestCluster(func(c *resourceTestCluster) { c.cfg.DeveloperConfiguration.MemoryOvercommit = 110 }),
			requests: map[corev1.ResourceName]string{memory: "1294Mi"}, // + 2Mi page tables
		},
		{
			// "with hugepages constraints": 282 MB on amd64
			name:     "2Mi hugepages back the guest and memory is the overhead alone",
			vmi:      resourceTestVMI("default", hugepages("2Mi", nil, "64M")),
			requests: map[corev1.ResourceName]string{memory: "281143368", "hugepages-2Mi": "64M"},
			limits:   map[corev1.ResourceName]string{memory: "281143368", "hugepages-2Mi": "64M"},
		},
		{
			name:     "1Gi hugepages on arm64 add the UEFI flash to the overhead",
			vmi:      onArchitecture(resourceTestVMI("default", hugepages("1Gi", nil, "64M")), "arm64"),
			requests: map[corev1.ResourceName]string{memory: "415361096", "hugepages-1Gi": "64M"},
			limits:   map[corev1.ResourceName]string{memory: "415361096", "hugepages-1Gi": "64M"},
		},
		{
			// "should account for difference between guest and container requested memory": 282 + 6 MB
			name:     "hugepages back only the guest memory and the rest of the request stays memory",
			vmi:      resourceTestVMI("default", hugepages("1Gi", ptr.To(resource.MustParse("64M")), "70M")),
			requests: map[corev1.ResourceName]string{memory: "287155086", "hugepages-1Gi": "64M"},
			limits:   map[corev1.ResourceName]string{memory: "287155086", "hugepages-1Gi": "64M"},
		},
		{
			name:   "an isolated emulator thread adds one CPU to an odd count",
			vmi:    resourceTestVMI("default", emulatorThread(3, 0)),
			limits: map[corev1.ResourceName]string{cpu: "4"},
		},
		{
			name:   "an isolated emulator thread adds one CPU to an even count without the parity annotation",
			vmi:    resourceTestVMI("default", emulatorThread(2, 0)),
			limits: map[corev1.ResourceName]string{cpu: "3"},
		},
		{
			name:   "the parity annotation keeps one emulator CPU for an odd count",
			vmi:    withVMIAnnotation(resourceTestVMI("default", emulatorThread(3, 0)), virtv1.EmulatorThreadCompleteToEvenParity),
			limits: map[corev1.ResourceName]string{cpu: "4"},
		},
		{
			name:   "the parity annotation adds two emulator CPUs to an even count",
			vmi:    withVMIAnnotation(resourceTestVMI("default", emulatorThread(4, 0)), virtv1.EmulatorThreadCompleteToEvenParity),
			limits: map[corev1.ResourceName]string{cpu: "6"},
		},
		{
			// renderresources_test "vCPUs specified, IO threads present"
			name:     "dedicated CPUs count supplemental IOThreads and the emulator thread",
			vmi:      resourceTestVMI("default", emulatorThread(5, 2)),
			requests: map[corev1.ResourceName]string{cpu: "8"},
			limits:   map[corev1.ResourceName]string{cpu: "8"},
		},
		{
			name:     "the parity annotation counts IOThreads when completing an even count",
			vmi:      withVMIAnnotation(resourceTestVMI("default", emulatorThread(6, 2)), virtv1.EmulatorThreadCompleteToEvenParity),
			requests: map[corev1.ResourceName]string{cpu: "10"},
			limits:   map[corev1.ResourceName]string{cpu: "10"},
		},
		{
			name: "dedicated CPUs without a topology add IOThreads and the emulator thread to the user's CPUs",
			vmi: withVMIAnnotation(resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				emulatorThread(0, 2)(d)
				d.Resources.Requests = resList("cpu", "5")
				d.Resources.Limits = resList("cpu", "5")
			}), virtv1.EmulatorThreadCompleteToEvenParity),
			requests: map[corev1.ResourceName]string{cpu: "8"},
			limits:   map[corev1.ResourceName]string{cpu: "8"},
		},
		{
			name:     "a namespace matching autoCPULimitNamespaceLabelSelector gets a CPU limit of the vCPU count",
			vmi:      resourceTestVMI("matching-label-ns", func(d *virtv1.DomainSpec) { d.CPU = &virtv1.CPU{Cores: 2} }),
			cluster:  newResourceTestCluster(autoLimitsSelector),
			objects:  &StaticObjects{Namespaces: []*corev1.Namespace{resourceTestNamespace("matching-label-ns", map[string]string{"testAutoLimits": "true"})}},
			requests: map[corev1.ResourceName]string{cpu: "200m"},
			limits:   map[corev1.ResourceName]string{cpu: "2"},
		},
		{
			name:     "a namespace not matching the selector gets no CPU limit",
			vmi:      resourceTestVMI("somethingelse", func(d *virtv1.DomainSpec) { d.CPU = &virtv1.CPU{Cores: 2} }),
			cluster:  newResourceTestCluster(autoLimitsSelector),
			objects:  &StaticObjects{Quotas: []*corev1.ResourceQuota{resourceTestQuota("somethingelse", corev1.ResourceCPU)}},
			requests: map[corev1.ResourceName]string{cpu: "200m"},
			absent:   []corev1.ResourceName{cpu},
		},
		{
			name: "a quota on limits.cpu gets a CPU limit of the vCPU count",
			vmi: resourceTestVMI("rq-namespace", func(d *virtv1.DomainSpec) {
				d.CPU = &virtv1.CPU{Cores: 2}
				d.Resources.Requests = resList("cpu", "200m")
			}),
			objects:  &StaticObjects{Quotas: []*corev1.ResourceQuota{resourceTestQuota("rq-namespace", corev1.ResourceLimitsCPU)}},
			requests: map[corev1.ResourceName]string{cpu: "200m"},
			limits:   map[corev1.ResourceName]string{cpu: "2"},
		},
		{
			name:     "a quota on limits.memory gets twice the final memory request as limit",
			vmi:      resourceTestVMI("rq-namespace", func(d *virtv1.DomainSpec) { d.Resources.Requests = resList("memory", "64M") }),
			objects:  &StaticObjects{Quotas: []*corev1.ResourceQuota{resourceTestQuota("rq-namespace", corev1.ResourceLimitsMemory)}},
			requests: map[corev1.ResourceName]string{memory: smallRequest},
			limits:   map[corev1.ResourceName]string{memory: "690286736"},
		},
		{
			name:     "the namespace's memory limits ratio label scales the auto limit",
			vmi:      resourceTestVMI("custom-ratio", func(d *virtv1.DomainSpec) { d.Resources.Requests = resList("memory", "64M") }),
			objects:  ratioNamespace("3.2"),
			requests: map[corev1.ResourceName]string{memory: smallRequest},
			limits:   map[corev1.ResourceName]string{memory: "1104458777"},
		},
		{
			name:    "a memory limits ratio label that is no float falls back to 2",
			vmi:     resourceTestVMI("custom-ratio", func(d *virtv1.DomainSpec) { d.Resources.Requests = resList("memory", "64M") }),
			objects: ratioNamespace("not_a_float"),
			limits:  map[corev1.ResourceName]string{memory: "690286736"},
		},
		{
			// 64M + 100Mi more overhead for dedicated CPUs
			name: "dedicated CPUs pin the memory limit to the request despite a quota",
			vmi: resourceTestVMI("rq-namespace", func(d *virtv1.DomainSpec) {
				d.CPU = &virtv1.CPU{DedicatedCPUPlacement: true}
				d.Resources.Requests = resList("memory", "64M")
			}),
			objects:  &StaticObjects{Quotas: []*corev1.ResourceQuota{resourceTestQuota("rq-namespace", corev1.ResourceLimitsMemory)}},
			requests: map[corev1.ResourceName]string{memory: "450000968"},
			limits:   map[corev1.ResourceName]string{memory: "450000968"},
		},
		{
			name:     "a quota without limits.memory sets no memory limit",
			vmi:      resourceTestVMI("no-rq-namespace", func(d *virtv1.DomainSpec) { d.Resources.Requests = resList("memory", "64M") }),
			objects:  &StaticObjects{Quotas: []*corev1.ResourceQuota{resourceTestQuota("no-rq-namespace", corev1.ResourceMemory)}},
			requests: map[corev1.ResourceName]string{memory: smallRequest},
			absent:   []corev1.ResourceName{memory},
		},
		{
			name: "a device-plugin GPU is requested once",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Devices.GPUs = []virtv1.GPU{{Name: "gpu1", DeviceName: "vendor.com/gpu_name"}}
			}),
			requests: map[corev1.ResourceName]string{"vendor.com/gpu_name": "1"},
			limits:   map[corev1.ResourceName]string{"vendor.com/gpu_name": "1"},
		},
		{
			name: "a device-plugin host device is requested once",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Devices.HostDevices = []virtv1.HostDevice{{Name: "hostdev1", DeviceName: "vendor.com/dev_name"}}
			}),
			requests: map[corev1.ResourceName]string{"vendor.com/dev_name": "1"},
			limits:   map[corev1.ResourceName]string{"vendor.com/dev_name": "1"},
		},
		{
			name: "two GPUs of one device plugin are requested twice",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Devices.GPUs = []virtv1.GPU{{Name: "gpu1", DeviceName: "vendor.com/gpu"}, {Name: "gpu2", DeviceName: "vendor.com/gpu"}}
			}),
			requests: map[corev1.ResourceName]string{"vendor.com/gpu": "2"},
			limits:   map[corev1.ResourceName]string{"vendor.com/gpu": "2"},
		},
		{
			name:     "DRA GPUs and host devices become claims when their gates are on",
			vmi:      resourceTestVMI("default", draGPUs),
			cluster:  newResourceTestCluster(func(c *resourceTestCluster) { c.gates = []string{gateGPUsWithDRA, gateHostDevicesWithDRA} }),
			requests: map[corev1.ResourceName]string{"nvidia-gpu": "1"},
			limits:   map[corev1.ResourceName]string{"nvidia-gpu": "1"},
			claims:   []corev1.ResourceClaim{{Name: "gpu-claim", Request: "gpu-request"}, {Name: "hostdev-claim", Request: "hostdev-request"}},
		},
		{
			name:   "DRA GPUs and host devices make no claims with their gates off",
			vmi:    resourceTestVMI("default", draGPUs),
			limits: map[corev1.ResourceName]string{"nvidia-gpu": "1"},
			claims: []corev1.ResourceClaim{},
		},
		{
			name:     "each SR-IOV network's resource is requested",
			vmi:      resourceTestVMI("default", nil),
			networks: map[string]string{"net1": "res1", "net2": "res44", "pod": ""},
			requests: map[corev1.ResourceName]string{"res1": "1", "res44": "1"},
			limits:   map[corev1.ResourceName]string{"res1": "1", "res44": "1"},
		},
		{
			name:     "network resources are ignored under ExternalNetResourceInjection",
			vmi:      resourceTestVMI("default", nil),
			cluster:  newResourceTestCluster(func(c *resourceTestCluster) { c.gates = []string{gateExternalNetResourceInjection} }),
			networks: map[string]string{"net1": "res1"},
			absent:   []corev1.ResourceName{"res1"},
		},
		{
			name: "SEV requests the sev device",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.LaunchSecurity = &virtv1.LaunchSecurity{SEV: &virtv1.SEV{}}
			}),
			requests: map[corev1.ResourceName]string{sevResource: "1"},
			limits:   map[corev1.ResourceName]string{sevResource: "1"},
		},
		{
			name: "a LUN with persistent reservation requests the pr-helper device",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Devices.Disks = []virtv1.Disk{{Name: "lun", DiskDevice: virtv1.DiskDevice{LUN: &virtv1.LunTarget{Reservation: true}}}}
			}),
			requests: map[corev1.ResourceName]string{prHelperResource: "1"},
			limits:   map[corev1.ResourceName]string{prHelperResource: "1"},
		},
		{
			name: "auto-attached VSOCK requests vhost-vsock",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Devices.AutoattachVSOCK = ptr.To(true)
			}),
			limits: map[corev1.ResourceName]string{vhostVsockResource: "1"},
		},
		{
			name: "a virtio interface requests vhost-net",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Devices.Interfaces = []virtv1.Interface{{Name: "default"}}
			}),
			limits: map[corev1.ResourceName]string{vhostNetResource: "1", tun: "1", kvm: "1"},
		},
		{
			name: "emulation drops kvm and vhost-net but keeps tun",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Devices.Interfaces = []virtv1.Interface{{Name: "default"}}
			}),
			cluster: newResourceTestCluster(func(c *resourceTestCluster) { c.cfg.DeveloperConfiguration.UseEmulation = true }),
			limits:  map[corev1.ResourceName]string{tun: "1"},
			absent:  []corev1.ResourceName{kvm, vhostNetResource},
		},
		{
			name: "no pod interface needs no tun",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Devices.AutoattachPodInterface = ptr.To(false)
			}),
			limits: map[corev1.ResourceName]string{kvm: "1"},
			absent: []corev1.ResourceName{tun},
		},
		{
			name: "the hyperv-direct hypervisor requests mshv instead of kvm",
			vmi:  resourceTestVMI("default", nil),
			cluster: newResourceTestCluster(func(c *resourceTestCluster) {
				c.gates = []string{gateConfigurableHypervisor}
				c.cfg.Hypervisors = []virtv1.HypervisorConfiguration{{Name: virtv1.HyperVDirectHypervisorName}}
			}),
			limits: map[corev1.ResourceName]string{"devices.kubevirt.io/mshv": "1"},
			absent: []corev1.ResourceName{kvm},
		},
		{
			// "Ephemeral storage request"
			name: "KubeVirt's 50M of ephemeral storage is added to the user's request and limit",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Resources.Requests = resList("ephemeral-storage", "30M")
				d.Resources.Limits = resList("ephemeral-storage", "70M")
			}),
			requests: map[corev1.ResourceName]string{corev1.ResourceEphemeralStorage: "80M"},
			limits:   map[corev1.ResourceName]string{corev1.ResourceEphemeralStorage: "120M"},
		},
		{
			name: "GPUs and host devices not in permittedHostDevices are refused with KubeVirt's message",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Devices.GPUs = []virtv1.GPU{{Name: "gpu1", DeviceName: "vendor.com/gpu_name"}}
				d.Devices.HostDevices = []virtv1.HostDevice{{Name: "hd1", DeviceName: "vendor.com/dev_name"}, {Name: "hd2", DeviceName: "vendor.com/allowed_pci"}}
			}),
			cluster: newResourceTestCluster(permitted),
			wantErr: "GPU vendor.com/gpu_name is not permitted in permittedHostDevices configuration HostDevice vendor.com/dev_name is not permitted in permittedHostDevices configuration",
		},
		{
			name: "GPUs are not checked against permittedHostDevices under GPUsWithDRA",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Devices.GPUs = []virtv1.GPU{{Name: "gpu1", DeviceName: "vendor.com/gpu_name"}}
				d.Devices.HostDevices = []virtv1.HostDevice{{Name: "hd1", DeviceName: "vendor.com/dev_name"}}
			}),
			cluster: newResourceTestCluster(permitted, func(c *resourceTestCluster) { c.gates = []string{gateGPUsWithDRA} }),
			wantErr: "HostDevice vendor.com/dev_name is not permitted in permittedHostDevices configuration",
		},
		{
			name: "permitted GPUs and host devices are requested",
			vmi: resourceTestVMI("default", func(d *virtv1.DomainSpec) {
				d.Devices.GPUs = []virtv1.GPU{{Name: "gpu1", DeviceName: "vendor.com/allowed_mdev"}}
				d.Devices.HostDevices = []virtv1.HostDevice{{Name: "hd1", DeviceName: "vendor.com/allowed_pci"}}
			}),
			cluster: newResourceTestCluster(permitted),
			limits:  map[corev1.ResourceName]string{"vendor.com/allowed_mdev": "1", "vendor.com/allowed_pci": "1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cluster := tt.cluster
			if cluster == nil {
				cluster = newResourceTestCluster()
			}
			objects := tt.objects
			if objects == nil {
				objects = &StaticObjects{}
			}
			got, err := computeResources(tt.vmi, cluster, objects, tt.networks, MemoryOverhead(tt.vmi, cluster))
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("computeResources error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("computeResources: %v", err)
			}
			checkQuantityStrings(t, "request", got.Requests, tt.requests)
			checkQuantityStrings(t, "limit", got.Limits, tt.limits)
			for _, name := range tt.absent {
				if q, ok := got.Limits[name]; ok {
					t.Errorf("limit %s = %s, want none", name, q.String())
				}
			}
			if tt.claims != nil && !slices.Equal(got.Claims, tt.claims) {
				t.Errorf("claims = %v, want %v", got.Claims, tt.claims)
			}
		})
	}
}

func checkQuantityStrings(t *testing.T, what string, got corev1.ResourceList, want map[corev1.ResourceName]string) {
	t.Helper()
	for name, w := range want {
		q, ok := got[name]
		if !ok {
			t.Errorf("%s %s missing, want %s", what, name, w)
			continue
		}
		if q.String() != w {
			t.Errorf("%s %s = %s, want %s", what, name, q.String(), w)
		}
	}
}

func TestComputeResourcesLeavesTheVMIUntouched(t *testing.T) {
	vmi := resourceTestVMI("default", func(d *virtv1.DomainSpec) {
		d.CPU = &virtv1.CPU{Cores: 2, DedicatedCPUPlacement: true, IsolateEmulatorThread: true}
		d.Resources.Requests = resList("memory", "1Gi", "ephemeral-storage", "1G")
		d.Resources.Limits = resList("memory", "1Gi", "ephemeral-storage", "1G")
	})
	before := vmi.DeepCopy()
	cluster := newResourceTestCluster()
	if _, err := computeResources(vmi, cluster, &StaticObjects{}, nil, MemoryOverhead(vmi, cluster)); err != nil {
		t.Fatal(err)
	}
	for name, q := range before.Spec.Domain.Resources.Requests {
		if got := vmi.Spec.Domain.Resources.Requests[name]; got.Cmp(q) != 0 {
			t.Errorf("request %s changed to %s", name, got.String())
		}
	}
	for name, q := range before.Spec.Domain.Resources.Limits {
		if got := vmi.Spec.Domain.Resources.Limits[name]; got.Cmp(q) != 0 {
			t.Errorf("limit %s changed to %s", name, got.String())
		}
	}
}

func TestVCPUsOfResources(t *testing.T) {
	tests := []struct {
		name string
		cpu  *virtv1.CPU
		want int64
	}{
		{"no CPU spec counts one vCPU", nil, 1},
		{"an empty topology counts none", &virtv1.CPU{}, 0},
		{"sockets alone count", &virtv1.CPU{Sockets: 3}, 3},
		{"cores times sockets times threads", &virtv1.CPU{Cores: 2, Sockets: 2, Threads: 2}, 8},
		{"threads alone count", &virtv1.CPU{Threads: 4}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := VCPUs(tt.cpu); got != tt.want {
				t.Errorf("VCPUs = %d, want %d", got, tt.want)
			}
		})
	}
}

func supportTestCluster(kind virtv1.SupportContainerType, requests, limits corev1.ResourceList) *resourceTestCluster {
	return newResourceTestCluster(func(c *resourceTestCluster) {
		c.cfg.SupportContainerResources = []virtv1.SupportContainerResources{{
			Type:      kind,
			Resources: virtv1.ResourceRequirementsWithoutClaims{Requests: requests, Limits: limits},
		}}
	})
}

func dedicatedTestVMI() *virtv1.VirtualMachineInstance {
	return resourceTestVMI("default", func(d *virtv1.DomainSpec) { d.CPU = &virtv1.CPU{DedicatedCPUPlacement: true} })
}

func guaranteedTestVMI() *virtv1.VirtualMachineInstance {
	return resourceTestVMI("default", func(d *virtv1.DomainSpec) {
		d.Resources.Requests = resList("cpu", "1", "memory", "64M")
		d.Resources.Limits = resList("cpu", "1", "memory", "64M")
	})
}

func TestSupportContainerResources(t *testing.T) {
	none := corev1.ResourceList{}
	tests := []struct {
		name         string
		kind         virtv1.SupportContainerType
		vmi          *virtv1.VirtualMachineInstance
		cfgRequests  corev1.ResourceList
		cfgLimits    corev1.ResourceList
		wantRequests corev1.ResourceList
		wantLimits   corev1.ResourceList
	}{
		// template_test "should add defined cpu/memory resources for sidecar if specified in config"
		{"a sidecar gets nothing by default", virtv1.SideCar, resourceTestVMI("", nil), none, none, none, none},
		{"a sidecar of a dedicated VMI gets 200m and 64M", virtv1.SideCar, dedicatedTestVMI(), none, none, resList("cpu", "200m", "memory", "64M"), resList("cpu", "200m", "memory", "64M")},
		{"a sidecar gets the configured requests", virtv1.SideCar, resourceTestVMI("", nil), resList("cpu", "100m", "memory", "3M"), none, resList("cpu", "100m", "memory", "3M"), none},
		{"a sidecar of a dedicated VMI ignores configured requests", virtv1.SideCar, dedicatedTestVMI(), resList("cpu", "100m", "memory", "3M"), none, resList("cpu", "200m", "memory", "64M"), resList("cpu", "200m", "memory", "64M")},
		{"a sidecar gets the configured limits and no request", virtv1.SideCar, resourceTestVMI("", nil), none, resList("cpu", "100m", "memory", "3M"), none, resList("cpu", "100m", "memory", "3M")},
		{"a sidecar of a dedicated VMI requests its configured limits", virtv1.SideCar, dedicatedTestVMI(), none, resList("cpu", "100m", "memory", "3M"), resList("cpu", "100m", "memory", "3M"), resList("cpu", "100m", "memory", "3M")},

		// renderresources_test "Calculate ratios from VMI" (hotplug)
		{"a hotplug pod gets the defaults", virtv1.HotplugAttachment, nil, none, none, resList("cpu", "10m", "memory", "2M"), resList("cpu", "100m", "memory", "80M")},
		{"a hotplug pod gets configured limits", virtv1.HotplugAttachment, nil, none, resList("cpu", "25m", "memory", "32M"), resList("cpu", "10m", "memory", "2M"), resList("cpu", "25m", "memory", "32M")},
		{"a hotplug pod gets configured requests", virtv1.HotplugAttachment, nil, resList("cpu", "140m", "memory", "1024M"), none, resList("cpu", "140m", "memory", "1024M"), resList("cpu", "100m", "memory", "80M")},
		{"a hotplug pod mixes a partial request with defaults", virtv1.HotplugAttachment, nil, resList("memory", "32M"), resList("cpu", "140m", "memory", "1024M"), resList("cpu", "10m", "memory", "32M"), resList("cpu", "140m", "memory", "1024M")},
		{"a hotplug pod mixes a partial limit with defaults", virtv1.HotplugAttachment, nil, resList("cpu", "25m", "memory", "32M"), resList("cpu", "140m"), resList("cpu", "25m", "memory", "32M"), resList("cpu", "140m", "memory", "80M")},

		// template_test "should add defined cpu/memory resources for virtiofs if specified in config"
		{"virtiofs gets the defaults", virtv1.VirtioFS, resourceTestVMI("", nil), none, none, resList("cpu", "10m", "memory", "1M"), resList("cpu", "100m", "memory", "80M")},
		{"virtiofs of a dedicated VMI requests its limits", virtv1.VirtioFS, dedicatedTestVMI(), none, none, resList("cpu", "100m", "memory", "80M"), resList("cpu", "100m", "memory", "80M")},
		{"virtiofs gets configured values", virtv1.VirtioFS, resourceTestVMI("", nil), resList("cpu", "5m", "memory", "8M"), resList("cpu", "50m", "memory", "80M"), resList("cpu", "5m", "memory", "8M"), resList("cpu", "50m", "memory", "80M")},
		{"virtiofs of a dedicated VMI requests its configured limits", virtv1.VirtioFS, dedicatedTestVMI(), resList("cpu", "5m", "memory", "8M"), resList("cpu", "50m", "memory", "80M"), resList("cpu", "50m", "memory", "80M"), resList("cpu", "50m", "memory", "80M")},

		// container-disk_test "resources are set from config" and "… if the VMI wants the guaranteed QOS class"
		{"a container disk gets the minimal defaults", virtv1.ContainerDisk, resourceTestVMI("", nil), none, none, resList("cpu", "1m", "memory", "1M", "ephemeral-storage", "50M"), resList("cpu", "10m", "memory", "40M")},
		{"a container disk gets configured values", virtv1.ContainerDisk, resourceTestVMI("", nil), resList("cpu", "2m", "memory", "25M"), resList("cpu", "110m", "memory", "400M"), resList("cpu", "2m", "memory", "25M", "ephemeral-storage", "50M"), resList("cpu", "110m", "memory", "400M")},
		{"a container disk of a Guaranteed VMI requests its limits", virtv1.ContainerDisk, guaranteedTestVMI(), none, none, resList("cpu", "10m", "memory", "40M", "ephemeral-storage", "50M"), resList("cpu", "10m", "memory", "40M")},
		{"a container disk of a Guaranteed VMI requests its configured limits", virtv1.ContainerDisk, guaranteedTestVMI(), resList("cpu", "1m", "memory", "25M"), resList("cpu", "100m", "memory", "400M"), resList("cpu", "100m", "memory", "400M", "ephemeral-storage", "50M"), resList("cpu", "100m", "memory", "400M")},

		// serialconsolelog.go and vmExportContainerResourceRequirements (no KubeVirt unit test)
		{"the console log gets its defaults", virtv1.GuestConsoleLog, resourceTestVMI("", nil), none, none, resList("cpu", "5m", "memory", "35M"), resList("cpu", "15m", "memory", "60M")},
		{"the console log of a Guaranteed VMI requests its limits", virtv1.GuestConsoleLog, guaranteedTestVMI(), none, none, resList("cpu", "15m", "memory", "60M"), resList("cpu", "15m", "memory", "60M")},
		{"a VM export server gets its defaults", virtv1.VMExport, nil, none, none, resList("cpu", "100m", "memory", "200Mi"), resList("cpu", "1", "memory", "1024Mi")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := supportContainerResources(tt.kind, tt.vmi, supportTestCluster(tt.kind, tt.cfgRequests, tt.cfgLimits))
			checkResourceList(t, "requests", got.Requests, tt.wantRequests)
			checkResourceList(t, "limits", got.Limits, tt.wantLimits)
		})
	}
}

func TestContainerDiskBinaryResources(t *testing.T) {
	// initContainerResourceRequirementsForVMI (no KubeVirt unit test).
	tests := []struct {
		name         string
		vmi          *virtv1.VirtualMachineInstance
		wantRequests corev1.ResourceList
		wantLimits   corev1.ResourceList
	}{
		{"the binary copy gets minimal defaults", resourceTestVMI("", nil), resList("cpu", "10m", "memory", "1M"), resList("cpu", "100m", "memory", "40M")},
		{"the binary copy of a dedicated VMI gets request equal to limit", dedicatedTestVMI(), resList("cpu", "10m", "memory", "40M"), resList("cpu", "10m", "memory", "40M")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := containerDiskBinaryResources(tt.vmi, newResourceTestCluster())
			checkResourceList(t, "requests", got.Requests, tt.wantRequests)
			checkResourceList(t, "limits", got.Limits, tt.wantLimits)
		})
	}
}

func checkResourceList(t *testing.T, what string, got, want corev1.ResourceList) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
		return
	}
	for name, w := range want {
		if q, ok := got[name]; !ok || q.String() != w.String() {
			t.Errorf("%s %s = %s, want %s", what, name, q.String(), w.String())
		}
	}
}
