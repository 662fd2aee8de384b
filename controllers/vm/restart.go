package vm

import (
	"context"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/instancetype"
)

// restartMessage is the message of KubeVirt's RestartRequired condition.
const restartMessage = "a non-live-updatable field was changed in the template spec"

// restartVerdict is what a sync says of the VM's RestartRequired
// condition.
type restartVerdict int

const (
	// restartUnjudged leaves the condition as it is: there is no running
	// VMI, or no start revision, to judge the template against. A
	// stopped VM keeps the condition until it starts, as KubeVirt's does.
	restartUnjudged restartVerdict = iota
	// restartRequired sets it.
	restartRequired
	// restartNotRequired removes it; so does a start.
	restartNotRequired
)

// liveSettings are the cluster settings that make fields of a running
// VM's template changeable without a restart.
type liveSettings struct {
	// rollout: vmRolloutStrategy is LiveUpdate (the default): CPU
	// sockets, guest memory, node selector, affinity and tolerations
	// reach the running VMI.
	rollout bool
	// nadRef: the LiveUpdateNADRef feature gate; a Multus network may
	// change the attachment definition it names.
	nadRef bool
}

// needsRestart reports whether the VM's template changed since the start
// that the VMI runs (started, the spec of the start revision) in a field
// the running VMI cannot take, as KubeVirt v1.8.1's syncRestartRequired
// (pkg/virt-controller/watch/vm/vm.go) judges: the two templates' specs
// must be equal once the fields that can change live are taken from the
// current one. The caller expands instance types and preferences into
// both first (judgeRestart), as KubeVirt does.
func needsRestart(started *virtv1.VirtualMachineSpec, vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance, live liveSettings) bool {
	if started.Template == nil || vm.Spec.Template == nil {
		return false
	}
	cur := &vm.Spec.Template.Spec
	was := started.Template.Spec.DeepCopy()
	if volumesChangeLive(was.Volumes, cur.Volumes, vm.Spec.UpdateVolumesStrategy) {
		was.Volumes = cur.Volumes
	}
	if disksChangeLive(was, cur) {
		was.Domain.Devices.Disks = cur.Domain.Devices.Disks
	}
	if live.rollout {
		if was.Domain.CPU != nil && cur.Domain.CPU != nil {
			was.Domain.CPU.Sockets = cur.Domain.CPU.Sockets
		}
		if cur.Domain.Memory != nil && cur.Domain.Memory.Guest != nil {
			if was.Domain.Memory == nil {
				was.Domain.Memory = &virtv1.Memory{}
			}
			was.Domain.Memory.Guest = cur.Domain.Memory.Guest
		}
		was.NodeSelector, was.Affinity, was.Tolerations = cur.NodeSelector, cur.Affinity, cur.Tolerations
	}
	if !networksNeedRestart(cur, &vmi.Spec, live.nadRef) {
		was.Domain.Devices.Interfaces, was.Networks = cur.Domain.Devices.Interfaces, cur.Networks
	}
	// A firmware UUID persisted to the VM after the start is the one the
	// VMI runs with.
	if vmi.Spec.Domain.Firmware != nil && cur.Domain.Firmware != nil && vmi.Spec.Domain.Firmware.UUID == cur.Domain.Firmware.UUID {
		if was.Domain.Firmware == nil {
			was.Domain.Firmware = &virtv1.Firmware{}
		}
		was.Domain.Firmware.UUID = cur.Domain.Firmware.UUID
	}
	return !equality.Semantic.DeepEqual(*was, *cur)
}

// hotplugged reports a volume that is plugged in and out of a running VMI
// (a hotpluggable claim or DataVolume, or a hotpluggable memory dump).
func hotplugged(v *virtv1.Volume) bool {
	switch {
	case v == nil:
		return false
	case v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.Hotpluggable,
		v.DataVolume != nil && v.DataVolume.Hotpluggable,
		v.MemoryDump != nil && v.MemoryDump.Hotpluggable:
		return true
	}
	return false
}

// volumesChangeLive reports whether the volumes changed, if at all, only
// in hotplugged ones, or, with the Migration update strategy, in the claim
// or DataVolume a volume names.
func volumesChangeLive(was, cur []virtv1.Volume, strategy *virtv1.UpdateVolumesStrategy) bool {
	left := volumesByName(was)
	migrate := strategy != nil && *strategy == virtv1.UpdateVolumesStrategyMigration
	for i := range cur {
		v := &cur[i]
		old, had := left[v.Name]
		switch {
		case hotplugged(v):
		case !had:
			return false
		case migrate && (v.PersistentVolumeClaim != nil || v.DataVolume != nil):
		case !equality.Semantic.DeepEqual(*old, *v):
			return false
		}
		delete(left, v.Name)
	}
	for _, v := range left {
		if !hotplugged(v) {
			return false
		}
	}
	return true
}

// disksChangeLive reports whether the disks changed, if at all, only in
// disks of hotplugged volumes; a removed CD-ROM needs a restart.
func disksChangeLive(was, cur *virtv1.VirtualMachineInstanceSpec) bool {
	oldDisks := disksByName(was.Domain.Devices.Disks)
	oldVolumes, curVolumes := volumesByName(was.Volumes), volumesByName(cur.Volumes)
	curDisks := disksByName(cur.Domain.Devices.Disks)
	left := disksByName(was.Domain.Devices.Disks)
	for i := range cur.Domain.Devices.Disks {
		d := &cur.Domain.Devices.Disks[i]
		old, had := oldDisks[d.Name]
		switch {
		case hotplugged(curVolumes[d.Name]):
		case !had:
			return false
		case !equality.Semantic.DeepEqual(*old, *d):
			return false
		}
		delete(left, d.Name)
	}
	for name, d := range left {
		if v, ok := oldVolumes[name]; ok && !hotplugged(v) {
			return false
		}
		if _, kept := curDisks[name]; d.CDRom != nil && !kept {
			return false
		}
	}
	return true
}

// networksNeedRestart reports whether an interface or network the VMI
// runs with was removed from the template or changed in it (an
// interface's state aside; a Multus network's attachment name aside with
// nadRef), or the pod network was added: what KubeVirt's network
// live-update cannot apply (pkg/network/vmliveupdate, IsRestartRequired).
func networksNeedRestart(tmpl, running *virtv1.VirtualMachineInstanceSpec, nadRef bool) bool {
	want := map[string]virtv1.Interface{}
	for _, i := range tmpl.Domain.Devices.Interfaces {
		want[i.Name] = i
	}
	for _, i := range running.Domain.Devices.Interfaces {
		w, ok := want[i.Name]
		if !ok {
			return true
		}
		w.State, i.State = "", ""
		if !reflect.DeepEqual(w, i) {
			return true
		}
	}
	if hasPodNetwork(tmpl.Networks) && !hasPodNetwork(running.Networks) {
		return true
	}
	wantNets := map[string]virtv1.Network{}
	for _, n := range tmpl.Networks {
		wantNets[n.Name] = n
	}
	for _, n := range running.Networks {
		w, ok := wantNets[n.Name]
		if !ok {
			return true
		}
		if nadRef {
			w, n = withoutAttachmentName(w), withoutAttachmentName(n)
		}
		if !reflect.DeepEqual(w, n) {
			return true
		}
	}
	return false
}

func hasPodNetwork(nets []virtv1.Network) bool {
	for _, n := range nets {
		if n.Pod != nil {
			return true
		}
	}
	return false
}

// withoutAttachmentName is n without the Multus attachment it names.
func withoutAttachmentName(n virtv1.Network) virtv1.Network {
	n = *n.DeepCopy()
	if n.Multus != nil {
		n.Multus.NetworkName = ""
	}
	return n
}

func volumesByName(vs []virtv1.Volume) map[string]*virtv1.Volume {
	out := make(map[string]*virtv1.Volume, len(vs))
	for i := range vs {
		out[vs[i].Name] = &vs[i]
	}
	return out
}

func disksByName(ds []virtv1.Disk) map[string]*virtv1.Disk {
	out := make(map[string]*virtv1.Disk, len(ds))
	for i := range ds {
		out[ds[i].Name] = &ds[i]
	}
	return out
}

// judgeRestart judges the VM's template against the start the VMI runs.
// A VM with an instance type or preference is judged with both applied on
// either side, the start's from the revisions it was pinned to, as
// KubeVirt's syncRestartRequired; when either cannot be applied it is left
// unjudged.
func (c *Controller) judgeRestart(ctx context.Context, r *caches.Range, o *observed) (restartVerdict, error) {
	vm, vmi := o.vm, o.vmi
	started, err := lastStartedSpec(r, vm)
	if err != nil || started == nil {
		return restartUnjudged, err
	}
	if vm.Spec.Instancetype != nil || vm.Spec.Preference != nil || started.Instancetype != nil || started.Preference != nil {
		// The sync resolved the VM's own side already (syncInstancetypes).
		current, ok := applied(vm, o.resolved)
		if !ok {
			return restartUnjudged, nil
		}
		last, ok := c.expanded(ctx, r, &virtv1.VirtualMachine{ObjectMeta: vm.ObjectMeta, Spec: *started}, &virtv1.VirtualMachineStatus{})
		if !ok {
			return restartUnjudged, nil
		}
		vm, started = current, &last.Spec
	}
	cfg := c.env.ClusterConfig.Current()
	live := liveSettings{rollout: cfg.IsVMRolloutStrategyLiveUpdate(), nadRef: cfg.LiveUpdateNADRefEnabled()}
	if needsRestart(started, vm, vmi, live) {
		return restartRequired, nil
	}
	return restartNotRequired, nil
}

// expanded is a copy of vm with its instance type and preference (found
// with status's refs) applied to its template, and whether they could be.
func (c *Controller) expanded(ctx context.Context, r *caches.Range, vm *virtv1.VirtualMachine, status *virtv1.VirtualMachineStatus) (*virtv1.VirtualMachine, bool) {
	if vm.Spec.Template == nil {
		return vm.DeepCopy(), true
	}
	res, err := c.resolve(ctx, r, vm, status)
	if err != nil {
		return nil, false
	}
	return applied(vm, res)
}

// applied is a copy of vm with res applied to its template, and whether it
// could be.
func applied(vm *virtv1.VirtualMachine, res resolved) (*virtv1.VirtualMachine, bool) {
	out := vm.DeepCopy()
	if out.Spec.Template == nil {
		return out, true
	}
	return out, len(instancetype.Apply("spec", res.instancetype, res.preference, &out.Spec.Template.Spec, &out.Spec.Template.ObjectMeta)) == 0
}
