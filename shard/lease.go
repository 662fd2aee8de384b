package shard

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Labels on every Lease and ConfigMap the members share.
const (
	// LabelShard carries Config.Name.
	LabelShard = "virtshard.io/shard"
	// LabelRole is "range" or "member".
	LabelRole = "virtshard.io/role"
	// LabelRange is a range Lease's range index.
	LabelRange = "virtshard.io/range"
	// LabelFleetRange, on a member of a fleet (a replica set's VMI, a
	// pool's VM), is the range of the fleet that counts it; the member
	// itself is acted on where its own placement puts it (FleetsRange).
	LabelFleetRange = "virtshard.io/fleet-range"

	roleRange  = "range"
	roleMember = "member"
)

// Annotations on the Leases.
const (
	// AnnotationTenure on a member Lease names its holder's current tenure;
	// on a range Lease, the tenure of the holder it is bound to: the range
	// is held while that tenure lasts, with no writes of its own.
	AnnotationTenure = "virtshard.io/tenure"
	// AnnotationLeaving on a member Lease: the member is handing its ranges
	// off before it stops; the leader assigns it none.
	AnnotationLeaving = "virtshard.io/leaving"
	// AnnotationSynced on a member Lease: the ranges assigned to the member,
	// not yet held, whose caches it has synced (a Set's String, "" for
	// none). A holder hands such a range over at once; to a member whose
	// Lease has the annotation but not the range, it hands it over once the
	// range appears there or after Config.HandoffWait. Without the
	// annotation (no Preparer) the range is handed over at once.
	AnnotationSynced = "virtshard.io/synced"
)

func (c *Config) rangeLeaseName(i int) string      { return fmt.Sprintf("%s-range-%d", c.Name, i) }
func (c *Config) memberLeaseName(id string) string { return fmt.Sprintf("%s-member-%s", c.Name, id) }
func (c *Config) leaderLeaseName() string          { return c.Name + "-leader" }
func (c *Config) assignmentName() string           { return c.Name + "-assignment" }

func (c *Config) newLease(name, role, tenure string, now time.Time) *coordinationv1.Lease {
	mt := metav1.NewMicroTime(now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   c.Namespace,
			Labels:      map[string]string{LabelShard: c.Name, LabelRole: role},
			Annotations: map[string]string{AnnotationTenure: tenure},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(c.Identity),
			LeaseDurationSeconds: ptr.To(int32(c.LeaseDuration / time.Second)),
			AcquireTime:          &mt,
			RenewTime:            &mt,
			LeaseTransitions:     ptr.To(int32(0)),
		},
	}
}

func (c *Config) newRangeLease(i int, tenure string, now time.Time) *coordinationv1.Lease {
	l := c.newLease(c.rangeLeaseName(i), roleRange, tenure, now)
	l.Labels[LabelRange] = strconv.Itoa(i)
	return l
}

func holder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// tenureOf is the tenure a Lease names, "" for none.
func tenureOf(l *coordinationv1.Lease) string {
	if l == nil {
		return ""
	}
	return l.Annotations[AnnotationTenure]
}

// setHolder makes l held by id in tenure (id "" releases it) from now.
func setHolder(l *coordinationv1.Lease, id, tenure string, duration time.Duration, now time.Time) {
	mt := metav1.NewMicroTime(now)
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	delete(l.Annotations, AnnotationLeaving)
	l.Spec.RenewTime = &mt
	if id == "" {
		l.Spec.HolderIdentity, l.Spec.AcquireTime = nil, nil
		delete(l.Annotations, AnnotationTenure)
		return
	}
	l.Spec.HolderIdentity = ptr.To(id)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(duration / time.Second))
	l.Spec.AcquireTime = &mt
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	l.Annotations[AnnotationTenure] = tenure
}

// observations remembers, per Lease, when this member last saw it change.
// A lease counts as expired once it has not changed for its duration as
// measured on this member's clock, as client-go's leader election does: the
// holder's clock and timestamps are never trusted.
type observations struct {
	mu   sync.Mutex
	seen map[string]observed
	// gone records when a lease was seen deleted.
	gone map[string]time.Time
}

type observed struct {
	resourceVersion string
	at              time.Time
}

func newObservations() *observations {
	return &observations{seen: map[string]observed{}, gone: map[string]time.Time{}}
}

// observe records l as seen at now, and returns when its current version was
// first seen.
func (o *observations) observe(l *coordinationv1.Lease, now time.Time) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.gone, l.Name)
	prev, ok := o.seen[l.Name]
	if ok && prev.resourceVersion == l.ResourceVersion {
		return prev.at
	}
	o.seen[l.Name] = observed{resourceVersion: l.ResourceVersion, at: now}
	return now
}

// deleted records that the lease name was seen deleted at now.
func (o *observations) deleted(name string, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.seen, name)
	o.gone[name] = now
}

// goneSince returns when the lease name was seen deleted; a lease never
// seen counts as deleted from now.
func (o *observations) goneSince(name string, now time.Time) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	if at, ok := o.gone[name]; ok {
		return at
	}
	o.gone[name] = now
	return now
}

// deletedAt returns when the lease name was seen deleted, if it was.
func (o *observations) deletedAt(name string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.gone[name]
	return at, ok
}

// expired reports whether l, unchanged since observedAt, has expired at now.
func expired(l *coordinationv1.Lease, observedAt, now time.Time) bool {
	d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	return !now.Before(observedAt.Add(d))
}

// expiry is when l expires unless it changes, as seen from here.
func (o *observations) expiry(l *coordinationv1.Lease, now time.Time) time.Time {
	return o.observe(l, now).Add(time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second)
}

// free reports whether l may be taken by another member at now.
func (o *observations) free(l *coordinationv1.Lease, now time.Time) bool {
	if holder(l) == "" {
		return true
	}
	return expired(l, o.observe(l, now), now)
}
