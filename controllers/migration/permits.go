package migration

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
)

// Limits are KubeVirt's migration limits, enforced cluster-wide.
type Limits struct {
	// PerCluster bounds migrations in flight in the cluster
	// (parallelMigrationsPerCluster).
	PerCluster int
	// PerNode bounds migrations in flight out of one node
	// (parallelOutboundMigrationsPerNode).
	PerNode int
}

// DefaultLimits are KubeVirt's defaults, in force without a KubeVirt CR
// that sets others.
var DefaultLimits = Limits{
	PerCluster: int(clusterconfig.DefaultParallelMigrationsPerCluster),
	PerNode:    int(clusterconfig.DefaultParallelOutboundMigrationsPerNode),
}

// Over returns l with each zero field taken from the KubeVirt CR's
// migration configuration m: the limits in force when l are the overrides
// (flags). KubeVirt reads both from its configuration at every decision,
// and so does the controller, so that a change of the CR applies to the
// next grant. A CR may set a limit to 0, which lets no migration start, as
// in KubeVirt.
func (l Limits) Over(m *virtv1.MigrationConfiguration) Limits {
	if l.PerCluster == 0 {
		l.PerCluster = int(ptr.Deref(m.ParallelMigrationsPerCluster, clusterconfig.DefaultParallelMigrationsPerCluster))
	}
	if l.PerNode == 0 {
		l.PerNode = int(ptr.Deref(m.ParallelOutboundMigrationsPerNode, clusterconfig.DefaultParallelOutboundMigrationsPerNode))
	}
	return l
}

// permit is one in-flight migration's claim on the limits.
type permit struct {
	Node    string    `json:"node"`
	Granted time.Time `json:"granted"`
}

// table is every permit, by migration UID: the whole cluster's in-flight
// migrations in one object, so that one conditional update checks both
// limits at once, whichever replica writes it.
type table map[types.UID]permit

// candidate is a migration that wants a permit.
type candidate struct {
	uid     types.UID
	node    string // its VMI's node: the outbound limit it counts against
	system  bool   // created by the system (evacuation): goes first
	hasNode bool
}

// grant decides whether m may have a permit from t: within both limits,
// and, for a user's migration, with no system migration (evacuation)
// waiting that the limits would let go. It returns the table to write, or
// false. Within a priority, whoever asks first after a permit is released
// gets it: strict age order across replicas would make every migration
// wait for the oldest one's replica, a dead one's for a lease duration.
//
// Limits only gate new permits: after a limit is lowered, the permits held
// beyond it stay (KubeVirt does not stop a running migration either) and
// no new one is granted until enough of them are released.
func (t table) grant(m candidate, waiting []candidate, limits Limits, now time.Time) (table, bool) {
	if _, ok := t[m.uid]; ok {
		return t, true
	}
	perNode := map[string]int{}
	for _, p := range t {
		perNode[p.Node]++
	}
	if len(t) >= limits.PerCluster || perNode[m.node] >= limits.PerNode {
		return t, false
	}
	for _, w := range waiting {
		if w.uid == m.uid || !w.hasNode {
			continue
		}
		if _, held := t[w.uid]; held {
			continue
		}
		if w.system && !m.system && perNode[w.node] < limits.PerNode {
			return t, false // the system's migration goes first
		}
	}
	next := make(table, len(t)+1)
	for uid, p := range t {
		next[uid] = p
	}
	next[m.uid] = permit{Node: m.node, Granted: now}
	return next, true
}

// prune drops the permits of migrations that are over: final, or gone
// from the cache for longer than grace (a permit granted by another
// replica may name a migration this replica's cache has not seen yet).
func (t table) prune(live func(types.UID) (exists, final bool), now time.Time, grace time.Duration) (table, bool) {
	next := table{}
	for uid, p := range t {
		exists, final := live(uid)
		if final || (!exists && now.Sub(p.Granted) > grace) {
			continue
		}
		next[uid] = p
	}
	return next, len(next) != len(t)
}

// Permits keeps the table in a ConfigMap of the controller's namespace.
// Every write is conditional on the resourceVersion read, so two replicas
// granting at once cannot both fill the last slot.
type Permits struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Live tells whether a migration exists in the cache and is final.
	Live func(types.UID) (exists, final bool)
	// Grace is how long a permit of a migration the cache does not know is
	// kept.
	Grace time.Duration
	Now   func() time.Time

	// mu makes one replica's workers take turns: they would only conflict
	// with each other on the one object.
	mu sync.Mutex
}

const permitsKey = "permits"

func (p *Permits) read(ctx context.Context) (*corev1.ConfigMap, table, error) {
	cm, err := p.Client.CoreV1().ConfigMaps(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = p.Client.CoreV1().ConfigMaps(p.Namespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			Data:       map[string]string{permitsKey: "{}"},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cm, err = p.Client.CoreV1().ConfigMaps(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read migration permits: %w", err)
	}
	t := table{}
	if raw := cm.Data[permitsKey]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &t); err != nil {
			// A corrupt table would block every migration: start over; the
			// limits hold again once the migrations in flight end.
			t = table{}
		}
	}
	return cm, t, nil
}

func (p *Permits) write(ctx context.Context, cm *corev1.ConfigMap, t table) error {
	raw, err := json.Marshal(t)
	if err != nil {
		return err
	}
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[permitsKey] = string(raw)
	_, err = p.Client.CoreV1().ConfigMaps(p.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// Acquire grants m a permit if limits, those in force now, and the waiting
// migrations allow it. A migration holding one keeps it.
func (p *Permits) Acquire(ctx context.Context, m candidate, waiting []candidate, limits Limits) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range 10 {
		cm, t, err := p.read(ctx)
		if err != nil {
			return false, err
		}
		t, pruned := t.prune(p.Live, p.Now(), p.Grace)
		next, ok := t.grant(m, waiting, limits, p.Now())
		if !ok && !pruned {
			return false, nil
		}
		if _, held := t[m.uid]; held && !pruned {
			return true, nil
		}
		err = p.write(ctx, cm, next)
		if apierrors.IsConflict(err) {
			continue // another grant or release: decide again on what is there now
		}
		if err != nil {
			return false, fmt.Errorf("write migration permits: %w", err)
		}
		return ok, nil
	}
	return false, nil // contended: the caller tries again shortly
}

// Release gives m's permit back.
func (p *Permits) Release(ctx context.Context, uid types.UID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range 10 {
		cm, t, err := p.read(ctx)
		if err != nil {
			return err
		}
		if _, ok := t[uid]; !ok {
			return nil
		}
		delete(t, uid)
		err = p.write(ctx, cm, t)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("release migration permit %s: too many conflicts", uid)
}

// Holds reports whether m holds a permit.
func (p *Permits) Holds(ctx context.Context, uid types.UID) (bool, error) {
	_, t, err := p.read(ctx)
	if err != nil {
		return false, err
	}
	_, ok := t[uid]
	return ok, nil
}
