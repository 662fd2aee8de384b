package shard

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/virtshard/virtshard/client/optimisticfake"
)

// tenureFixture is a member "me" over a fake clientset and a fake clock,
// its lease lister an indexer the test fills: the tenure rules without
// informers or timing.
type tenureFixture struct {
	m       *Manager
	client  *fake.Clientset
	clock   *clocktesting.FakeClock
	indexer cache.Indexer
}

func newTenureFixture(t *testing.T) *tenureFixture {
	t.Helper()
	ranges, err := NewRanges(4, KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	f := &tenureFixture{client: optimisticfake.NewClientset(), clock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)),
		indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})}
	f.m, err = NewManager(Config{Client: f.client, Namespace: "ns", Identity: "me", Ranges: ranges, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	f.m.leaseLister = coordinationlisters.NewLeaseLister(f.indexer).Leases("ns")
	return f
}

// lease puts a Lease held by holder in tenure (holder "": released) into
// the lister.
func (f *tenureFixture) lease(t *testing.T, name, holder, tenure, resourceVersion string) *coordinationv1.Lease {
	t.Helper()
	l := f.m.cfg.newLease(name, roleRange, tenure, f.clock.Now())
	l.ResourceVersion, l.UID = resourceVersion, types.UID("uid-"+name)
	if holder == "" {
		setHolder(l, "", "", f.m.cfg.LeaseDuration, f.clock.Now())
	} else {
		l.Spec.HolderIdentity = &holder
	}
	if tenure == "" {
		delete(l.Annotations, AnnotationTenure)
	}
	if err := f.indexer.Add(l); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestARangeBoundToALiveTenureIsHeldUntilThatTenureCouldEnd(t *testing.T) {
	f := newTenureFixture(t)
	rangeLease := f.lease(t, "virtshard-range-1", "b", "t1", "10")
	member := f.lease(t, "virtshard-member-b", "b", "t1", "11")
	lease := f.m.cfg.LeaseDuration

	state := f.m.rangeLeaseState(rangeLease, f.clock.Now())
	if state.free || state.revoke != nil || !state.until.Equal(f.clock.Now().Add(lease)) {
		t.Fatalf("while b's tenure renews: %+v, want held until a lease duration from now", state)
	}
	// b renews (a new resourceVersion) just before that: held again for a
	// whole lease duration from then.
	f.clock.Step(lease - time.Second)
	member.ResourceVersion = "12"
	if err := f.indexer.Update(member); err != nil {
		t.Fatal(err)
	}
	if state = f.m.rangeLeaseState(rangeLease, f.clock.Now()); state.free || state.revoke != nil {
		t.Fatalf("after b renewed: %+v, want held", state)
	}
	// Unchanged for a whole lease duration: the tenure must be revoked
	// before the range is taken, and never the range taken as it is.
	f.clock.Step(lease)
	state = f.m.rangeLeaseState(rangeLease, f.clock.Now())
	if state.free || state.revoke == nil || state.revoke.Name != "virtshard-member-b" || state.revoke.ResourceVersion != "12" {
		t.Fatalf("after b stopped renewing: %+v, want b's member Lease revoked at resourceVersion 12 first", state)
	}
}

func TestARangeIsFreeOnceItsTenureEnded(t *testing.T) {
	for _, tc := range []struct {
		name           string
		holder, tenure string
	}{
		{"revoked", "", ""},
		{"a new tenure of its holder", "b", "t2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTenureFixture(t)
			rangeLease := f.lease(t, "virtshard-range-1", "b", "t1", "10")
			f.lease(t, "virtshard-member-b", tc.holder, tc.tenure, "11")
			if state := f.m.rangeLeaseState(rangeLease, f.clock.Now()); !state.free {
				t.Errorf("%+v, want free at once: nobody ends a tenure before its holder stopped acting", state)
			}
		})
	}
}

func TestARangeWhoseMemberLeaseIsGoneIsFreeALeaseDurationLater(t *testing.T) {
	f := newTenureFixture(t)
	rangeLease := f.lease(t, "virtshard-range-1", "b", "t1", "10")
	first := f.clock.Now()
	if state := f.m.rangeLeaseState(rangeLease, first); state.free || !state.until.Equal(first.Add(f.m.cfg.LeaseDuration)) {
		t.Fatalf("member Lease never seen: %+v, want held for a lease duration from the first look (its holder may act until its deadline)", state)
	}
	f.clock.Step(f.m.cfg.LeaseDuration)
	if state := f.m.rangeLeaseState(rangeLease, f.clock.Now()); !state.free {
		t.Errorf("a lease duration later: %+v, want free", state)
	}
}

func TestARangeLeaseWithoutTenureIsHeldUntilItExpires(t *testing.T) {
	f := newTenureFixture(t)
	rangeLease := f.lease(t, "virtshard-range-1", "b", "", "10")
	if state := f.m.rangeLeaseState(rangeLease, f.clock.Now()); state.free || state.revoke != nil {
		t.Fatalf("%+v, want held", state)
	}
	f.clock.Step(f.m.cfg.LeaseDuration)
	if state := f.m.rangeLeaseState(rangeLease, f.clock.Now()); !state.free {
		t.Errorf("unchanged for a lease duration: %+v, want free", state)
	}
}

func (f *tenureFixture) memberLease(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	l, err := f.client.CoordinationV1().Leases("ns").Get(context.Background(), "virtshard-member-me", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestATenureEndsWhenAnotherMemberRevokesIt(t *testing.T) {
	f := newTenureFixture(t)
	ctx := context.Background()
	if err := f.m.beat(ctx); err != nil {
		t.Fatal(err)
	}
	first := f.m.tenure.Load()
	if first == nil || tenureOf(f.memberLease(t)) != first.id || holder(f.memberLease(t)) != "me" {
		t.Fatalf("no tenure began: %+v", f.memberLease(t))
	}
	f.m.heldGen[2].Store(first.gen)
	if _, ok := f.m.Deadline(2); !ok {
		t.Fatal("a range held in the tenure is not held")
	}
	// Someone revokes the tenure: the next heartbeat conflicts, reads the
	// Lease, and ends the tenure, with its ranges at once.
	revoked := f.memberLease(t)
	setHolder(revoked, "", "", f.m.cfg.LeaseDuration, f.clock.Now())
	if _, err := f.client.CoordinationV1().Leases("ns").Update(ctx, revoked, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(f.m.cfg.RetryPeriod)
	if err := f.m.beat(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.ended:
	default:
		t.Fatal("the revoked tenure did not end")
	}
	if _, ok := f.m.Deadline(2); ok {
		t.Error("a range of the revoked tenure is still held")
	}
	// The next heartbeat begins a new tenure on the released Lease.
	if err := f.m.beat(ctx); err != nil {
		t.Fatal(err)
	}
	second := f.m.tenure.Load()
	if second == nil || second.id == first.id || tenureOf(f.memberLease(t)) != second.id {
		t.Errorf("after the revocation: tenure %+v, member Lease %v; want a new tenure", second, f.memberLease(t).Annotations)
	}
	if _, ok := f.m.Deadline(2); ok {
		t.Error("a range of the old tenure is held in the new one")
	}
}

func TestATenureWhoseRenewalsFailEndsAtItsDeadline(t *testing.T) {
	f := newTenureFixture(t)
	ctx := context.Background()
	if err := f.m.beat(ctx); err != nil {
		t.Fatal(err)
	}
	first := f.m.tenure.Load()
	f.m.heldGen[1].Store(first.gen)
	failing := true
	f.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return failing, nil, errors.New("the API server does not answer")
	})
	for range 3 {
		f.clock.Step(f.m.cfg.RetryPeriod)
		if err := f.m.beat(ctx); err == nil {
			t.Fatal("a renewal that failed reported no error")
		}
	}
	if _, ok := f.m.Deadline(1); !ok {
		t.Fatal("the range was given up before the renew deadline")
	}
	f.clock.Step(f.m.cfg.RenewDeadline - 3*f.m.cfg.RetryPeriod)
	if _, ok := f.m.Deadline(1); ok {
		t.Fatal("the range is still held at the renew deadline")
	}
	// Traffic flows again: the tenure, which its member stopped acting on,
	// ends, and a new one begins from the Lease as it is.
	failing = false
	if err := f.m.beat(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.ended:
	default:
		t.Fatal("the lapsed tenure did not end")
	}
	if second := f.m.tenure.Load(); second == nil || second.id == first.id || tenureOf(f.memberLease(t)) != second.id {
		t.Errorf("tenure %+v after the lapse, want a new one", second)
	}
}

func TestANewProcessWaitsOutItsPredecessorsTenure(t *testing.T) {
	f := newTenureFixture(t)
	ctx := context.Background()
	// The previous process of this identity left its Lease in tenure t0.
	old := f.m.cfg.newLease("virtshard-member-me", roleMember, "t0", f.clock.Now())
	if _, err := f.client.CoordinationV1().Leases("ns").Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.m.beat(ctx); err == nil || f.m.tenure.Load() != nil {
		t.Fatal("a tenure began over a predecessor's that may still act")
	}
	f.clock.Step(f.m.cfg.LeaseDuration - time.Second)
	if err := f.m.beat(ctx); err == nil || f.m.tenure.Load() != nil {
		t.Fatal("a tenure began before the predecessor's went unchanged for a lease duration")
	}
	f.clock.Step(time.Second)
	if err := f.m.beat(ctx); err != nil {
		t.Fatal(err)
	}
	if tn := f.m.tenure.Load(); tn == nil || tenureOf(f.memberLease(t)) != tn.id || tn.id == "t0" {
		t.Errorf("tenure %+v once the predecessor's expired, want a new one on the Lease", tn)
	}
}

// A member frozen past its renew deadline wakes up to a rebalance of a
// range it held (the assignment's watch event) before its heartbeat ends
// the tenure: the range was lost to expiry, whatever asked for its release,
// and it is given up as such (no flush, caches kept, counted as expiry).
func TestARangeReleasedAfterItsTenureFellIsGivenUpForExpiry(t *testing.T) {
	f := newTenureFixture(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	f.m.cfg.Metrics = NewMetrics(reg)
	var calls []string
	f.m.cfg.Handler = keepRecorder{&calls}
	if err := f.m.beat(ctx); err != nil {
		t.Fatal(err)
	}
	f.m.startHolding(ctx, 1, f.lease(t, "virtshard-range-1", "me", f.m.tenure.Load().id, "10"), f.m.tenure.Load())
	f.m.mu.Lock()
	h := f.m.held[1]
	f.m.mu.Unlock()

	f.clock.Step(f.m.cfg.RenewDeadline)
	h.requestRelease(ReasonRebalance)
	<-h.done

	if want := []string{"acquired", "keep", "releasing expiry"}; !slices.Equal(calls, want) {
		t.Errorf("handler calls %v, want %v", calls, want)
	}
	if n := testutil.ToFloat64(f.m.cfg.Metrics.handoffs.WithLabelValues(string(ReasonExpiry))); n != 1 {
		t.Errorf("%v handoffs counted for expiry, want 1", n)
	}
	if n := testutil.ToFloat64(f.m.cfg.Metrics.handoffs.WithLabelValues(string(ReasonRebalance))); n != 0 {
		t.Errorf("%v handoffs counted for rebalance, want 0", n)
	}
}

// keepRecorder records a Preparer's calls in order.
type keepRecorder struct{ calls *[]string }

func (r keepRecorder) Acquired(context.Context, int) error {
	*r.calls = append(*r.calls, "acquired")
	return nil
}
func (r keepRecorder) Releasing(_ context.Context, _ int, reason Reason) {
	*r.calls = append(*r.calls, "releasing "+string(reason))
}
func (r keepRecorder) Prepare(int)     { *r.calls = append(*r.calls, "prepare") }
func (r keepRecorder) Unprepare(int)   { *r.calls = append(*r.calls, "unprepare") }
func (r keepRecorder) Synced(int) bool { return false }
func (r keepRecorder) Keep(int)        { *r.calls = append(*r.calls, "keep") }

// Just after an outage the lease informer may still hold this member's
// Lease as it was before (unchanged for a lease duration) while the new
// tenure stands: the leader counts itself live all the same, or it would
// publish an assignment without itself and move its ranges away and back.
func TestTheLeaderCountsItselfLiveWhileItsTenureStands(t *testing.T) {
	f := newTenureFixture(t)
	stale := f.lease(t, "virtshard-member-me", "me", "an-earlier-tenure", "1")
	stale.Labels[LabelRole] = roleMember
	f.m.obs.observe(stale, f.clock.Now())
	f.clock.Step(2 * f.m.cfg.LeaseDuration)
	if live, _, err := f.m.liveMembers(); err != nil || len(live) != 0 {
		t.Fatalf("live %v (%v) with no tenure and a stale Lease, want none", live, err)
	}

	if err := f.m.beat(context.Background()); err != nil {
		t.Fatal(err)
	}
	if live, _, err := f.m.liveMembers(); err != nil || !slices.Equal(live, []string{"me"}) {
		t.Errorf("live %v (%v) while its tenure stands, want [me]", live, err)
	}
	f.m.leaving.Store(true)
	if live, _, err := f.m.liveMembers(); err != nil || len(live) != 0 {
		t.Errorf("live %v (%v) while leaving, want none", live, err)
	}
}

func TestARebalancedRangeIsKeptUntilItsSuccessorSyncedIt(t *testing.T) {
	ctx := context.Background()
	f := newTenureFixture(t)
	a := &Assignment{Owners: []string{"me", "b", "b", "me"}}
	successor := func(annotations map[string]string) {
		t.Helper()
		l := f.lease(t, "virtshard-member-b", "b", "t1", "11")
		l.Labels[LabelRole] = roleMember
		maps.Copy(l.Annotations, annotations)
		if err := f.indexer.Update(l); err != nil {
			t.Fatal(err)
		}
	}
	moved := f.clock.Now()
	deadline := moved.Add(f.m.cfg.HandoffWait)
	check := func(what string, i int, wantWait bool) {
		t.Helper()
		wait, until := f.m.awaitSuccessor(ctx, a, i, f.clock.Now())
		if wait != wantWait || (wait && !until.Equal(deadline)) {
			t.Errorf("%s: awaitSuccessor(range %d) = %v until %s, want %v until %s", what, i, wait, until, wantWait, deadline)
		}
	}

	check("successor's lease not seen yet", 1, true)
	successor(nil)
	check("successor does not say what it synced", 1, false)
	successor(map[string]string{AnnotationSynced: ""})
	check("successor synced nothing yet", 1, true)
	successor(map[string]string{AnnotationSynced: "2"})
	check("successor synced another range", 1, true)
	check("successor synced this range", 2, false)
	successor(map[string]string{AnnotationSynced: "not a set"})
	check("successor's annotation does not parse", 1, false)

	successor(map[string]string{AnnotationSynced: ""})
	f.clock.Step(f.m.cfg.HandoffWait - time.Second)
	check("a second before the bound", 1, true)
	f.clock.Step(time.Second)
	check("at the bound", 1, false)

	f.m.movedAt[1] = time.Time{}
	f.m.leaving.Store(true)
	check("this member leaving", 1, false)
}

func TestHeartbeatAnnouncesSyncedRanges(t *testing.T) {
	ctx := context.Background()
	f := newTenureFixture(t)
	if err := f.m.beat(ctx); err != nil { // begins the tenure
		t.Fatal(err)
	}
	read := func() (string, bool) {
		t.Helper()
		l, err := f.client.CoordinationV1().Leases("ns").Get(ctx, "virtshard-member-me", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := l.Annotations[AnnotationSynced]
		return v, ok
	}
	if err := f.m.beat(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok := read(); ok {
		t.Errorf("a member that prepares nothing announces synced ranges %q", v)
	}
	f.m.announceSynced("1,3")
	select {
	case <-f.m.beatNow:
	default:
		t.Error("a new synced set did not ask for a heartbeat at once")
	}
	if err := f.m.beat(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := read(); v != "1,3" {
		t.Errorf("announced %q, want %q", v, "1,3")
	}
	f.m.announceSynced("1,3")
	select {
	case <-f.m.beatNow:
		t.Error("an unchanged synced set asked for a heartbeat")
	default:
	}
}

// A restarted member's first write replaces what its previous process
// announced: holders must not hand over to caches that are gone.
func TestNewTenureReplacesAPreviousProcessesSyncedRanges(t *testing.T) {
	ctx := context.Background()
	f := newTenureFixture(t)
	f.m.synced.Store(new(string)) // a Preparer's, before it synced anything
	old := f.m.cfg.newLease("virtshard-member-me", roleMember, "previous", f.clock.Now())
	setHolder(old, "", "", f.m.cfg.LeaseDuration, f.clock.Now())
	old.Annotations[AnnotationSynced] = "0-3"
	if _, err := f.client.CoordinationV1().Leases("ns").Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.m.beat(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := f.client.CoordinationV1().Leases("ns").Get(ctx, "virtshard-member-me", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := l.Annotations[AnnotationSynced]; !ok || v != "" || tenureOf(l) == "previous" {
		t.Errorf("new tenure %q announces synced ranges %q (present: %v), want none", tenureOf(l), v, ok)
	}
}
