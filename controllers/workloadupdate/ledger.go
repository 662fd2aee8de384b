package workloadupdate

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// record is what the replicas share of the workload updates: the count of
// outdated VMIs of each range, written by the range's holder, which adds
// up to the cluster's, and the evictions of the last interval, which every
// replica draws from so that the cluster evicts no more per interval than
// the KubeVirt CR allows.
type record struct {
	// Outdated is by range index; a range with none is left out.
	Outdated map[string]int `json:"outdated,omitempty"`
	// Evicted are the times of the evictions granted within the last
	// interval, oldest first.
	Evicted []time.Time `json:"evicted,omitempty"`
}

// total is the cluster's count of outdated VMIs.
func (r record) total() int {
	n := 0
	for _, v := range r.Outdated {
		n += v
	}
	return n
}

// withCounts is r with the counts of the ranges in counts replaced.
func (r record) withCounts(counts map[int]int) record {
	out := r
	out.Outdated = maps.Clone(r.Outdated)
	if out.Outdated == nil {
		out.Outdated = map[string]int{}
	}
	for i, n := range counts {
		if n == 0 {
			delete(out.Outdated, strconv.Itoa(i))
		} else {
			out.Outdated[strconv.Itoa(i)] = n
		}
	}
	return out
}

// draw grants up to want evictions at now, as many as leave at most size
// granted within any interval; it returns the record after and how many
// were granted. KubeVirt evicts a batch of size at one instant and the
// next an interval later, which this bound allows too; replicas drawing
// at different instants share the interval's evictions.
func (r record) draw(want, size int, interval time.Duration, now time.Time) (record, int) {
	if want <= 0 {
		return r, 0
	}
	recent := slices.DeleteFunc(slices.Clone(r.Evicted), func(t time.Time) bool { return !t.After(now.Add(-interval)) })
	n := min(want, size-len(recent))
	if n <= 0 {
		return r, 0
	}
	for range n {
		recent = append(recent, now)
	}
	r.Evicted = recent
	return r, n
}

// ledger keeps the record in a ConfigMap of the replicas' namespace. Every
// write is conditional on the version read, so that two replicas drawing
// at once cannot both take the interval's last evictions.
type ledger struct {
	client          kubernetes.Interface
	namespace, name string
}

const recordKey = "record"

func (l *ledger) read(ctx context.Context) (*corev1.ConfigMap, record, error) {
	cms := l.client.CoreV1().ConfigMaps(l.namespace)
	cm, err := cms.Get(ctx, l.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace},
			Data: map[string]string{recordKey: "{}"}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cm, err = cms.Get(ctx, l.name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, record{}, fmt.Errorf("read the workload update record: %w", err)
	}
	var r record
	if raw := cm.Data[recordKey]; raw != "" {
		// A record that does not parse is started over: the counts come
		// back with the holders' next looks, and a batch is at worst
		// begun again early.
		_ = json.Unmarshal([]byte(raw), &r)
	}
	return cm, r, nil
}

// update applies change to the record and writes it back if it changed,
// reading again after a conflict. It returns the record as written (or
// found unchanged) and what change returned with it.
func (l *ledger) update(ctx context.Context, change func(record) (record, int)) (record, int, error) {
	for range 10 {
		cm, r, err := l.read(ctx)
		if err != nil {
			return record{}, 0, err
		}
		next, n := change(r)
		before, _ := json.Marshal(r)
		after, err := json.Marshal(next)
		if err != nil {
			return record{}, 0, err
		}
		if string(before) == string(after) {
			return r, n, nil
		}
		cm = cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[recordKey] = string(after)
		_, err = l.client.CoreV1().ConfigMaps(l.namespace).Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // another replica wrote: decide again on what is there now
		}
		if err != nil {
			return record{}, 0, fmt.Errorf("write the workload update record: %w", err)
		}
		return next, n, nil
	}
	return record{}, 0, fmt.Errorf("write the workload update record: too many conflicts")
}
