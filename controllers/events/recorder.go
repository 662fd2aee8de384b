package events

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Component is the source of the events of a controller that names none
// of its own (For).
const Component = "virtshard-controller"

// Recorder is a replica's event recorder: every controller records through
// it, or through one of its sources (For), and one Sink writes what they
// record.
type Recorder struct {
	record.EventRecorder
	broadcaster record.EventBroadcaster
	scheme      *runtime.Scheme
	sink        *Sink
}

// NewRecorder starts a recorder for objects of scheme whose events go to
// the API server until ctx is done; Stop ends it.
func NewRecorder(ctx context.Context, scheme *runtime.Scheme, events typedcorev1.EventsGetter, opts Options) *Recorder {
	broadcaster := record.NewBroadcaster()
	broadcaster.StartStructuredLogging(4)
	return &Recorder{
		EventRecorder: broadcaster.NewRecorder(scheme, corev1.EventSource{Component: Component}),
		broadcaster:   broadcaster,
		scheme:        scheme,
		sink:          Start(ctx, broadcaster, events, opts),
	}
}

// For records events as coming from component, through the same sink:
// KubeVirt's virt-controller names each controller's events
// (application.go, newRecorder), and tools that select events by their
// source find virtshard's under the same names.
func (r *Recorder) For(component string) record.EventRecorder {
	return r.broadcaster.NewRecorder(r.scheme, corev1.EventSource{Component: component})
}

// Stop stops taking events and, once ctx is done, waits for the sink's
// workers.
func (r *Recorder) Stop() {
	r.broadcaster.Shutdown()
	r.sink.Wait()
}
