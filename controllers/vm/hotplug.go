package vm

import (
	"context"
	"encoding/json"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/apidefaults"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// Under the LiveUpdate rollout, more CPU sockets or guest memory in a
// running VM's template reach its VMI's spec, with the VMI's requests and
// limits grown by the difference, as KubeVirt v1.8.1's VM controller does
// (handleCPUChangeRequest, handleMemoryHotplugRequest). The VMI controller
// then marks the VMI (VCPUChange, MemoryChange), the workload updater
// migrates it, and the target's virt-handler plugs the new CPUs and memory
// in. A change the VMI cannot take that way asks for a restart, with
// KubeVirt's words for why.

// Reasons of the VM's Failure condition when a hotplug must wait.
const (
	ReasonHotplugCPU    = "HotPlugCPUError"
	ReasonHotplugMemory = "HotPlugMemoryError"
)

// archARM64 is the architecture that has no CPU hotplug.
const archARM64 = "arm64"

// askRestart sets the VM's RestartRequired condition with why.
func askRestart(o *observed, why string) {
	o.restart, o.restartWhy = restartRequired, why
}

// hotplugCPU takes the template's socket count to the running VMI.
func (c *Controller) hotplugCPU(ctx context.Context, it item, o *observed, tmpl *virtv1.VirtualMachineInstanceSpec) error {
	vmi := o.vmi
	want, have := tmpl.Domain.CPU, vmi.Spec.Domain.CPU
	if want == nil || have == nil || want.Sockets == have.Sockets {
		return nil
	}
	hotplugFailed := func(why string) error {
		return &syncError{reason: ReasonHotplugCPU, silent: true, message: "Error encountered while handling CPU change request: " + why}
	}
	switch {
	case vmistatus.ConditionIs(vmi, virtv1.VirtualMachineInstanceVCPUChange, "True"):
		return hotplugFailed("another CPU hotplug is in progress")
	case vmistatus.Migrating(vmi, c.env.Clock.Now()):
		return hotplugFailed("CPU hotplug is not allowed while VMI is migrating")
	case want.Sockets > have.MaxSockets:
		// The VMI's maximum was derived at its start (an explicit one in
		// the VM is checked by virt-api): more needs a new VMI.
		askRestart(o, "CPU sockets updated in template spec to a value higher than what's available")
		return nil
	case want.Sockets < have.Sockets:
		askRestart(o, "Reduction of CPU socket count requires a restart")
		return nil
	case o.vm.Spec.Template.Spec.Architecture == archARM64:
		askRestart(o, "ARM doesn't support CPU hotplug")
		return nil
	}
	ops := []jsonPatchOp{
		{Op: "test", Path: "/spec/domain/cpu/sockets", Value: have.Sockets},
		{Op: "replace", Path: "/spec/domain/cpu/sockets", Value: want.Sockets},
	}
	// Each vCPU adds what the CPU allocation ratio makes of one, in whole
	// thousandths as KubeVirt divides.
	added := template.VCPUs(want) - template.VCPUs(have)
	delta := resource.NewMilliQuantity(added*int64(1000/c.env.ClusterConfig.Current().CPUAllocationRatio()), resource.DecimalSI)
	if !tmpl.Domain.Resources.Requests.Cpu().IsZero() {
		ops = append(ops, grownOps("/spec/domain/resources/requests/cpu", vmi.Spec.Domain.Resources.Requests.Cpu(), delta)...)
	}
	if !tmpl.Domain.Resources.Limits.Cpu().IsZero() {
		ops = append(ops, grownOps("/spec/domain/resources/limits/cpu", vmi.Spec.Domain.Resources.Limits.Cpu(), delta)...)
	}
	if err := c.patchVMI(ctx, it, o, ops); err != nil {
		return hotplugFailed(err.Error())
	}
	klog.V(2).InfoS("Hotplugging CPU sockets", "vmi", it.Key, "sockets", want.Sockets)
	return nil
}

// hotplugMemory takes the template's guest memory to the running VMI.
func (c *Controller) hotplugMemory(ctx context.Context, it item, o *observed, tmpl *virtv1.VirtualMachineInstanceSpec) error {
	vmi := o.vmi
	want, have, status := tmpl.Domain.Memory, vmi.Spec.Domain.Memory, vmi.Status.Memory
	if want == nil || want.Guest == nil || have == nil || have.Guest == nil || status == nil || status.GuestCurrent == nil {
		return nil
	}
	if vmistatus.ConditionIs(vmi, virtv1.VirtualMachineInstanceMemoryChange, "False") {
		askRestart(o, "memory updated in template spec. Memory-hotplug failed and is not available for this VM configuration")
		return nil
	}
	if want.Guest.Equal(*have.Guest) {
		return nil
	}
	hotplugFailed := func(why string) error {
		return &syncError{reason: ReasonHotplugMemory, silent: true, message: "error encountered while handling memory hotplug requests: " + why}
	}
	switch {
	case !vmistatus.Migratable(vmi):
		askRestart(o, "memory updated in template spec. Memory-hotplug is only available for migratable VMs")
		return nil
	case have.MaxGuest == nil:
		askRestart(o, "memory updated in template spec. Memory-hotplug is not available for this VM configuration")
		return nil
	case vmistatus.ConditionIs(vmi, virtv1.VirtualMachineInstanceMemoryChange, "True"):
		return hotplugFailed("another memory hotplug is in progress")
	case vmistatus.Migrating(vmi, c.env.Clock.Now()):
		return hotplugFailed("memory hotplug is not allowed while VMI is migrating")
	}
	if why := apidefaults.MemoryHotplugRefusal(tmpl, have.MaxGuest); why != "" {
		askRestart(o, "memory hotplug not supported, "+why)
		return nil
	}
	switch {
	case status.GuestAtBoot != nil && want.Guest.Cmp(*status.GuestAtBoot) < 0:
		askRestart(o, "memory updated in template spec to a value lower than what the VM started with")
		return nil
	case want.Guest.Cmp(*have.MaxGuest) > 0:
		askRestart(o, "memory updated in template spec to a value higher than what's available")
		return nil
	}
	ops := []jsonPatchOp{
		{Op: "test", Path: "/spec/domain/memory/guest", Value: have.Guest.String()},
		{Op: "replace", Path: "/spec/domain/memory/guest", Value: want.Guest.String()},
	}
	// The difference is taken from the memory the guest has now, which a
	// hot-unplug may have left above what it asked for.
	delta := resource.NewQuantity(want.Guest.Value()-status.GuestCurrent.Value(), resource.BinarySI)
	if requests := vmi.Spec.Domain.Resources.Requests.Memory(); !requests.IsZero() {
		grown := requests.DeepCopy()
		grown.Add(*delta)
		if grown.Cmp(*want.Guest) < 0 {
			// The pod asks at least for the guest's memory; the limit
			// then grows by what is still missing, as in KubeVirt.
			grown = want.Guest.DeepCopy()
			delta = resource.NewQuantity(want.Guest.Value()-grown.Value(), resource.BinarySI)
		}
		ops = append(ops, jsonPatchOp{Op: "test", Path: "/spec/domain/resources/requests/memory", Value: requests.String()},
			jsonPatchOp{Op: "replace", Path: "/spec/domain/resources/requests/memory", Value: grown.String()})
	}
	if !tmpl.Domain.Resources.Limits.Memory().IsZero() {
		ops = append(ops, grownOps("/spec/domain/resources/limits/memory", vmi.Spec.Domain.Resources.Limits.Memory(), delta)...)
	}
	if err := c.patchVMI(ctx, it, o, ops); err != nil {
		return hotplugFailed(err.Error())
	}
	klog.V(2).InfoS("Hotplugging memory", "vmi", it.Key, "guest", want.Guest.String())
	return nil
}

// grownOps test that the quantity at path is still have and replace it
// with have plus delta.
func grownOps(path string, have *resource.Quantity, delta *resource.Quantity) []jsonPatchOp {
	grown := have.DeepCopy()
	grown.Add(*delta)
	return []jsonPatchOp{{Op: "test", Path: path, Value: have.String()}, {Op: "replace", Path: path, Value: grown.String()}}
}

// patchVMI sends ops to the sync's VMI as a JSON patch through the
// range's fence, and keeps the VMI it returns.
func (c *Controller) patchVMI(ctx context.Context, it item, o *observed, ops []jsonPatchOp) error {
	body, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	vmi := o.vmi
	updated, ok, err := sharded.SendPatch(ctx, c.rt.Writer, it.Range, body, func(ctx context.Context, body []byte) (*virtv1.VirtualMachineInstance, error) {
		return c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.JSONPatchType, body, metav1.PatchOptions{})
	})
	if err != nil {
		return err
	}
	if ok {
		o.vmi = updated
	}
	return nil
}
