package differential

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The corpus is data: every scenario in it must load, so that a broken
// file fails here rather than halfway through a run on the cluster.
func TestTheCorpusLoads(t *testing.T) {
	scenarios, err := LoadDir("scenarios")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scenarios {
		if s.Description == "" {
			t.Errorf("scenario %s has no description", s.Name)
		}
	}
	i := slices.IndexFunc(scenarios, func(s *Scenario) bool { return s.Name == "vm-halted" })
	if i < 0 {
		t.Fatal("no vm-halted scenario")
	}
	halted := scenarios[i]
	if got := halted.Steps[2].Wait.Quiet.Duration; got != 3*time.Second {
		t.Errorf("quiet %s, want 3s", got)
	}
	if halted.Steps[0].Create.GetKind() != "VirtualMachine" || halted.Steps[4].Patch.Name != "halted" {
		t.Errorf("steps read as %+v", halted.Steps)
	}
}

func TestABadScenarioIsRefusedWithItsReason(t *testing.T) {
	for file, want := range map[string]string{
		"two-actions.yaml":          "2 actions",
		"no-checkpoint.yaml":        "no checkpoint",
		"unknown-field.yaml":        "unknown field",
		"generate-name.yaml":        "metadata.name",
		"stop-without-node.yaml":    "names a node",
		"bad-duration.yaml":         "duration",
		"two-waits.yaml":            "exactly one of quiet",
		"bad-name.yaml":             "namespace",
		"shared-configuration.yaml": "must be exclusive",
	} {
		t.Run(file, func(t *testing.T) {
			_, err := Load(filepath.Join("testdata", "bad", file))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want one saying %q", err, want)
			}
		})
	}
}
