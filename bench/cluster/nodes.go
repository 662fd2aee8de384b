package cluster

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/handler"
)

// DefaultNodes is the default number of kwok nodes.
const DefaultNodes = 20

// Labels, annotation and taint of the kwok nodes. kwokctl's kwok controller
// manages the nodes carrying KwokNodeAnnotation; the taint keeps real
// workloads off them, so test pods must tolerate it.
const (
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	KwokNodeTaintKey   = "kwok.x-k8s.io/node"
	KwokNodeTypeLabel  = "type"
	KwokNodeType       = "kwok"
	SchedulableLabel   = "kubevirt.io/schedulable"
	// MachineTypeLabel is what virt-handler's node labeller sets on a node
	// that runs amd64's default machine type: launcher pods select it.
	MachineTypeLabel = "machine-type.node.kubevirt.io/q35"
)

// NodeOptions say how many kwok nodes to have and what each offers.
type NodeOptions struct {
	Count int
	// PodsPerNode is each node's pod capacity. kwok's default is 110, which
	// would cap the bench long before tens of thousands of VMIs.
	PodsPerNode int64
}

// Defaults for NodeOptions' zero values and for each node's resources: room
// for 5000 launcher pods of a few hundred MiB each.
const (
	DefaultPodsPerNode = 5000
	nodeCPU            = "2000"
	nodeMemory         = "4Ti"
	// Launcher pods request 50M of ephemeral storage each (KubeVirt's
	// WithEphemeralStorageRequest), plus their container disks' share.
	nodeEphemeralStorage = "1Pi"
)

// KubeVirt's device-plugin resources, which virt-handler advertises on every
// schedulable node and every launcher pod requests.
var kubevirtDevices = []corev1.ResourceName{
	"devices.kubevirt.io/kvm",
	"devices.kubevirt.io/tun",
	"devices.kubevirt.io/vhost-net",
	"devices.kubevirt.io/vhost-vsock",
}

// NodeName is the name of the i-th kwok node.
func NodeName(i int) string { return fmt.Sprintf("kwok-node-%d", i) }

// MaxNodes is how many nodes get a pod CIDR of their own.
const MaxNodes = 254

// PodCIDR is the i-th kwok node's pod CIDR, from which kwok gives its pods
// their IPs: a /16 each (65,534 addresses, far more than a node's pods), so
// that no node shares, or runs out of, pod IPs; without one kwok gives
// every node's pods addresses from one default range.
func PodCIDR(i int) string { return fmt.Sprintf("10.%d.0.0/16", i+1) }

// EnsureNodes creates the kwok nodes that are missing, leaving existing
// ones alone.
func EnsureNodes(ctx context.Context, client kubernetes.Interface, opts NodeOptions) error {
	if opts.PodsPerNode == 0 {
		opts.PodsPerNode = DefaultPodsPerNode
	}
	if opts.Count > MaxNodes {
		return fmt.Errorf("%d nodes asked for, at most %d get a pod CIDR of their own", opts.Count, MaxNodes)
	}
	for i := range opts.Count {
		node := NewNode(NodeName(i), opts.PodsPerNode)
		node.Spec.PodCIDR, node.Spec.PodCIDRs = PodCIDR(i), []string{PodCIDR(i)}
		_, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = ensureLabels(ctx, client, node)
		}
		if err != nil {
			return fmt.Errorf("create node %s: %w", node.Name, err)
		}
	}
	return nil
}

// ensureLabels adds node's labels, and its pod CIDR if it has none, to the
// existing node of its name: a cluster started by an older version keeps
// its nodes.
func ensureLabels(ctx context.Context, client kubernetes.Interface, node *corev1.Node) error {
	existing, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	missing := map[string]string{}
	for k, v := range node.Labels {
		if existing.Labels[k] != v {
			missing[k] = v
		}
	}
	change := map[string]any{}
	if len(missing) > 0 {
		change["metadata"] = map[string]any{"labels": missing}
	}
	if existing.Spec.PodCIDR == "" && node.Spec.PodCIDR != "" {
		change["spec"] = map[string]any{"podCIDR": node.Spec.PodCIDR, "podCIDRs": node.Spec.PodCIDRs}
	}
	if len(change) == 0 {
		return nil
	}
	patch, err := json.Marshal(change)
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// NewNode is a kwok node named name with room for pods pods, labelled and
// tainted as the bench's nodes are.
func NewNode(name string, pods int64) *corev1.Node {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse(nodeCPU),
		corev1.ResourceMemory:           resource.MustParse(nodeMemory),
		corev1.ResourceEphemeralStorage: resource.MustParse(nodeEphemeralStorage),
		corev1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
	}
	for _, device := range kubevirtDevices {
		resources[device] = *resource.NewQuantity(pods, resource.DecimalSI)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{KwokNodeAnnotation: "fake"},
			Labels: map[string]string{
				KwokNodeTypeLabel: KwokNodeType,
				SchedulableLabel:  "true",
				MachineTypeLabel:  "true",
				// What the simulated virt-handler reports as the VMIs'
				// status.machine.type, by which a migration's target
				// pod selects its node.
				virtv1.SupportedMachineTypeLabel + handler.MachineType: "true",
				corev1.LabelHostname:            name,
				corev1.LabelOSStable:            "linux",
				corev1.LabelArchStable:          "amd64",
				"kubernetes.io/role":            "agent",
				"node-role.kubernetes.io/agent": "",
			},
		},
		Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: KwokNodeTaintKey, Value: "fake", Effect: corev1.TaintEffectNoSchedule}},
		},
		// Nodes take their status on create; kwok's node stage keeps it.
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources.DeepCopy(),
		},
	}
}
