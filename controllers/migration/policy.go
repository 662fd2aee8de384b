package migration

import (
	"cmp"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	migrationsv1 "kubevirt.io/api/migrations/v1alpha1"

	"github.com/virtshard/virtshard/controllers/kinds"
)

// policyScore is how closely a MigrationPolicy matches a VMI: the labels
// of its selectors the VMI and its namespace carry.
type policyScore struct{ vmi, namespace int }

// closer orders scores as KubeVirt's matchPolicy does: more labels matched
// in all, then more of them the VMI's own.
func (s policyScore) closer(o policyScore) bool {
	if s.vmi+s.namespace != o.vmi+o.namespace {
		return s.vmi+s.namespace > o.vmi+o.namespace
	}
	return s.vmi > o.vmi
}

// score reports whether policy p matches a VMI with vmiLabels in a
// namespace with nsLabels, and how closely: every label of its VMI
// selector on the VMI and every label of its namespace selector on the
// namespace. A policy without selectors matches nothing; an empty selector
// asks nothing. As KubeVirt's countMatchingLabels, the namespace selector
// is not looked at for a VMI without labels.
func score(p *migrationsv1.MigrationPolicy, vmiLabels, nsLabels map[string]string) (policyScore, bool) {
	sel := p.Spec.Selectors
	if sel == nil {
		return policyScore{}, false
	}
	var s policyScore
	if sel.VirtualMachineInstanceSelector != nil && vmiLabels != nil {
		if !hasLabels(vmiLabels, sel.VirtualMachineInstanceSelector) {
			return s, false
		}
		s.vmi = len(sel.VirtualMachineInstanceSelector)
	}
	if sel.NamespaceSelector != nil && vmiLabels != nil {
		if !hasLabels(nsLabels, sel.NamespaceSelector) {
			return s, false
		}
		s.namespace = len(sel.NamespaceSelector)
	}
	return s, true
}

// matchPolicy is the MigrationPolicy that applies to a VMI with vmiLabels
// in a namespace with nsLabels: the closest match, and of equally close
// ones the first by name; nil when none matches.
func matchPolicy(policies []*migrationsv1.MigrationPolicy, vmiLabels, nsLabels map[string]string) *migrationsv1.MigrationPolicy {
	var best *migrationsv1.MigrationPolicy
	var bestScore policyScore
	for _, p := range policies {
		s, ok := score(p, vmiLabels, nsLabels)
		switch {
		case !ok:
		case best == nil, s.closer(bestScore):
			best, bestScore = p, s
		case !bestScore.closer(s) && cmp.Less(p.Name, best.Name):
			best = p
		}
	}
	return best
}

// migrationConfiguration is what a migration of vmi hands to the node
// agents: the KubeVirt CR's migration configuration, with the fields the
// matching MigrationPolicy sets in their place, and that policy's name
// when it set any (KubeVirt's matchMigrationPolicy). The VMI's namespace
// must be cached: its labels may select the policy.
func (c *Controller) migrationConfiguration(vmi *virtv1.VirtualMachineInstance) (*virtv1.MigrationConfiguration, *string, error) {
	cfg := c.env.ClusterConfig.Current().Migrations()
	ns, ok := c.env.Objects.Namespace(vmi.Namespace)
	if !ok {
		return nil, nil, fmt.Errorf("namespace %s of VMI %s is not cached yet", vmi.Namespace, vmi.Name)
	}
	policy := matchPolicy(kinds.MigrationPolicies.All(c.env.Caches).List(), vmi.Labels, ns.Labels)
	if policy == nil {
		return cfg, nil, nil
	}
	// The policy's fields are written through the configuration's
	// pointers, which the CR's defaults fill; make sure of them.
	cfg.AllowAutoConverge = ptr.To(ptr.Deref(cfg.AllowAutoConverge, false))
	cfg.BandwidthPerMigration = ptr.To(ptr.Deref(cfg.BandwidthPerMigration, resource.Quantity{}))
	cfg.CompletionTimeoutPerGiB = ptr.To(ptr.Deref(cfg.CompletionTimeoutPerGiB, 0))
	cfg.AllowPostCopy = ptr.To(ptr.Deref(cfg.AllowPostCopy, false))
	cfg.AllowWorkloadDisruption = ptr.To(ptr.Deref(cfg.AllowWorkloadDisruption, false))
	changed, err := policy.GetMigrationConfByPolicy(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("apply MigrationPolicy %s: %w", policy.Name, err)
	}
	if !changed {
		return cfg, nil, nil
	}
	return cfg, &policy.Name, nil
}
