package topology

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
)

// UpdatePeriod is how often the labels are looked at regardless of events:
// KubeVirt's node topology updater runs every 30 s (node-topology-update-period).
const UpdatePeriod = 30 * time.Second

// itemKey is the one item the replica's updater reconciles: the TSC
// nodes of the ranges it holds, all at once, as KubeVirt's runs over all.
const itemKey = "tsc-frequencies"

// Declare declares the node topology updater: the frequencies in use are
// the cluster's, so each replica publishes those of its ranges' VMIs, per
// range, in a ConfigMap of the replicas' namespace (<name>-tsc-frequencies,
// conditional writes), and labels the nodes whose names hash to its
// ranges with the union of all and the cluster's lowest.
func Declare() sharded.Declaration {
	return sharded.Declaration{Name: "topology", Workers: 1, New: func(env *sharded.Env, rt *sharded.Runtime) (*sharded.Controller, error) {
		if env.ClusterConfig == nil {
			return nil, errors.New("no cluster configuration")
		}
		c := &Controller{env: env, rt: rt, configMap: env.Name + "-tsc-frequencies"}
		return c.declare(), nil
	}}
}

// Controller is the node topology updater of one replica.
type Controller struct {
	env       *sharded.Env
	rt        *sharded.Runtime
	configMap string
}

func (c *Controller) declare() *sharded.Controller {
	item := []sharded.Item{{Range: sharded.Cluster, Key: itemKey}}
	return &sharded.Controller{
		Watches: []sharded.Watch{
			// Only a change of what the labels are computed from: every
			// heartbeat updates every node.
			sharded.Across(kinds.Nodes, sharded.Events[*corev1.Node]{Route: func(n *corev1.Node) []sharded.Item {
				if _, ok := n.Labels[FrequencyLabel]; ok {
					return item
				}
				return nil
			}, Changed: func(old, cur *corev1.Node) bool { return !maps.Equal(tscLabels(old), tscLabels(cur)) }}, nil),
			// The frequencies in use are looked at every period, as
			// KubeVirt's updater looks: a VMI handler in every range would
			// cost more than it saves.
			sharded.Reading(kinds.VMIs.Watch(nil)),
			sharded.OnConfig(func(*clusterconfig.Config) []sharded.Item { return item }),
		},
		Sync: c.sync,
	}
}

// tscLabels are the labels of node the scheduling labels follow from.
func tscLabels(node *corev1.Node) map[string]string {
	out := map[string]string{}
	for key, value := range node.Labels {
		if key == FrequencyLabel || key == ScalableLabel || key == virtv1.NodeSchedulable || strings.HasPrefix(key, SchedulingLabel) {
			out[key] = value
		}
	}
	return out
}

func (c *Controller) sync(ctx context.Context, _ sharded.Item) (time.Duration, error) {
	inUse, err := c.publish(ctx)
	if err != nil {
		return 0, err
	}
	nodes := kinds.Nodes.All(c.env.Caches).List()
	lowest, err := Lowest(nodes, c.env.ClusterConfig.Current().MinimumClusterTSCFrequency(), c.hosting)
	if err != nil {
		// As KubeVirt: no node is labelled until the configuration is mended.
		klog.FromContext(ctx).Error(err, "Skipping TSC frequency updates on all nodes")
		return UpdatePeriod, nil
	}
	required := append(inUse, lowest)
	var errs []error
	for _, node := range nodes {
		if err := c.label(ctx, node, required); err != nil {
			errs = append(errs, err)
		}
	}
	return UpdatePeriod, errors.Join(errs...)
}

// hosting reports whether a VMI of the held ranges runs on the node: a
// node whose virt-handler is gone (not schedulable) still counts for the
// lowest frequency while VMIs run there. The VMIs of other replicas' ranges
// are not looked at (docs/sharding.md).
func (c *Controller) hosting(node string) bool { return HostsHeldVMIs(c.env, node) }

// HostsHeldVMIs reports whether a VMI of env's held ranges runs on node.
func HostsHeldVMIs(env *sharded.Env, node string) bool {
	return slices.ContainsFunc(kinds.VMIs.Held(env.Caches), func(vmi *virtv1.VirtualMachineInstance) bool {
		return vmi.Status.NodeName == node
	})
}

// label sets node's scheduling labels to required, if the node's name
// hashes to a held range.
func (c *Controller) label(ctx context.Context, node *corev1.Node, required []int64) error {
	rng := c.env.Ranges.OfValue(node.Name)
	if c.env.Caches.Get(rng) == nil {
		return nil
	}
	add, remove, err := SchedulingLabels(node, required)
	if errors.Is(err, ErrNoFrequency) {
		return nil
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Could not calculate TSC frequencies for node", "node", node.Name)
		return nil // virt-handler's label to mend; its change brings the node back
	}
	labels := map[string]any{}
	for _, key := range add {
		if node.Labels[key] != "true" {
			labels[key] = "true"
		}
	}
	for _, key := range remove {
		labels[key] = nil
	}
	if len(labels) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	err = c.rt.Write(ctx, rng, func(ctx context.Context) error {
		_, err := c.env.Kube.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil && !errors.Is(err, sharded.ErrNotHeld) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patch the TSC frequencies of node %s: %w", node.Name, err)
	}
	return nil
}

// publish writes the frequencies in use by the held ranges' VMIs, one
// entry per range, and returns those of every range: the union is the
// cluster's, as KubeVirt's TSCFrequenciesInUse sees all VMIs.
func (c *Controller) publish(ctx context.Context) ([]int64, error) {
	mine := map[string]string{}
	for i := range c.env.Ranges.Count() {
		r := c.env.Caches.Get(i)
		if r == nil {
			continue
		}
		set := map[int64]bool{}
		for _, vmi := range kinds.VMIs.In(r).List() {
			if f := HintedFrequency(vmi); f > 0 {
				set[f] = true
			}
		}
		mine[rangeKey(i)] = joinFrequencies(set)
	}
	cms := c.env.Kube.CoreV1().ConfigMaps(c.env.ReplicaNamespace)
	for range 10 {
		cm, err := cms.Get(ctx, c.configMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: c.configMap, Namespace: c.env.ReplicaNamespace}}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("read the TSC frequencies in use: %w", err)
		}
		next := cm.DeepCopy()
		if next.Data == nil {
			next.Data = map[string]string{}
		}
		for key, value := range mine {
			if value == "" {
				delete(next.Data, key)
			} else {
				next.Data[key] = value
			}
		}
		if !maps.Equal(next.Data, cm.Data) {
			// Unfenced, as a range's entry may be written by its last
			// holder a moment after a handoff: the new holder writes it
			// again within a period.
			_, err = cms.Update(ctx, next, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				continue // another replica wrote: merge into what is there now
			}
			if err != nil {
				return nil, fmt.Errorf("write the TSC frequencies in use: %w", err)
			}
		}
		return unionOf(next.Data), nil
	}
	return nil, errors.New("write the TSC frequencies in use: too many conflicts")
}

func rangeKey(i int) string { return "range-" + strconv.Itoa(i) }

func joinFrequencies(set map[int64]bool) string {
	fs := make([]int64, 0, len(set))
	for f := range set {
		fs = append(fs, f)
	}
	slices.Sort(fs)
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = strconv.FormatInt(f, 10)
	}
	return strings.Join(parts, ",")
}

// unionOf is every frequency the entries name; one that does not parse
// is left out (the range's holder writes it again).
func unionOf(data map[string]string) []int64 {
	set := map[int64]bool{}
	for _, value := range data {
		for _, part := range strings.Split(value, ",") {
			if f, err := strconv.ParseInt(part, 10, 64); err == nil && f > 0 {
				set[f] = true
			}
		}
	}
	out := make([]int64, 0, len(set))
	for f := range set {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}
