package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

// A cluster is recreated unless kwokctl saved both the audit policy and
// kwokConfig into its kwok.yaml.
func TestOutdatedReadsTheSavedConfiguration(t *testing.T) {
	o := Options{Root: t.TempDir(), Name: "test"}
	if o.outdated() == "" {
		t.Error("a cluster without kwok.yaml counts as current")
	}
	if err := os.MkdirAll(filepath.Dir(o.savedConfigPath()), 0o755); err != nil {
		t.Fatal(err)
	}
	const (
		unaudited = "kind: KwokctlConfiguration\ncomponents:\n- name: kube-apiserver\n  args: [--etcd-prefix=/registry]\n"
		audited   = "kind: KwokctlConfiguration\ncomponents:\n- name: kube-apiserver\n  args: [--audit-policy-file=/p.yaml]\n"
	)
	for _, tc := range []struct {
		name    string
		saved   string
		current bool
	}{
		{"no API server", "kind: KwokctlConfiguration\n", false},
		{"no audit policy", unaudited + "---\n" + kwokConfig, false},
		{"kwok's defaults", audited, false},
		{"another parallelism", audited + "---\nkind: KwokConfiguration\noptions:\n  podPlayStageParallelism: 4\n", false},
		{"ours", audited + "---\n" + kwokConfig, true},
	} {
		if err := os.WriteFile(o.savedConfigPath(), []byte(tc.saved), 0o644); err != nil {
			t.Fatal(err)
		}
		if why := o.outdated(); (why == "") != tc.current {
			t.Errorf("%s: outdated %q, want current %v", tc.name, why, tc.current)
		}
	}
}
