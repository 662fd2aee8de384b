package shard

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// fakeServer serves pods by label selector as the watch cache does: a
// watch from a resourceVersion replays what happened since (410 if that is
// older than its history), and a watcher sees an object leave its selector
// as a delete.
type fakeServer struct {
	mu     sync.Mutex
	rv     int
	oldest int // no watch resumes from before it
	// held keeps events from the open watches, as from a watcher cut off.
	held    bool
	pods    map[string]*corev1.Pod
	history []fakeEvent
	lists   []metav1.ListOptions
	watches []*fakeWatch
}

type fakeEvent struct {
	rv       int
	old, new *corev1.Pod // nil: absent
}

type fakeWatch struct {
	*watch.RaceFreeFakeWatcher
	opts     metav1.ListOptions
	selector labels.Selector
}

func newFakeServer() *fakeServer { return &fakeServer{pods: map[string]*corev1.Pod{}} }

func (f *fakeServer) ListWithContext(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists = append(f.lists, opts)
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(f.rv)}}
	for _, p := range f.pods {
		if sel.Matches(labels.Set(p.Labels)) {
			list.Items = append(list.Items, *p.DeepCopy())
		}
	}
	return list, nil
}

func (f *fakeServer) WatchWithContext(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	w := &fakeWatch{RaceFreeFakeWatcher: watch.NewRaceFreeFake(), opts: opts, selector: sel}
	f.watches = append(f.watches, w)
	from, _ := strconv.Atoi(opts.ResourceVersion)
	if from < f.oldest {
		w.Error(&apierrors.NewResourceExpired("too old resource version").ErrStatus)
		return w, nil
	}
	for _, ev := range f.history {
		if ev.rv > from {
			w.deliver(ev)
		}
	}
	return w, nil
}

func (w *fakeWatch) deliver(ev fakeEvent) {
	matches := func(p *corev1.Pod) bool { return p != nil && w.selector.Matches(labels.Set(p.Labels)) }
	switch was, is := matches(ev.old), matches(ev.new); {
	case is && !was:
		w.Add(ev.new.DeepCopy())
	case is && was:
		w.Modify(ev.new.DeepCopy())
	case was:
		gone := ev.old.DeepCopy()
		gone.ResourceVersion = strconv.Itoa(ev.rv)
		w.Delete(gone)
	}
}

// put creates or updates a pod in range, or deletes it (range < 0).
func (f *fakeServer) put(name string, rng int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	ev := fakeEvent{rv: f.rv, old: f.pods[name]}
	if rng >= 0 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			ResourceVersion: strconv.Itoa(f.rv), Labels: map[string]string{LabelRange: strconv.Itoa(rng)}}}
		f.pods[name] = p
		ev.new = p
	} else {
		delete(f.pods, name)
	}
	f.history = append(f.history, ev)
	for _, w := range f.watches {
		if !w.IsStopped() && !f.held {
			w.deliver(ev)
		}
	}
}

// hold stops passing events to the open watches.
func (f *fakeServer) hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = true
}

// endWatches closes every open watch, as the server does at a watch's
// timeout or to a watcher it finds unresponsive; forget drops the history,
// so that no watch can resume from before now.
func (f *fakeServer) endWatches(forget bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.watches {
		if !w.IsStopped() {
			w.Stop()
		}
	}
	f.held = false
	if forget {
		f.oldest, f.history = f.rv, nil
	}
}

// open returns the selectors and resourceVersions of the open watches.
func (f *fakeServer) open() []metav1.ListOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []metav1.ListOptions
	for _, w := range f.watches {
		if !w.IsStopped() {
			out = append(out, w.opts)
		}
	}
	return out
}

func (f *fakeServer) listCount() int { return len(f.listed()) }

// listed returns the options of every list served so far.
func (f *fakeServer) listed() []metav1.ListOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.lists)
}

// sharedFixture runs range informers of pods by range label on one
// SharedWatch over a fake server.
type sharedFixture struct {
	t       *testing.T
	server  *fakeServer
	shared  *SharedWatch
	metrics *Metrics
	ranges  Ranges
	stops   map[int]context.CancelFunc
	inf     map[int]cache.SharedIndexInformer
}

func newSharedFixture(t *testing.T) *sharedFixture {
	t.Helper()
	ranges, err := NewRanges(4, KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	f := &sharedFixture{t: t, server: newFakeServer(), metrics: NewMetrics(prometheus.NewRegistry()), ranges: ranges,
		stops: map[int]context.CancelFunc{}, inf: map[int]cache.SharedIndexInformer{}}
	f.shared = NewSharedWatch(&cache.ListWatch{ListWithContextFunc: f.server.ListWithContext, WatchFuncWithContext: f.server.WatchWithContext},
		ranges.Count(), ranges.ByLabel, "pods", f.metrics)
	t.Cleanup(func() {
		for _, stop := range f.stops {
			stop()
		}
	})
	return f
}

// start starts range i's informer and waits until it synced.
func (f *sharedFixture) start(i int) {
	f.t.Helper()
	inf, err := f.shared.NewInformer(i, &corev1.Pod{}, cache.Indexers{}, TrimForCache)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.stops[i], f.inf[i] = cancel, inf
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		f.t.Fatalf("range %d did not sync", i)
	}
}

func (f *sharedFixture) stop(i int) {
	f.stops[i]()
	delete(f.stops, i)
}

// eventually waits until cond holds.
func (f *sharedFixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		f.t.Fatalf("timed out waiting until %s", what)
	}
}

// holds reports whether range i's informer holds exactly the named pods.
func (f *sharedFixture) holds(i int, names ...string) bool {
	keys := f.inf[i].GetStore().ListKeys()
	want := make([]string, len(names))
	for k, n := range names {
		want[k] = "ns/" + n
	}
	slices.Sort(keys)
	slices.Sort(want)
	return slices.Equal(keys, want)
}

// openSelectors are the label selectors of the server's open watches.
func (f *sharedFixture) openSelectors() []string {
	var out []string
	for _, opts := range f.server.open() {
		out = append(out, opts.LabelSelector)
	}
	return out
}

func (f *sharedFixture) selectorOf(ranges ...int) string {
	var opts metav1.ListOptions
	f.ranges.ByLabel(NewSet(f.ranges.Count(), ranges...)).apply(&opts)
	return opts.LabelSelector
}

// The informers of several ranges are served by one watch whose selector
// covers them all, and each gets its own range's objects.
func TestSharedWatchServesRangesFromOneWatch(t *testing.T) {
	f := newSharedFixture(t)
	f.server.put("a", 0)
	f.server.put("b", 1)
	f.server.put("c", 2)
	f.start(0)
	f.start(1)
	f.eventually("one watch covers ranges 0 and 1", func() bool {
		return slices.Equal(f.openSelectors(), []string{f.selectorOf(0, 1)})
	})
	if !f.holds(0, "a") || !f.holds(1, "b") {
		t.Fatalf("after the lists: range 0 holds %v, range 1 holds %v", f.inf[0].GetStore().ListKeys(), f.inf[1].GetStore().ListKeys())
	}
	f.server.put("d", 1)
	f.server.put("e", 2) // not watched
	f.server.put("a", 0)
	f.server.put("b", -1)
	f.eventually("the events reach their ranges", func() bool { return f.holds(0, "a") && f.holds(1, "d") })
	if got := f.shared.Ranges().String(); got != "0-1" {
		t.Errorf("shared watch serves ranges %s, want 0-1", got)
	}
	if n := len(f.server.watches); n > 3 {
		t.Errorf("%d watches opened for two ranges, want at most one each and the first", n)
	}
}

// When the server ends the watch (timeout, a watcher it found
// unresponsive), the watch resumes from its last event; no range's
// informer lists again.
func TestSharedWatchResumesWithoutRelisting(t *testing.T) {
	f := newSharedFixture(t)
	f.start(0)
	f.start(1)
	f.server.put("a", 0)
	f.eventually("range 0 holds a", func() bool { return f.holds(0, "a") })
	lists := f.server.listCount()

	f.server.endWatches(false)
	f.server.put("b", 1) // while no watch is open
	f.eventually("range 1 holds b", func() bool { return f.holds(1, "b") })
	open := f.server.open()
	if len(open) != 1 || open[0].ResourceVersion != "1" {
		t.Errorf("watches open after the server ended one: %+v, want one from resourceVersion 1", open)
	}
	if n := f.server.listCount(); n != lists {
		t.Errorf("%d lists after the watch resumed, want %d", n, lists)
	}
	if got := testutil.ToFloat64(f.metrics.watchRestarts.WithLabelValues("pods")); got != 1 {
		t.Errorf("%v watch restarts counted, want 1", got)
	}
	if got := testutil.ToFloat64(f.metrics.relists.WithLabelValues("pods")); got != 0 {
		t.Errorf("%v relists counted, want 0", got)
	}
}

// A range whose informer stops leaves the watch; the others keep their
// objects and events.
func TestSharedWatchDropsAStoppedRange(t *testing.T) {
	f := newSharedFixture(t)
	f.start(0)
	f.start(1)
	f.stop(1)
	f.eventually("the watch covers range 0 only", func() bool {
		return slices.Equal(f.openSelectors(), []string{f.selectorOf(0)})
	})
	f.server.put("a", 0)
	f.server.put("b", 1)
	f.eventually("range 0 holds a", func() bool { return f.holds(0, "a") })
	if got := f.shared.Ranges().String(); got != "0" {
		t.Errorf("shared watch serves ranges %s, want 0", got)
	}
	f.stop(0)
	f.eventually("no watch is open", func() bool { return len(f.server.open()) == 0 })
}

// An object that moves to another watched range (its range label edited)
// is deleted from the range it left and added to the other, as two
// separate watches would have it.
func TestSharedWatchMovesAnObjectBetweenRanges(t *testing.T) {
	f := newSharedFixture(t)
	f.server.put("a", 0)
	f.start(0)
	f.start(1)
	f.server.put("a", 1)
	f.eventually("a moved from range 0 to range 1", func() bool { return f.holds(0) && f.holds(1, "a") })
	f.server.put("a", 3) // out of the watch: deleted from range 1
	f.eventually("a left range 1", func() bool { return f.holds(1) })
}

// A watch that cannot resume (its resourceVersion is gone from the
// server's history) makes every range list again.
func TestSharedWatchExpiredMakesEveryRangeList(t *testing.T) {
	f := newSharedFixture(t)
	f.start(0)
	f.start(1)
	f.server.put("a", 0)
	f.eventually("range 0 holds a", func() bool { return f.holds(0, "a") })
	f.server.put("b", 1)
	f.eventually("range 1 holds b", func() bool { return f.holds(1, "b") })
	f.server.hold()
	f.server.put("c", 0)
	f.server.endWatches(true)
	f.eventually("both ranges listed again and hold their objects", func() bool {
		return f.holds(0, "a", "c") && f.holds(1, "b") && testutil.ToFloat64(f.metrics.relists.WithLabelValues("pods")) == 2
	})
	f.eventually("one watch covers both ranges again", func() bool {
		return slices.Equal(f.openSelectors(), []string{f.selectorOf(0, 1)})
	})
}

// Many ranges starting at once are listed together and the watch reopens
// once per batch, not once per range; every range ends with its objects.
func TestSharedWatchSubscribesConcurrentRanges(t *testing.T) {
	f := newSharedFixture(t)
	for i := range 4 {
		f.server.put(fmt.Sprint("p", i), i)
	}
	var wg sync.WaitGroup
	informers := make([]cache.SharedIndexInformer, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 4 {
		inf, err := f.shared.NewInformer(i, &corev1.Pod{}, cache.Indexers{}, TrimForCache)
		if err != nil {
			t.Fatal(err)
		}
		informers[i] = inf
		f.inf[i] = inf
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	for i, inf := range informers {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatalf("range %d did not sync", i)
		}
		if !f.holds(i, fmt.Sprint("p", i)) {
			t.Errorf("range %d holds %v", i, inf.GetStore().ListKeys())
		}
	}
	f.eventually("one watch covers every range", func() bool { return len(f.server.open()) == 1 })
	cancel()
	wg.Wait()
	f.eventually("no watch is open", func() bool { return len(f.server.open()) == 0 })
}

// A replica's first lists are consistent reads; the ranges' lists are
// instead made at least as new as the server's current version, read once
// with a list of one object and no selector, so that a lagging watch cache
// never serves them from etcd (which reads the whole namespace for each).
func TestSharedWatchFirstListsAreAtTheCurrentVersion(t *testing.T) {
	f := newSharedFixture(t)
	f.server.put("a", 0)
	f.server.put("b", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subscribe := func(ranges ...int) {
		var batch []*subscribeRequest
		for _, i := range ranges {
			batch = append(batch, &subscribeRequest{ctx: ctx, i: i, done: make(chan struct{})})
		}
		f.shared.mu.Lock()
		defer f.shared.mu.Unlock()
		f.shared.subscribeLocked(batch)
		for _, req := range batch {
			if req.err != nil {
				t.Fatalf("range %d: %v", req.i, req.err)
			}
		}
	}
	subscribe(0, 1)
	lists := f.server.listed()
	if len(lists) != 3 {
		t.Fatalf("%d lists, want the version read and one per range: %+v", len(lists), lists)
	}
	if got := lists[0]; got.Limit != 1 || got.LabelSelector != "" || got.ResourceVersion != "" {
		t.Errorf("first list %+v, want a consistent list of one object without a selector", got)
	}
	current := "2" // the fake server's version after two writes
	for _, got := range lists[1:] {
		if got.ResourceVersion != current || got.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan || got.LabelSelector == "" {
			t.Errorf("range list %+v, want one range at least as new as %s", got, current)
		}
	}
	// Once the watch has a position, a range joining lists from it, with
	// no version read.
	subscribe(2)
	if got := f.server.listed()[3:]; len(got) != 1 || got[0].ResourceVersion != current || got[0].Limit != 0 {
		t.Errorf("lists of a joining range %+v, want one at least as new as %s", got, current)
	}
}

// A range that joins the watch skips the events its own list holds: the
// watch resumes from before that list.
func TestSubscriptionSkipsWhatItsListHolds(t *testing.T) {
	sub := newSubscription(nil, 0, "10")
	for _, rv := range []string{"9", "10", "11", ""} {
		sub.send(watch.Event{Type: watch.Modified, Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rv" + rv, ResourceVersion: rv}}})
	}
	var got []string
	for _, ev := range sub.queue {
		got = append(got, ev.Object.(*corev1.Pod).Name)
	}
	if want := []string{"rv11", "rv"}; !slices.Equal(got, want) {
		t.Errorf("queued %v, want %v", got, want)
	}
}

// Without watch-list streaming (the WatchListClient feature off), a range's
// reflector lists and then watches from its list; a second watch of the
// same subscription, or one from another version, must list again.
func TestRangeListWatchListsThenWatches(t *testing.T) {
	f := newSharedFixture(t)
	f.server.put("a", 0)
	lw := &rangeListWatch{w: f.shared, i: 0, example: &corev1.Pod{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// client-go's consistency check lists at an exact version: it reads only.
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{ResourceVersion: "1", ResourceVersionMatch: metav1.ResourceVersionMatchExact}); err != nil {
		t.Fatal(err)
	}
	if got := f.shared.Ranges().Len(); got != 0 {
		t.Fatalf("an exact list subscribed %d ranges", got)
	}
	list, err := lw.ListWithContext(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	pods := list.(*corev1.PodList)
	if len(pods.Items) != 1 || pods.Items[0].Name != "a" {
		t.Fatalf("range 0 listed %v, want pod a", pods.Items)
	}
	if _, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "0"}); !apierrors.IsResourceExpired(err) {
		t.Errorf("a watch from another version than the list's: %v, want expired", err)
	}
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: pods.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	f.server.put("b", 0)
	select {
	case ev := <-w.ResultChan():
		if pod, ok := ev.Object.(*corev1.Pod); !ok || ev.Type != watch.Added || pod.Name != "b" {
			t.Errorf("first event %s %v, want pod b added", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event for pod b")
	}
	if _, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: pods.ResourceVersion}); !apierrors.IsResourceExpired(err) {
		t.Errorf("a second watch of one list: %v, want expired", err)
	}
}

// An informer stopped during its watch-list makes client-go list all the
// same, with the stopped context: that neither subscribes nor counts as a
// relist.
func TestRangeListWatchIgnoresAListOfAStoppedInformer(t *testing.T) {
	f := newSharedFixture(t)
	lw := &rangeListWatch{w: f.shared, i: 0, example: &corev1.Pod{}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 2 {
		if _, err := lw.ListWithContext(ctx, metav1.ListOptions{}); err == nil {
			t.Fatal("a list with a stopped context succeeded")
		}
	}
	if n := f.server.listCount(); n != 0 {
		t.Errorf("%d lists sent for a stopped informer", n)
	}
	if got := testutil.ToFloat64(f.metrics.relists.WithLabelValues("pods")); got != 0 {
		t.Errorf("%v relists counted for a stopped informer", got)
	}
}
