package differential

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Totals are field counts by outcome, and how many of the fields that are
// not equal the list explains.
type Totals struct {
	Fields map[Outcome]int
	// Known, Pending and Unknown count the fields that are not equal: on
	// the list as deliberate, on it as not built yet (an open issue), not
	// on it.
	Known, Pending, Unknown int
}

func (t *Totals) add(c Comparison) {
	if t.Fields == nil {
		t.Fields = map[Outcome]int{}
	}
	for _, byOutcome := range c.Counts {
		for o, n := range byOutcome {
			t.Fields[o] += n
		}
	}
	for _, d := range c.Diffs {
		switch {
		case d.Known == nil:
			t.Unknown++
		case d.Known.Issue != 0:
			t.Pending++
		default:
			t.Known++
		}
	}
}

// All is every field compared.
func (t Totals) All() int {
	n := 0
	for _, v := range t.Fields {
		n += v
	}
	return n
}

// EqualShare is the share of fields equal, in percent.
func (t Totals) EqualShare() float64 {
	if t.All() == 0 {
		return 0
	}
	return 100 * float64(t.Fields[Equal]) / float64(t.All())
}

// Summarize adds up every checkpoint of every result.
func Summarize(results []Result) Totals {
	var t Totals
	for _, r := range results {
		for _, c := range r.Checkpoints {
			t.add(c.Comparison)
		}
	}
	return t
}

// Failed reports whether the run failed: a difference not on the list, or
// a scenario that did not reach its end under either controller.
func Failed(results []Result) bool {
	if Summarize(results).Unknown > 0 {
		return true
	}
	for _, r := range results {
		if len(r.Errors) > 0 {
			return true
		}
	}
	return false
}

// WriteReport writes, per scenario and kind, the fields equal, differing,
// missing (KubeVirt wrote them, virtshard did not) and extra; then every
// difference the list does not explain, and the scenarios that did not
// reach their end.
func WriteReport(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tkind\tequal\tdiffer\tmissing\textra\tdeliberate\tnot yet\t")
	for _, r := range results {
		byKind := map[string]*Totals{}
		for _, c := range r.Checkpoints {
			for kind := range c.Counts {
				if byKind[kind] == nil {
					byKind[kind] = &Totals{}
				}
				byKind[kind].add(Comparison{Counts: map[string]map[Outcome]int{kind: c.Counts[kind]}, Diffs: diffsOf(c.Diffs, kind)})
			}
		}
		for _, kind := range slices.Sorted(maps.Keys(byKind)) {
			t := byKind[kind]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", r.Scenario.Name, kind,
				t.Fields[Equal], t.Fields[Differ], t.Fields[Missing], t.Fields[Extra], t.Known, t.Pending)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	t := Summarize(results)
	fmt.Fprintf(w, "\n%d scenarios, %d checkpoints: %d of %d fields equal (%.1f %%); of the rest %d are deliberate differences, "+
		"%d are not built yet (an open issue builds them), %d are on no list\n",
		len(results), checkpoints(results), t.Fields[Equal], t.All(), t.EqualShare(), t.Known, t.Pending, t.Unknown)
	byEntry := map[string]int{}
	for _, r := range results {
		for _, c := range r.Checkpoints {
			for _, d := range c.Diffs {
				if k := d.Known; k != nil {
					entry := fmt.Sprintf("%s %s%s", k.Kind, k.Object, k.Path)
					if k.Issue != 0 {
						entry = fmt.Sprintf("issue %d: %s", k.Issue, entry)
					}
					byEntry[entry]++
				}
			}
		}
	}
	for _, entry := range slices.Sorted(maps.Keys(byEntry)) {
		fmt.Fprintf(w, "  %5d  %s\n", byEntry[entry], entry)
	}

	writeGenerations(w, results)
	writeWrites(w, results)

	for _, r := range results {
		for _, side := range []Side{KubeVirt, Virtshard} {
			if err := r.Errors[side]; err != nil {
				fmt.Fprintf(w, "\n%s did not reach its end under %s: %v\n", r.Scenario.Name, side, err)
			}
		}
		for _, c := range r.Checkpoints {
			for _, d := range c.Unknown() {
				fmt.Fprintf(w, "%s@%s: %s %s %s %s: kubevirt %s, virtshard %s\n", r.Scenario.Name, c.Name,
					d.Kind, d.Name, d.Path, d.Outcome, show(d.KubeVirt), show(d.Ours))
			}
		}
	}
	return nil
}

// writeGenerations lists, at each scenario's last checkpoint, the objects
// whose generation differs between the runs: how often the API server saw
// each change (every write that changed a VMI; the spec changes of the
// kinds with a status subresource). Reported, not compared: virtshard
// batches its writes.
func writeGenerations(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	header := false
	for _, r := range results {
		if len(r.Checkpoints) == 0 {
			continue
		}
		last := r.Checkpoints[len(r.Checkpoints)-1]
		theirs := map[[2]string]int64{}
		for _, o := range last.KubeVirt {
			theirs[[2]string{o.Kind, o.Name}] = o.Generation
		}
		for _, o := range last.Ours {
			g, ok := theirs[[2]string{o.Kind, o.Name}]
			if !ok || g == o.Generation {
				continue
			}
			if !header {
				fmt.Fprintln(w, "\ngenerations (changes the API server saw) that differ at each scenario's last checkpoint:")
				fmt.Fprintln(tw, "scenario\tcheckpoint\tobject\tkubevirt\tvirtshard\t")
				header = true
			}
			fmt.Fprintf(tw, "%s\t%s\t%s %s\t%d\t%d\t\n", r.Scenario.Name, last.Name, o.Kind, o.Name, g, o.Generation)
		}
	}
	_ = tw.Flush()
}

func checkpoints(results []Result) int {
	n := 0
	for _, r := range results {
		n += len(r.Checkpoints)
	}
	return n
}

func diffsOf(diffs []FieldDiff, kind string) []FieldDiff {
	var out []FieldDiff
	for _, d := range diffs {
		if d.Kind == kind {
			out = append(out, d)
		}
	}
	return out
}

// Dump writes each checkpoint's normalized objects under both controllers
// to dir/<scenario>/<checkpoint>.<side>.yaml, for a person to diff.
func Dump(dir string, results []Result) error {
	for _, r := range results {
		sub := filepath.Join(dir, r.Scenario.Name)
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return err
		}
		for _, c := range r.Checkpoints {
			for side, objs := range map[Side][]Object{KubeVirt: c.KubeVirt, Virtshard: c.Ours} {
				var docs []map[string]any
				for _, o := range objs {
					docs = append(docs, o.Content)
				}
				data, err := yaml.Marshal(docs)
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(sub, c.Name+"."+string(side)+".yaml"), data, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// show prints a field's value, or that it is absent.
func show(v any) string {
	if v == nil {
		return "<none>"
	}
	s := fmt.Sprintf("%v", v)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return strings.ReplaceAll(s, "\n", " ")
}
