package shard

import (
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Default lease timings. A holder stops acting RenewDeadline after the start
// of its last successful renewal; others take the lease only LeaseDuration
// after they last saw it change. The 3 s gap absorbs clock-rate drift and
// scheduling delays.
const (
	DefaultLeaseDuration = 10 * time.Second
	DefaultRenewDeadline = 7 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// DefaultLoad bounds each member to ceil(Load · ranges / members) ranges:
	// 1 is the tightest balance (16 ranges each of 64 over 4 members); the
	// imbalance of 1.05 (17, 17, 15, 15) cost the fullest replica 6% more
	// memory. Membership changes between 2 and 7 members move as many ranges
	// as 1.05 did, give or take 1; between 7 and 8, 6 more (15 instead of 9).
	DefaultLoad = 1.0
	// DefaultReplicationFactor is the virtual nodes per member on the ring.
	DefaultReplicationFactor = 100
	// DefaultShutdownTimeout bounds the graceful release of all ranges.
	DefaultShutdownTimeout = 5 * time.Second
	// DefaultHandoffWait bounds how long a holder keeps a range the
	// assignment moved to a member still syncing its caches of it. A
	// replica restarted under load in the chaos scenario (4,000 VMIs with
	// fleets) took up to about 85 s to sync its ranges; the range is acted
	// on meanwhile, so the bound only stops a successor that never syncs
	// from holding the move up for ever.
	DefaultHandoffWait = 2 * time.Minute
)

// Config of one member.
type Config struct {
	// Client writes the Leases and the assignment.
	Client kubernetes.Interface
	// Namespace holds the Leases and the assignment ConfigMap.
	Namespace string
	// Name prefixes every object the members share, so that several sharded
	// controllers can live in one namespace.
	Name string
	// Identity is this member's name: unique among live members.
	Identity string
	// Ranges is the hash space split.
	Ranges Ranges

	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// SuspectAfter is how long a member's Lease may go unchanged before the
	// others warm the caches of the ranges they would get if it died
	// (Preparer); the default is two missed heartbeats, 2 · RetryPeriod, at
	// most RenewDeadline.
	SuspectAfter time.Duration
	// ShutdownTimeout bounds the graceful release on stop.
	ShutdownTimeout time.Duration
	// HandoffWait bounds how long a range the assignment moved away is kept
	// while its new owner, whose handler is a Preparer, syncs its caches.
	HandoffWait time.Duration

	// Load and ReplicationFactor tune the bounded-load consistent hashing.
	Load              float64
	ReplicationFactor int

	// Handler is told when this member starts and stops acting on a range.
	Handler Handler
	// Clock is injected so that tests drive time; nil means the real clock.
	Clock clock.WithTicker
	// Metrics receives the member's metrics; nil means none.
	Metrics *Metrics
}

// Complete fills the zero values with defaults.
func (c *Config) Complete() {
	if c.Name == "" {
		c.Name = "virtshard"
	}
	if c.Identity == "" {
		c.Identity = DefaultIdentity()
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = DefaultRenewDeadline
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = DefaultRetryPeriod
	}
	if c.SuspectAfter == 0 {
		c.SuspectAfter = min(2*c.RetryPeriod, c.RenewDeadline)
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.HandoffWait == 0 {
		c.HandoffWait = DefaultHandoffWait
	}
	if c.Load == 0 {
		c.Load = DefaultLoad
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Handler == nil {
		c.Handler = HandlerFuncs{}
	}
}

// Validate checks a completed Config.
func (c *Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("a client is required"))
	}
	if c.Namespace == "" {
		errs = append(errs, errors.New("a namespace is required"))
	}
	if c.Ranges.Count() == 0 {
		errs = append(errs, errors.New("ranges are required"))
	}
	if err := c.ValidateTimings(); err != nil {
		errs = append(errs, err)
	}
	if c.Load < 1 {
		errs = append(errs, fmt.Errorf("load %v must be at least 1", c.Load))
	}
	return errors.Join(errs...)
}

// ValidateTimings checks that a completed Config's lease timings are in the
// order the fencing needs: retry period < renew deadline < lease duration,
// and a member turns suspect after more than one missed heartbeat but before
// its lease could expire.
func (c *Config) ValidateTimings() error {
	var errs []error
	if c.LeaseDuration < time.Second || c.LeaseDuration%time.Second != 0 {
		// Lease objects carry whole seconds: anything else would be truncated
		// and let others take a lease its holder still acts on.
		errs = append(errs, fmt.Errorf("lease duration %s must be a whole number of seconds", c.LeaseDuration))
	}
	if c.RenewDeadline >= c.LeaseDuration {
		errs = append(errs, fmt.Errorf("renew deadline %s must be shorter than the lease duration %s", c.RenewDeadline, c.LeaseDuration))
	}
	if c.RetryPeriod >= c.RenewDeadline {
		errs = append(errs, fmt.Errorf("retry period %s must be shorter than the renew deadline %s", c.RetryPeriod, c.RenewDeadline))
	}
	if c.HandoffWait < 0 {
		errs = append(errs, fmt.Errorf("handoff wait %s must not be negative", c.HandoffWait))
	}
	if c.SuspectAfter <= c.RetryPeriod || c.SuspectAfter >= c.LeaseDuration {
		errs = append(errs, fmt.Errorf("suspect-after %s must be longer than the retry period %s and shorter than the lease duration %s", c.SuspectAfter, c.RetryPeriod, c.LeaseDuration))
	}
	return errors.Join(errs...)
}

// DefaultIdentity is $POD_NAME (a StatefulSet pod's name carries its
// ordinal), else the hostname, which is the pod name inside a pod.
func DefaultIdentity() string {
	if name := os.Getenv("POD_NAME"); name != "" {
		return name
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		return host
	}
	return "virtshard"
}

// DefaultNamespace is $POD_NAMESPACE, else "virtshard-system".
func DefaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "virtshard-system"
}
