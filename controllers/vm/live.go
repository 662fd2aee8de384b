package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// Under the LiveUpdate rollout, a running VMI takes its VM's new CPU
// sockets and guest memory (hotplug.go), node selector, affinity and
// tolerations without a restart: KubeVirt v1.8.1's VM controller patches
// them into the VMI's spec (handleCPUChangeRequest,
// handleAffinityChangeRequest, handleTolerationsChangeRequest,
// handleMemoryHotplugRequest in pkg/virt-controller/watch/vm/vm.go), unless
// the VM needs a restart anyway, and refuses while the VMI migrates.

// Reasons of the VM's Failure condition when a live change must wait.
const (
	ReasonAffinityChange    = "AffinityChangeError"
	ReasonTolerationsChange = "TolerationsChangeError"
	ReasonVolumesUpdate     = "VolumesUpdateError"
)

// liveChangesApply reports whether this sync takes the template's live
// fields to the VMI.
func (c *Controller) liveChangesApply(o *observed) bool {
	vmi := o.vmi
	if vmi == nil || vmi.DeletionTimestamp != nil || o.vm.Spec.Template == nil ||
		!c.env.ClusterConfig.Current().IsVMRolloutStrategyLiveUpdate() {
		return false
	}
	switch o.restart {
	case restartRequired:
		return false
	case restartNotRequired:
		return true
	}
	return !slices.ContainsFunc(o.vm.Status.Conditions, isRestartRequired)
}

// applyLiveChanges takes the template's live fields to the VMI, in
// KubeVirt's order: CPU sockets, placement, guest memory, and the volumes
// (a receiver's described, another's moved: volumes.go).
func (c *Controller) applyLiveChanges(ctx context.Context, it item, o *observed) error {
	// CPU and memory are judged with the instance type and preference
	// applied, as KubeVirt does.
	expanded, typed := o.vm, o.vm.Spec.Instancetype != nil || o.vm.Spec.Preference != nil
	if typed {
		var ok bool
		if expanded, ok = applied(o.vm, o.resolved); !ok {
			return nil
		}
	}
	if err := c.hotplugCPU(ctx, it, o, &expanded.Spec.Template.Spec); err != nil {
		return err
	}
	// KubeVirt takes the placement from the template as written, which
	// would drop an instance type's node selector from the VMI: virtshard
	// leaves the placement of such a VM's VMI alone.
	if !typed {
		if err := c.applyPlacement(ctx, it, o); err != nil {
			return err
		}
	}
	if err := c.hotplugMemory(ctx, it, o, &expanded.Spec.Template.Spec); err != nil {
		return err
	}
	if o.strategy == virtv1.RunStrategyWaitAsReceiver {
		return c.describeReceivedVolumes(ctx, it, o)
	}
	return c.updateVolumes(ctx, it, o)
}

// applyPlacement patches the VMI's node selector, affinity and
// tolerations to the template's where they differ.
func (c *Controller) applyPlacement(ctx context.Context, it item, o *observed) error {
	tmpl, vmi := &o.vm.Spec.Template.Spec, o.vmi
	selector := !equality.Semantic.DeepEqual(tmpl.NodeSelector, vmi.Spec.NodeSelector)
	affinity := !equality.Semantic.DeepEqual(tmpl.Affinity, vmi.Spec.Affinity)
	tolerations := !equality.Semantic.DeepEqual(tmpl.Tolerations, vmi.Spec.Tolerations)
	migrating := vmistatus.Migrating(vmi, c.env.Clock.Now())
	if migrating && (selector || affinity) {
		return &syncError{reason: ReasonAffinityChange, silent: true,
			message: "Error encountered while handling node affinity change request: Node affinity should not be changed during VMI migration"}
	}
	var ops []jsonPatchOp
	if affinity {
		ops = append(ops, replaceOps("/spec/affinity", vmi.Spec.Affinity == nil, vmi.Spec.Affinity, tmpl.Affinity, tmpl.Affinity == nil)...)
	}
	if selector {
		ops = append(ops, replaceOps("/spec/nodeSelector", vmi.Spec.NodeSelector == nil, vmi.Spec.NodeSelector, tmpl.NodeSelector, tmpl.NodeSelector == nil)...)
	}
	if tolerations && !migrating {
		ops = append(ops, replaceOps("/spec/tolerations", vmi.Spec.Tolerations == nil, vmi.Spec.Tolerations, tmpl.Tolerations, tmpl.Tolerations == nil)...)
	}
	if len(ops) > 0 {
		if err := c.patchVMI(ctx, it, o, ops); err != nil {
			return fmt.Errorf("apply the live changes of VM %s to its VMI: %w", it.Key, err)
		}
	}
	if tolerations && migrating {
		return &syncError{reason: ReasonTolerationsChange, silent: true,
			message: "Error encountered while handling tolerations change request: tolerations should not be changed during VMI migration"}
	}
	return nil
}

// describeReceivedVolumes records once on a receiver VMI the claims its
// VM's volumes use, as the destinations of the migration that brings it
// (KubeVirt's handleWaitAsReceiverVolumeInfo): each template volume whose
// claim exists, with the claim's mode, access modes, requests and
// capacity. The patch is KubeVirt's: a test that the VMI has none, then a
// replace.
func (c *Controller) describeReceivedVolumes(ctx context.Context, it item, o *observed) error {
	vmi := o.vmi
	if vmi.IsMigrationCompleted() || len(vmi.Status.MigratedVolumes) > 0 {
		return nil
	}
	var volumes []virtv1.StorageMigratedVolumeInfo
	for _, v := range o.vm.Spec.Template.Spec.Volumes {
		claim := template.VolumeClaim(v)
		if claim == "" {
			continue
		}
		pvc, ok := c.env.Objects.PVC(vmi.Namespace, claim)
		if !ok {
			continue
		}
		volumes = append(volumes, virtv1.StorageMigratedVolumeInfo{VolumeName: v.Name, DestinationPVCInfo: &virtv1.PersistentVolumeClaimInfo{
			ClaimName: claim, VolumeMode: pvc.Spec.VolumeMode, AccessModes: pvc.Spec.AccessModes,
			Requests: pvc.Spec.Resources.Requests, Capacity: pvc.Status.Capacity,
		}})
	}
	if len(volumes) == 0 {
		return nil
	}
	body, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/status/migratedVolumes", "value": nil},
		{"op": "replace", "path": "/status/migratedVolumes", "value": volumes},
	})
	if err != nil {
		return err
	}
	updated, ok, err := sharded.SendPatch(ctx, c.rt.Writer, it.Range, body, func(ctx context.Context, body []byte) (*virtv1.VirtualMachineInstance, error) {
		return c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.JSONPatchType, body, metav1.PatchOptions{})
	})
	if err != nil {
		return &syncError{reason: ReasonVolumesUpdate, silent: true,
			message: "error encountered while handling wait as receiver volume migration requests: " + err.Error()}
	}
	if ok {
		o.vmi = updated
	}
	return nil
}

// jsonPatchOp is one operation of a JSON patch.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// jsonNull is a patch operation's value null, which Value's omitempty
// would leave out.
var jsonNull = json.RawMessage("null")

// replaceOps set path to want: added where the VMI has nothing, removed
// where the template has nothing, otherwise replaced once the VMI is seen
// to still hold have.
func replaceOps(path string, absent bool, have, want any, remove bool) []jsonPatchOp {
	switch {
	case remove:
		return []jsonPatchOp{{Op: "remove", Path: path}}
	case absent:
		return []jsonPatchOp{{Op: "add", Path: path, Value: want}}
	}
	return []jsonPatchOp{{Op: "test", Path: path, Value: have}, {Op: "replace", Path: path, Value: want}}
}
