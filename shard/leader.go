package shard

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// elect takes part in the leader election until ctx is done; while leading,
// it publishes the assignment.
func (m *Manager) elect(ctx context.Context) {
	logger := klog.FromContext(ctx)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: m.cfg.leaderLeaseName(), Namespace: m.cfg.Namespace},
		Client:     m.cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: m.cfg.Identity},
		Labels:     map[string]string{LabelShard: m.cfg.Name},
	}
	leaseDuration, renewDeadline, retryPeriod := m.cfg.leaderTimings()
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            m.cfg.Name,
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				m.leading.Store(true)
				m.cfg.Metrics.setLeader(true)
				logger.V(2).Info("Leading: publishing the assignment")
				m.lead(ctx)
			},
			OnStoppedLeading: func() {
				m.leading.Store(false)
				m.cfg.Metrics.setLeader(false)
			},
		},
	})
	if err != nil {
		logger.Error(err, "Invalid leader election config")
		return
	}
	// Run returns when leadership is lost; stand again until ctx is done.
	for ctx.Err() == nil {
		elector.Run(ctx)
	}
}

// leaderTimings are the leader election's: half the range lease duration
// (whole seconds, at least one), so that a dead leader is replaced before
// the ranges of a dead member expire and the new leader is there to
// reassign them. Leadership only publishes advice, so a shorter lease risks
// nothing: the range Leases decide who acts.
func (c *Config) leaderTimings() (leaseDuration, renewDeadline, retryPeriod time.Duration) {
	leaseDuration = max(time.Second, (c.LeaseDuration / 2).Truncate(time.Second))
	renewDeadline = leaseDuration * 7 / 10
	retryPeriod = min(c.RetryPeriod/4, renewDeadline/2)
	return leaseDuration, renewDeadline, retryPeriod
}

// lead publishes the assignment for the live members until ctx is done. It
// wakes on member lease changes, on every tick, and when the first live
// member's lease expires, which no event announces.
func (m *Manager) lead(ctx context.Context) {
	ticker := m.cfg.Clock.NewTicker(m.cfg.RetryPeriod / 2)
	defer ticker.Stop()
	for {
		next, err := m.publish(ctx)
		if err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Publishing the assignment failed", "err", err)
		}
		var expiry <-chan time.Time
		if !next.IsZero() {
			expiry = m.cfg.Clock.After(next.Sub(m.cfg.Clock.Now()) + 10*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-m.leaderWake:
		case <-expiry:
		case <-ticker.C():
		}
	}
}

// publish writes the assignment for the current live members if it changed.
// The resourceVersion precondition keeps two leaders (an old one that has
// not noticed yet) from both bumping the generation.
// It returns when the first live member's lease expires unless renewed.
func (m *Manager) publish(ctx context.Context) (nextExpiry time.Time, err error) {
	members, nextExpiry, err := m.liveMembers()
	if err != nil {
		return nextExpiry, err
	}
	return nextExpiry, m.write(ctx, members)
}

// write publishes the assignment for members if it changed.
func (m *Manager) write(ctx context.Context, members []string) error {
	owners := Assign(m.cfg.Ranges.Count(), members, m.cfg.Load, m.cfg.ReplicationFactor)
	cms := m.cfg.Client.CoreV1().ConfigMaps(m.cfg.Namespace)
	current, err := m.cmLister.Get(m.cfg.assignmentName())
	if apierrors.IsNotFound(err) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: m.cfg.assignmentName(), Namespace: m.cfg.Namespace, Labels: map[string]string{LabelShard: m.cfg.Name},
		}}
		if err := encodeAssignment(Assignment{Generation: 1, Owners: owners}, cm); err != nil {
			return err
		}
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	a, err := decodeAssignment(current)
	if err == nil && slices.Equal(a.Owners, owners) {
		return nil
	}
	// A damaged assignment must not restart the generations: members ignore
	// generations older than the one they have seen.
	if seen := m.assignment.Load(); seen != nil && seen.Generation > a.Generation {
		a.Generation = seen.Generation
	}
	next := current.DeepCopy()
	if err := encodeAssignment(Assignment{Generation: a.Generation + 1, Owners: owners}, next); err != nil {
		return err
	}
	if _, err := cms.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Published assignment", "generation", a.Generation+1, "members", members)
	return nil
}
