package differential

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/virtshard/virtshard/bench/audit"
	"github.com/virtshard/virtshard/bench/cluster"
)

// Writes are the write requests one controller sent for one scenario, by
// resource ("pods", "virtualmachineinstances/status"), as the API server's
// audit log records them: every answered create, update, patch and
// delete, refused ones included, counted where the controller cannot
// undercount them. The simulated virt-handler and the harness write as
// other users, which the log leaves out.
type Writes map[string]int

// Total is every write of the scenario.
func (w Writes) Total() int {
	n := 0
	for _, c := range w {
		n += c
	}
	return n
}

// countWrites reads the audit log's events of cluster.AuditedUser (both
// controllers authenticate as it) and counts their writes in each of
// namespaces.
func countWrites(log io.Reader, namespaces []string) (map[string]Writes, error) {
	out := map[string]Writes{}
	for _, ns := range namespaces {
		out[ns] = Writes{}
	}
	err := audit.Scan(log, func(ev *auditv1.Event) error {
		if ev.User.Username != cluster.AuditedUser || ev.Stage != auditv1.StageResponseComplete || ev.ObjectRef == nil {
			return nil
		}
		switch ev.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
		default:
			return nil
		}
		w, ok := out[ev.ObjectRef.Namespace]
		if !ok {
			return nil
		}
		resource := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			resource += "/" + ev.ObjectRef.Subresource
		}
		w[resource]++
		return nil
	})
	return out, err
}

// writeWrites reports each scenario's writes under both controllers, by
// resource, and their sum. Reported, not compared: virtshard batches its
// writes and KubeVirt is expected to need more.
func writeWrites(w io.Writer, results []Result) {
	var kv, ours int
	counted := false
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, r := range results {
		a, b := r.Writes[KubeVirt], r.Writes[Virtshard]
		if a == nil || b == nil {
			continue
		}
		if !counted {
			fmt.Fprintln(w, "\nwrites each controller sent (the API server's audit log), by scenario and resource:")
			fmt.Fprintln(tw, "scenario\tresource\tkubevirt\tvirtshard\t")
			counted = true
		}
		resources := map[string]bool{}
		for res := range maps.Keys(a) {
			resources[res] = true
		}
		for res := range maps.Keys(b) {
			resources[res] = true
		}
		for _, res := range slices.Sorted(maps.Keys(resources)) {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t\n", r.Scenario.Name, res, a[res], b[res])
		}
		kv, ours = kv+a.Total(), ours+b.Total()
	}
	if !counted {
		fmt.Fprintln(w, "\nwrites not counted: the cluster's API server keeps no audit log (recreate it: make cluster-down cluster-up)")
		return
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "all scenarios: KubeVirt %d writes, virtshard %d (%.2f of KubeVirt's)\n", kv, ours, float64(ours)/float64(max(kv, 1)))
}
