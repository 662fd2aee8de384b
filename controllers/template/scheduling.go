package template

import (
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// Node labels virt-handler's node labeller sets, which launcher pods
// select on.
const (
	// SchedulableLabel is on nodes whose virt-handler is ready.
	SchedulableLabel = "kubevirt.io/schedulable"
	// tscFrequencyLabel prefixes a node's TSC frequencies.
	tscFrequencyLabel = "scheduling.node.kubevirt.io/tsc-frequency"
	intelVendor       = "Intel"
)

// nodeSelector is KubeVirt's NodeSelectorRenderer: schedulable nodes of the
// VMI's architecture, the cluster's and the VMI's selectors, and a label
// for every node capability the VMI needs.
func nodeSelector(vmi *virtv1.VirtualMachineInstance, cluster Cluster) map[string]string {
	cfg := cluster.Configuration()
	selector := map[string]string{SchedulableLabel: "true"}
	if arch := vmi.Spec.Architecture; arch != "" {
		selector[corev1.LabelArchStable] = strings.ToLower(arch)
	}
	if cfg.DeveloperConfiguration != nil {
		maps.Copy(selector, cfg.DeveloperConfiguration.NodeSelectors)
	}
	maps.Copy(selector, vmi.Spec.NodeSelector)

	require := func(label string) { selector[label] = "true" }
	if vmi.IsCPUDedicated() {
		require(virtv1.CPUManager)
	}
	if cluster.FeatureGateEnabled(gateHypervStrictCheck) {
		maps.Copy(selector, hypervSelectors(vmi.Spec.Domain.Features))
	}
	if cpu := vmi.Spec.Domain.CPU; cpu != nil && cpu.Model != "" {
		if cpu.Model != virtv1.CPUModeHostModel && cpu.Model != virtv1.CPUModeHostPassthrough {
			require(virtv1.CPUModelLabel + cpu.Model)
		}
	}
	if machine := machineType(vmi); machine != "" {
		require(virtv1.SupportedMachineTypeLabel + machine)
	}
	if cpu := vmi.Spec.Domain.CPU; cpu != nil && cpu.Model != "" {
		// KubeVirt selects on required features only along with a model.
		for _, f := range cpu.Features {
			if f.Policy == "" || f.Policy == "require" {
				require(virtv1.CPUFeatureLabel + f.Name)
			}
		}
	}
	if manualTSCFrequency(vmi) {
		require(fmt.Sprintf("%s-%d", tscFrequencyLabel, *vmi.Status.TopologyHints.TSCFrequency))
	}
	if vmi.IsRealtimeEnabled() {
		require(virtv1.RealtimeLabel)
	}
	ls := vmi.Spec.Domain.LaunchSecurity
	if ls != nil && (ls.SEV != nil || ls.SNP != nil) {
		require(virtv1.SEVLabel)
	}
	if ls != nil && ls.SEV != nil && ls.SEV.Policy != nil && ls.SEV.Policy.EncryptedState != nil && *ls.SEV.Policy.EncryptedState {
		require(virtv1.SEVESLabel)
	}
	if ls != nil && ls.SNP != nil {
		require(virtv1.SEVSNPLabel)
	}
	if ls != nil && vmi.Spec.Architecture == "s390x" {
		require(virtv1.SecureExecutionLabel)
	}
	if ls != nil && ls.TDX != nil {
		require(virtv1.TDXLabel)
	}
	return selector
}

// machineType is the status' machine type (set once the VMI ran), else
// the spec's.
func machineType(vmi *virtv1.VirtualMachineInstance) string {
	if m := vmi.Status.Machine; m != nil && m.Type != "" {
		return m.Type
	}
	if m := vmi.Spec.Domain.Machine; m != nil {
		return m.Type
	}
	return ""
}

// manualTSCFrequency tells whether the VMI needs a node of its TSC
// frequency (invtsc, or Hyper-V reenlightenment) and the VMI controller has
// found that frequency (status.topologyHints).
func manualTSCFrequency(vmi *virtv1.VirtualMachineInstance) bool {
	hints := vmi.Status.TopologyHints
	if hints == nil || hints.TSCFrequency == nil || *hints.TSCFrequency <= 0 {
		return false
	}
	if cpu := vmi.Spec.Domain.CPU; cpu != nil {
		for _, f := range cpu.Features {
			if f.Name == "invtsc" && (f.Policy == "require" || f.Policy == "force") {
				return true
			}
		}
	}
	features := vmi.Spec.Domain.Features
	return features != nil && features.Hyperv != nil && features.Hyperv.Reenlightenment != nil &&
		features.Hyperv.Reenlightenment.Enabled != nil && *features.Hyperv.Reenlightenment.Enabled
}

// hypervSelectors require a node label for each enabled Hyper-V
// enlightenment the node must support, and an Intel CPU for EVMCS.
func hypervSelectors(features *virtv1.Features) map[string]string {
	selector := map[string]string{}
	if features == nil || features.Hyperv == nil {
		return selector
	}
	hv := features.Hyperv
	enabled := func(f *virtv1.FeatureState) bool { return f != nil && f.Enabled != nil && *f.Enabled }
	var synicTimer, tlbFlush *virtv1.FeatureState
	if hv.SyNICTimer != nil {
		synicTimer = &virtv1.FeatureState{Enabled: hv.SyNICTimer.Enabled}
	}
	if hv.TLBFlush != nil {
		tlbFlush = &virtv1.FeatureState{Enabled: hv.TLBFlush.Enabled}
	}
	for label, f := range map[string]*virtv1.FeatureState{
		"vpindex": hv.VPIndex, "runtime": hv.Runtime, "reset": hv.Reset, "synic": hv.SyNIC,
		"synictimer": synicTimer, "frequencies": hv.Frequencies, "reenlightenment": hv.Reenlightenment,
		"tlbflush": tlbFlush, "ipi": hv.IPI,
	} {
		if enabled(f) {
			selector[virtv1.HypervLabel+label] = "true"
		}
	}
	if hv.EVMCS != nil && (hv.EVMCS.Enabled == nil || *hv.EVMCS.Enabled) {
		selector[virtv1.CPUModelVendorLabel+intelVendor] = "true"
	}
	return selector
}

// affinity is the VMI's affinity plus what keeps the VMI off nodes it
// cannot run on: with the host-model CPU (the default), nodes whose host
// model is obsolete; with a forbidden CPU feature, nodes that have it.
// Each requirement is added to every required term, as terms are ORed.
func affinity(vmi *virtv1.VirtualMachineInstance) *corev1.Affinity {
	a := vmi.Spec.Affinity.DeepCopy()
	cpu := vmi.Spec.Domain.CPU
	if cpu == nil || cpu.Model == "" || cpu.Model == virtv1.CPUModeHostModel {
		a = rejectNodeLabel(a, virtv1.NodeHostModelIsObsoleteLabel)
	}
	if cpu != nil {
		for _, f := range cpu.Features {
			if f.Policy == "forbid" {
				a = rejectNodeLabel(a, virtv1.CPUFeatureLabel+f.Name)
			}
		}
	}
	return a
}

func rejectNodeLabel(a *corev1.Affinity, label string) *corev1.Affinity {
	requirement := corev1.NodeSelectorRequirement{Key: label, Operator: corev1.NodeSelectorOpDoesNotExist}
	term := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{requirement}}
	if a == nil {
		a = &corev1.Affinity{}
	}
	if a.NodeAffinity == nil {
		a.NodeAffinity = &corev1.NodeAffinity{}
	}
	required := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if required == nil {
		a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}
		return a
	}
	for i := range required.NodeSelectorTerms {
		required.NodeSelectorTerms[i].MatchExpressions = append(required.NodeSelectorTerms[i].MatchExpressions, requirement)
	}
	return a
}
