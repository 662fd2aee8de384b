package migration

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/kinds"
)

// errNoSELinuxContext is KubeVirt's refusal to render a target pod for a
// VMI whose node agent has not reported its SELinux context.
var errNoSELinuxContext = errors.New("SELinux context not set on VMI status")

// placeOnLikeNode narrows the target pod to nodes the VMI can run on as it
// runs on its source node, as KubeVirt's createTargetPod does: a VMI with
// the host-model CPU goes only to nodes that support the source's model
// and its required features, and any VMI only to nodes of the source's CPU
// vendor, unless its pod already names one.
func (c *Controller) placeOnLikeNode(pod *corev1.Pod, vmi *virtv1.VirtualMachineInstance, source *corev1.Pod) error {
	node, ok, err := kinds.Nodes.All(c.env.Caches).Get(vmi.Status.NodeName)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("node %q associated with vmi %q does not exist", vmi.Status.NodeName, vmi.Name)
	}
	if cpu := vmi.Spec.Domain.CPU; cpu != nil && cpu.Model == virtv1.CPUModeHostModel {
		var sourceSelector map[string]string
		if source != nil {
			sourceSelector = source.Spec.NodeSelector
		}
		// KubeVirt v1.8.1 drops the error of a source node that does not
		// say its model (an err shadowed in createTargetPod) and asks for
		// nothing: so does virtshard.
		maps.Copy(pod.Spec.NodeSelector, hostModelSelector(node.Labels, sourceSelector))
	}
	if vendorLabel(pod.Spec.NodeSelector) == "" {
		if key := vendorLabel(node.Labels); key != "" {
			pod.Spec.NodeSelector[key] = "true"
		}
	}
	return nil
}

// hostModelSelector is what a target node must be labelled with to run
// the host-model CPU the VMI runs on its source node: what the source pod
// already asked for, when the VMI migrated before (so that it may migrate
// back); else the source node's host model and required features, as the
// labels that say a node supports them (KubeVirt's
// prepareNodeSelectorForHostCpuModel); nothing when the node does not say
// its host model.
func hostModelSelector(nodeLabels, sourceSelector map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range sourceSelector {
		if strings.Contains(k, virtv1.CPUFeatureLabel) || strings.Contains(k, virtv1.SupportedHostModelMigrationCPU) {
			out[k] = v
		}
	}
	if len(out) > 0 {
		return out
	}
	model, value := "", ""
	for k, v := range nodeLabels {
		if m, ok := strings.CutPrefix(k, virtv1.HostModelCPULabel); ok {
			model, value = m, v
		}
		if feature, ok := strings.CutPrefix(k, virtv1.HostModelRequiredFeaturesLabel); ok {
			out[virtv1.CPUFeatureLabel+feature] = v
		}
	}
	if model == "" {
		return nil
	}
	out[virtv1.SupportedHostModelMigrationCPU+model] = value
	return out
}

// vendorLabel is the first CPU vendor label among labels, "" if none.
func vendorLabel(labels map[string]string) string {
	for k := range labels {
		if strings.HasPrefix(k, virtv1.CPUModelVendorLabel) {
			return k
		}
	}
	return ""
}

// matchSELinuxLevel gives the target pod the SELinux level (MCS
// categories) of the VMI's source, which the node agent reported in
// status.selinuxContext: the two pods may share files (a read-write-many
// disk). "none" says the node has no SELinux.
func matchSELinuxLevel(pod *corev1.Pod, context string) error {
	switch context {
	case "none":
		return nil
	case "":
		return errNoSELinuxContext
	}
	// user:role:type[:level], the level itself may hold colons
	// (s0:c1,c2).
	parts := strings.SplitN(context, ":", 4)
	if len(parts) < 3 {
		return fmt.Errorf("SELinux context %q: want user:role:type[:level]", context)
	}
	if len(parts) < 4 || parts[3] == "" {
		return nil
	}
	if pod.Spec.SecurityContext == nil {
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	pod.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Level: parts[3]}
	return nil
}

// warnNoHostModelNode tells, on a host-model VMI whose target pod cannot
// be scheduled, that no node but the source supports its CPU model and
// required features, as KubeVirt's alertIfHostModelIsUnschedulable does
// on every sync of such a migration.
func (c *Controller) warnNoHostModelNode(vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod) {
	if cpu := vmi.Spec.Domain.CPU; cpu == nil || cpu.Model != virtv1.CPUModeHostModel {
		return
	}
	required := map[string]string{}
	for k, v := range pod.Spec.NodeSelector {
		if strings.HasPrefix(k, virtv1.SupportedHostModelMigrationCPU) || strings.HasPrefix(k, virtv1.CPUFeatureLabel) {
			required[k] = v
		}
	}
	for _, node := range kinds.Nodes.All(c.env.Caches).List() {
		if node.Name != vmi.Status.NodeName && hasLabels(node.Labels, required) {
			return
		}
	}
	c.env.Recorder.Eventf(vmi, corev1.EventTypeWarning, "NoSuitableNodesForHostModelMigration",
		"Migration cannot proceed since no node is suitable to run the required CPU model / required features: %v", required)
}

func hasLabels(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
