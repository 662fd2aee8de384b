package events

import (
	"context"
	"errors"
	"hash/fnv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// Defaults of Options.
const (
	DefaultQueueSize = 50000
	DefaultWorkers   = 4
	// requestTimeout bounds one event's POST or PATCH.
	requestTimeout = 10 * time.Second
	// retries of an event the server did not answer (a transport error).
	retries = 3
)

// Options of a Sink.
type Options struct {
	// QueueSize is how many events may wait; more are dropped and counted.
	QueueSize int
	// Workers post in parallel; one object's events go to one worker, in
	// order.
	Workers int
	Metrics *Metrics
}

// Sink takes a broadcaster's events as they are recorded and writes them
// to the API server from its own queue: it does there what client-go's
// StartRecordingToSink does in the broadcaster's goroutine (correlate —
// aggregate repeats, filter spam —, then create or patch), so that the
// broadcaster never waits on the API server.
type Sink struct {
	events     typedcorev1.EventsGetter
	correlator *record.EventCorrelator
	queues     []chan *corev1.Event
	metrics    *Metrics
	wg         sync.WaitGroup
}

// Start sends broadcaster's events until ctx is done; Wait waits for the
// workers after that.
func Start(ctx context.Context, broadcaster record.EventBroadcaster, events typedcorev1.EventsGetter, opts Options) *Sink {
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	s := &Sink{events: events, correlator: record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{}), metrics: opts.Metrics}
	for range opts.Workers {
		q := make(chan *corev1.Event, opts.QueueSize/opts.Workers)
		s.queues = append(s.queues, q)
		s.wg.Go(func() { s.work(ctx, q) })
	}
	broadcaster.StartEventWatcher(s.enqueue)
	return s
}

// Wait returns once the workers stopped.
func (s *Sink) Wait() { s.wg.Wait() }

func (s *Sink) enqueue(e *corev1.Event) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name))
	copied := *e // the broadcaster may have other watchers
	select {
	case s.queues[h.Sum32()%uint32(len(s.queues))] <- &copied:
		s.metrics.queued()
	default:
		s.metrics.result("dropped")
	}
}

func (s *Sink) work(ctx context.Context, q chan *corev1.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-q:
			s.metrics.dequeued()
			s.metrics.result(s.send(ctx, e))
		}
	}
}

// send correlates e and writes it, retrying a transport error a few times
// as client-go's sink loop does; the server's refusals are final.
func (s *Sink) send(ctx context.Context, e *corev1.Event) string {
	result, err := s.correlator.EventCorrelate(e)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Event correlation failed", "err", err)
	}
	if result.Skip {
		return "filtered"
	}
	for try := range retries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return "failed"
			case <-time.After(time.Duration(try) * time.Second):
			}
		}
		var written *corev1.Event
		written, err = s.write(ctx, result.Event, result.Patch)
		if err == nil {
			// The server's name and resourceVersion, for the next patch.
			s.correlator.UpdateState(written)
			return "sent"
		}
		var refused apierrors.APIStatus
		if errors.As(err, &refused) {
			break
		}
	}
	klog.FromContext(ctx).V(2).Info("Event not written", "event", klog.KObj(e), "reason", e.Reason, "err", err)
	return "failed"
}

// write patches a repeated event's count, or creates the event: also when
// the event to patch is gone, as client-go's sink does.
func (s *Sink) write(ctx context.Context, e *corev1.Event, patch []byte) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	events := s.events.Events(e.Namespace)
	if e.Count > 1 {
		written, err := events.Patch(ctx, e.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if !apierrors.IsNotFound(err) {
			return written, err
		}
	}
	created := e.DeepCopy()
	created.ResourceVersion = ""
	written, err := events.Create(ctx, created, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return created, nil
	}
	return written, err
}

// Metrics count the events a sink handled.
type Metrics struct {
	results *prometheus.CounterVec
	depth   prometheus.Gauge
}

// NewMetrics registers virtshard_events_total{result} (sent, failed,
// filtered as spam, dropped) and virtshard_events_queued.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virtshard_events_total",
			Help: "Events the controllers recorded, by result: sent to the API server, failed (refused or unreachable), filtered (client-go's spam filter), dropped (queue full).",
		}, []string{"result"}),
		depth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virtshard_events_queued",
			Help: "Events waiting to be sent.",
		}),
	}
	reg.MustRegister(m.results, m.depth)
	return m
}

func (m *Metrics) result(r string) {
	if m != nil {
		m.results.WithLabelValues(r).Inc()
	}
}

func (m *Metrics) queued() {
	if m != nil {
		m.depth.Inc()
	}
}

func (m *Metrics) dequeued() {
	if m != nil {
		m.depth.Dec()
	}
}
