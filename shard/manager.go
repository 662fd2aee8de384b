package shard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/informers"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// EventType is a change in what a member considers its own.
type EventType string

const (
	// EventAcquired: the member holds the range's lease and may act on it.
	EventAcquired EventType = "acquired"
	// EventReleased: the member no longer acts on the range.
	EventReleased EventType = "released"
)

// Event is one step of a member's ownership timeline; Config.Observer
// receives them (tests check mutual exclusion from them).
type Event struct {
	Member string
	Range  int
	Type   EventType
	Reason Reason
	// Time is when ownership began or ended on this member's clock; for an
	// expiry that is the renew deadline, from which Holds returned false.
	Time time.Time
}

// Manager is one member of a sharded controller: it heartbeats its member
// Lease, takes part in the leader election, and claims, renews and releases
// range Leases as the leader's assignment says.
type Manager struct {
	cfg Config
	// Observer, if set before Run, receives every ownership event.
	Observer func(Event)

	obs        *observations
	wake       chan struct{}
	leaderWake chan struct{}
	beatNow    chan struct{}
	// leaving is set once Run's context is done: the member takes no new
	// ranges and, if leading, assigns none to itself.
	leaving atomic.Bool

	leaseLister coordinationlisters.LeaseNamespaceLister
	cmLister    corelisters.ConfigMapNamespaceLister

	// tenure is the current tenure (nil between tenures), fence until when
	// it lets this member act, and heldGen[i] the tenure range i is held in
	// (0: not held): together the lock-free fence Holds reads.
	tenure    atomic.Pointer[tenure]
	fence     atomic.Pointer[fence]
	tenureGen atomic.Int64
	heldGen   []atomic.Int64
	// endedTenure is this member's last tenure that ended; heartbeat
	// goroutine only.
	endedTenure string
	active      []atomic.Bool
	assignment  atomic.Pointer[Assignment]
	assignedAt  []time.Time // when the assignment gave us range i; reconcile loop only
	// movedAt[i]: when the assignment moved range i, held here, to another
	// member; handingOver[i]: its release was asked for. Reconcile loop only.
	movedAt     []time.Time
	handingOver []bool
	// synced is what this member's heartbeat writes in AnnotationSynced:
	// nil unless the handler is a Preparer.
	synced atomic.Pointer[string]
	// prepared[i]: the Preparer was asked to warm range i and has not since
	// been told to drop it, nor has the range been held; it is dropped
	// once unwanted past keepPrepared[i]. Reconcile loop only.
	prepared     []bool
	keepPrepared []time.Time
	leading      atomic.Bool
	// leftOut are the live members the leader assigns nothing because they
	// share no protocol version with it, and the versions they speak.
	// Leader loop only.
	leftOut map[string]protocols

	mu   sync.Mutex
	held map[int]*holding
	// kept[i]: the Preparer kept range i's caches when its holding
	// expired, and the reconcile loop has not yet counted them prepared.
	kept []bool
	// failures[i] counts Acquired failures in a row; range i is not tried
	// again before retryAt[i], with exponential backoff.
	failures []int
	retryAt  []time.Time
	wg       sync.WaitGroup
}

// maxAcquireBackoff caps the wait before retrying a range whose Acquired failed.
const maxAcquireBackoff = time.Minute

// holding is a range whose lease this member holds, in tenure.
type holding struct {
	i       int
	lease   *coordinationv1.Lease
	tenure  *tenure
	release chan Reason
	done    chan struct{}
}

// NewManager validates cfg and returns a Manager.
func NewManager(cfg Config) (*Manager, error) {
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := cfg.Ranges.Count()
	cfg.Metrics.setRanges(n)
	m := &Manager{
		cfg:          cfg,
		obs:          newObservations(),
		wake:         make(chan struct{}, 1),
		leaderWake:   make(chan struct{}, 1),
		beatNow:      make(chan struct{}, 1),
		heldGen:      make([]atomic.Int64, n),
		active:       make([]atomic.Bool, n),
		assignedAt:   make([]time.Time, n),
		movedAt:      make([]time.Time, n),
		handingOver:  make([]bool, n),
		prepared:     make([]bool, n),
		kept:         make([]bool, n),
		keepPrepared: make([]time.Time, n),
		held:         map[int]*holding{},
		failures:     make([]int, n),
		retryAt:      make([]time.Time, n),
	}
	if _, ok := cfg.Handler.(Preparer); ok {
		m.synced.Store(new(string))
	}
	return m, nil
}

// Holds reports whether this member may act on range i now: it holds the
// lease and its last renewal is recent enough that nobody else can have
// taken it. Controllers check it before every write path; it takes no lock.
func (m *Manager) Holds(i int) bool {
	_, ok := m.Deadline(i)
	return ok
}

// Deadline is the fence of range i: when this member's claim on it could
// lapse unless its tenure is renewed, and whether it holds i now. Every
// renewal of the member Lease moves it forward; it stays a margin
// (LeaseDuration - RenewDeadline) ahead of the moment anyone else could end
// the tenure.
func (m *Manager) Deadline(i int) (time.Time, bool) {
	if i < 0 || i >= len(m.heldGen) {
		return time.Time{}, false
	}
	gen := m.heldGen[i].Load()
	if gen == 0 {
		return time.Time{}, false
	}
	return m.fenceOf(gen)
}

// Owned returns the ranges this member holds and whose Acquired returned.
func (m *Manager) Owned() Set {
	s := NewSet(m.cfg.Ranges.Count())
	for i := range m.active {
		if m.active[i].Load() && m.Holds(i) {
			s.Add(i)
		}
	}
	return s
}

// Ready reports whether this member is in a tenure, has seen an assignment
// and every range it holds has been acquired (its caches synced).
func (m *Manager) Ready() bool {
	if m.assignment.Load() == nil || m.tenure.Load() == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.held {
		if !m.active[i].Load() {
			return false
		}
	}
	return true
}

// Leading reports whether this member is the leader.
func (m *Manager) Leading() bool { return m.leading.Load() }

// Run takes part until ctx is done, then leaves gracefully within about
// Config.ShutdownTimeout: it marks its member Lease leaving so that the
// leader (itself, if leading) reassigns its ranges, hands each range over as
// the new assignment moves it (the new owner can claim it at once, with no
// expiry to wait for), releases whatever is left at the timeout, ends its
// tenure by deleting the member Lease, and gives up leadership last.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("member", m.cfg.Identity)
	ctx = klog.NewContext(ctx, logger)

	informerCtx, stopInformers := context.WithCancel(context.Background())
	defer stopInformers()
	if err := m.startInformers(informerCtx, ctx.Done()); err != nil {
		return err
	}
	base := klog.NewContext(context.Background(), logger)
	heartbeatCtx, stopHeartbeat := context.WithCancel(base)
	electCtx, stopElect := context.WithCancel(base)
	claimCtx, stopClaim := context.WithCancel(base)
	var heartbeat, elect, claim sync.WaitGroup
	heartbeat.Go(func() { m.heartbeat(heartbeatCtx) })
	elect.Go(func() { m.elect(electCtx) })
	claim.Go(func() { m.claim(claimCtx) })

	<-ctx.Done()
	logger.V(2).Info("Leaving: handing off all ranges")
	m.leaving.Store(true)
	select {
	case m.beatNow <- struct{}{}: // announce it
	default:
	}
	m.pokeLeader()
	m.waitHandedOff(m.cfg.ShutdownTimeout / 2)
	stopClaim()
	claim.Wait()
	m.wg.Wait()
	// A holding that expired while the claim loop stopped kept its caches
	// after the loop's last unprepareAll.
	m.unprepareAll()
	// Every range is released (or given up): the tenure may end. The
	// member Lease goes with the resourceVersion last written, so that a
	// tenure someone else began meanwhile stays.
	stopHeartbeat()
	heartbeat.Wait()
	if t := m.tenure.Load(); t != nil {
		deleteCtx, cancel := context.WithTimeout(base, m.cfg.ShutdownTimeout)
		err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).Delete(deleteCtx, t.lease.Name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &t.lease.ResourceVersion}})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "Deleting the member lease failed; its tenure will expire")
		}
	}
	stopElect()
	elect.Wait()
	return nil
}

// waitHandedOff waits until this member holds no range, or timeout.
func (m *Manager) waitHandedOff(timeout time.Duration) {
	deadline := m.cfg.Clock.Now().Add(timeout)
	for m.cfg.Clock.Now().Before(deadline) {
		m.mu.Lock()
		n := len(m.held)
		m.mu.Unlock()
		if n == 0 {
			return
		}
		m.cfg.Clock.Sleep(20 * time.Millisecond)
	}
}

// startInformers starts the lease and assignment caches under ctx and waits
// for them until they sync or abort is closed.
func (m *Manager) startInformers(ctx context.Context, abort <-chan struct{}) error {
	selector := labels.SelectorFromSet(labels.Set{LabelShard: m.cfg.Name}).String()
	leases := informers.NewSharedInformerFactoryWithOptions(m.cfg.Client, 0,
		informers.WithNamespace(m.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	cms := informers.NewSharedInformerFactoryWithOptions(m.cfg.Client, 0,
		informers.WithNamespace(m.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", m.cfg.assignmentName()).String()
		}))
	leaseInformer := leases.Coordination().V1().Leases()
	cmInformer := cms.Core().V1().ConfigMaps()
	m.leaseLister = leaseInformer.Lister().Leases(m.cfg.Namespace)
	m.cmLister = cmInformer.Lister().ConfigMaps(m.cfg.Namespace)

	// Every lease change is observed as it arrives, so that expiry counts
	// from the holder's last write, not from when we first looked; and any
	// change may free a range for us or change the live members.
	onLease := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			m.obs.observe(l, m.cfg.Clock.Now())
			m.checkHeld(l, false)
		}
		m.poke()
		m.pokeLeader()
	}
	wake := cache.ResourceEventHandlerFuncs{
		AddFunc:    onLease,
		UpdateFunc: func(_, obj any) { onLease(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				m.obs.deleted(l.Name, m.cfg.Clock.Now())
				m.checkHeld(l, true)
			}
			m.poke()
			m.pokeLeader()
		},
	}
	if _, err := leaseInformer.Informer().AddEventHandler(wake); err != nil {
		return err
	}
	onAssignment := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			m.setAssignment(klog.FromContext(ctx), cm)
		}
	}
	if _, err := cmInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onAssignment,
		UpdateFunc: func(_, obj any) { onAssignment(obj) },
	}); err != nil {
		return err
	}
	leases.Start(ctx.Done())
	cms.Start(ctx.Done())
	for typ, ok := range leases.WaitForCacheSync(abort) {
		if !ok {
			return fmt.Errorf("sync %v informer", typ)
		}
	}
	for typ, ok := range cms.WaitForCacheSync(abort) {
		if !ok {
			return fmt.Errorf("sync %v informer", typ)
		}
	}
	return nil
}

// checkHeld fences a range this member holds at once if its Lease was
// deleted, or written by anyone after the write that took it (by hand: a
// member takes a range only once the holder's tenure ended).
func (m *Manager) checkHeld(l *coordinationv1.Lease, deleted bool) {
	if l.Labels[LabelRole] != roleRange {
		return
	}
	i, err := strconv.Atoi(l.Labels[LabelRange])
	if err != nil {
		return
	}
	m.mu.Lock()
	h := m.held[i]
	m.mu.Unlock()
	if h == nil || l.UID != h.lease.UID {
		return
	}
	if !deleted {
		newer, err := resourceversion.CompareResourceVersion(l.ResourceVersion, h.lease.ResourceVersion)
		if (err == nil && newer <= 0) || (holder(l) == m.cfg.Identity && tenureOf(l) == h.tenure.id) {
			return
		}
	}
	m.heldGen[i].Store(0)
	h.requestRelease(ReasonExpiry)
}

func (m *Manager) setAssignment(logger klog.Logger, cm *corev1.ConfigMap) {
	a, err := decodeAssignment(cm)
	if err != nil {
		logger.Error(err, "Ignoring an assignment that does not decode")
		return
	}
	if cur := m.assignment.Load(); cur != nil && cur.Generation >= a.Generation {
		return
	}
	m.assignment.Store(&a)
	mine := a.Of(m.cfg.Identity)
	m.cfg.Metrics.setAssignment(a.Generation, len(mine))
	logger.V(2).Info("Assignment changed", "generation", a.Generation, "mine", NewSet(m.cfg.Ranges.Count(), mine...).String())
	m.poke()
}

// poke wakes the claim loop.
func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// pokeLeader wakes the leader's publish loop.
func (m *Manager) pokeLeader() {
	select {
	case m.leaderWake <- struct{}{}:
	default:
	}
}

// claim runs the claim loop until ctx is done, then asks every holding to
// release.
func (m *Manager) claim(ctx context.Context) {
	ticker := m.cfg.Clock.NewTicker(m.cfg.RetryPeriod)
	defer ticker.Stop()
	for {
		// A lease we wait for expires without any event: wake up for it.
		var expiry <-chan time.Time
		if next := m.reconcile(ctx); !next.IsZero() {
			expiry = m.cfg.Clock.After(next.Sub(m.cfg.Clock.Now()) + 10*time.Millisecond)
		}
		select {
		case <-expiry:
		case <-ctx.Done():
			m.mu.Lock()
			for _, h := range m.held {
				h.requestRelease(ReasonRelease)
			}
			m.mu.Unlock()
			m.unprepareAll()
			return
		case <-m.wake:
		case <-ticker.C():
		}
	}
}

func (h *holding) requestRelease(reason Reason) {
	select {
	case h.release <- reason:
	default: // already asked
	}
}

// reconcile releases the ranges the assignment moved away, warms the caches
// of the ranges this member is or will likely be given, and tries to take
// them. It returns when it should look again: when the first lease it waits
// for expires, or the first member turns suspect (zero if neither).
//
// The claims go out together: after a member dies, its ranges expire within
// one renewal period of each other, and one round trip after another to a
// loaded API server would add up to seconds of takeover.
func (m *Manager) reconcile(ctx context.Context) (next time.Time) {
	a := m.assignment.Load()
	now := m.cfg.Clock.Now()
	successors, nextSuspicion := m.successors(a, now)
	var claim []int
	preparer, _ := m.cfg.Handler.(Preparer)
	synced := NewSet(m.cfg.Ranges.Count())
	for i := range m.cfg.Ranges.Count() {
		want := a != nil && i < len(a.Owners) && a.Owners[i] == m.cfg.Identity
		if !want {
			m.assignedAt[i] = time.Time{}
		} else if m.assignedAt[i].IsZero() {
			m.assignedAt[i] = now
		}
		m.mu.Lock()
		h := m.held[i]
		kept := m.kept[i]
		m.kept[i] = false
		backingOff := now.Before(m.retryAt[i])
		m.mu.Unlock()
		if kept {
			// Read with the holding, in one critical section: kept is set
			// as the holding goes. Prepared, and wanted for a lease duration.
			m.prepared[i] = true
			m.keepPrepared[i] = now.Add(m.cfg.LeaseDuration)
		}
		// A range this member would get if the suspects died is claimed
		// too: its lease is free only once its holder stopped renewing for
		// a whole lease duration, and the leader's assignment, which waits
		// for the member lease to expire, may come up to a renewal period
		// later. It is kept until the assignment says otherwise.
		predicted := successors != nil && successors[i] == m.cfg.Identity
		open := h == nil && !m.leaving.Load() && !backingOff
		m.prepare(i, h != nil, open && (want || predicted), now)
		if want && h == nil && m.prepared[i] && preparer.Synced(i) {
			synced.Add(i)
		}
		if h == nil || want || predicted {
			m.movedAt[i], m.handingOver[i] = time.Time{}, false
		}
		switch {
		case h != nil && !want && !predicted:
			if !m.handingOver[i] {
				if wait, until := m.awaitSuccessor(ctx, a, i, now); wait {
					nextSuspicion = earliest(nextSuspicion, until)
					continue
				}
				m.handingOver[i] = true
			}
			h.requestRelease(ReasonRebalance)
		case open && (want || predicted):
			claim = append(claim, i)
		}
	}
	m.cfg.Metrics.setPrepared(m.prepared)
	if preparer != nil {
		m.announceSynced(synced.String())
	}
	return earliest(m.acquire(ctx, claim, now), nextSuspicion)
}

// awaitSuccessor reports whether range i, held here, should be kept a while
// longer although the assignment gave it to successor, and until when at
// most: while the successor syncs its caches of the range, for at most
// HandoffWait. Releasing at once would leave the range acted on by nobody
// for as long as that sync takes; under load that was up to about 85 s for
// a replica restarted in the chaos scenario. Keeping it costs nothing: only
// the holder acts, and the successor claims the range the moment it is
// released. A member leaving hands over at once (its ShutdownTimeout bounds
// the handoff), as does one whose successor does not say what it synced.
func (m *Manager) awaitSuccessor(ctx context.Context, a *Assignment, i int, now time.Time) (wait bool, until time.Time) {
	if m.leaving.Load() || a == nil || i >= len(a.Owners) || a.Owners[i] == "" {
		return false, time.Time{}
	}
	successor := a.Owners[i]
	if m.movedAt[i].IsZero() {
		m.movedAt[i] = now
	}
	deadline := m.movedAt[i].Add(m.cfg.HandoffWait)
	logger := klog.FromContext(ctx).WithValues("range", i, "successor", successor)
	if !now.Before(deadline) {
		logger.Info("Handing a range over before its successor synced its caches", "waited", m.cfg.HandoffWait)
		return false, time.Time{}
	}
	lease, err := m.leaseLister.Get(m.cfg.memberLeaseName(successor))
	if err != nil {
		// Not seen yet, or gone: the assignment will change or the lease
		// appear; either pokes the claim loop.
		return true, deadline
	}
	value, announces := lease.Annotations[AnnotationSynced]
	if !announces {
		return false, time.Time{}
	}
	set, err := ParseSet(m.cfg.Ranges.Count(), value)
	if err != nil || set.Has(i) {
		if err == nil {
			logger.V(2).Info("Handing a range over to a successor that synced its caches", "waited", now.Sub(m.movedAt[i]))
		}
		return false, time.Time{}
	}
	return true, deadline
}

// announceSynced has the next heartbeat, at once, tell the holders which of
// the ranges assigned here, not yet held, have synced caches.
func (m *Manager) announceSynced(value string) {
	if old := m.synced.Swap(&value); old != nil && *old == value {
		return
	}
	select {
	case m.beatNow <- struct{}{}:
	default:
	}
}

// claimPlan is how to take one range Lease: create it (lease nil) or
// update it, after revoking the tenure of member Lease revoke if set.
type claimPlan struct {
	i      int
	lease  *coordinationv1.Lease
	revoke *coordinationv1.Lease
}

// acquire takes the ranges of claim that are free, ending first the
// tenures that must end (one write per dead member, not per range), and
// returns when the first one it waits for may be free.
func (m *Manager) acquire(ctx context.Context, claim []int, now time.Time) (next time.Time) {
	t := m.tenure.Load()
	if t == nil {
		return time.Time{} // a tenure's start pokes the claim loop
	}
	var plans []claimPlan
	revokes := map[string]*coordinationv1.Lease{}
	for _, i := range claim {
		p, ok, at := m.plan(i, now)
		next = earliest(next, at)
		if !ok {
			continue
		}
		if p.revoke != nil {
			revokes[p.revoke.Name] = p.revoke
		}
		plans = append(plans, p)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	revoked := map[string]bool{}
	for name, l := range revokes {
		wg.Go(func() {
			ok := m.revoke(ctx, l)
			mu.Lock()
			defer mu.Unlock()
			revoked[name] = ok
		})
	}
	wg.Wait()
	for _, p := range plans {
		if p.revoke == nil || revoked[p.revoke.Name] {
			wg.Go(func() { m.take(ctx, p, t) })
		}
	}
	wg.Wait()
	return next
}

// plan says how range i's Lease may be taken now (ok), or when to look
// again.
func (m *Manager) plan(i int, now time.Time) (p claimPlan, ok bool, next time.Time) {
	name := m.cfg.rangeLeaseName(i)
	lease, err := m.leaseLister.Get(name)
	switch {
	case apierrors.IsNotFound(err):
		// A lease deleted under its holder is not free at once: the holder
		// may act until its deadline.
		if gone, ok := m.obs.deletedAt(name); ok && now.Before(gone.Add(m.cfg.LeaseDuration)) {
			return p, false, gone.Add(m.cfg.LeaseDuration)
		}
		return claimPlan{i: i}, true, time.Time{}
	case err != nil:
		return p, false, time.Time{}
	case holder(lease) == "":
		return claimPlan{i: i, lease: lease}, true, time.Time{}
	}
	state := m.rangeLeaseState(lease, now)
	if !state.free && state.revoke == nil {
		return p, false, state.until
	}
	return claimPlan{i: i, lease: lease, revoke: state.revoke}, true, time.Time{}
}

// take writes range p.i's Lease, bound to tenure t, with the
// resourceVersion it was planned on, and starts holding the range.
func (m *Manager) take(ctx context.Context, p claimPlan, t *tenure) {
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	start := m.cfg.Clock.Now()
	var lease *coordinationv1.Lease
	var err error
	if p.lease == nil {
		lease, err = leases.Create(ctx, m.cfg.newRangeLease(p.i, t.id, start), metav1.CreateOptions{})
	} else {
		taken := p.lease.DeepCopy()
		setHolder(taken, m.cfg.Identity, t.id, m.cfg.LeaseDuration, start)
		lease, err = leases.Update(ctx, taken, metav1.UpdateOptions{})
	}
	if err != nil {
		// Usually a conflict: someone else was faster, or our cache is behind.
		klog.FromContext(ctx).V(4).Info("Range not acquired", "range", p.i, "err", err)
		return
	}
	m.startHolding(ctx, p.i, lease, t)
}

// prepare asks the Preparer, if the handler is one, to warm range i when
// wanted, and to drop it once it has not been wanted for a lease duration:
// a member that misses heartbeats now and then under load costs one sync of
// what it would leave, not one per miss. A held range's caches are
// Acquired's from then on.
func (m *Manager) prepare(i int, held, wanted bool, now time.Time) {
	p, ok := m.cfg.Handler.(Preparer)
	switch {
	case !ok:
	case held:
		m.prepared[i] = false
	case wanted:
		m.keepPrepared[i] = now.Add(m.cfg.LeaseDuration)
		if !m.prepared[i] {
			p.Prepare(i)
			m.prepared[i] = true
		}
	case m.prepared[i] && !now.Before(m.keepPrepared[i]):
		p.Unprepare(i)
		m.prepared[i] = false
	}
}

// unprepareAll drops every prepared range that is not held, at once.
func (m *Manager) unprepareAll() {
	m.mu.Lock()
	for i, kept := range m.kept {
		if kept {
			m.kept[i] = false
			m.prepared[i] = true
		}
	}
	m.mu.Unlock()
	for i := range m.keepPrepared {
		m.keepPrepared[i] = time.Time{}
		m.mu.Lock()
		held := m.held[i] != nil
		m.mu.Unlock()
		m.prepare(i, held, false, m.cfg.Clock.Now())
	}
	m.cfg.Metrics.setPrepared(m.prepared)
}

// successors returns the owners the leader would assign if the suspect
// member died, and when the next healthy member turns suspect unless it
// heartbeats. A member is suspect once its lease has not changed for
// SuspectAfter, long before it expires: warming the ranges it would leave
// takes their cache sync off the takeover. It stays suspect after its lease
// expired for as long as the assignment still gives it ranges, until the
// leader has moved them.
//
// It predicts nothing (nil) unless exactly one other member is suspect.
// Several suspects at once mean an overloaded API server far more often
// than several deaths, and warming caches for them all would load it more;
// when this member looks suspect itself, it is the one cut off and its view
// is stale.
func (m *Manager) successors(a *Assignment, now time.Time) (owners []string, nextSuspicion time.Time) {
	leases, err := m.leaseLister.List(labels.SelectorFromSet(labels.Set{LabelRole: roleMember}))
	if err != nil || a == nil || m.leaving.Load() {
		return nil, time.Time{}
	}
	var healthy []string
	suspects := 0
	for _, l := range leases {
		id := holder(l)
		if id == "" {
			continue
		}
		seen := m.obs.observe(l, now)
		if suspectAt := seen.Add(m.cfg.SuspectAfter); now.Before(suspectAt) {
			if l.Annotations[AnnotationLeaving] == "" {
				healthy = append(healthy, id)
			}
			nextSuspicion = earliest(nextSuspicion, suspectAt)
			continue
		}
		switch {
		case id == m.cfg.Identity:
			return nil, nextSuspicion
		case !expired(l, seen, now) || slices.Contains(a.Owners, id):
			suspects++
		}
	}
	if suspects != 1 {
		return nil, nextSuspicion
	}
	return Assign(m.cfg.Ranges.Count(), healthy, m.cfg.Load, m.cfg.ReplicationFactor), nextSuspicion
}

// earliest is the earlier of a and b, a zero time meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (m *Manager) startHolding(ctx context.Context, i int, lease *coordinationv1.Lease, t *tenure) {
	if _, ok := m.fenceOf(t.gen); !ok {
		return // the tenure ended meanwhile: the Lease names a dead tenure, free for anyone
	}
	h := &holding{i: i, lease: lease, tenure: t, release: make(chan Reason, 1), done: make(chan struct{})}
	m.heldGen[i].Store(t.gen)
	m.mu.Lock()
	m.held[i] = h
	m.cfg.Metrics.setOwned(len(m.held))
	m.mu.Unlock()
	m.emit(Event{Member: m.cfg.Identity, Range: i, Type: EventAcquired, Time: m.cfg.Clock.Now()})
	klog.FromContext(ctx).V(2).Info("Range acquired", "range", i)
	assignedAt := m.assignedAt[i]
	m.wg.Go(func() { m.hold(ctx, h, assignedAt) })
}

func (m *Manager) emit(e Event) {
	if m.Observer != nil {
		m.Observer(e)
	}
}

// hold runs one held range: Acquired, renewals, and the way out.
func (m *Manager) hold(ctx context.Context, h *holding, assignedAt time.Time) {
	logger := klog.FromContext(ctx).WithValues("range", h.i)
	kept := false
	defer func() {
		m.mu.Lock()
		// In the same critical section as the holding goes: the reconcile
		// loop sees the range either held or kept.
		delete(m.held, h.i)
		if kept {
			m.kept[h.i] = true
		}
		m.cfg.Metrics.setOwned(len(m.held))
		m.mu.Unlock()
		close(h.done)
		m.poke()
	}()

	acquireCtx, cancelAcquire := context.WithCancel(ctx)
	defer cancelAcquire()
	acquired := make(chan error, 1)
	go func() { acquired <- m.cfg.Handler.Acquired(acquireCtx, h.i) }()

	var reason Reason
loop:
	for {
		select {
		case err := <-acquired:
			acquired = nil
			if err != nil {
				backoff := m.backOff(h.i)
				logger.Error(err, "Acquiring range failed, giving it back", "retryIn", backoff)
				reason = ReasonFailed
				break loop
			}
			m.mu.Lock()
			m.failures[h.i] = 0
			m.mu.Unlock()
			m.active[h.i].Store(true)
			m.cfg.Metrics.activeChanged(h.i, true)
			if !assignedAt.IsZero() {
				m.cfg.Metrics.acquired(m.cfg.Clock.Since(assignedAt).Seconds())
			}
		case reason = <-h.release:
			break loop
		case <-ctx.Done():
			reason = ReasonRelease
			break loop
		case <-h.tenure.ended:
			reason = ReasonExpiry
			break loop
		}
	}

	if m.active[h.i].Swap(false) {
		m.cfg.Metrics.activeChanged(h.i, false)
	}
	cancelAcquire()
	if acquired != nil {
		<-acquired // Acquired must return once its context is done
	}
	deadline, standing := m.fenceOf(h.tenure.gen)
	if !standing {
		// Whatever asked for the release, the tenure fell first: the
		// range is given up for expiry.
		reason = ReasonExpiry
	}
	m.cfg.Metrics.handoff(reason)
	logger.V(2).Info("Stopping work on range", "reason", reason)

	if reason == ReasonExpiry {
		// Holds has been false since the fence fell (at the latest now):
		// that is when ownership ended.
		fell := m.cfg.Clock.Now()
		if f := m.fence.Load(); f != nil && f.gen == h.tenure.gen {
			fell = minTime(time.Unix(0, f.deadline), fell)
		}
		m.heldGen[h.i].Store(0)
		m.emit(Event{Member: m.cfg.Identity, Range: h.i, Type: EventReleased, Reason: ReasonExpiry, Time: fell})
		if p, ok := m.cfg.Handler.(Preparer); ok {
			p.Keep(h.i)
			kept = true
		}
		m.cfg.Handler.Releasing(context.Background(), h.i, ReasonExpiry)
		return
	}

	// Still the holder until the deadline: Releasing may flush writes.
	releaseCtx, cancel := context.WithDeadline(context.Background(), deadline)
	m.cfg.Handler.Releasing(releaseCtx, h.i, reason)
	cancel()
	m.heldGen[h.i].Store(0)
	m.emit(Event{Member: m.cfg.Identity, Range: h.i, Type: EventReleased, Reason: reason, Time: m.cfg.Clock.Now()})

	writeCtx, cancel := context.WithTimeout(context.Background(), m.cfg.ShutdownTimeout)
	defer cancel()
	released := h.lease.DeepCopy()
	setHolder(released, "", "", m.cfg.LeaseDuration, m.cfg.Clock.Now())
	if _, err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).Update(writeCtx, released, metav1.UpdateOptions{}); err != nil {
		// Not fatal: the lease expires on its own.
		logger.Error(err, "Releasing range lease failed; it will expire")
	}
}

// backOff records a failed Acquired of range i and returns how long the
// range is left alone: RetryPeriod, doubling per failure in a row, capped.
func (m *Manager) backOff(i int) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failures[i]++
	d := m.cfg.RetryPeriod << min(m.failures[i]-1, 16)
	d = min(d, maxAcquireBackoff)
	m.retryAt[i] = m.cfg.Clock.Now().Add(d)
	return d
}

// noteLeftOut logs the members left out of the assignment for their
// protocol when that changes, and counts them.
func (m *Manager) noteLeftOut(leftOut map[string]protocols) {
	m.cfg.Metrics.setIncompatible(len(leftOut))
	if maps.Equal(leftOut, m.leftOut) {
		return
	}
	for id, p := range leftOut {
		if q, ok := m.leftOut[id]; !ok || q != p {
			klog.Background().Info("Member assigned no ranges: it shares no shard protocol version with the leader",
				"member", id, "memberProtocols", p.String(), "leaderProtocols", ours.String())
		}
	}
	m.leftOut = leftOut
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// liveMembers are the members whose Lease changed within its duration as
// seen from here, sorted, and when the first of them expires unless renewed.
// This member is also live while its own tenure stands, whatever its
// informer shows: it knows that first-hand, and just after an API outage the
// watch may come back later than the heartbeat; an assignment without it
// would send its ranges away and back.
func (m *Manager) liveMembers() (live []string, nextExpiry time.Time, err error) {
	leases, err := m.leaseLister.List(labels.SelectorFromSet(labels.Set{LabelRole: roleMember}))
	if err != nil {
		return nil, nextExpiry, err
	}
	now := m.cfg.Clock.Now()
	leftOut := map[string]protocols{}
	for _, l := range leases {
		id := holder(l)
		if id == "" || l.Annotations[AnnotationLeaving] != "" || (id == m.cfg.Identity && m.leaving.Load()) {
			continue
		}
		if at := m.obs.expiry(l, now); now.Before(at) {
			nextExpiry = earliest(nextExpiry, at)
			if p := protocolsOf(l); !ours.compatible(p) {
				leftOut[id] = p
				continue
			}
			live = append(live, id)
		}
	}
	m.noteLeftOut(leftOut)
	if t := m.tenure.Load(); t != nil && !m.leaving.Load() && !slices.Contains(live, m.cfg.Identity) {
		if _, standing := m.fenceOf(t.gen); standing {
			live = append(live, m.cfg.Identity)
		}
	}
	slices.Sort(live)
	return live, nextExpiry, nil
}
