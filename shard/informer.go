package shard

import (
	"context"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/cache"
)

// Selection is how a sharded informer picks the objects of some ranges.
type Selection interface {
	// apply narrows list and watch options to the ranges.
	apply(opts *metav1.ListOptions)
	// owns is the client-side guard for one object.
	owns(obj metav1.Object) bool
	// rangeOf is the range an object the selection owns belongs to: how a
	// SharedWatch hands it to one range's informer.
	rangeOf(obj metav1.Object) (int, bool)
}

// ListOptions are opts narrowed to the objects s selects, for a read past
// the informers; Selects is the client-side guard to apply to what it
// returns.
func ListOptions(s Selection, opts metav1.ListOptions) metav1.ListOptions {
	s.apply(&opts)
	return opts
}

// Selects reports whether s selects obj.
func Selects(s Selection, obj metav1.Object) bool { return s.owns(obj) }

// ByKey selects objects by the hash of their own uid or namespace, with a
// KEP-5866 shard selector on the server.
func (r Ranges) ByKey(owned Set) Selection { return keySelection{r, owned, r.Selector(owned.List())} }

type keySelection struct {
	ranges   Ranges
	owned    Set
	selector string
}

func (s keySelection) apply(opts *metav1.ListOptions) { opts.ShardSelector = s.selector }
func (s keySelection) owns(obj metav1.Object) bool    { return s.owned.Has(s.ranges.Of(obj)) }
func (s keySelection) rangeOf(obj metav1.Object) (int, bool) {
	return s.ranges.Of(obj), true
}

// ByUnlabelledKey selects, among objects of a kind that may also carry a
// parent's range label, those without one (or without a valid one) whose
// own key hashes into the ranges: with ByLabel over the same ranges it
// covers each object of the kind exactly once, as Owner places it.
func (r Ranges) ByUnlabelledKey(owned Set) Selection {
	all := make([]string, r.count)
	for i := range all {
		all[i] = strconv.Itoa(i)
	}
	// notin also matches objects without the label.
	req, err := labels.NewRequirement(LabelRange, selection.NotIn, all)
	if err != nil {
		panic(fmt.Sprintf("range label requirement: %v", err)) // values are valid label values
	}
	return unlabelledKeySelection{keySelection{r, owned, r.Selector(owned.List())}, labels.NewSelector().Add(*req).String()}
}

type unlabelledKeySelection struct {
	keySelection
	labelSelector string
}

func (s unlabelledKeySelection) apply(opts *metav1.ListOptions) {
	s.keySelection.apply(opts)
	addLabelSelector(opts, s.labelSelector)
}

func (s unlabelledKeySelection) owns(obj metav1.Object) bool {
	_, labelled := s.ranges.Labelled(obj)
	return !labelled && s.keySelection.owns(obj)
}

func (s unlabelledKeySelection) rangeOf(obj metav1.Object) (int, bool) {
	if _, labelled := s.ranges.Labelled(obj); labelled {
		return 0, false
	}
	return s.ranges.Of(obj), true
}

// ByLabel selects children by the range label the controller stamped on
// them (LabelRange): a child's own uid hashes elsewhere than its parent's.
func (r Ranges) ByLabel(owned Set) Selection { return r.byLabel(LabelRange, owned) }

// ByFleetLabel selects the members of the fleets of the ranges by the
// fleet's range label (LabelFleetRange, StampFleetRange): a fleet's view of
// its members, which their own placement puts elsewhere.
func (r Ranges) ByFleetLabel(owned Set) Selection { return r.byLabel(LabelFleetRange, owned) }

func (r Ranges) byLabel(label string, owned Set) Selection {
	values := make([]string, 0, owned.Len())
	for _, i := range owned.List() {
		values = append(values, strconv.Itoa(i))
	}
	req, err := labels.NewRequirement(label, selection.In, values)
	if err != nil {
		// Only reachable with no ranges: select nothing rather than everything.
		req, _ = labels.NewRequirement(label, selection.In, []string{"none"})
	}
	return labelSelection{r, label, owned, labels.NewSelector().Add(*req).String()}
}

type labelSelection struct {
	ranges   Ranges
	label    string
	owned    Set
	selector string
}

func (s labelSelection) apply(opts *metav1.ListOptions) { addLabelSelector(opts, s.selector) }

func (s labelSelection) owns(obj metav1.Object) bool {
	i, ok := s.ranges.labelledBy(obj, s.label)
	return ok && s.owned.Has(i)
}

func (s labelSelection) rangeOf(obj metav1.Object) (int, bool) {
	return s.ranges.labelledBy(obj, s.label)
}

func addLabelSelector(opts *metav1.ListOptions, selector string) {
	if opts.LabelSelector != "" {
		opts.LabelSelector += "," + selector
	} else {
		opts.LabelSelector = selector
	}
}

// guard is the client-side guard of a selection: it drops, and counts under
// resource, every object outside the selected ranges, on LIST and WATCH. The
// server's filtering is trusted only as far as the guard proves it: a server
// without the ShardedListAndWatch feature ignores the shard selector, and a
// custom resource's list never echoes ListMeta.ShardInfo.
type guard struct {
	sel      Selection
	resource string
	metrics  *Metrics
}

// list lists what the selection selects from lw, guarded.
func (g guard) list(ctx context.Context, lw cache.ListerWatcherWithContext, opts metav1.ListOptions) (runtime.Object, error) {
	g.sel.apply(&opts)
	list, err := lw.ListWithContext(ctx, opts)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractListWithAlloc(list)
	if err != nil {
		return nil, fmt.Errorf("guard %s list: %w", g.resource, err)
	}
	kept := items[:0]
	for _, item := range items {
		if g.keep(item) {
			kept = append(kept, item)
		}
	}
	if len(kept) == len(items) {
		return list, nil
	}
	if err := meta.SetList(list, kept); err != nil {
		return nil, fmt.Errorf("guard %s list: %w", g.resource, err)
	}
	return list, nil
}

// keep is the client-side guard: objects without metadata pass (the
// informer reports them), objects outside the ranges are dropped.
func (g guard) keep(obj runtime.Object) bool {
	accessor, err := meta.Accessor(obj)
	if err != nil || g.sel.owns(accessor) {
		return true
	}
	g.metrics.dropped(g.resource)
	return false
}

// TrimForCache is an informer transform that drops what controllers never
// read, so cache memory follows the owned objects' useful size: managed
// fields are often the largest part of an object.
func TrimForCache(obj any) (any, error) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
	return obj, nil
}
