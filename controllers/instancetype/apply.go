package instancetype

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/api/instancetype/v1beta1"
)

// Conflicts are the paths of the VMI fields an instance type would set
// that the VM's template already sets, in KubeVirt's order.
type Conflicts []string

// String joins the paths as KubeVirt's messages list them.
func (c Conflicts) String() string { return strings.Join(c, ", ") }

// VMIError is KubeVirt's error for conflicts met as a VM creates its VMI.
func (c Conflicts) VMIError() error {
	return fmt.Errorf("VMI conflicts with instancetype spec in fields: [%s]", c)
}

// VMError is KubeVirt's error for conflicts met in a VM's template (an
// instance type stored or expanded into it).
func (c Conflicts) VMError() error {
	return fmt.Errorf("VM field(s) %s conflicts with selected instance type", c)
}

// Apply applies the instance type it and then the preference pref (either
// may be nil) to the VMI spec and metadata, naming conflicts from base
// ("spec" when a VM creates its VMI). On conflicts the preference is not
// applied and spec is left part-applied: callers discard it, as KubeVirt's
// do.
func Apply(base string, it *v1beta1.VirtualMachineInstancetypeSpec, pref *v1beta1.VirtualMachinePreferenceSpec,
	spec *virtv1.VirtualMachineInstanceSpec, meta *metav1.ObjectMeta) Conflicts {
	if it != nil {
		a := instancetypeApply{base: base, it: it, pref: pref, spec: spec}
		var conflicts Conflicts
		for _, step := range []func() Conflicts{
			a.nodeSelector, a.schedulerName, a.cpu, a.memory, a.ioThreads, a.ioThreadsPolicy,
			a.launchSecurity, a.gpus, a.hostDevices,
		} {
			conflicts = append(conflicts, step()...)
		}
		conflicts = append(conflicts, instancetypeAnnotations(it.Annotations, meta)...)
		if len(conflicts) > 0 {
			return conflicts
		}
	}
	applyPreference(pref, spec, meta)
	return nil
}

// instancetypeApply is one application of an instance type: each step
// sets its fields, or reports the ones the VMI already has.
type instancetypeApply struct {
	base string
	it   *v1beta1.VirtualMachineInstancetypeSpec
	pref *v1beta1.VirtualMachinePreferenceSpec
	spec *virtv1.VirtualMachineInstanceSpec
}

func (a instancetypeApply) path(elems ...string) string {
	return strings.Join(append([]string{a.base}, elems...), ".")
}

func (a instancetypeApply) nodeSelector() Conflicts {
	switch {
	case a.it.NodeSelector == nil:
		return nil
	case a.spec.NodeSelector != nil:
		return Conflicts{a.path("nodeSelector")}
	}
	a.spec.NodeSelector = maps.Clone(a.it.NodeSelector)
	return nil
}

func (a instancetypeApply) schedulerName() Conflicts {
	switch {
	case a.it.SchedulerName == "":
		return nil
	case a.spec.SchedulerName != "":
		return Conflicts{a.path("schedulerName")}
	}
	a.spec.SchedulerName = a.it.SchedulerName
	return nil
}

// cpu sets the topology from the guest vCPUs and the preference, and the
// CPU settings the instance type names. Requests and limits, and a
// topology of the template's own, conflict whatever the instance type says;
// every conflict is reported.
func (a instancetypeApply) cpu() Conflicts {
	d := &a.spec.Domain
	if d.CPU == nil {
		d.CPU = &virtv1.CPU{}
	}
	it, cpu := a.it.CPU, d.CPU
	var conflicts Conflicts
	for _, c := range []struct {
		set  bool
		path []string
	}{
		{hasResource(d.Resources.Requests, corev1.ResourceCPU), []string{"domain", "resources", "requests", "cpu"}},
		{hasResource(d.Resources.Limits, corev1.ResourceCPU), []string{"domain", "resources", "limits", "cpu"}},
		{cpu.Sockets != 0, []string{"domain", "cpu", "sockets"}},
		{cpu.Cores != 0, []string{"domain", "cpu", "cores"}},
		{cpu.Threads != 0, []string{"domain", "cpu", "threads"}},
		{it.Model != nil && cpu.Model != "", []string{"domain", "cpu", "model"}},
		// KubeVirt names this path by the Go field, not the JSON one.
		{it.DedicatedCPUPlacement != nil && cpu.DedicatedCPUPlacement, []string{"domain", "cpu", "dedicatedCPUPlacement"}},
		{it.IsolateEmulatorThread != nil && cpu.IsolateEmulatorThread, []string{"domain", "cpu", "isolateEmulatorThread"}},
		{it.NUMA != nil && cpu.NUMA != nil, []string{"domain", "cpu", "numa"}},
		{it.Realtime != nil && cpu.Realtime != nil, []string{"domain", "cpu", "realtime"}},
	} {
		if c.set {
			conflicts = append(conflicts, a.path(c.path...))
		}
	}
	if len(conflicts) > 0 {
		return conflicts
	}
	if it.Model != nil {
		cpu.Model = *it.Model
	}
	if it.DedicatedCPUPlacement != nil {
		cpu.DedicatedCPUPlacement = *it.DedicatedCPUPlacement
	}
	if it.IsolateEmulatorThread != nil {
		cpu.IsolateEmulatorThread = *it.IsolateEmulatorThread
	}
	if it.NUMA != nil {
		cpu.NUMA = it.NUMA.DeepCopy()
	}
	if it.Realtime != nil {
		cpu.Realtime = it.Realtime.DeepCopy()
	}
	if it.MaxSockets != nil {
		cpu.MaxSockets = *it.MaxSockets
	}
	cpu.Sockets, cpu.Cores, cpu.Threads = topology(it.Guest, a.pref)
	return nil
}

// memory sets the guest memory, and a request below it by the overcommit
// percentage. Only the first conflict, in KubeVirt's order, is reported.
func (a instancetypeApply) memory() Conflicts {
	d := &a.spec.Domain
	if d.Memory == nil {
		d.Memory = &virtv1.Memory{}
	}
	it, mem := a.it.Memory, d.Memory
	for _, c := range []struct {
		set  bool
		path []string
	}{
		{mem.Guest != nil, []string{"domain", "memory", "guest"}},
		{it.Hugepages != nil && mem.Hugepages != nil, []string{"domain", "memory", "hugepages"}},
		{it.MaxGuest != nil && mem.MaxGuest != nil, []string{"domain", "memory", "maxGuest"}},
		{hasResource(d.Resources.Requests, corev1.ResourceMemory), []string{"domain", "resources", "requests", "memory"}},
		{hasResource(d.Resources.Limits, corev1.ResourceMemory), []string{"domain", "resources", "limits", "memory"}},
	} {
		if c.set {
			return Conflicts{a.path(c.path...)}
		}
	}
	guest := it.Guest.DeepCopy()
	mem.Guest = &guest
	if pct := it.OvercommitPercent; pct > 0 {
		if d.Resources.Requests == nil {
			d.Resources.Requests = corev1.ResourceList{}
		}
		d.Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(overcommitted(guest.Value(), pct), guest.Format)
	}
	if it.Hugepages != nil {
		mem.Hugepages = it.Hugepages.DeepCopy()
	}
	if it.MaxGuest != nil {
		maxGuest := it.MaxGuest.DeepCopy()
		mem.MaxGuest = &maxGuest
	}
	return nil
}

// overcommitted is the memory request for guest bytes overcommitted by pct
// percent. KubeVirt computes it in single precision and truncates, which
// is not the exact figure (1Gi at 15 % is 912680576, not 912680550): the
// request must be KubeVirt's to the byte.
func overcommitted(guest int64, pct int) int64 {
	return int64(float32(guest) * (1 - float32(pct)/100))
}

func (a instancetypeApply) ioThreads() Conflicts {
	if a.it.IOThreads == nil || a.it.IOThreads.SupplementalPoolThreadCount == nil {
		return nil
	}
	d := &a.spec.Domain
	if d.IOThreads != nil && d.IOThreads.SupplementalPoolThreadCount != nil {
		return Conflicts{a.path("domain", "ioThreads", "supplementalPoolThreadCount")}
	}
	if d.IOThreads == nil {
		d.IOThreads = &virtv1.DiskIOThreads{}
	}
	count := *a.it.IOThreads.SupplementalPoolThreadCount
	d.IOThreads.SupplementalPoolThreadCount = &count
	return nil
}

func (a instancetypeApply) ioThreadsPolicy() Conflicts {
	switch {
	case a.it.IOThreadsPolicy == nil:
		return nil
	case a.spec.Domain.IOThreadsPolicy != nil:
		return Conflicts{a.path("domain", "ioThreadsPolicy")}
	}
	policy := *a.it.IOThreadsPolicy
	a.spec.Domain.IOThreadsPolicy = &policy
	return nil
}

func (a instancetypeApply) launchSecurity() Conflicts {
	switch {
	case a.it.LaunchSecurity == nil:
		return nil
	case a.spec.Domain.LaunchSecurity != nil:
		return Conflicts{a.path("domain", "launchSecurity")}
	}
	a.spec.Domain.LaunchSecurity = a.it.LaunchSecurity.DeepCopy()
	return nil
}

func (a instancetypeApply) gpus() Conflicts {
	devices := &a.spec.Domain.Devices
	switch {
	case len(a.it.GPUs) == 0:
		return nil
	case len(devices.GPUs) != 0:
		return Conflicts{a.path("domain", "devices", "gpus")}
	}
	devices.GPUs = make([]virtv1.GPU, len(a.it.GPUs))
	for i := range a.it.GPUs {
		a.it.GPUs[i].DeepCopyInto(&devices.GPUs[i])
	}
	return nil
}

func (a instancetypeApply) hostDevices() Conflicts {
	devices := &a.spec.Domain.Devices
	switch {
	case len(a.it.HostDevices) == 0:
		return nil
	case len(devices.HostDevices) != 0:
		return Conflicts{a.path("domain", "devices", "hostDevices")}
	}
	devices.HostDevices = make([]virtv1.HostDevice, len(a.it.HostDevices))
	for i := range a.it.HostDevices {
		a.it.HostDevices[i].DeepCopyInto(&devices.HostDevices[i])
	}
	return nil
}

// instancetypeAnnotations adds the instance type's annotations; one the
// VMI has with another value conflicts, under a path KubeVirt does not
// prefix with the base. (KubeVirt lists them in map order; sorted here.)
func instancetypeAnnotations(annotations map[string]string, meta *metav1.ObjectMeta) Conflicts {
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	var conflicts Conflicts
	for _, key := range slices.Sorted(maps.Keys(annotations)) {
		value := annotations[key]
		switch have, ok := meta.Annotations[key]; {
		case !ok:
			meta.Annotations[key] = value
		case have != value:
			conflicts = append(conflicts, "annotations."+key)
		}
	}
	return conflicts
}

func hasResource(list corev1.ResourceList, name corev1.ResourceName) bool {
	_, ok := list[name]
	return ok
}
