package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A cluster is recreated unless kwokctl saved kwokConfig into its kwok.yaml.
func TestKwokConfiguredReadsTheSavedConfiguration(t *testing.T) {
	o := Options{Root: t.TempDir(), Name: "test"}
	if o.kwokConfigured() {
		t.Error("a cluster without kwok.yaml counts as configured")
	}
	dir := filepath.Join(o.Workdir(), "clusters", o.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		saved string
		want  bool
	}{
		{"kwok's defaults", "kind: KwokctlConfiguration\n", false},
		{"another parallelism", "kind: KwokConfiguration\noptions:\n  podPlayStageParallelism: 4\n", false},
		{"ours", "kind: KwokctlConfiguration\n---\n" + kwokConfig, true},
	} {
		if err := os.WriteFile(filepath.Join(dir, "kwok.yaml"), []byte(tc.saved), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := o.kwokConfigured(); got != tc.want {
			t.Errorf("%s: configured %v, want %v", tc.name, got, tc.want)
		}
	}
	if !strings.Contains(kwokConfig, "nodeLeaseParallelism: 4") {
		t.Error("kwokConfig leaves out kwok's default node lease parallelism, which kwok then takes as 0 and fails")
	}
}
