package shard

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// A sharded informer's first list and first watch are its start; every one
// after is a restart, counted by resource. A watch-list counts as a list.
func TestWatchRestartsAndRelistsAreCounted(t *testing.T) {
	ranges, err := NewRanges(4, KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	metrics := NewMetrics(prometheus.NewRegistry())
	lw := cache.ToListerWatcherWithContext(ShardedListWatch(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.PodList{}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}, ranges.ByKey(NewSet(4, 0, 1)), "pods", metrics))
	ctx := context.Background()
	for range 3 {
		w, err := lw.WatchWithContext(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.Stop()
	}
	for range 2 {
		if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A watch-list streams the state again: a list, not a watch restart.
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{SendInitialEvents: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if got := testutil.ToFloat64(metrics.watchRestarts.WithLabelValues("pods")); got != 2 {
		t.Errorf("%v watch restarts after 3 watches, want 2", got)
	}
	if got := testutil.ToFloat64(metrics.relists.WithLabelValues("pods")); got != 2 {
		t.Errorf("%v relists after 2 lists and a watch-list, want 2", got)
	}
}
