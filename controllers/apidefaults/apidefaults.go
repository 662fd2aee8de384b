package apidefaults

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// Cluster is what defaults read of the cluster configuration.
type Cluster interface {
	// Configuration is the effective configuration: KubeVirt's defaults
	// with the KubeVirt CR's spec.configuration merged over them, and
	// architectureConfiguration.defaultArchitecture taken from the CR's
	// status. Apply never modifies it.
	Configuration() *virtv1.KubeVirtConfiguration
	// FeatureGateEnabled has KubeVirt's semantics: GA gates are always on,
	// others only when listed in developerConfiguration.featureGates.
	FeatureGateEnabled(name string) bool
	// KubeVirtAnnotations are the KubeVirt CR's metadata.annotations.
	KubeVirtAnnotations() map[string]string
}

// Feature gates Apply reads (pkg/virt-config/featuregate/active.go).
const (
	featureGateRoot      = "Root"
	featureGateAlignCPUs = "AlignCPUs"
)

// nonRootUser is the runtime user of a non-root virt-launcher, the qemu user
// of its image (virt-api's markAsNonroot).
const nonRootUser = 107

// Apply gives vmi the defaults virt-api's mutating webhook gives a
// VirtualMachineInstance on CREATE, as the API server would then store it.
// now stands for the webhook's clock reading, the time of the Pending phase
// transition. On error, which is when virt-api would reject the create, vmi
// is left unchanged.
//
// One value stays random as in KubeVirt: a VMI without
// spec.domain.firmware.uuid gets a fresh one (kubevirt.io/api's
// SetDefaults_Firmware).
func Apply(vmi *virtv1.VirtualMachineInstance, cluster Cluster, now metav1.Time) error {
	// The webhook works on the object decoded from the admission request,
	// and the API server stores the JSON of its patch: going through JSON
	// at both ends gives the same nil-versus-empty, timestamp precision and
	// pointer sharing as a real create.
	work := &virtv1.VirtualMachineInstance{}
	if err := roundTrip(vmi, work); err != nil {
		return fmt.Errorf("decode vmi: %w", err)
	}
	if err := applyNewVMIMutations(work, cluster); err != nil {
		return err
	}
	addCreateBookkeeping(work, now)

	out := &virtv1.VirtualMachineInstance{}
	if err := roundTrip(work, out); err != nil {
		return fmt.Errorf("encode defaulted vmi: %w", err)
	}
	*vmi = *out
	return nil
}

// applyNewVMIMutations mirrors virt-api's ApplyNewVMIMutations.
func applyNewVMIMutations(vmi *virtv1.VirtualMachineInstance, cluster Cluster) error {
	cfg := configView{cluster.Configuration()}
	if err := setInstanceDefaults(vmi, cfg); err != nil {
		return err
	}
	setPCITopologyVersion(&vmi.ObjectMeta)
	copyEvenParityAnnotation(vmi, cluster)
	if !cluster.FeatureGateEnabled(featureGateRoot) {
		vmi.Status.RuntimeUser = nonRootUser
	}
	return nil
}

// setPCITopologyVersion marks a new VMI as using the v3 PCI topology unless
// it names one already.
func setPCITopologyVersion(meta *metav1.ObjectMeta) {
	if _, ok := meta.Annotations[virtv1.PciTopologyVersionAnnotation]; ok {
		return
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[virtv1.PciTopologyVersionAnnotation] = virtv1.PciTopologyVersionV3
}

// copyEvenParityAnnotation passes the KubeVirt CR's alpha
// EmulatorThreadCompleteToEvenParity annotation on to a VMI that isolates
// its emulator thread, when the AlignCPUs gate is on. Only the key counts:
// the VMI's value is always empty.
func copyEvenParityAnnotation(vmi *virtv1.VirtualMachineInstance, cluster Cluster) {
	if !vmi.Spec.Domain.CPU.IsolateEmulatorThread {
		return
	}
	if _, ok := cluster.KubeVirtAnnotations()[virtv1.EmulatorThreadCompleteToEvenParity]; !ok {
		return
	}
	if !cluster.FeatureGateEnabled(featureGateAlignCPUs) {
		return
	}
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[virtv1.EmulatorThreadCompleteToEvenParity] = ""
}

// addCreateBookkeeping is what Mutate's create branch adds after the
// mutations: the foreground-delete finalizer (appended even when present, as
// KubeVirt does) and phase Pending with its transition timestamp, so that no
// VMI is stored with a blank status.
func addCreateBookkeeping(vmi *virtv1.VirtualMachineInstance, now metav1.Time) {
	vmi.Finalizers = append(vmi.Finalizers, virtv1.VirtualMachineInstanceFinalizer)
	vmi.Status.Phase = virtv1.Pending
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		virtv1.VirtualMachineInstancePhaseTransitionTimestamp{
			Phase:                    virtv1.Pending,
			PhaseTransitionTimestamp: now,
		})
}

func roundTrip(in, out *virtv1.VirtualMachineInstance) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

// SetSpecDefaults gives a VMI spec the defaults of pkg/defaults'
// SetDefaultVirtualMachineInstanceSpec, the part of virt-api's that a VM
// controller expanding an instance type into a VM's template gives it.
func SetSpecDefaults(spec *virtv1.VirtualMachineInstanceSpec, cluster Cluster) error {
	return setSpecDefaults(spec, configView{cluster.Configuration()})
}

// SetVMDefaults gives a VMI spec the defaults KubeVirt's VM controller
// gives the VMI it makes before applying an instance type and preference
// (SetupVMIFromVM, SetDefaultNetworkInterface): a disk for every volume
// without one, and the default pod network, which a preference may then
// tune. virt-api gives both again on create, to no effect.
func SetVMDefaults(spec *virtv1.VirtualMachineInstanceSpec, cluster Cluster) error {
	addMissingVolumeDisks(spec)
	return setDefaultNetwork(spec, configView{cluster.Configuration()})
}
