package main

import (
	"crypto/sha1"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "kubevirt.io/api/core/v1"

	"kubevirt.io/kubevirt/pkg/virt-api/webhooks/mutating-webhook/mutators"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
)

// firmwareUUIDPlaceholder replaces the firmware UUID that KubeVirt's API
// defaults (SetDefaults_Firmware in kubevirt.io/api) draw with
// uuid.NewString when a VMI names none. The launcher pod does not use it; the
// comparison only checks that virtshard's VMI has one. (A VM's VMI gets its
// UUID from the VM, so the corpus's VM-owned case gives one.)
const firmwareUUIDPlaceholder = "RANDOM_FIRMWARE_UUID"

// fixedTime stands for every clock reading, so that re-runs are byte-identical.
var fixedTime = metav1.NewTime(time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC))

// applyCreateDefaults does to vmi what virt-api's VMIsMutator.Mutate does on
// create (vmi-mutator.go), with fixedTime for time.Now. VMI presets, which
// Mutate applies first, are deprecated and the corpus has none. The API
// server's own part of a create is reduced to a UID (derived from name when
// the input has none) and a creationTimestamp.
//
// A corpus VMI may carry status (the migration case is a Running VMI on a
// node): those fields are kept, and a phase given in the input survives the
// webhook's Pending, since such a VMI stands for one created earlier.
func applyCreateDefaults(vmi *v1.VirtualMachineInstance, clusterConfig *virtconfig.ClusterConfig, name string) error {
	if vmi.UID == "" {
		vmi.UID = uidFor(name)
	}
	if vmi.CreationTimestamp.IsZero() {
		vmi.CreationTimestamp = fixedTime
	}
	inputPhase := vmi.Status.Phase
	hadFirmwareUUID := vmi.Spec.Domain.Firmware != nil && vmi.Spec.Domain.Firmware.UUID != ""

	if err := mutators.ApplyNewVMIMutations(vmi, clusterConfig); err != nil {
		return err
	}
	if !hadFirmwareUUID && vmi.Spec.Domain.Firmware != nil {
		vmi.Spec.Domain.Firmware.UUID = firmwareUUIDPlaceholder
	}
	vmi.Finalizers = append(vmi.Finalizers, v1.VirtualMachineInstanceFinalizer)
	vmi.Status.Phase = v1.Pending
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps, v1.VirtualMachineInstancePhaseTransitionTimestamp{
		Phase:                    vmi.Status.Phase,
		PhaseTransitionTimestamp: fixedTime,
	})

	if inputPhase != "" {
		vmi.Status.Phase = inputPhase
	}
	return nil
}

// uidFor derives a UID from name as a name-based UUID (version 5 layout over
// SHA-1), so that a VMI without one gets the same UID on every run.
func uidFor(name string) types.UID {
	sum := sha1.Sum([]byte("virtshard-conformance/" + name))
	sum[6] = sum[6]&0x0f | 0x50
	sum[8] = sum[8]&0x3f | 0x80
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16]))
}
