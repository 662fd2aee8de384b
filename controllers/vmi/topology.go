package vmi

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/topology"
)

// ReasonTopologyHints is KubeVirt's reason (its spelling) when the
// cluster's TSC frequency cannot be had for a VMI that needs it to boot.
const ReasonTopologyHints = "FailedGatherhingClusterTopologyHints"

// hint gives a VMI that needs a TSC frequency (the invtsc CPU feature,
// Hyper-V reenlightenment) the cluster's lowest as its topology hint, in
// its Pending status, before its pod is rendered: the pod then asks for a
// node that can run that frequency. KubeVirt's VMI controller does the
// same (addTopologyHints; no pod until the hint is there). Where the
// frequency cannot be had, a VMI that needs it to boot says so and is
// tried again; one that needs it only to migrate waits, as KubeVirt's.
func (c *Controller) hint(it item, vmi *virtv1.VirtualMachineInstance, need topology.Need) error {
	nodes := kinds.Nodes.All(c.env.Caches).List()
	hosting := func(node string) bool { return topology.HostsHeldVMIs(c.env, node) }
	lowest, err := topology.Lowest(nodes, c.env.ClusterConfig.Current().MinimumClusterTSCFrequency(), hosting)
	if err != nil {
		if need != topology.ForBoot {
			return nil
		}
		message := "failed to determine the lowest tsc frequency on the cluster: " + err.Error()
		c.blocked(it, vmi, corev1.EventTypeWarning, ReasonTopologyHints, message)
		return errors.New(message)
	}
	c.batcher.Enqueue(it.Range, it.Key, vmi.UID, c.opts.UrgentStatusWait, hinted(lowest, metav1.Now()))
	return nil
}

// hinted: the Pending VMI gets its TSC frequency hint.
func hinted(hz int64, at metav1.Time) mutation {
	return func(v *virtv1.VirtualMachineInstance) bool {
		if v.Status.TopologyHints != nil {
			return false
		}
		if _, ok := pendingWithoutPod(v, at); !ok {
			return false
		}
		v.Status.TopologyHints = &virtv1.TopologyHints{TSCFrequency: ptr.To(hz)}
		return true
	}
}
