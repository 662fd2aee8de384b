package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
)

// flowOptions describe one stream of VMIs.
type flowOptions struct {
	Namespace string
	Prefix    string
	Count     int
	Creators  int
	// Rate is VMIs per second (open loop); 0 is as fast as the creators go.
	Rate float64
	// Spread spreads the VMIs over the nodes (workload.Spread).
	Spread bool
	// Timeout bounds the flow; Stall ends it early when no VMI has reached
	// Running for that long after the last create.
	Timeout, Stall time.Duration
	// Progress, when set, gets a line every 5 s.
	Progress io.Writer
	// Ranges, when set, is asked every second how many ranges the replicas
	// act on (into the timeline) and for the progress line's shard map.
	Ranges func(context.Context) (active int, line string)
	// MemoryFloor, when set, ends the flow, creation and all, once
	// Available (the machine's available memory) reads below it.
	MemoryFloor int64
	Available   func() (int64, error)
}

// Sample is the flow's state at one second of the run.
type Sample struct {
	Seconds   float64 `json:"seconds"`
	Created   int     `json:"created"`
	Scheduled int     `json:"scheduled"`
	Running   int     `json:"running"`
	// ActiveRanges is how many ranges the live replicas acted on (lease
	// held, caches synced); -1 when the flow was not told.
	ActiveRanges int `json:"activeRanges"`
}

// flow creates VMIs and watches them to Running, recording when each was
// sent, handed off and seen Running.
type flow struct {
	opts    flowOptions
	kv      *kubevirt.Clientset
	start   time.Time
	created atomic.Int64

	mu        sync.Mutex
	sent      map[string]time.Time
	scheduled map[string]time.Time
	running   map[string]time.Time
	samples   []Sample
	stopped   string
}

// flowResult is what a flow measured.
type flowResult struct {
	Start    time.Time
	Duration time.Duration // first create to last Running
	Created  int
	Running  int
	// Scheduled VMIs were seen handed off (or Running), the last of them
	// ScheduledDuration after the first create.
	Scheduled         int
	ScheduledDuration time.Duration
	Samples           []Sample
	// Latency is creation → Running from each VMI's phaseTransitionTimestamps
	// and creationTimestamp, as kubevirt_vmi_phase_transition_time_from_creation_seconds;
	// Handoff the same to Scheduled; Observed is from the bench's create call to
	// its watch seeing Running, at the watch's resolution. All sorted.
	Latency, Handoff, Observed []time.Duration
	// RunningAt is when the watch saw each VMI Running, by name.
	RunningAt map[string]time.Time
	SentAt    map[string]time.Time
	// Stopped says why the flow ended before its VMIs were all created and
	// Running, when it was stopped for memory.
	Stopped string
}

func newFlow(kv *kubevirt.Clientset, opts flowOptions) *flow {
	return &flow{opts: opts, kv: kv, sent: map[string]time.Time{}, scheduled: map[string]time.Time{}, running: map[string]time.Time{}}
}

func (f *flow) ours(obj any) (*virtv1.VirtualMachineInstance, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	vmi, ok := obj.(*virtv1.VirtualMachineInstance)
	return vmi, ok && strings.HasPrefix(vmi.Name, f.opts.Prefix+"-")
}

func (f *flow) observe(obj any) {
	vmi, ok := f.ours(obj)
	if !ok {
		return
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	switch vmi.Status.Phase {
	case virtv1.Running:
		if _, seen := f.running[vmi.Name]; !seen {
			f.running[vmi.Name] = now
		}
		fallthrough
	case virtv1.Scheduled:
		if _, seen := f.scheduled[vmi.Name]; !seen {
			f.scheduled[vmi.Name] = now
		}
	}
}

func (f *flow) counts() (scheduled, running int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.scheduled), len(f.running)
}

// run creates the VMIs and waits until all are Running, the flow stalls,
// or it times out. Only a failure to create or to watch is an error; VMIs
// not Running at the end are the caller's "stuck".
func (f *flow) run(ctx context.Context) (*flowResult, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.Timeout)
	defer cancel()
	vmis := f.kv.VirtualMachineInstances(f.opts.Namespace)
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return vmis.List(ctx, o) },
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return vmis.Watch(ctx, o)
			},
		},
		ObjectType: &virtv1.VirtualMachineInstance{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    f.observe,
			UpdateFunc: func(_, obj any) { f.observe(obj) },
		},
		// Only phases matter: keep the bench's own memory small at 50,000 VMIs.
		Transform: func(obj any) (any, error) {
			if vmi, ok := obj.(*virtv1.VirtualMachineInstance); ok {
				vmi.Spec = virtv1.VirtualMachineInstanceSpec{}
				vmi.ManagedFields = nil
				vmi.Status = virtv1.VirtualMachineInstanceStatus{Phase: vmi.Status.Phase}
			}
			return obj, nil
		},
	})
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("VMI watch did not sync: %w", ctx.Err())
	}

	f.start = time.Now()
	creation, stopCreating := context.WithCancel(ctx)
	defer stopCreating()
	createErr := make(chan error, 1)
	go func() {
		createErr <- workload.Create(creation, f.kv, workload.Options{
			Namespace: f.opts.Namespace, Count: f.opts.Count, Concurrency: f.opts.Creators, Rate: f.opts.Rate, Prefix: f.opts.Prefix,
			Spread: f.opts.Spread,
			Sent: func(name string, at time.Time) {
				f.mu.Lock()
				f.sent[name] = at
				f.mu.Unlock()
			},
		}, &f.created)
	}()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	creating := true
	lastRunning, lastChange := 0, time.Now()
	for {
		select {
		case err := <-createErr:
			if err != nil {
				return nil, err
			}
			creating = false
			continue
		case <-ctx.Done():
		case <-tick.C:
		}
		scheduled, running := f.counts()
		elapsed := time.Since(f.start)
		active, ranges := -1, ""
		if f.opts.Ranges != nil {
			active, ranges = f.opts.Ranges(ctx)
		}
		f.mu.Lock()
		f.samples = append(f.samples, Sample{Seconds: elapsed.Seconds(), Created: int(f.created.Load()), Scheduled: scheduled, Running: running,
			ActiveRanges: active})
		f.mu.Unlock()
		if running != lastRunning {
			lastRunning, lastChange = running, time.Now()
		}
		if f.opts.Progress != nil && int(elapsed.Seconds())%5 == 0 {
			line := fmt.Sprintf("%6s created %d/%d  Scheduled %d  Running %d", elapsed.Round(time.Second), f.created.Load(), f.opts.Count, scheduled, running)
			if ranges != "" {
				line += "  " + ranges
			}
			fmt.Fprintln(f.opts.Progress, line)
		}
		if reason := f.memoryShort(); reason != "" {
			stopCreating()
			f.mu.Lock()
			f.stopped = reason
			f.mu.Unlock()
			return f.result(context.WithoutCancel(ctx))
		}
		switch {
		case running >= f.opts.Count, ctx.Err() != nil:
			return f.result(context.WithoutCancel(ctx))
		case !creating && time.Since(lastChange) > f.opts.Stall:
			return f.result(context.WithoutCancel(ctx))
		}
	}
}

// memoryShort says why the flow must stop for memory, or "" if it need not
// (or cannot tell).
func (f *flow) memoryShort() string {
	if f.opts.MemoryFloor <= 0 || f.opts.Available == nil {
		return ""
	}
	available, err := f.opts.Available()
	if err != nil || available >= f.opts.MemoryFloor {
		return ""
	}
	return fmt.Sprintf("stopped at %d VMIs created: the machine's available memory fell to %d MiB, below the bench's floor of %d MiB (--memory-floor)",
		f.created.Load(), available>>20, f.opts.MemoryFloor>>20)
}

// waitRunning blocks until n of the flow's VMIs are Running or ctx ends.
func (f *flow) waitRunning(ctx context.Context, n int) error {
	for {
		if _, running := f.counts(); running >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (f *flow) result(ctx context.Context) (*flowResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &flowResult{Start: f.start, Created: int(f.created.Load()), Running: len(f.running),
		Samples: slices.Clone(f.samples), RunningAt: f.running, SentAt: f.sent, Stopped: f.stopped}
	var last time.Time
	for name, at := range f.running {
		if at.After(last) {
			last = at
		}
		res.Observed = append(res.Observed, max(0, at.Sub(f.sent[name])))
	}
	if !last.IsZero() {
		res.Duration = last.Sub(f.start)
	}
	res.Scheduled = len(f.scheduled)
	var lastScheduled time.Time
	for _, at := range f.scheduled {
		if at.After(lastScheduled) {
			lastScheduled = at
		}
	}
	if !lastScheduled.IsZero() {
		res.ScheduledDuration = lastScheduled.Sub(f.start)
	}
	list, err := f.kv.VirtualMachineInstances(f.opts.Namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("list VMIs for their phase transitions: %w", err)
	}
	for _, vmi := range list.Items {
		if _, ok := f.ours(&vmi); !ok {
			continue
		}
		for _, t := range vmi.Status.PhaseTransitionTimestamps {
			since := t.PhaseTransitionTimestamp.Sub(vmi.CreationTimestamp.Time)
			switch t.Phase {
			case virtv1.Running:
				res.Latency = append(res.Latency, since)
			case virtv1.Scheduled:
				res.Handoff = append(res.Handoff, since)
			}
		}
	}
	for _, d := range [][]time.Duration{res.Latency, res.Handoff, res.Observed} {
		slices.Sort(d)
	}
	return res, nil
}

// observedBetween returns the observed latencies of the VMIs whose create
// was sent in [from, to), sorted.
func (r *flowResult) observedBetween(from, to time.Time) []time.Duration {
	var out []time.Duration
	for name, sent := range r.SentAt {
		running, ok := r.RunningAt[name]
		if ok && !sent.Before(from) && sent.Before(to) {
			out = append(out, running.Sub(sent))
		}
	}
	slices.Sort(out)
	return out
}
