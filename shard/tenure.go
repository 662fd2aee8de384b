package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// A member acts on its ranges within a tenure: from taking its member Lease
// to losing it. Each range Lease it takes names the tenure, and the range is
// held for as long as the tenure lasts, so that only the member Lease is
// renewed: the idle write rate grows with the members, not the ranges.
//
// The fence is the member's: a tenure renewed at time t lets the member act
// until t + RenewDeadline. Nobody else ends a tenure but by a write to the
// member Lease (a revocation, or a new tenure) made with the resourceVersion
// they saw unchanged for a whole LeaseDuration on their own clock: the write
// succeeds only if the holder did not renew since, so the holder's last
// renewal began before that version was first seen, and its fence fell at
// least LeaseDuration − RenewDeadline before. A range Lease bound to a tenure
// that ended is free.
type tenure struct {
	id    string
	gen   int64
	ended chan struct{}
	// lease is the member Lease as this member last wrote it; heartbeat
	// goroutine only.
	lease *coordinationv1.Lease
}

// fence is until when this member may act on the ranges it holds in tenure
// gen.
type fence struct {
	gen      int64
	deadline int64 // UnixNano
}

func newTenureID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// heartbeat keeps this member's tenure until ctx is done: it begins one, and
// renews it every retry period (at once when poked: leaving is announced
// without waiting).
func (m *Manager) heartbeat(ctx context.Context) {
	ticker := m.cfg.Clock.NewTicker(m.cfg.RetryPeriod)
	defer ticker.Stop()
	for {
		if err := m.beat(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Member heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-m.beatNow:
		case <-ticker.C():
		}
	}
}

// beat renews the current tenure, or begins one. It renews the member Lease
// from the copy it last wrote: under load the lease informer lags behind the
// member's own writes, and renewing the informer's copy conflicts (in a
// 20,000-VMI chaos run 54 of 2,162 heartbeats failed so, each a missed
// heartbeat that makes the others suspect a live member). On a conflict it
// reads the Lease from the server: still this tenure's, it renews that;
// otherwise the tenure was ended by someone else, and so is every range in
// it.
func (m *Manager) beat(ctx context.Context) error {
	t := m.tenure.Load()
	if t == nil {
		return m.begin(ctx)
	}
	start := m.cfg.Clock.Now()
	f := m.fence.Load()
	if f == nil || start.UnixNano() >= f.deadline {
		// Renewals failed for a whole renew deadline: the member stopped
		// acting on the tenure's ranges, so a new tenure may free them.
		m.end(ctx, t, "its renewals failed until the renew deadline")
		return m.begin(ctx)
	}
	renewCtx, cancel := context.WithDeadline(ctx, time.Unix(0, f.deadline))
	defer cancel()
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	renew := func(l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
		l = l.DeepCopy()
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(start))
		if m.leaving.Load() {
			l.Annotations[AnnotationLeaving] = "true"
		}
		annotateProtocol(l)
		m.annotateSynced(l)
		return leases.Update(renewCtx, l, metav1.UpdateOptions{})
	}
	renewed, err := renew(t.lease)
	if apierrors.IsConflict(err) {
		var fresh *coordinationv1.Lease
		if fresh, err = leases.Get(renewCtx, t.lease.Name, metav1.GetOptions{}); err == nil {
			if holder(fresh) != m.cfg.Identity || tenureOf(fresh) != t.id {
				m.end(ctx, t, "another member ended it")
				return nil
			}
			renewed, err = renew(fresh)
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		m.end(ctx, t, "its member Lease was deleted")
		return nil
	case err != nil:
		m.cfg.Metrics.renewFailed()
		return err
	}
	t.lease = renewed
	m.fence.Store(&fence{gen: t.gen, deadline: start.Add(m.cfg.RenewDeadline).UnixNano()})
	return nil
}

// annotateSynced writes AnnotationSynced into the member Lease l, from its
// first write on (a holder hands over at once to a member whose Lease lacks
// it), and removes one a previous process of this identity left.
func (m *Manager) annotateSynced(l *coordinationv1.Lease) {
	if synced := m.synced.Load(); synced != nil {
		l.Annotations[AnnotationSynced] = *synced
	} else {
		delete(l.Annotations, AnnotationSynced)
	}
}

// begin takes the member Lease for a new tenure: at once if it is missing,
// released, or in this member's own tenure that just ended; in any other
// tenure (this identity's previous process, say) only once it went
// unchanged for a lease duration. It reads the Lease from the server: a
// tenure begins rarely, and a stale copy would only conflict.
func (m *Manager) begin(ctx context.Context) error {
	if m.leaving.Load() {
		return nil
	}
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	name := m.cfg.memberLeaseName(m.cfg.Identity)
	start := m.cfg.Clock.Now()
	id := newTenureID()
	current, err := leases.Get(ctx, name, metav1.GetOptions{})
	var taken *coordinationv1.Lease
	switch {
	case apierrors.IsNotFound(err):
		fresh := m.cfg.newLease(name, roleMember, id, start)
		annotateProtocol(fresh)
		m.annotateSynced(fresh)
		taken, err = leases.Create(ctx, fresh, metav1.CreateOptions{})
	case err != nil:
		return err
	case holder(current) != "" && tenureOf(current) != m.endedTenure && !m.obs.free(current, start):
		return fmt.Errorf("member Lease %s is in tenure %q, free at %s at the earliest", name, tenureOf(current), m.obs.expiry(current, start).Format(time.RFC3339))
	default:
		next := current.DeepCopy()
		setHolder(next, m.cfg.Identity, id, m.cfg.LeaseDuration, start)
		annotateProtocol(next)
		m.annotateSynced(next)
		taken, err = leases.Update(ctx, next, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	t := &tenure{id: id, gen: m.tenureGen.Add(1), ended: make(chan struct{}), lease: taken}
	m.fence.Store(&fence{gen: t.gen, deadline: start.Add(m.cfg.RenewDeadline).UnixNano()})
	m.tenure.Store(t)
	klog.FromContext(ctx).V(2).Info("Tenure began", "tenure", id)
	m.poke()
	m.pokeLeader()
	return nil
}

// end ends tenure t at once: the fence falls, and every range held in it is
// given up for expiry (nothing more may be written for it).
func (m *Manager) end(ctx context.Context, t *tenure, why string) {
	if !m.tenure.CompareAndSwap(t, nil) {
		return
	}
	m.fence.Store(nil)
	m.endedTenure = t.id
	close(t.ended)
	klog.FromContext(ctx).Info("Tenure ended: its ranges are given up", "tenure", t.id, "why", why)
	m.poke()
}

// fenceOf is the deadline of tenure gen, and whether it still stands.
func (m *Manager) fenceOf(gen int64) (time.Time, bool) {
	f := m.fence.Load()
	if f == nil || f.gen != gen || m.cfg.Clock.Now().UnixNano() >= f.deadline {
		return time.Time{}, false
	}
	return time.Unix(0, f.deadline), true
}

// rangeState is what a member may do about a range Lease held by another.
type rangeState struct {
	// free: the Lease may be taken now.
	free bool
	// revoke, when set, is the member Lease whose tenure must be ended
	// first: unchanged for a lease duration, its holder stopped acting.
	revoke *coordinationv1.Lease
	// until is when to look again, if neither.
	until time.Time
}

// rangeLeaseState tells whether range Lease l, held by someone, is free at
// now: its tenure ended, or may be ended. A Lease without a tenure counts
// as held until it went unchanged for its duration.
func (m *Manager) rangeLeaseState(l *coordinationv1.Lease, now time.Time) rangeState {
	id, bound := holder(l), tenureOf(l)
	if bound == "" {
		if m.obs.free(l, now) {
			return rangeState{free: true}
		}
		return rangeState{until: m.obs.expiry(l, now)}
	}
	if t := m.tenure.Load(); id == m.cfg.Identity && t != nil && bound == t.id {
		return rangeState{free: true} // ours, in this tenure, but not worked on
	}
	name := m.cfg.memberLeaseName(id)
	member, err := m.leaseLister.Get(name)
	switch {
	case apierrors.IsNotFound(err):
		// Deleted while bound: its holder may act until its deadline.
		gone := m.obs.goneSince(name, now)
		if free := gone.Add(m.cfg.LeaseDuration); now.Before(free) {
			return rangeState{until: free}
		}
		return rangeState{free: true}
	case err != nil:
		return rangeState{}
	case holder(member) != id || tenureOf(member) != bound:
		return rangeState{free: true} // that tenure ended
	case m.obs.free(member, now):
		return rangeState{revoke: member}
	}
	return rangeState{until: m.obs.expiry(member, now)}
}

// revoke ends the tenure of member Lease l, which went unchanged for a whole
// lease duration: written with the resourceVersion seen, it fails if the
// holder renewed since.
func (m *Manager) revoke(ctx context.Context, l *coordinationv1.Lease) bool {
	revoked := l.DeepCopy()
	setHolder(revoked, "", "", m.cfg.LeaseDuration, m.cfg.Clock.Now())
	_, err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).Update(ctx, revoked, metav1.UpdateOptions{})
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Tenure not revoked", "member", holder(l), "tenure", tenureOf(l), "err", err)
		return false
	}
	klog.FromContext(ctx).V(2).Info("Revoked the tenure of a member that stopped renewing", "member", holder(l), "tenure", tenureOf(l))
	return true
}
