package shard

import (
	"context"
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

	roleRange  = "range"
	roleMember = "member"
)

func (c *Config) rangeLeaseName(i int) string      { return fmt.Sprintf("%s-range-%d", c.Name, i) }
func (c *Config) memberLeaseName(id string) string { return fmt.Sprintf("%s-member-%s", c.Name, id) }
func (c *Config) leaderLeaseName() string          { return c.Name + "-leader" }
func (c *Config) assignmentName() string           { return c.Name + "-assignment" }

func (c *Config) newLease(name, role string, now time.Time) *coordinationv1.Lease {
	mt := metav1.NewMicroTime(now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: c.Namespace,
			Labels:    map[string]string{LabelShard: c.Name, LabelRole: role},
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

func (c *Config) newRangeLease(i int, now time.Time) *coordinationv1.Lease {
	l := c.newLease(c.rangeLeaseName(i), roleRange, now)
	l.Labels[LabelRange] = strconv.Itoa(i)
	return l
}

func holder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
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

// renew writes l with a fresh renewTime; the resourceVersion precondition
// makes it fail if anyone else wrote the lease since.
func (c *Config) renew(ctx context.Context, l *coordinationv1.Lease, now time.Time) (*coordinationv1.Lease, error) {
	l = l.DeepCopy()
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	return c.Client.CoordinationV1().Leases(c.Namespace).Update(ctx, l, metav1.UpdateOptions{})
}
