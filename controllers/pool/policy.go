package pool

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/intstr"
	virtv1 "kubevirt.io/api/core/v1"
	poolv1 "kubevirt.io/api/pool/v1beta1"
)

// Autohealing's defaults, KubeVirt's (defaultStartUpFailureThreshold and
// minFailingToStartDuration in watch/pool).
const (
	DefaultStartUpFailureThreshold   = 3
	DefaultMinFailingToStartDuration = 5 * time.Minute
)

// sortBy orders vms by a pool's sort policy. KubeVirt's default policy,
// Random, shuffles them; virtshard reads any order as one KubeVirt could
// have drawn and takes the ordinals ascending for updates and descending
// for scale-in, so that a pool keeps its lowest names.
func sortBy(vms []*vm, policy *poolv1.VirtualMachinePoolSortPolicy, scaleIn bool) {
	p := poolv1.VirtualMachinePoolSortPolicyRandom
	if policy != nil {
		p = *policy
	}
	byOrdinal := func(a, b *vm) int { return ordinal(a) - ordinal(b) }
	switch p {
	case poolv1.VirtualMachinePoolSortPolicyAscendingOrder:
		slices.SortStableFunc(vms, byOrdinal)
	case poolv1.VirtualMachinePoolSortPolicyDescendingOrder:
		slices.SortStableFunc(vms, func(a, b *vm) int { return byOrdinal(b, a) })
	case poolv1.VirtualMachinePoolSortPolicyNewest:
		slices.SortStableFunc(vms, func(a, b *vm) int { return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) })
	case poolv1.VirtualMachinePoolSortPolicyOldest:
		slices.SortStableFunc(vms, func(a, b *vm) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	default:
		if scaleIn {
			slices.SortStableFunc(vms, func(a, b *vm) int { return byOrdinal(b, a) })
		} else {
			slices.SortStableFunc(vms, byOrdinal)
		}
	}
}

// ordinal is the index in a VM's name, 0 when it has none (as KubeVirt
// sorts such a name).
func ordinal(v *vm) int { return max(indexOf(v.Name), 0) }

// selected keeps the VMs a selection policy's selectors match: the label
// selector against the VMI template's labels, the node selector
// requirements against its node selector.
func selected(vms []*vm, s *poolv1.VirtualMachinePoolSelectors) ([]*vm, error) {
	if s == nil {
		return vms, nil
	}
	var byLabels, byNode labels.Selector
	var err error
	if s.LabelSelector != nil {
		if byLabels, err = metav1.LabelSelectorAsSelector(s.LabelSelector); err != nil {
			return nil, fmt.Errorf("failed to parse label selector from pool: %w", err)
		}
	}
	if s.NodeSelectorRequirementMatcher != nil {
		if byNode, err = nodeRequirements(*s.NodeSelectorRequirementMatcher); err != nil {
			return nil, fmt.Errorf("failed to parse node selector from pool: %w", err)
		}
	}
	if byLabels == nil && byNode == nil {
		return vms, nil
	}
	var out []*vm
	for _, v := range vms {
		var tmplLabels, nodeSelector labels.Set
		if v.Spec.Template != nil {
			tmplLabels, nodeSelector = v.Spec.Template.ObjectMeta.Labels, v.Spec.Template.Spec.NodeSelector
		}
		if (byLabels == nil || byLabels.Matches(tmplLabels)) && (byNode == nil || byNode.Matches(nodeSelector)) {
			out = append(out, v)
		}
	}
	return out, nil
}

// nodeRequirements is a node selector's requirements as a label selector.
func nodeRequirements(reqs []corev1.NodeSelectorRequirement) (labels.Selector, error) {
	ops := map[corev1.NodeSelectorOperator]selection.Operator{
		corev1.NodeSelectorOpIn: selection.In, corev1.NodeSelectorOpNotIn: selection.NotIn,
		corev1.NodeSelectorOpExists: selection.Exists, corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
		corev1.NodeSelectorOpGt: selection.GreaterThan, corev1.NodeSelectorOpLt: selection.LessThan,
	}
	out := labels.NewSelector()
	for _, req := range reqs {
		op, ok := ops[req.Operator]
		if !ok {
			return nil, fmt.Errorf("%q is not a valid label selector operator", req.Operator)
		}
		r, err := labels.NewRequirement(req.Key, op, req.Values)
		if err != nil {
			return nil, err
		}
		out = out.Add(*r)
	}
	return out, nil
}

// maxUnavailable is how many of the pool's VMs a proactive update may
// have down at once: spec.maxUnavailable (a count, or a percentage of
// spec.replicas rounded down; 100 % by default), at least 1.
func maxUnavailable(pool *poolv1.VirtualMachinePool) (int, error) {
	limit := intstr.FromString("100%")
	if pool.Spec.MaxUnavailable != nil {
		limit = *pool.Spec.MaxUnavailable
	}
	n := int(limit.IntVal)
	if limit.Type == intstr.String {
		percent, err := strconv.ParseInt(strings.TrimSuffix(limit.StrVal, "%"), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("invalid maxUnavailable percentage: %w", err)
		}
		n = int(replicas(pool)) * int(percent) / 100
	}
	return max(n, 1), nil
}

// replicas is spec.replicas, 1 when unset.
func replicas(pool *poolv1.VirtualMachinePool) int32 {
	if pool.Spec.Replicas == nil {
		return 1
	}
	return *pool.Spec.Replicas
}

// failing are the VMs autohealing replaces: those that failed to start
// the threshold's count of times in a row, and those whose printable
// status is a failure to start and whose Ready condition has been False
// (since its last probe) for the minimum duration.
func failing(vms []*vm, heal *poolv1.VirtualMachinePoolAutohealingStrategy, now time.Time) []*vm {
	threshold, minFailing := DefaultStartUpFailureThreshold, DefaultMinFailingToStartDuration
	if heal.StartUpFailureThreshold != nil {
		threshold = int(*heal.StartUpFailureThreshold)
	}
	if heal.MinFailingToStartDuration != nil {
		minFailing = heal.MinFailingToStartDuration.Duration
	}
	var out []*vm
	for _, v := range vms {
		if f := v.Status.StartFailure; f != nil && f.ConsecutiveFailCount >= threshold {
			out = append(out, v)
			continue
		}
		switch v.Status.PrintableStatus {
		case virtv1.VirtualMachineStatusCrashLoopBackOff, virtv1.VirtualMachineStatusUnschedulable,
			virtv1.VirtualMachineStatusDataVolumeError, virtv1.VirtualMachineStatusPvcNotFound,
			virtv1.VirtualMachineStatusErrImagePull, virtv1.VirtualMachineStatusImagePullBackOff:
			i := slices.IndexFunc(v.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool { return c.Type == virtv1.VirtualMachineReady })
			if i >= 0 && v.Status.Conditions[i].Status == corev1.ConditionFalse && now.Sub(v.Status.Conditions[i].LastProbeTime.Time) >= minFailing {
				out = append(out, v)
			}
		}
	}
	return out
}

// isReady: the VM's Ready condition is True.
func isReady(v *vm) bool {
	return slices.ContainsFunc(v.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
		return c.Type == virtv1.VirtualMachineReady && c.Status == corev1.ConditionTrue
	})
}

// vmiReady: the VMI runs, is not being deleted, and is Ready.
func vmiReady(vmi *virtv1.VirtualMachineInstance) bool {
	return vmi.DeletionTimestamp == nil && vmi.Status.Phase == virtv1.Running &&
		slices.ContainsFunc(vmi.Status.Conditions, func(c virtv1.VirtualMachineInstanceCondition) bool {
			return c.Type == virtv1.VirtualMachineInstanceReady && c.Status == corev1.ConditionTrue
		})
}
