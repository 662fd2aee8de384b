package topology

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// Node labels.
const (
	// FrequencyLabel is a node's TSC frequency in Hz, from virt-handler.
	FrequencyLabel = virtv1.CPUTimerLabel + "tsc-frequency"
	// ScalableLabel is "true" on a node whose TSC frequency can be scaled.
	ScalableLabel = virtv1.CPUTimerLabel + "tsc-scalable"
	// SchedulingLabel prefixes the labels of the frequencies a node can run
	// ("-<Hz>"), which a VMI's launcher pod selects.
	SchedulingLabel = "scheduling.node.kubevirt.io/tsc-frequency"
)

// tolerancePPM is how far, in parts per million, a non-scalable node's
// frequency may be from a VMI's for the VMI to run there.
const tolerancePPM = 250

// Need is what a VMI needs of a TSC frequency.
type Need int

const (
	// NotNeeded: no hint.
	NotNeeded Need = iota
	// ForMigration: Hyper-V reenlightenment; a VMI boots without one but
	// gets one first.
	ForMigration
	// ForBoot: the invtsc CPU feature, required or forced.
	ForBoot
)

// NeedOf is what vmi needs: only amd64 VMIs have a TSC frequency.
func NeedOf(vmi *virtv1.VirtualMachineInstance) Need {
	if vmi.Spec.Architecture != "amd64" {
		return NotNeeded
	}
	if cpu := vmi.Spec.Domain.CPU; cpu != nil {
		for _, f := range cpu.Features {
			if f.Name == "invtsc" && (f.Policy == "require" || f.Policy == "force") {
				return ForBoot
			}
		}
	}
	if f := vmi.Spec.Domain.Features; f != nil && f.Hyperv != nil && f.Hyperv.Reenlightenment != nil &&
		f.Hyperv.Reenlightenment.Enabled != nil && *f.Hyperv.Reenlightenment.Enabled {
		return ForMigration
	}
	return NotNeeded
}

// NodeFrequency is node's TSC frequency (0 without one) and whether it
// scales; an unreadable or non-positive label is an error.
func NodeFrequency(node *corev1.Node) (hz int64, scalable bool, err error) {
	scalable = node.Labels[ScalableLabel] == "true"
	raw, ok := node.Labels[FrequencyLabel]
	if !ok {
		return 0, false, nil
	}
	hz, err = strconv.ParseInt(raw, 10, 64)
	switch {
	case err != nil:
		return 0, false, fmt.Errorf("tsc frequency on node %v is not an int: %w", node.Name, err)
	case hz <= 0:
		return 0, false, fmt.Errorf("tsc frequency on node %v is invalid: expected a frequenchy bigger than 0, but got %v", node.Name, hz)
	}
	return hz, scalable, nil
}

// Lowest is the frequency a VMI that needs one is given: the KubeVirt
// CR's minimumClusterTSCFrequency if set (an error if not positive), else
// the lowest of the nodes with a valid frequency that are schedulable
// (kubevirt.io/schedulable=true) or that hosting says run VMIs; 0 when
// there is none.
func Lowest(nodes []*corev1.Node, configured *int64, hosting func(node string) bool) (int64, error) {
	if configured != nil {
		if *configured <= 0 {
			return 0, fmt.Errorf("the configured minimumClusterTSCFrequency must be greater 0, but got %d", *configured)
		}
		return *configured, nil
	}
	var lowest int64
	for _, node := range nodes {
		hz, _, err := NodeFrequency(node)
		if err != nil || hz == 0 {
			continue
		}
		if node.Labels[virtv1.NodeSchedulable] != "true" && !hosting(node.Name) {
			continue
		}
		if lowest == 0 || hz < lowest {
			lowest = hz
		}
	}
	return lowest, nil
}

// HintedFrequency is vmi's TSC frequency hint, 0 without one.
func HintedFrequency(vmi *virtv1.VirtualMachineInstance) int64 {
	if h := vmi.Status.TopologyHints; h != nil && h.TSCFrequency != nil && *h.TSCFrequency > 0 {
		return *h.TSCFrequency
	}
	return 0
}

// ErrNoFrequency: the node has no TSC frequency, so it carries no
// scheduling labels.
var ErrNoFrequency = errors.New("no tsc frequency")

// SchedulingLabels are node's scheduling labels for the frequencies
// required (those in use and the cluster's lowest), to be "true" (add) or
// gone (remove): a label for each required frequency the node can run — a
// non-scalable node only those within the tolerance of its own, a scalable
// one also any lower — and for its own; none for the others (KubeVirt's
// CalculateTSCLabelDiff).
func SchedulingLabels(node *corev1.Node, required []int64) (add, remove []string, err error) {
	hz, scalable, err := NodeFrequency(node)
	if err != nil {
		return nil, nil, err
	}
	if hz == 0 {
		return nil, nil, ErrNoFrequency
	}
	tolerance := hz * tolerancePPM / 1_000_000
	distance := func(f int64) int64 {
		if f > hz {
			return f - hz
		}
		return hz - f
	}
	want := map[int64]bool{hz: true}
	for _, f := range required {
		if scalable || distance(f) <= tolerance {
			want[f] = true
		}
	}
	for key := range node.Labels {
		if f, ok := strings.CutPrefix(key, SchedulingLabel+"-"); ok {
			if v, err := strconv.ParseInt(f, 10, 64); err == nil {
				if !want[v] {
					remove = append(remove, key)
				}
			}
		}
	}
	for f := range want {
		if !scalable || f <= hz || distance(f) <= tolerance {
			add = append(add, fmt.Sprintf("%s-%d", SchedulingLabel, f))
		}
	}
	return add, remove, nil
}
