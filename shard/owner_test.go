package shard

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Every object, whatever its range label, is selected by exactly one of
// the ByLabel and ByUnlabelledKey selections of one range, the range Owner
// names, and the label selector sent to the server agrees with the
// client-side guard.
func TestOwnerSelectionsCoverEveryObjectOnce(t *testing.T) {
	ranges, err := NewRanges(8, KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	labelValues := []struct {
		value    string
		set      bool
		labelled bool
	}{
		{set: false},
		{value: "3", set: true, labelled: true},
		{value: "0", set: true, labelled: true},
		{value: "7", set: true, labelled: true},
		{value: "03", set: true},
		{value: "+3", set: true},
		{value: "8", set: true},
		{value: "-1", set: true},
		{value: "x", set: true},
		{value: "", set: true},
	}
	for _, lv := range labelValues {
		for n := range 50 {
			obj := &metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint(n), UID: types.UID(fmt.Sprintf("uid-%d", n))}
			if lv.set {
				obj.Labels = map[string]string{LabelRange: lv.value}
			}
			if _, ok := ranges.Labelled(obj); ok != lv.labelled {
				t.Errorf("label %q: Labelled = %v, want %v", lv.value, ok, lv.labelled)
			}
			var selectedBy []int
			for i := range 8 {
				owned := NewSet(8, i)
				for _, sel := range []Selection{ranges.ByLabel(owned), ranges.ByUnlabelledKey(owned)} {
					var opts metav1.ListOptions
					sel.apply(&opts)
					server, err := labels.Parse(opts.LabelSelector)
					if err != nil {
						t.Fatalf("label selector %q: %v", opts.LabelSelector, err)
					}
					serverMatches := server.Matches(labels.Set(obj.Labels))
					owns := sel.owns(obj)
					if owns && !serverMatches {
						t.Errorf("label %q, range %d: the guard keeps an object the server's label selector %q filters out", lv.value, i, opts.LabelSelector)
					}
					if owns {
						selectedBy = append(selectedBy, i)
					}
				}
			}
			if len(selectedBy) != 1 || selectedBy[0] != ranges.Owner(obj) {
				t.Errorf("label %q, uid %s: selected by ranges %v, want exactly Owner's %d", lv.value, obj.UID, selectedBy, ranges.Owner(obj))
			}
		}
	}
}
