package migration

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	migrationsv1 "kubevirt.io/api/migrations/v1alpha1"
)

func policyOf(name string, sel *migrationsv1.Selectors) *migrationsv1.MigrationPolicy {
	return &migrationsv1.MigrationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: migrationsv1.MigrationPolicySpec{Selectors: sel}}
}

// The policy that applies is KubeVirt's choice (matchPolicy): the one
// whose selectors match the most labels of the VMI and its namespace, then
// the most of the VMI's own, then the first by name.
func TestMatchPolicyAsKubeVirt(t *testing.T) {
	vmiLabels := map[string]string{"app": "db", "size": "big"}
	nsLabels := map[string]string{"tier": "gold", "team": "a"}
	vmiSel := func(kv ...string) map[string]string { return pairs(kv) }
	for _, tt := range []struct {
		name      string
		policies  []*migrationsv1.MigrationPolicy
		vmiLabels map[string]string
		want      string
	}{
		{"no selectors match nothing", []*migrationsv1.MigrationPolicy{policyOf("p", nil)}, vmiLabels, ""},
		{"empty selectors match every VMI", []*migrationsv1.MigrationPolicy{policyOf("p", &migrationsv1.Selectors{})}, vmiLabels, "p"},
		{"a label of another value does not match", []*migrationsv1.MigrationPolicy{
			policyOf("p", &migrationsv1.Selectors{VirtualMachineInstanceSelector: vmiSel("app", "web")})}, vmiLabels, ""},
		{"a namespace label missing does not match", []*migrationsv1.MigrationPolicy{
			policyOf("p", &migrationsv1.Selectors{NamespaceSelector: vmiSel("tier", "silver")})}, vmiLabels, ""},
		{"more labels in all win", []*migrationsv1.MigrationPolicy{
			policyOf("vmi-1", &migrationsv1.Selectors{VirtualMachineInstanceSelector: vmiSel("app", "db")}),
			policyOf("vmi-1-ns-1", &migrationsv1.Selectors{VirtualMachineInstanceSelector: vmiSel("app", "db"), NamespaceSelector: vmiSel("tier", "gold")}),
			policyOf("ns-1", &migrationsv1.Selectors{NamespaceSelector: vmiSel("tier", "gold")}),
		}, vmiLabels, "vmi-1-ns-1"},
		{"at a tie, more of the VMI's own labels", []*migrationsv1.MigrationPolicy{
			policyOf("ns-2", &migrationsv1.Selectors{NamespaceSelector: vmiSel("tier", "gold", "team", "a")}),
			policyOf("vmi-2", &migrationsv1.Selectors{VirtualMachineInstanceSelector: vmiSel("app", "db", "size", "big")}),
			policyOf("vmi-1-ns-1", &migrationsv1.Selectors{VirtualMachineInstanceSelector: vmiSel("app", "db"), NamespaceSelector: vmiSel("tier", "gold")}),
		}, vmiLabels, "vmi-2"},
		{"at an equal match, the first name", []*migrationsv1.MigrationPolicy{
			policyOf("b", &migrationsv1.Selectors{VirtualMachineInstanceSelector: vmiSel("app", "db")}),
			policyOf("c", &migrationsv1.Selectors{VirtualMachineInstanceSelector: vmiSel("size", "big")}),
			policyOf("a", &migrationsv1.Selectors{VirtualMachineInstanceSelector: vmiSel("app", "db")}),
		}, vmiLabels, "a"},
		// KubeVirt's countMatchingLabels looks at neither selector of a
		// VMI without labels: every policy with selectors matches it.
		{"a VMI without labels", []*migrationsv1.MigrationPolicy{
			policyOf("z", &migrationsv1.Selectors{VirtualMachineInstanceSelector: vmiSel("app", "web"), NamespaceSelector: vmiSel("tier", "silver")}),
		}, nil, "z"},
	} {
		got := ""
		if p := matchPolicy(tt.policies, tt.vmiLabels, nsLabels); p != nil {
			got = p.Name
		}
		if got != tt.want {
			t.Errorf("%s: matched %q, want %q", tt.name, got, tt.want)
		}
	}
}

func pairs(kv []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}
