package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// SharedWatch serves the informers of many ranges of one resource from a
// single watch on the API server, whose selector covers every range that
// has an informer: one watch per resource and replica instead of one per
// range and resource.
//
// Why (issue 18): kube-apiserver's watch cache puts every event of a
// namespace into the input buffer of every watcher of that namespace, and
// filters by selector only afterwards, in each watcher's own goroutine
// (k8s.io/apiserver pkg/storage/cacher: Cacher.dispatchEvent,
// cacheWatcher.process). A watcher whose buffer is still full when the
// dispatcher's blocking budget is spent (at most 100 ms, refilled at 50 ms
// a second: time_budget.go) is closed ("Forcing … watcher close due to
// unresponsiveness", apiserver_terminated_watchers_total). With a watch per
// range, bursts of events on a busy server closed watchers by the
// hundred (docs/sharding.md).
//
// Each range's informer keeps its own store, handlers and lifecycle, so
// starting and stopping a range is unchanged. Its initial list (a
// watch-list stream, or a LIST) subscribes the range: the shared watch
// stops, the range is listed alone, at least as new as the watch's
// position, and the watch reopens from that position with the range
// added; the range's events follow its list on the same stream. Stopping
// the informer unsubscribes the range, and the watch reopens without it.
// When the server ends the watch, it resumes from the last event it handed
// out, which no range's informer notices; only if the server can no longer
// resume it (410 Gone) does every range's informer list again. An object
// that leaves a range without leaving the selector (its range label
// edited) reaches the range it left as a delete, as it would have from a
// watch of that range alone.
type SharedWatch struct {
	lw       cache.ListerWatcherWithContext
	count    int
	by       func(Set) Selection
	resource string
	metrics  *Metrics
	clock    clock.Clock
	logger   klog.Logger

	pendingMu sync.Mutex
	// pending are subscriptions waiting for mu: whoever takes mu serves
	// them all, with one reopening of the watch.
	pending []*subscribeRequest

	mu   sync.Mutex
	subs map[int]*subscription
	// owner is the range each object was last handed to.
	owner map[string]int
	// rv is the watch's position: every event up to it has been handed
	// out. "" while no range is subscribed.
	rv string
	// gen counts the reopenings; a watch goroutine of an older one hands
	// nothing out.
	gen  uint64
	stop context.CancelFunc
}

// NewSharedWatch returns a shared watch of lw's resource over count ranges;
// by is the selection of a set of ranges (Ranges.ByKey, ByLabel or
// ByUnlabelledKey), and resource names the resource in metrics. Nothing is
// watched until an informer of it lists.
func NewSharedWatch(lw cache.ListerWatcher, count int, by func(Set) Selection, resource string, metrics *Metrics) *SharedWatch {
	return &SharedWatch{lw: cache.ToListerWatcherWithContext(lw), count: count, by: by, resource: resource, metrics: metrics,
		clock: clock.RealClock{}, logger: klog.Background().WithValues("resource", resource),
		subs: map[int]*subscription{}, owner: map[string]int{}}
}

// NewInformer returns range i's informer, whose cache keeps what trim
// returns of each object (TrimForCache, or a resource's own trim). Start
// it when the range is acquired (or prepared) and stop it when it is
// released.
func (w *SharedWatch) NewInformer(i int, example runtime.Object, indexers cache.Indexers, trim cache.TransformFunc) (cache.SharedIndexInformer, error) {
	informer := cache.NewSharedIndexInformer(&rangeListWatch{w: w, i: i, example: example}, example, 0, indexers)
	if err := informer.SetTransform(trim); err != nil {
		return nil, err
	}
	return informer, nil
}

// Ranges is the set of ranges the watch serves now.
func (w *SharedWatch) Ranges() Set {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.setLocked()
}

func (w *SharedWatch) setLocked() Set {
	set := NewSet(w.count)
	for i := range w.subs {
		set.Add(i)
	}
	return set
}

// rangeListWatch is range i's ListerWatcher. Its reflector streams the
// range's initial state as a watch-list (or lists it, without the
// WatchListClient feature); either subscribes the range.
type rangeListWatch struct {
	w       *SharedWatch
	i       int
	example runtime.Object
	lists   atomic.Int64
}

func (l *rangeListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *rangeListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

// ListWithContext subscribes the range for as long as ctx (the reflector's)
// lasts, and returns its objects, at least as new as opts.ResourceVersion
// and as the shared watch's position. A list at an exact version (client-go's
// watch-list consistency detector, KUBE_WATCHLIST_INCONSISTENCY_DETECTOR)
// only reads.
func (l *rangeListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if err := ctx.Err(); err != nil {
		// The informer stopped during a watch-list; client-go falls back
		// to a list all the same.
		return nil, err
	}
	if opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact {
		g := guard{sel: l.w.by(NewSet(l.w.count, l.i)), resource: l.w.resource, metrics: l.w.metrics}
		return g.list(ctx, l.w.lw, opts)
	}
	l.counted()
	list, _, err := l.w.subscribe(ctx, l.i, opts.ResourceVersion)
	return list, err
}

// WatchWithContext streams the range's events after its list; a watch-list
// (SendInitialEvents) first subscribes the range and streams its objects as
// added events, ended by the initial-events bookmark.
func (l *rangeListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents == nil || !*opts.SendInitialEvents {
		return l.w.stream(l.i, opts.ResourceVersion)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.counted()
	list, sub, err := l.w.subscribe(ctx, l.i, opts.ResourceVersion)
	if err != nil {
		return nil, err
	}
	return l.w.streamList(sub, list, l.example)
}

// counted counts a list of the range after its first as a relist.
func (l *rangeListWatch) counted() {
	if l.lists.Add(1) > 1 {
		l.w.metrics.relisted(l.w.resource)
	}
}

type subscribeRequest struct {
	ctx context.Context
	i   int
	// rv is the reflector's: the list must not be older.
	rv   string
	done chan struct{}
	list runtime.Object
	sub  *subscription
	err  error
}

func (w *SharedWatch) subscribe(ctx context.Context, i int, rv string) (runtime.Object, *subscription, error) {
	req := &subscribeRequest{ctx: ctx, i: i, rv: rv, done: make(chan struct{})}
	w.pendingMu.Lock()
	w.pending = append(w.pending, req)
	w.pendingMu.Unlock()

	w.mu.Lock()
	w.pendingMu.Lock()
	batch := w.pending
	w.pending = nil
	w.pendingMu.Unlock()
	if len(batch) > 0 {
		w.subscribeLocked(batch)
	}
	w.mu.Unlock()
	// Whoever held mu before us served req if we did not.
	<-req.done
	return req.list, req.sub, req.err
}

// subscribeLocked lists each requested range at least as new as the
// watch's position (in parallel), subscribes those listed and reopens the
// watch once for all of them.
func (w *SharedWatch) subscribeLocked(batch []*subscribeRequest) {
	position := w.rv
	// The watch reopens after the lists anyway: stop it now rather than
	// leave its events unread on the server meanwhile.
	watching := w.stopLocked()
	floor, err := w.consistentFloor(position, batch)
	var wg sync.WaitGroup
	for _, req := range batch {
		if err != nil {
			req.err = err
			continue
		}
		wg.Go(func() { req.list, req.err = w.listRange(req.ctx, req.i, floor, req.rv) })
	}
	wg.Wait()
	start := position
	for _, req := range batch {
		if old := w.subs[req.i]; old != nil {
			// The range's reflector lists again, or a new informer of the
			// range replaces one still stopping: the old stream ends.
			w.forgetLocked(old)
			old.fail(expiredStatus(fmt.Sprintf("shared %s watch: range %d listed again", w.resource, req.i)))
		}
		if req.err != nil {
			continue
		}
		from, err := meta.ListAccessor(req.list)
		if err != nil {
			req.err = fmt.Errorf("shared %s watch: list of range %d: %w", w.resource, req.i, err)
			continue
		}
		sub := newSubscription(w, req.i, from.GetResourceVersion())
		w.subs[req.i], req.sub = sub, sub
		_ = meta.EachListItem(req.list, func(obj runtime.Object) error {
			if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				w.owner[key] = req.i
			}
			return nil
		})
		sub.stopAfter = context.AfterFunc(req.ctx, func() { w.unsubscribe(sub) })
		if position == "" && (start == "" || olderRV(sub.from, start)) {
			// Nothing was watched: watch from the oldest list, each range
			// skipping what its own list already holds.
			start = sub.from
		}
	}
	w.rv = start
	w.reopenLocked(watching)
	for _, req := range batch {
		close(req.done)
	}
}

// consistentFloor is the version the batch's lists must be at least as new
// as: the watch's position, or, when nothing is watched and a reflector asks
// for a consistent list (a replica's first lists), the server's current
// version, read once for the whole batch.
//
// Why not a consistent list of each range: when the API server's watch
// cache lags by more than its 3 s wait, it serves a consistent list from
// etcd, which cannot filter by label, so every range's list reads and
// decodes the whole namespace. A replica restarted under load in the chaos
// scenario sent 48 such VMI lists at once (16 ranges, three selections);
// they held the server for a minute and timed out, and the replica acted on
// none of its ranges for about two minutes. A list that asks only for the
// current version (limit 1, no selector) costs one object even from etcd,
// and lists at least as new as that version are served by the watch cache,
// which answers "too large resource version" with a retry after a second
// rather than reading etcd.
func (w *SharedWatch) consistentFloor(position string, batch []*subscribeRequest) (string, error) {
	if position != "" || !slices.ContainsFunc(batch, func(req *subscribeRequest) bool { return req.rv == "" }) {
		return position, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), currentVersionTimeout)
	defer cancel()
	list, err := w.lw.ListWithContext(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", fmt.Errorf("shared %s watch: current version: %w", w.resource, err)
	}
	accessor, err := meta.ListAccessor(list)
	if err != nil {
		return "", fmt.Errorf("shared %s watch: current version: %w", w.resource, err)
	}
	return accessor.GetResourceVersion(), nil
}

// currentVersionTimeout bounds the read of the server's current version, as
// client-go's default request timeout does for other requests.
const currentVersionTimeout = time.Minute

// listRange lists range i alone, at least as new as floor (see
// consistentFloor) and as rv, the reflector's own version (it must not go
// back in time). With neither, any recent state will do, from the watch
// cache ("0", as the reflector's first list).
func (w *SharedWatch) listRange(ctx context.Context, i int, position, rv string) (runtime.Object, error) {
	opts := metav1.ListOptions{ResourceVersion: rv}
	if floor := newerRV(position, rv); floor != "" && floor != "0" {
		opts.ResourceVersion = floor
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	g := guard{sel: w.by(NewSet(w.count, i)), resource: w.resource, metrics: w.metrics}
	return g.list(ctx, w.lw, opts)
}

// streamList is sub's watch for a watch-list: list's objects as added
// events and the bookmark that ends them (an example of the resource,
// annotated), then the range's events.
func (w *SharedWatch) streamList(sub *subscription, list, example runtime.Object) (watch.Interface, error) {
	items, err := meta.ExtractListWithAlloc(list)
	if err != nil {
		return nil, fmt.Errorf("shared %s watch: list of range %d: %w", w.resource, sub.i, err)
	}
	bookmark := example.DeepCopyObject()
	accessor, err := meta.Accessor(bookmark)
	if err != nil {
		return nil, fmt.Errorf("shared %s watch: bookmark: %w", w.resource, err)
	}
	accessor.SetResourceVersion(sub.from)
	accessor.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	initial := make([]watch.Event, 0, len(items)+1)
	for _, item := range items {
		initial = append(initial, watch.Event{Type: watch.Added, Object: item})
	}
	initial = append(initial, watch.Event{Type: watch.Bookmark, Object: bookmark})

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs[sub.i] != sub || sub.streaming {
		return nil, apierrors.NewResourceExpired(fmt.Sprintf("shared %s watch: range %d must list again", w.resource, sub.i))
	}
	sub.mu.Lock()
	sub.queue = append(initial, sub.queue...)
	sub.mu.Unlock()
	sub.streaming = true
	go sub.pump()
	return sub, nil
}

// stream is range i's watch: the events its subscription has gathered
// since its list at rv. A second watch, or one from elsewhere, is refused
// as expired, so that the reflector lists (and subscribes) again.
func (w *SharedWatch) stream(i int, rv string) (watch.Interface, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sub := w.subs[i]
	if sub == nil || sub.streaming || sub.from != rv {
		return nil, apierrors.NewResourceExpired(fmt.Sprintf("shared %s watch: range %d must list again", w.resource, i))
	}
	sub.streaming = true
	go sub.pump()
	return sub, nil
}

// unsubscribe ends sub and, unless a newer subscription of the range
// replaced it, reopens the watch without its range.
func (w *SharedWatch) unsubscribe(sub *subscription) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sub.close()
	if w.subs[sub.i] != sub {
		return
	}
	w.forgetLocked(sub)
	w.reopenLocked(w.stopLocked())
}

// forgetLocked takes sub's range out of the watch and forgets the objects
// handed to it.
func (w *SharedWatch) forgetLocked(sub *subscription) {
	delete(w.subs, sub.i)
	for key, i := range w.owner {
		if i == sub.i {
			delete(w.owner, key)
		}
	}
}

func expiredStatus(message string) *metav1.Status {
	status := apierrors.NewResourceExpired(message).Status()
	return &status
}

// stopLocked stops the current watch, if one runs, and reports whether one
// did: from now on its goroutine hands nothing out.
func (w *SharedWatch) stopLocked() bool {
	w.gen++
	if w.stop == nil {
		return false
	}
	w.stop()
	w.stop = nil
	return true
}

// reopenLocked opens the watch for the subscribed ranges from the position,
// if any range is subscribed; reselect counts it as a reopening for a
// changed set of ranges.
func (w *SharedWatch) reopenLocked(reselect bool) {
	w.stopLocked()
	if len(w.subs) == 0 {
		w.rv = ""
		return
	}
	if reselect {
		w.metrics.watchReselected(w.resource)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	go w.run(ctx, w.gen, w.by(w.setLocked()))
}

// Backoff of reopening a watch that failed or ended at once, as client-go's
// reflector backs off.
const (
	watchBackoffInitial = 800 * time.Millisecond
	watchBackoffMax     = 30 * time.Second
)

// run watches sel from the position until ctx ends or gen is outdated,
// resuming from where it was whenever the server ends the watch.
func (w *SharedWatch) run(ctx context.Context, gen uint64, sel Selection) {
	g := guard{sel: sel, resource: w.resource, metrics: w.metrics}
	delay := watchBackoffInitial
	for first := true; ; first = false {
		w.mu.Lock()
		if w.gen != gen {
			w.mu.Unlock()
			return
		}
		rv := w.rv
		w.mu.Unlock()
		if !first {
			w.metrics.watchRestarted(w.resource)
		}
		// A timeout as the reflector's: 5–10 minutes, so that a silently
		// broken connection is noticed.
		timeout := int64(300 + rand.IntN(300))
		opts := metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout}
		sel.apply(&opts)
		began := w.clock.Now()
		handed := 0
		ww, err := w.lw.WatchWithContext(ctx, opts)
		if err == nil {
			handed, err = w.consume(ctx, gen, g, ww)
		}
		if ctx.Err() != nil {
			return
		}
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			w.logger.V(2).Info("Shared watch cannot resume: every range lists again", "resourceVersion", rv, "err", err)
			w.expire(gen, err)
			return
		}
		if err == nil && (handed > 0 || w.clock.Since(began) >= time.Second) {
			delay = watchBackoffInitial
			continue
		}
		w.logger.V(2).Info("Shared watch failed; reopening", "resourceVersion", rv, "err", err, "after", delay)
		select {
		case <-ctx.Done():
			return
		case <-w.clock.After(delay):
		}
		delay = min(2*delay, watchBackoffMax)
	}
}

// consume hands the events of ww out until it ends, returning how many.
func (w *SharedWatch) consume(ctx context.Context, gen uint64, g guard, ww watch.Interface) (int, error) {
	defer ww.Stop()
	handed := 0
	for {
		select {
		case <-ctx.Done():
			return handed, nil
		case ev, ok := <-ww.ResultChan():
			if !ok {
				return handed, nil
			}
			if ev.Type == watch.Error {
				return handed, apierrors.FromObject(ev.Object)
			}
			w.mu.Lock()
			if w.gen != gen {
				w.mu.Unlock()
				return handed, nil
			}
			w.handOutLocked(ev, g)
			w.mu.Unlock()
			handed++
		}
	}
}

// handOutLocked gives ev to the subscription of the range it belongs to,
// and moves the position past it.
func (w *SharedWatch) handOutLocked(ev watch.Event, g guard) {
	accessor, err := meta.Accessor(ev.Object)
	if err != nil {
		w.logger.Error(err, "Shared watch event without metadata dropped", "type", ev.Type)
		return
	}
	// Read before the event is handed out: the informer that takes it
	// transforms the object (TrimForCache) in its own goroutine.
	if rv := accessor.GetResourceVersion(); rv != "" {
		defer func() { w.rv = rv }()
	}
	if ev.Type == watch.Bookmark {
		for _, sub := range w.subs {
			sub.send(watch.Event{Type: watch.Bookmark, Object: ev.Object.DeepCopyObject()})
		}
		return
	}
	key, err := cache.MetaNamespaceKeyFunc(ev.Object)
	if err != nil {
		w.logger.Error(err, "Shared watch event without a key dropped", "type", ev.Type)
		return
	}
	prev, known := w.owner[key]
	if ev.Type == watch.Deleted {
		delete(w.owner, key)
		if !known {
			if !g.keep(ev.Object) {
				return
			}
			if prev, known = g.sel.rangeOf(accessor); !known {
				return
			}
		}
		if sub := w.subs[prev]; sub != nil {
			sub.send(ev)
		}
		return
	}
	i, ok := 0, g.keep(ev.Object)
	if ok {
		i, ok = g.sel.rangeOf(accessor)
	}
	if known && (!ok || prev != i) {
		// Another range's now, or (from a server that does not filter)
		// nobody's: to the range it left it is gone, as a watch of that
		// range alone would say.
		delete(w.owner, key)
		if sub := w.subs[prev]; sub != nil {
			// A copy: each informer transforms what it is given.
			sub.send(watch.Event{Type: watch.Deleted, Object: ev.Object.DeepCopyObject()})
		}
	}
	if !ok {
		return
	}
	w.owner[key] = i
	if sub := w.subs[i]; sub != nil {
		sub.send(ev)
	}
}

// expire ends every subscription with err (410: the position is gone), so
// that each range's reflector lists again.
func (w *SharedWatch) expire(gen uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gen != gen {
		return
	}
	for _, sub := range w.subs {
		sub.fail(expiredStatus(err.Error()))
	}
	clear(w.subs)
	clear(w.owner)
	w.rv = ""
	w.stopLocked() // the caller's watch, which returns
}

// olderRV reports whether resourceVersion a is older than b; versions
// that are not etcd revisions compare as not older.
func olderRV(a, b string) bool {
	an, aerr := strconv.ParseUint(a, 10, 64)
	bn, berr := strconv.ParseUint(b, 10, 64)
	return aerr == nil && berr == nil && an < bn
}

// newerRV is the newer of two resourceVersions, or a if b is not an etcd
// revision.
func newerRV(a, b string) string {
	if _, err := strconv.ParseUint(b, 10, 64); err != nil || olderRV(b, a) {
		return a
	}
	if _, err := strconv.ParseUint(a, 10, 64); err != nil && a != "" {
		return a
	}
	return b
}

// subscription is one range's share of a SharedWatch, and the watch its
// informer reads.
type subscription struct {
	w    *SharedWatch
	i    int
	from string
	// fromRV is from as an etcd revision (0 if it is none): events up to
	// it are in the range's list.
	fromRV uint64
	// stopAfter cancels the unsubscription when the reflector's context
	// ends.
	stopAfter func() bool
	// streaming is set once the range's reflector watches (guarded by the
	// shared watch's mu).
	streaming bool

	mu     sync.Mutex
	queue  []watch.Event
	failed *metav1.Status
	closed bool
	wake   chan struct{}
	done   chan struct{}
	result chan watch.Event
}

func newSubscription(w *SharedWatch, i int, from string) *subscription {
	fromRV, _ := strconv.ParseUint(from, 10, 64)
	return &subscription{w: w, i: i, from: from, fromRV: fromRV, stopAfter: func() bool { return false },
		wake: make(chan struct{}, 1), done: make(chan struct{}), result: make(chan watch.Event)}
}

// send queues ev unless the range's list already holds it: the watch may
// resume from before that list.
func (s *subscription) send(ev watch.Event) {
	if accessor, err := meta.Accessor(ev.Object); err == nil && s.fromRV > 0 {
		if rv, err := strconv.ParseUint(accessor.GetResourceVersion(), 10, 64); err == nil && rv <= s.fromRV {
			return
		}
	}
	s.mu.Lock()
	if !s.closed && s.failed == nil {
		s.queue = append(s.queue, ev)
	}
	s.mu.Unlock()
	s.poke()
}

// fail ends the stream with status after what is queued.
func (s *subscription) fail(status *metav1.Status) {
	s.mu.Lock()
	s.failed = status
	s.mu.Unlock()
	s.poke()
}

func (s *subscription) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// close ends the subscription; its stream closes.
func (s *subscription) close() {
	s.stopAfter()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
}

// pump passes the queue to the result channel, in order, until closed.
func (s *subscription) pump() {
	defer close(s.result)
	for {
		s.mu.Lock()
		var ev watch.Event
		have := len(s.queue) > 0
		if have {
			ev = s.queue[0]
			s.queue[0] = watch.Event{}
			s.queue = s.queue[1:]
		}
		failed := s.failed
		s.mu.Unlock()
		switch {
		case have:
		case failed != nil:
			select {
			case s.result <- watch.Event{Type: watch.Error, Object: failed}:
			case <-s.done:
			}
			return
		default:
			select {
			case <-s.wake:
				continue
			case <-s.done:
				return
			}
		}
		select {
		case s.result <- ev:
		case <-s.done:
			return
		}
	}
}

// ResultChan implements watch.Interface.
func (s *subscription) ResultChan() <-chan watch.Event { return s.result }

// Stop implements watch.Interface: the range's informer stopped watching,
// so the range leaves the shared watch.
func (s *subscription) Stop() { s.w.unsubscribe(s) }
