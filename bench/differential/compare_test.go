package differential

import (
	"testing"
)

func obj(kind, name string, content map[string]any) Object {
	return Object{Kind: kind, Name: name, Content: content}
}

func TestFlattenKeysNamedItemsByName(t *testing.T) {
	got := Flatten(map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"kubevirt.io/created-by": "x"}},
		"status": map[string]any{
			"conditions": []any{map[string]any{"type": "Ready", "status": "True"}},
			"list":       []any{"a", "b"},
			"empty":      []any{},
		},
	})
	for path, want := range map[string]any{
		"metadata.labels[kubevirt.io/created-by]": "x",
		"status.conditions[Ready].status":         "True",
		"status.list[1]":                          "b",
	} {
		if got[path] != want {
			t.Errorf("%s = %v, want %v (all: %v)", path, got[path], want, got)
		}
	}
	if _, ok := got["status.empty"]; !ok {
		t.Errorf("an empty list is no field: %v", got)
	}
}

// Conditions in another order are the same conditions.
func TestCompareIgnoresTheOrderOfNamedItems(t *testing.T) {
	a := obj("VirtualMachineInstance", "a", map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "Ready", "status": "True"}, map[string]any{"type": "Paused", "status": "False"}}}})
	b := obj("VirtualMachineInstance", "a", map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "Paused", "status": "False"}, map[string]any{"type": "Ready", "status": "True"}}}})
	c := Compare([]Object{a}, []Object{b}, nil)
	if len(c.Diffs) != 0 || c.Counts["VirtualMachineInstance"][Equal] != 4 {
		t.Errorf("diffs %+v counts %v, want 4 equal fields", c.Diffs, c.Counts)
	}
}

func TestCompareSaysHowEachFieldDiffersAndWhichAreKnown(t *testing.T) {
	kubevirt := []Object{
		obj("Pod", "p", map[string]any{"spec": map[string]any{"a": "1", "b": "2", "gone": "x"}}),
		obj("Event", "e", map[string]any{"reason": "Created"}),
	}
	ours := []Object{
		obj("Pod", "p", map[string]any{"spec": map[string]any{"a": "1", "b": "3"},
			"metadata": map[string]any{"labels": map[string]any{"virtshard.io/range": "4"}}}),
	}
	c := Compare(kubevirt, ours, Known)
	pod := c.Counts["Pod"]
	if pod[Equal] != 1 || pod[Differ] != 1 || pod[Missing] != 1 || pod[Extra] != 1 {
		t.Errorf("pod counts %v, want one of each", pod)
	}
	if c.Counts["Event"][Missing] != 1 {
		t.Errorf("event counts %v, want the event missing", c.Counts["Event"])
	}
	unknown := map[string]Outcome{}
	for _, d := range c.Unknown() {
		unknown[d.Kind+" "+d.Path] = d.Outcome
	}
	want := map[string]Outcome{"Pod spec.b": Differ, "Pod spec.gone": Missing, "Event reason": Missing}
	if len(unknown) != len(want) {
		t.Fatalf("unknown differences %v, want %v (the range label is listed)", unknown, want)
	}
	for k, o := range want {
		if unknown[k] != o {
			t.Errorf("%s: %q, want %q", k, unknown[k], o)
		}
	}
}

func TestDifferencePatterns(t *testing.T) {
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"metadata.labels[virtshard.io/range]", "metadata.labels[virtshard.io/range]", true},
		{"status.conditions[*].lastProbeTime", "status.conditions[Ready].lastProbeTime", true},
		{"status.conditions[*].lastProbeTime", "status.conditions[Ready].status", false},
		{"spec.**", "spec.template.spec.domain", true},
		{"spec.**", "status.phase", false},
		{"spec.*", "spec.template.spec", false},
	} {
		d := Difference{Kind: "K", Path: tc.pattern}
		if got := d.covers(FieldDiff{Kind: "K", Path: tc.path, Outcome: Differ}); got != tc.want {
			t.Errorf("%q covers %q: %t, want %t", tc.pattern, tc.path, got, tc.want)
		}
	}
}

// A listed difference with an object pattern explains that object's
// fields only.
func TestADifferenceWithAnObjectPatternCoversThatObjectOnly(t *testing.T) {
	d := Difference{Kind: "Event", Object: "<event:VirtualMachine/*/FailedCreate#*>", Path: "**", Outcomes: []Outcome{Extra}}
	for name, want := range map[string]bool{
		"<event:VirtualMachine/vm/FailedCreate#1>":         true,
		"<event:VirtualMachineInstance/vm/FailedCreate#1>": false,
		"<event:VirtualMachine/vm/SuccessfulCreate#1>":     false,
	} {
		if got := d.covers(FieldDiff{Kind: "Event", Name: name, Path: "message", Outcome: Extra}); got != want {
			t.Errorf("covers %s: %v, want %v", name, got, want)
		}
	}
}
