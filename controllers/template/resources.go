package template

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	virtv1 "kubevirt.io/api/core/v1"
)

// This file computes container resources exactly as KubeVirt v1.8.1's
// template service does (pkg/virt-controller/services/renderresources.go,
// template.go, pkg/hypervisor/kvm, pkg/network/resources). Quantities are
// built with the same operations in the same order, not just the same sums:
// a Quantity's format, and so its string, depends on which addend came first.

// Device-plugin resources virt-handler advertises (template.go's constants).
const (
	kubevirtDevices                        = "devices.kubevirt.io/"
	tunResource        corev1.ResourceName = kubevirtDevices + "tun"
	vhostNetResource   corev1.ResourceName = kubevirtDevices + "vhost-net"
	vhostVsockResource corev1.ResourceName = kubevirtDevices + "vhost-vsock"
	sevResource        corev1.ResourceName = kubevirtDevices + "sev"
	prHelperResource   corev1.ResourceName = kubevirtDevices + "pr-helper"
)

// Feature gates read only here (pkg/virt-config/featuregate).
const (
	gateGPUsWithDRA        = "GPUsWithDRA"
	gateHostDevicesWithDRA = "HostDevicesWithDRA"
)

const (
	// ephemeralStorageOverhead is what KubeVirt itself writes to the compute
	// and container-disk containers' ephemeral storage
	// (ephemeralStorageOverheadSize in services and in container-disk).
	ephemeralStorageOverhead = "50M"
	// defaultMemoryLimitRatio is DefaultMemoryLimitOverheadRatio: auto
	// memory limits are twice the request unless the namespace says otherwise.
	defaultMemoryLimitRatio = 2.0
	// KubeVirt's defaults for the developer configuration; it rejects a
	// configuration with values <= 0 and keeps the last valid one.
	defaultMemoryOvercommit   = 100
	defaultCPUAllocationRatio = 10
)

// launcherProcessOverheads are the RSS KubeVirt measured for
// virt-launcher-monitor, virt-launcher, virtlogd, virtqemud and qemu
// (kvm.VirtLauncherMonitorOverhead … kvm.QemuOverhead), added in this order.
var launcherProcessOverheads = []string{"25Mi", "100Mi", "25Mi", "40Mi", "30Mi"}

// MemoryOverhead is the memory the launcher pod needs beyond the guest's:
// CalculateMemoryOverhead with the KVM backend's GetMemoryOverhead plus the
// network MemoryCalculator (passt and binding plugins), as virt-controller
// wires it with WithNetMemoryCalculator. The hyperv-direct (mshv) backend's
// GetMemoryOverhead is the same arithmetic, so this serves it too.
func MemoryOverhead(vmi *virtv1.VirtualMachineInstance, cluster Cluster) resource.Quantity {
	cfg := cluster.Configuration()
	arch := vmi.Spec.Architecture
	if arch == "" {
		// GetClusterCPUArch is virt-controller's own GOARCH; virt-api sets
		// spec.architecture, so this only serves VMIs it never defaulted.
		arch = runtime.GOARCH
	}
	overhead := hypervisorMemoryOverhead(vmi, arch, cfg.AdditionalGuestMemoryOverheadRatio)
	var bindings map[string]virtv1.InterfaceBindingPlugin
	if cfg.NetworkConfiguration != nil {
		bindings = cfg.NetworkConfiguration.Binding
	}
	overhead.Add(networkMemoryOverhead(vmi, bindings))
	return overhead
}

// hypervisorMemoryOverhead mirrors KvmHypervisorBackend.GetMemoryOverhead:
// an estimate of page tables, KubeVirt's processes, vCPUs, devices and
// side processes, scaled by additionalGuestMemoryOverheadRatio last.
func hypervisorMemoryOverhead(vmi *virtv1.VirtualMachineInstance, arch string, ratio *string) resource.Quantity {
	domain := &vmi.Spec.Domain
	overhead := *resource.NewScaledQuantity(0, resource.Kilo)
	add := func(q string) { overhead.Add(resource.MustParse(q)) }

	// Page tables: one byte per 512 bytes of requested guest memory.
	pageTables := resource.NewScaledQuantity(domain.Resources.Requests.Memory().ScaledValue(resource.Kilo), resource.Kilo)
	pageTables.Set(pageTables.Value() / 512)
	overhead.Add(*pageTables)

	for _, q := range launcherProcessOverheads {
		add(q)
	}

	perVCPU := resource.MustParse("8Mi")
	overhead.Add(*resource.NewQuantity(perVCPU.Value()*overheadVCPUs(vmi), perVCPU.Format))

	add("8Mi") // the IOThread
	if domain.Devices.AutoattachGraphicsDevice == nil || *domain.Devices.AutoattachGraphicsDevice {
		add("32Mi") // video RAM
	}
	if arch == "arm64" {
		add("128Mi") // the two 64Mi UEFI pflash devices of qemu's virt machine
	}
	if usesVFIO(vmi) {
		add("1Gi") // VFIO locks guest RAM plus about 1G of MMIO space
	}
	if hasDownwardMetricsVolume(vmi) {
		add("1Mi") // its memory-backed emptyDir
	}
	// addProbeOverheads: virt-probe per exec probe, and its binary once.
	liveness := vmi.Spec.LivenessProbe != nil && vmi.Spec.LivenessProbe.Exec != nil
	readiness := vmi.Spec.ReadinessProbe != nil && vmi.Spec.ReadinessProbe.Exec != nil
	if liveness {
		add("10Mi")
	}
	if readiness {
		add("10Mi")
	}
	if liveness || readiness {
		add("100Mi")
	}
	if isSEV(vmi) {
		add("256Mi") // SEV, SEV-ES and SEV-SNP guests' encrypted memory bookkeeping
	}
	if hasTPM(vmi) {
		add("53Mi") // swtpm
	}
	if dedicatedOrGuaranteed(vmi) {
		add("100Mi")
	}
	if m := domain.Memory; m != nil && m.ReservedOverhead != nil && m.ReservedOverhead.AddedOverhead != nil {
		overhead.Add(*m.ReservedOverhead.AddedOverhead)
	}

	if ratio != nil && *ratio != "" {
		// virt-api validates the ratio; KubeVirt logs and ignores a bad one.
		if r, err := strconv.ParseFloat(*ratio, 64); err == nil {
			overhead = scaleMemory(overhead, r)
		}
	}
	return overhead
}

// scaleMemory mirrors kvm.MultiplyMemory: it adds (ratio-1) times the
// quantity, computed in kilobytes.
func scaleMemory(q resource.Quantity, ratio float64) resource.Quantity {
	extra := float64(q.ScaledValue(resource.Kilo)) * (ratio - 1.0)
	q.Add(*resource.NewScaledQuantity(int64(extra), resource.Kilo))
	return q
}

// overheadVCPUs is the vCPU count GetMemoryOverhead charges 8Mi each for:
// the topology, or for VMIs without one (never defaulted) the CPU limit,
// else the request, and at least one.
func overheadVCPUs(vmi *virtv1.VirtualMachineInstance) int64 {
	var n int64
	res := vmi.Spec.Domain.Resources
	if cpu := vmi.Spec.Domain.CPU; cpu != nil {
		n = topologyVCPUs(cpu)
	} else if limit, ok := res.Limits[corev1.ResourceCPU]; ok {
		n = limit.Value()
	} else if request, ok := res.Requests[corev1.ResourceCPU]; ok {
		n = request.Value()
	}
	return max(n, 1)
}

// networkMemoryOverhead mirrors network/resources MemoryCalculator: passt's
// 250Mi, plus each registered binding plugin's memory request, counted once
// per plugin however many interfaces use it.
func networkMemoryOverhead(vmi *virtv1.VirtualMachineInstance, bindings map[string]virtv1.InterfaceBindingPlugin) resource.Quantity {
	total := resource.Quantity{}
	ifaces := vmi.Spec.Domain.Devices.Interfaces
	for _, iface := range ifaces {
		if iface.PasstBinding != nil {
			total.Add(resource.MustParse("250Mi"))
			break
		}
	}
	plugins := resource.Quantity{}
	seen := map[string]bool{}
	for _, iface := range ifaces {
		if iface.Binding == nil || seen[iface.Binding.Name] {
			continue
		}
		plugin, registered := bindings[iface.Binding.Name]
		if !registered {
			continue
		}
		seen[iface.Binding.Name] = true
		if plugin.ComputeResourceOverhead == nil || plugin.ComputeResourceOverhead.Requests == nil {
			continue
		}
		plugins.Add(plugin.ComputeResourceOverhead.Requests[corev1.ResourceMemory])
	}
	total.Add(plugins)
	return total
}

// computeResources is the compute container's requirements: KubeVirt's
// newResourceRenderer with its base options and VMIResourcePredicates, in
// their order. networkResources maps each Multus network to its
// NetworkAttachmentDefinition's resourceName (multus.NetworkToResource);
// overhead is MemoryOverhead's result.
func computeResources(vmi *virtv1.VirtualMachineInstance, cluster Cluster, objects Objects, networkResources map[string]string, overhead resource.Quantity) (corev1.ResourceRequirements, error) {
	cfg := cluster.Configuration()
	if err := validatePermittedHostDevices(vmi, cluster); err != nil {
		return corev1.ResourceRequirements{}, err
	}
	if cluster.FeatureGateEnabled(gateExternalNetResourceInjection) {
		// KubeVirt does not read NetworkAttachmentDefinitions then; a
		// webhook outside KubeVirt injects the network resources.
		networkResources = nil
	}
	overcommit, ratio, allowEmulation := developerSettings(cfg)
	domain := &vmi.Spec.Domain

	r := newLauncherResources(domain.Resources)
	r.addEphemeralStorage()
	maps.Copy(r.vmiLimits, virtualizationDevices(vmi, hypervisorDevice(cluster), allowEmulation))

	// The predicates read the VMI only, so evaluating them in turn equals
	// KubeVirt evaluating them all first.
	if domain.Resources.Requests.Memory().IsZero() {
		r.defaultMemoryRequest(domain.Memory, overcommit)
	}
	if isDedicated(vmi) {
		r.pinCPUs(vmi, emulatorParityCPUs(vmi))
	} else {
		r.shareCPUs(vmi, ratio, needsAutoCPULimit(vmi, cfg, objects))
	}
	if hasHugepages(vmi) {
		r.backWithHugepages(domain.Memory, overhead)
	} else {
		r.addMemoryOverhead(domain.Resources.OvercommitGuestOverhead, overhead)
	}
	if quotaNeedsLimit(vmi, objects, corev1.ResourceMemory) {
		r.autoMemoryLimit(memoryLimitRatio(vmi.Namespace, objects))
	}
	if len(networkResources) > 0 {
		var names []corev1.ResourceName
		for _, name := range networkResources {
			if name != "" {
				names = append(names, corev1.ResourceName(name))
			}
		}
		r.requestDevices(names...)
	}
	if gpus := devicePluginGPUs(domain.Devices.GPUs); len(gpus) > 0 {
		r.requestDevices(gpus...)
	}
	if cluster.FeatureGateEnabled(gateGPUsWithDRA) {
		var claims []corev1.ResourceClaim
		for _, gpu := range domain.Devices.GPUs {
			if c, ok := draClaim(gpu.DeviceName, gpu.ClaimRequest); ok {
				claims = append(claims, c)
			}
		}
		r.addClaims(claims)
	}
	if devs := devicePluginHostDevices(domain.Devices.HostDevices); len(devs) > 0 {
		r.requestDevices(devs...)
	}
	if cluster.FeatureGateEnabled(gateHostDevicesWithDRA) {
		var claims []corev1.ResourceClaim
		for _, dev := range domain.Devices.HostDevices {
			if c, ok := draClaim(dev.DeviceName, dev.ClaimRequest); ok {
				claims = append(claims, c)
			}
		}
		r.addClaims(claims)
	}
	if isSEV(vmi) {
		r.requestDevices(sevResource)
	}
	if hasPersistentReservation(vmi) {
		r.requestDevices(prHelperResource)
	}
	return r.requirements(), nil
}

// developerSettings reads the configuration computeResources needs, with
// KubeVirt's defaults where a configuration it would reject says otherwise.
func developerSettings(cfg *virtv1.KubeVirtConfiguration) (overcommit, cpuAllocationRatio int, allowEmulation bool) {
	overcommit, cpuAllocationRatio = defaultMemoryOvercommit, defaultCPUAllocationRatio
	if dc := cfg.DeveloperConfiguration; dc != nil {
		if dc.MemoryOvercommit > 0 {
			overcommit = dc.MemoryOvercommit
		}
		if dc.CPUAllocationRatio > 0 {
			cpuAllocationRatio = dc.CPUAllocationRatio
		}
		allowEmulation = dc.UseEmulation
	}
	return overcommit, cpuAllocationRatio, allowEmulation
}

// hypervisorDevice is ConstructHypervisorResourceName for the hypervisor
// GetHypervisor names: mshv for hyperv-direct, kvm for anything else.
// (KubeVirt picks the backend once at startup; this reads it per render.)
func hypervisorDevice(cluster Cluster) corev1.ResourceName {
	if hypervisorName(cluster) == virtv1.HyperVDirectHypervisorName {
		return kubevirtDevices + "mshv"
	}
	return kubevirtDevices + "kvm"
}

// virtualizationDevices mirrors getRequiredResources: the device-plugin
// devices qemu opens. With emulation allowed, qemu runs without /dev/kvm and
// falls back to userland virtio-net, so neither is requested.
func virtualizationDevices(vmi *virtv1.VirtualMachineInstance, hypervisor corev1.ResourceName, allowEmulation bool) corev1.ResourceList {
	devices := vmi.Spec.Domain.Devices
	res := corev1.ResourceList{}
	if len(devices.Interfaces) > 0 || devices.AutoattachPodInterface == nil || *devices.AutoattachPodInterface {
		res[tunResource] = resource.MustParse("1")
	}
	if hasVirtioInterface(vmi) && !allowEmulation {
		res[vhostNetResource] = resource.MustParse("1")
	}
	if !allowEmulation {
		res[hypervisor] = resource.MustParse("1")
	}
	if devices.AutoattachVSOCK != nil && *devices.AutoattachVSOCK {
		res[vhostVsockResource] = resource.MustParse("1")
	}
	return res
}

// validatePermittedHostDevices mirrors KubeVirt's check of GPUs and host
// devices against permittedHostDevices, when the CR lists any. The messages
// are KubeVirt's, word for word: they surface in the VMI's conditions.
func validatePermittedHostDevices(vmi *virtv1.VirtualMachineInstance, cluster Cluster) error {
	permitted := cluster.Configuration().PermittedHostDevices
	if permitted == nil {
		return nil
	}
	allowed := map[string]bool{}
	for _, d := range permitted.PciHostDevices {
		allowed[d.ResourceName] = true
	}
	for _, d := range permitted.MediatedDevices {
		allowed[d.ResourceName] = true
	}
	for _, d := range permitted.USB {
		allowed[d.ResourceName] = true
	}
	var problems []string
	// KubeVirt does not yet validate GPUs when they may come from DRA.
	if !cluster.FeatureGateEnabled(gateGPUsWithDRA) {
		for _, gpu := range vmi.Spec.Domain.Devices.GPUs {
			if !allowed[gpu.DeviceName] {
				problems = append(problems, fmt.Sprintf("GPU %s is not permitted in permittedHostDevices configuration", gpu.DeviceName))
			}
		}
	}
	for _, dev := range vmi.Spec.Domain.Devices.HostDevices {
		if !allowed[dev.DeviceName] {
			problems = append(problems, fmt.Sprintf("HostDevice %s is not permitted in permittedHostDevices configuration", dev.DeviceName))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, " "))
	}
	return nil
}

// launcherResources accumulates the compute container's requirements as
// KubeVirt's ResourceRenderer does: what the VMI asked for (vmi*), which
// some steps rewrite, and what was derived (derived*). When they are
// merged the VMI's values win.
type launcherResources struct {
	vmiLimits, vmiRequests         corev1.ResourceList
	derivedLimits, derivedRequests corev1.ResourceList
	claims                         []corev1.ResourceClaim
}

func newLauncherResources(spec virtv1.ResourceRequirements) *launcherResources {
	return &launcherResources{
		vmiLimits:       copyResourceList(spec.Limits),
		vmiRequests:     copyResourceList(spec.Requests),
		derivedLimits:   corev1.ResourceList{},
		derivedRequests: corev1.ResourceList{},
		claims:          []corev1.ResourceClaim{},
	}
}

// copyResourceList deep-copies, so that no step touches the VMI (a cached
// object) through a shared inf.Dec.
func copyResourceList(in corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range in {
		out[name] = q.DeepCopy()
	}
	return out
}

func (r *launcherResources) merged() (limits, requests corev1.ResourceList) {
	limits, requests = corev1.ResourceList{}, corev1.ResourceList{}
	maps.Copy(limits, r.derivedLimits)
	maps.Copy(limits, r.vmiLimits)
	maps.Copy(requests, r.derivedRequests)
	maps.Copy(requests, r.vmiRequests)
	return limits, requests
}

func (r *launcherResources) requirements() corev1.ResourceRequirements {
	limits, requests := r.merged()
	return corev1.ResourceRequirements{Limits: limits, Requests: requests, Claims: r.claims}
}

// addEphemeralStorage mirrors WithEphemeralStorageRequest: KubeVirt's own
// use is added to the user's request, and to the limit if there is one.
func (r *launcherResources) addEphemeralStorage() {
	extra := resource.MustParse(ephemeralStorageOverhead)
	request := r.vmiRequests[corev1.ResourceEphemeralStorage]
	request.Add(extra)
	r.vmiRequests[corev1.ResourceEphemeralStorage] = request
	if limit, ok := r.vmiLimits[corev1.ResourceEphemeralStorage]; ok {
		limit.Add(extra)
		r.vmiLimits[corev1.ResourceEphemeralStorage] = limit
	}
}

// defaultMemoryRequest mirrors WithMemoryRequests, which runs before the
// overhead is added so that overcommit never shrinks the overhead: a limit
// alone becomes the request; without either, the guest memory (or one
// hugepage) divided by memoryOvercommit percent.
func (r *launcherResources) defaultMemoryRequest(mem *virtv1.Memory, overcommit int) {
	limit, hasLimit := r.vmiLimits[corev1.ResourceMemory]
	request, hasRequest := r.vmiRequests[corev1.ResourceMemory]
	if hasLimit && !limit.IsZero() && (!hasRequest || request.IsZero()) {
		r.vmiRequests[corev1.ResourceMemory] = limit
	}
	if _, ok := r.vmiRequests[corev1.ResourceMemory]; ok {
		return
	}
	var guest *resource.Quantity
	if mem != nil && mem.Guest != nil {
		guest = mem.Guest
	} else if mem != nil && mem.Hugepages != nil {
		if page, err := resource.ParseQuantity(mem.Hugepages.PageSize); err == nil {
			guest = &page
		}
	}
	if guest == nil || guest.Value() <= 0 {
		return
	}
	if overcommit == 100 {
		r.vmiRequests[corev1.ResourceMemory] = guest.DeepCopy()
		return
	}
	r.vmiRequests[corev1.ResourceMemory] = *resource.NewQuantity(guest.Value()*100/int64(overcommit), guest.Format)
}

// pinCPUs mirrors WithCPUPinning: dedicated CPUs need whole cores with
// request equal to limit (vCPUs plus supplemental IOThreads), one more core
// for an isolated emulator thread (two to keep SMT siblings together when
// the VMI carries EmulatorThreadCompleteToEvenParity), and a memory limit
// equal to the request for the Guaranteed QoS class.
func (r *launcherResources) pinCPUs(vmi *virtv1.VirtualMachineInstance, parityCPUs int64) {
	cpu := vmi.Spec.Domain.CPU
	vcpus := topologyVCPUs(cpu)
	ioThreads := supplementalIOThreads(vmi)
	if vcpus != 0 {
		r.vmiLimits[corev1.ResourceCPU] = *resource.NewQuantity(vcpus+ioThreads, resource.BinarySI)
		r.vmiRequests[corev1.ResourceCPU] = *resource.NewQuantity(vcpus+ioThreads, resource.BinarySI)
	} else {
		extra := resource.NewQuantity(ioThreads, resource.BinarySI)
		if limit, ok := r.vmiLimits[corev1.ResourceCPU]; ok {
			limit.Add(*extra)
			r.vmiLimits[corev1.ResourceCPU] = limit
		}
		if request, ok := r.vmiRequests[corev1.ResourceCPU]; ok {
			request.Add(*extra)
			r.vmiRequests[corev1.ResourceCPU] = request
		}
	}
	if cpu.IsolateEmulatorThread {
		emulator := resource.NewQuantity(1, resource.BinarySI)
		limit := r.vmiLimits[corev1.ResourceCPU]
		if _, even := vmi.Annotations[virtv1.EmulatorThreadCompleteToEvenParity]; even && (limit.Value()+parityCPUs)%2 == 0 {
			emulator = resource.NewQuantity(2, resource.BinarySI)
		}
		limit.Add(*emulator)
		r.vmiLimits[corev1.ResourceCPU] = limit
		if request, ok := r.vmiRequests[corev1.ResourceCPU]; ok {
			request.Add(*emulator)
			r.vmiRequests[corev1.ResourceCPU] = request
		}
	}
	if request, ok := r.vmiRequests[corev1.ResourceMemory]; ok {
		r.vmiLimits[corev1.ResourceMemory] = request
	}
}

// emulatorParityCPUs is the additionalCPUs VMIResourcePredicates passes to
// WithCPUPinning: the supplemental pool's IOThreads, counted again in the
// parity check, but only under the supplementalPool policy.
func emulatorParityCPUs(vmi *virtv1.VirtualMachineInstance) int64 {
	d := vmi.Spec.Domain
	if d.IOThreadsPolicy != nil && *d.IOThreadsPolicy == virtv1.IOThreadsPolicySupplementalPool &&
		d.IOThreads != nil && d.IOThreads.SupplementalPoolThreadCount != nil {
		return int64(*d.IOThreads.SupplementalPoolThreadCount)
	}
	return 0
}

// shareCPUs mirrors WithoutDedicatedCPU: vCPUs plus IOThreads divided by
// cpuAllocationRatio as the request (formatted as KubeVirt formats it, in
// millicores below one), and the whole count as the limit when auto CPU
// limits apply. The VMI's own CPU request or limit still wins.
func (r *launcherResources) shareCPUs(vmi *virtv1.VirtualMachineInstance, cpuAllocationRatio int, withLimit bool) {
	total := VCPUs(vmi.Spec.Domain.CPU) + supplementalIOThreads(vmi)
	if total == 0 || cpuAllocationRatio <= 0 {
		return
	}
	share := float64(total) / float64(cpuAllocationRatio)
	text := fmt.Sprintf("%g", share)
	if share < 1 {
		share *= 1000
		text = fmt.Sprintf("%gm", share)
	}
	r.derivedRequests[corev1.ResourceCPU] = resource.MustParse(text)
	if withLimit {
		r.derivedLimits[corev1.ResourceCPU] = resource.MustParse(strconv.FormatInt(total, 10))
	}
}

// backWithHugepages mirrors WithHugePages: the guest memory (the request,
// or spec.domain.memory.guest when smaller) comes from hugepages, and the
// memory request and limit shrink to the overhead plus whatever the
// request or limit exceeds the guest memory by.
func (r *launcherResources) backWithHugepages(mem *virtv1.Memory, overhead resource.Quantity) {
	pages := corev1.ResourceName(corev1.ResourceHugePagesPrefix + mem.Hugepages.PageSize)
	backed := r.vmiRequests.Memory()
	if mem.Guest != nil && backed.Value() > mem.Guest.Value() {
		backed = mem.Guest
	}
	r.derivedRequests[pages] = *backed
	r.derivedLimits[pages] = *backed

	requestDiff := resource.NewScaledQuantity(0, resource.Kilo)
	limitDiff := resource.NewScaledQuantity(0, resource.Kilo)
	if mem.Guest != nil {
		guest := mem.Guest.Value()
		if r.vmiRequests.Memory().Value() > guest {
			requestDiff.Add(*r.vmiRequests.Memory())
			requestDiff.Sub(*mem.Guest)
		}
		if r.vmiLimits.Memory().Value() > guest {
			limitDiff.Add(*r.vmiLimits.Memory())
			limitDiff.Sub(*mem.Guest)
		}
	}
	requestDiff.Add(overhead)
	r.vmiRequests[corev1.ResourceMemory] = *requestDiff
	if _, ok := r.vmiLimits[corev1.ResourceMemory]; ok {
		limitDiff.Add(overhead)
		r.vmiLimits[corev1.ResourceMemory] = *limitDiff
	}
}

// addMemoryOverhead mirrors WithMemoryOverhead: the overhead goes on the
// limit, and on the request unless overcommitGuestOverhead is set. (Like
// KubeVirt it sets a zero memory request when there was none.)
func (r *launcherResources) addMemoryOverhead(overcommitGuestOverhead bool, overhead resource.Quantity) {
	request := r.vmiRequests[corev1.ResourceMemory]
	if !overcommitGuestOverhead {
		request.Add(overhead)
	}
	r.vmiRequests[corev1.ResourceMemory] = request
	if limit, ok := r.vmiLimits[corev1.ResourceMemory]; ok {
		limit.Add(overhead)
		r.vmiLimits[corev1.ResourceMemory] = limit
	}
}

// autoMemoryLimit mirrors WithAutoMemoryLimits: a quota on limits.memory
// would reject a pod without a limit, so the limit is the final request
// times the namespace's ratio.
func (r *launcherResources) autoMemoryLimit(ratio float64) {
	request := r.vmiRequests[corev1.ResourceMemory]
	r.derivedLimits[corev1.ResourceMemory] = *resource.NewQuantity(int64(float64(request.Value())*ratio), request.Format)
}

// requestDevices mirrors requestResource as the device options use it:
// each name adds one to both limit and request (device plugins want them
// equal), starting from the merged lists, and the result becomes derived.
func (r *launcherResources) requestDevices(names ...corev1.ResourceName) {
	limits, requests := r.merged()
	for _, name := range names {
		addOneDevice(limits, name)
		addOneDevice(requests, name)
	}
	maps.Copy(r.derivedLimits, limits)
	maps.Copy(r.derivedRequests, requests)
}

func addOneDevice(list corev1.ResourceList, name corev1.ResourceName) {
	one := *resource.NewQuantity(1, resource.DecimalSI)
	if q, ok := list[name]; ok {
		q.Add(one)
		list[name] = q
		return
	}
	list[name] = one
}

// addClaims mirrors WithGPUsDRA/WithHostDevicesDRA with copyResourceClaims:
// claims are appended in order, the first of each name winning.
func (r *launcherResources) addClaims(claims []corev1.ResourceClaim) {
	for _, c := range claims {
		if !hasClaim(r.claims, c.Name) {
			r.claims = append(r.claims, c)
		}
	}
}

func hasClaim(claims []corev1.ResourceClaim, name string) bool {
	for _, c := range claims {
		if c.Name == name {
			return true
		}
	}
	return false
}

// draClaim is a GPU's or host device's DRA claim: no device-plugin name, a
// claim request with both names. (KubeVirt dereferences a GPU's names
// unchecked; virt-api rejects a claim request without them.)
func draClaim(deviceName string, req *virtv1.ClaimRequest) (corev1.ResourceClaim, bool) {
	if deviceName != "" || req == nil || req.ClaimName == nil || req.RequestName == nil {
		return corev1.ResourceClaim{}, false
	}
	return corev1.ResourceClaim{Name: *req.ClaimName, Request: *req.RequestName}, true
}

// devicePluginGPUs are the GPUs a device plugin provides (isGPUDevicePlugin).
func devicePluginGPUs(gpus []virtv1.GPU) []corev1.ResourceName {
	var names []corev1.ResourceName
	for _, g := range gpus {
		if g.DeviceName != "" && g.ClaimRequest == nil {
			names = append(names, corev1.ResourceName(g.DeviceName))
		}
	}
	return names
}

// devicePluginHostDevices are the host devices a device plugin provides.
func devicePluginHostDevices(devs []virtv1.HostDevice) []corev1.ResourceName {
	var names []corev1.ResourceName
	for _, d := range devs {
		if d.DeviceName != "" && d.ClaimRequest == nil {
			names = append(names, corev1.ResourceName(d.DeviceName))
		}
	}
	return names
}

// needsAutoCPULimit mirrors doesVMIRequireAutoCPULimits: a quota on
// limits.cpu, or a namespace matching autoCPULimitNamespaceLabelSelector,
// when the VMI sets no CPU limit.
func needsAutoCPULimit(vmi *virtv1.VirtualMachineInstance, cfg *virtv1.KubeVirtConfiguration, objects Objects) bool {
	if quotaNeedsLimit(vmi, objects, corev1.ResourceCPU) {
		return true
	}
	_, limitSet := vmi.Spec.Domain.Resources.Limits[corev1.ResourceCPU]
	if cfg.AutoCPULimitNamespaceLabelSelector == nil || limitSet || objects == nil {
		return false
	}
	selector, err := metav1.LabelSelectorAsSelector(cfg.AutoCPULimitNamespaceLabelSelector)
	if err != nil {
		return false // KubeVirt logs an invalid selector and assumes none
	}
	ns, ok := objects.Namespace(vmi.Namespace)
	return ok && selector.Matches(labels.Set(ns.Labels))
}

// quotaNeedsLimit mirrors doesVMIRequireAutoResourceLimits: some quota of
// the VMI's namespace caps limits.<resource> and the VMI sets no limit.
func quotaNeedsLimit(vmi *virtv1.VirtualMachineInstance, objects Objects, name corev1.ResourceName) bool {
	if _, set := vmi.Spec.Domain.Resources.Limits[name]; set || objects == nil {
		return false
	}
	for _, quota := range objects.ResourceQuotas(vmi.Namespace) {
		if _, ok := quota.Spec.Hard["limits."+name]; ok && quota.Namespace == vmi.Namespace {
			return true
		}
	}
	return false
}

// memoryLimitRatio mirrors getMemoryLimitsRatio: the namespace's
// alpha.kubevirt.io/auto-memory-limits-ratio label when it parses as a
// float >= 1, else 2.
func memoryLimitRatio(namespace string, objects Objects) float64 {
	if objects == nil {
		return defaultMemoryLimitRatio
	}
	ns, ok := objects.Namespace(namespace)
	if !ok {
		return defaultMemoryLimitRatio
	}
	value, ok := ns.Labels[virtv1.AutoMemoryLimitsRatioLabel]
	if !ok {
		return defaultMemoryLimitRatio
	}
	ratio, err := strconv.ParseFloat(value, 64)
	if err != nil || ratio < 1.0 {
		return defaultMemoryLimitRatio
	}
	return ratio
}

// VCPUs is the vCPU count the CPU request is derived from (calcVCPUs): the
// topology's sockets×cores×threads, or one without a CPU spec.
func VCPUs(cpu *virtv1.CPU) int64 {
	if cpu == nil {
		return 1
	}
	return topologyVCPUs(cpu)
}

// topologyVCPUs mirrors hardware.GetNumberOfVCPUs: the product of the
// non-zero topology fields, zero when all are zero.
func topologyVCPUs(cpu *virtv1.CPU) int64 {
	n := cpu.Cores
	for _, f := range []uint32{cpu.Sockets, cpu.Threads} {
		if f == 0 {
			continue
		}
		if n == 0 {
			n = f
		} else {
			n *= f
		}
	}
	return int64(n)
}

// supplementalIOThreads is getIOThreadsCount: the supplemental pool's
// size, whatever the policy.
func supplementalIOThreads(vmi *virtv1.VirtualMachineInstance) int64 {
	if t := vmi.Spec.Domain.IOThreads; t != nil && t.SupplementalPoolThreadCount != nil {
		return int64(*t.SupplementalPoolThreadCount)
	}
	return 0
}

// isDedicated is VirtualMachineInstance.IsCPUDedicated.
func isDedicated(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi.Spec.Domain.CPU != nil && vmi.Spec.Domain.CPU.DedicatedCPUPlacement
}

// dedicatedOrGuaranteed is the condition under which KubeVirt gives the
// launcher's support containers request == limit and charges 100Mi more
// overhead: dedicated CPUs, or a VMI asking for the Guaranteed QoS class.
func dedicatedOrGuaranteed(vmi *virtv1.VirtualMachineInstance) bool {
	return isDedicated(vmi) || vmi.WantsToHaveQOSGuaranteed()
}

// hasHugepages is template.go's hasHugePages.
func hasHugepages(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi.Spec.Domain.Memory != nil && vmi.Spec.Domain.Memory.Hugepages != nil
}

// isSEV is util.IsSEVVMI: SEV, SEV-ES (a SEV policy) or SEV-SNP.
func isSEV(vmi *virtv1.VirtualMachineInstance) bool {
	ls := vmi.Spec.Domain.LaunchSecurity
	return ls != nil && (ls.SEV != nil || ls.SNP != nil)
}

// hasTPM is tpm.HasDevice: a TPM not explicitly disabled.
func hasTPM(vmi *virtv1.VirtualMachineInstance) bool {
	tpm := vmi.Spec.Domain.Devices.TPM
	return tpm != nil && (tpm.Enabled == nil || *tpm.Enabled)
}

// usesVFIO is util.IsVFIOVMI: host devices, GPUs or SR-IOV interfaces.
func usesVFIO(vmi *virtv1.VirtualMachineInstance) bool {
	devices := vmi.Spec.Domain.Devices
	if len(devices.HostDevices) != 0 || len(devices.GPUs) != 0 {
		return true
	}
	for _, iface := range devices.Interfaces {
		if iface.SRIOV != nil {
			return true
		}
	}
	return false
}

// hasVirtioInterface is vmispec's hasVirtioIface: an interface whose model
// is virtio, the default.
func hasVirtioInterface(vmi *virtv1.VirtualMachineInstance) bool {
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.Model == "" || iface.Model == virtv1.VirtIO {
			return true
		}
	}
	return false
}

// hasDownwardMetricsVolume is downwardmetrics.HasDownwardMetricDisk.
func hasDownwardMetricsVolume(vmi *virtv1.VirtualMachineInstance) bool {
	for _, v := range vmi.Spec.Volumes {
		if v.DownwardMetrics != nil {
			return true
		}
	}
	return false
}

// hasPersistentReservation is reservation.HasVMIPersistentReservation: a
// LUN disk with SCSI persistent reservation needs the pr-helper device.
func hasPersistentReservation(vmi *virtv1.VirtualMachineInstance) bool {
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		if d.LUN != nil && d.LUN.Reservation {
			return true
		}
	}
	return false
}

// supportContainerResources is the requirements of a support container of
// the given kind, as KubeVirt renders it for this VMI. ContainerDisk means
// the containers pkg/container-disk generates; the init container copying
// the container-disk binary is containerDiskBinaryResources.
func supportContainerResources(kind virtv1.SupportContainerType, vmi *virtv1.VirtualMachineInstance, cluster Cluster) corev1.ResourceRequirements {
	switch kind {
	case virtv1.SideCar:
		return sidecarContainerResources(vmi, cluster)
	case virtv1.ContainerDisk:
		return containerDiskResources(vmi, cluster)
	case virtv1.VirtioFS:
		return virtiofsResources(vmi, cluster)
	case virtv1.GuestConsoleLog:
		return consoleLogResources(vmi, cluster)
	case virtv1.HotplugAttachment:
		return hotplugAttachmentResources(cluster)
	case virtv1.VMExport:
		return vmExportResources(cluster)
	}
	return corev1.ResourceRequirements{}
}

// supportOverride mirrors GetSupportContainerRequest/GetSupportContainerLimit:
// the first non-zero value for the kind in supportContainerResources.
func supportOverride(cluster Cluster, kind virtv1.SupportContainerType, name corev1.ResourceName, limit bool) (resource.Quantity, bool) {
	for _, scr := range cluster.Configuration().SupportContainerResources {
		if scr.Type != kind {
			continue
		}
		list := scr.Resources.Requests
		if limit {
			list = scr.Resources.Limits
		}
		if q := list[name]; !q.IsZero() {
			return q.DeepCopy(), true
		}
	}
	return resource.Quantity{}, false
}

// supportValue is the configured value, or fallback (a quantity string)
// when the CR sets none.
func supportValue(cluster Cluster, kind virtv1.SupportContainerType, name corev1.ResourceName, limit bool, fallback string) resource.Quantity {
	if q, ok := supportOverride(cluster, kind, name, limit); ok {
		return q
	}
	return resource.MustParse(fallback)
}

// setSupportValue sets the configured value, if the CR sets one.
func setSupportValue(list corev1.ResourceList, cluster Cluster, kind virtv1.SupportContainerType, name corev1.ResourceName, limit bool) {
	if q, ok := supportOverride(cluster, kind, name, limit); ok {
		list[name] = q
	}
}

// sidecarContainerResources mirrors sidecarResources, for hook and network
// binding plugin sidecars: only what the CR configures, except that
// dedicated CPUs or a Guaranteed VMI need request == limit on every
// container, with defaults of 200m and 64M.
func sidecarContainerResources(vmi *virtv1.VirtualMachineInstance, cluster Cluster) corev1.ResourceRequirements {
	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	setSupportValue(res.Requests, cluster, virtv1.SideCar, corev1.ResourceCPU, false)
	setSupportValue(res.Requests, cluster, virtv1.SideCar, corev1.ResourceMemory, false)
	if dedicatedOrGuaranteed(vmi) {
		res.Limits[corev1.ResourceCPU] = supportValue(cluster, virtv1.SideCar, corev1.ResourceCPU, true, "200m")
		res.Limits[corev1.ResourceMemory] = supportValue(cluster, virtv1.SideCar, corev1.ResourceMemory, true, "64M")
		res.Requests[corev1.ResourceCPU] = res.Limits[corev1.ResourceCPU]
		res.Requests[corev1.ResourceMemory] = res.Limits[corev1.ResourceMemory]
		return res
	}
	setSupportValue(res.Limits, cluster, virtv1.SideCar, corev1.ResourceCPU, true)
	setSupportValue(res.Limits, cluster, virtv1.SideCar, corev1.ResourceMemory, true)
	return res
}

// containerDiskBinaryResources is initContainerResourceRequirementsForVMI
// with v1.ContainerDisk: the init container copying the container-disk
// binary into the pod.
func containerDiskBinaryResources(vmi *virtv1.VirtualMachineInstance, cluster Cluster) corev1.ResourceRequirements {
	return initContainerResources(vmi, virtv1.ContainerDisk, cluster)
}

// initContainerResources mirrors initContainerResourceRequirementsForVMI:
// minimal defaults, or request == limit (10m, 40M unless configured) for
// dedicated or Guaranteed VMIs.
func initContainerResources(vmi *virtv1.VirtualMachineInstance, kind virtv1.SupportContainerType, cluster Cluster) corev1.ResourceRequirements {
	if dedicatedOrGuaranteed(vmi) {
		// KubeVirt builds the two lists separately; so does this.
		pinned := func() corev1.ResourceList {
			return corev1.ResourceList{
				corev1.ResourceCPU:    supportValue(cluster, kind, corev1.ResourceCPU, true, "10m"),
				corev1.ResourceMemory: supportValue(cluster, kind, corev1.ResourceMemory, true, "40M"),
			}
		}
		return corev1.ResourceRequirements{Limits: pinned(), Requests: pinned()}
	}
	return corev1.ResourceRequirements{
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    supportValue(cluster, kind, corev1.ResourceCPU, true, "100m"),
			corev1.ResourceMemory: supportValue(cluster, kind, corev1.ResourceMemory, true, "40M"),
		},
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    supportValue(cluster, kind, corev1.ResourceCPU, false, "10m"),
			corev1.ResourceMemory: supportValue(cluster, kind, corev1.ResourceMemory, false, "1M"),
		},
	}
}

// containerDiskResources mirrors container-disk's
// getMinimalInitContainerDiskResources, shared by GenerateContainers,
// GenerateInitContainers, the kernel-boot containers and the image-volume
// init containers: the disk copy is tiny, but it writes 50M of ephemeral
// storage.
func containerDiskResources(vmi *virtv1.VirtualMachineInstance, cluster Cluster) corev1.ResourceRequirements {
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:              supportValue(cluster, virtv1.ContainerDisk, corev1.ResourceCPU, false, "1m"),
			corev1.ResourceMemory:           supportValue(cluster, virtv1.ContainerDisk, corev1.ResourceMemory, false, "1M"),
			corev1.ResourceEphemeralStorage: resource.MustParse(ephemeralStorageOverhead),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    supportValue(cluster, virtv1.ContainerDisk, corev1.ResourceCPU, true, "10m"),
			corev1.ResourceMemory: supportValue(cluster, virtv1.ContainerDisk, corev1.ResourceMemory, true, "40M"),
		},
	}
	if dedicatedOrGuaranteed(vmi) {
		res.Requests[corev1.ResourceCPU] = res.Limits[corev1.ResourceCPU]
		res.Requests[corev1.ResourceMemory] = res.Limits[corev1.ResourceMemory]
	}
	return res
}

// virtiofsResources mirrors virtiofs.ResourcesForVirtioFSContainer as
// generateVirtioFSContainers calls it: dedicated CPUs pin the CPU request
// to the limit, dedicated or Guaranteed VMIs also the memory request.
func virtiofsResources(vmi *virtv1.VirtualMachineInstance, cluster Cluster) corev1.ResourceRequirements {
	dedicated, guaranteed := isDedicated(vmi), dedicatedOrGuaranteed(vmi)
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU: supportValue(cluster, virtv1.VirtioFS, corev1.ResourceCPU, false, "10m"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: supportValue(cluster, virtv1.VirtioFS, corev1.ResourceMemory, true, "80M"),
			corev1.ResourceCPU:    supportValue(cluster, virtv1.VirtioFS, corev1.ResourceCPU, true, "100m"),
		},
	}
	if dedicated || guaranteed {
		res.Requests[corev1.ResourceCPU] = res.Limits[corev1.ResourceCPU]
	}
	if guaranteed {
		res.Requests[corev1.ResourceMemory] = res.Limits[corev1.ResourceMemory]
	} else {
		res.Requests[corev1.ResourceMemory] = supportValue(cluster, virtv1.VirtioFS, corev1.ResourceMemory, false, "1M")
	}
	return res
}

// consoleLogResources mirrors resourcesForSerialConsoleLogContainer, for
// the guest-console-log container (virt-tail).
func consoleLogResources(vmi *virtv1.VirtualMachineInstance, cluster Cluster) corev1.ResourceRequirements {
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceMemory: supportValue(cluster, virtv1.GuestConsoleLog, corev1.ResourceMemory, false, "35M"),
			corev1.ResourceCPU:    supportValue(cluster, virtv1.GuestConsoleLog, corev1.ResourceCPU, false, "5m"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: supportValue(cluster, virtv1.GuestConsoleLog, corev1.ResourceMemory, true, "60M"),
			corev1.ResourceCPU:    supportValue(cluster, virtv1.GuestConsoleLog, corev1.ResourceCPU, true, "15m"),
		},
	}
	if dedicatedOrGuaranteed(vmi) {
		res.Requests[corev1.ResourceCPU] = res.Limits[corev1.ResourceCPU]
		res.Requests[corev1.ResourceMemory] = res.Limits[corev1.ResourceMemory]
	}
	return res
}

// hotplugAttachmentResources mirrors
// hotplugContainerResourceRequirementsForVMI, for the containers of hotplug
// attachment and trigger pods; they do not follow the VMI's QoS.
func hotplugAttachmentResources(cluster Cluster) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    supportValue(cluster, virtv1.HotplugAttachment, corev1.ResourceCPU, true, "100m"),
			corev1.ResourceMemory: supportValue(cluster, virtv1.HotplugAttachment, corev1.ResourceMemory, true, "80M"),
		},
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    supportValue(cluster, virtv1.HotplugAttachment, corev1.ResourceCPU, false, "10m"),
			corev1.ResourceMemory: supportValue(cluster, virtv1.HotplugAttachment, corev1.ResourceMemory, false, "2M"),
		},
	}
}

// vmExportResources mirrors vmExportContainerResourceRequirements, for the
// VM export server pod.
func vmExportResources(cluster Cluster) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Limits: corev1.ResourceList{
			corev1.ResourceCPU:    supportValue(cluster, virtv1.VMExport, corev1.ResourceCPU, true, "1"),
			corev1.ResourceMemory: supportValue(cluster, virtv1.VMExport, corev1.ResourceMemory, true, "1024Mi"),
		},
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    supportValue(cluster, virtv1.VMExport, corev1.ResourceCPU, false, "100m"),
			corev1.ResourceMemory: supportValue(cluster, virtv1.VMExport, corev1.ResourceMemory, false, "200Mi"),
		},
	}
}
