package events

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// slowEvents is an API server that takes d to create an event, in
// parallel as a server does, and counts the creates. It stores nothing: the
// burst has no repeated event to patch, and a fake clientset's tracker
// would serialise the creates under its lock.
type slowEvents struct {
	d time.Duration
	n *atomic.Int64
}

func (g slowEvents) Events(string) typedcorev1.EventInterface { return slowEventInterface{g: g} }

type slowEventInterface struct {
	typedcorev1.EventInterface // any call but Create panics: the burst makes none
	g                          slowEvents
}

func (e slowEventInterface) Create(_ context.Context, event *corev1.Event, _ metav1.CreateOptions) (*corev1.Event, error) {
	time.Sleep(e.g.d)
	e.g.n.Add(1)
	return event, nil
}

// burst records n events, 2,000 a second (ten every 5 ms: a timer does not
// keep a 500 µs pace): as fast as a controller creating launcher pods for
// a burst of VMIs records them.
func burst(recorder record.EventRecorder, n int) {
	for i := range n {
		if i%10 == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("vmi-%d", i), UID: "uid"}}
		recorder.Eventf(pod, corev1.EventTypeNormal, "SuccessfulCreate", "Created virtual machine pod %s", pod.Name)
	}
}

// A burst of 2,000 events against an API server taking 2 ms an event
// reaches the server whole through Sink; client-go's own sink, one event
// at a time, drops what does not fit its broadcaster's queue of 1,000.
func TestBurstReachesTheServerWhole(t *testing.T) {
	const burstSize = 2000
	for _, tt := range []struct {
		name  string
		ours  bool
		whole bool
	}{
		{"client-go's sink loses part of the burst", false, false},
		{"Sink delivers every event", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			created := &atomic.Int64{}
			events := slowEvents{2 * time.Millisecond, created}
			broadcaster := record.NewBroadcaster(record.WithContext(ctx))
			defer broadcaster.Shutdown()
			if tt.ours {
				Start(ctx, broadcaster, events, Options{})
			} else {
				broadcaster.StartRecordingToSink(&clientSink{events})
			}
			burst(broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "test"}), burstSize)
			// Wait until no more arrive (or all did).
			last, stable := int64(-1), 0
			_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				n := created.Load()
				if n == last {
					stable++
				} else {
					last, stable = n, 0
				}
				return n == burstSize || stable >= 10, nil
			})
			whole := created.Load() == burstSize
			if tt.whole && !whole {
				t.Fatalf("%d of %d events reached the server", created.Load(), burstSize)
			}
			if !tt.whole && whole {
				t.Fatalf("all %d events reached the server: the burst does not show the loss this package exists for", burstSize)
			}
			t.Logf("%d of %d events reached the server", created.Load(), burstSize)
		})
	}
}

// clientSink is client-go's typed sink, which the controllers used before.
type clientSink struct{ events typedcorev1.EventsGetter }

func (s *clientSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.events.Events(e.Namespace).Create(context.Background(), e, metav1.CreateOptions{})
}
func (s *clientSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.events.Events(e.Namespace).Update(context.Background(), e, metav1.UpdateOptions{})
}
func (s *clientSink) Patch(e *corev1.Event, p []byte) (*corev1.Event, error) {
	return s.events.Events(e.Namespace).Patch(context.Background(), e.Name, types.StrategicMergePatchType, p, metav1.PatchOptions{})
}

// A repeated event is one event with a count, as with client-go's sink;
// a repeat whose event is gone is created again.
func TestRepeatedEventIsPatchedAndRecreatedWhenGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	defer broadcaster.Shutdown()
	Start(ctx, broadcaster, client.CoreV1(), Options{})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "test"})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vmi", UID: "uid"}}
	countIs := func(want int32) error {
		return wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
			return err == nil && len(list.Items) == 1 && list.Items[0].Count == want, nil
		})
	}
	recorder.Event(pod, corev1.EventTypeWarning, "FailedCreate", "Error creating pod")
	if err := countIs(1); err != nil {
		t.Fatal("the first event was not created once")
	}
	recorder.Event(pod, corev1.EventTypeWarning, "FailedCreate", "Error creating pod")
	if err := countIs(2); err != nil {
		t.Fatal("the repeat did not raise the count of the one event")
	}
	if err := client.CoreV1().Events("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	recorder.Event(pod, corev1.EventTypeWarning, "FailedCreate", "Error creating pod")
	if err := countIs(3); err != nil {
		t.Fatal("a repeat of a deleted event was not created again")
	}
}

// A full queue drops, counts and never blocks the broadcaster.
func TestFullQueueDrops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no worker drains the queue
	s := &Sink{queues: []chan *corev1.Event{make(chan *corev1.Event, 2)}}
	done := make(chan struct{})
	go func() {
		for i := range 10 {
			s.enqueue(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint(i)}})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("enqueue blocked on a full queue")
	}
	if n := len(s.queues[0]); n != 2 {
		t.Errorf("%d events queued, want the queue's 2", n)
	}
	_ = ctx
}
