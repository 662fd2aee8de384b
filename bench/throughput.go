package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/ceiling"
	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/controllers/kubevirt"
)

// ThroughputResult is the report of the throughput scenario: N VMIs as fast
// as possible through R replica processes.
type ThroughputResult struct {
	Scenario              string  `json:"scenario"`
	VMIs                  int     `json:"vmis"`
	Replicas              int     `json:"replicas"`
	Running               int     `json:"running"`
	DuplicateLauncherPods int     `json:"duplicateLauncherPods"`
	Stuck                 int     `json:"stuck"`
	DurationSeconds       float64 `json:"durationSeconds"`
	VMIsPerSecond         float64 `json:"vmisPerSecond"`
	// CeilingPodsPerSecond is the bare-pod ceiling measured in the same
	// invocation, just before; CeilingRatio is the API server's mutating
	// requests per second during the VMI run over the same during the
	// ceiling run, both from its apiserver_request_total.
	CeilingPodsPerSecond  float64        `json:"ceilingPodsPerSecond"`
	CeilingRatio          float64        `json:"ceilingRatio"`
	AllClientWritesPerVMI float64        `json:"allClientWritesPerVMI"`
	WritesPerVMI          WritesPerVMI   `json:"writesPerVMI"`
	EventsPerVMI          float64        `json:"eventsPerVMI"`
	ReplicaStats          []ReplicaStats `json:"replicaStats"`
}

// WritesPerVMI is the controllers' writes to pods and VMIs per VMI.
type WritesPerVMI struct {
	Total          float64            `json:"total"`
	ByVerbResource map[string]float64 `json:"byVerbResource"`
}

// ReplicaStats are one replica's figures, measured at the end of the run.
type ReplicaStats struct {
	Name         string  `json:"name"`
	OwnedRanges  int     `json:"ownedRanges"`
	PeakRSSBytes int64   `json:"peakRSSBytes"`
	CPUSeconds   float64 `json:"cpuSeconds"`
}

// runThroughput runs the throughput scenario and prints progress to progress
// (nil for none).
func (o *Options) runThroughput(ctx context.Context, copts cluster.Options, kube kubernetes.Interface, kv *kubevirt.Clientset, progress io.Writer) (*ThroughputResult, error) {
	suffix := strconv.FormatInt(time.Now().Unix(), 10)
	ns, leases := "bench-throughput-"+suffix, "bench-leases-"+suffix
	for _, name := range []string{ns, leases} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create namespace %s: %w", name, err)
		}
		// Wait for the cleanup, so that the next run does not pay for it.
		defer func() {
			_ = kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
			cleanup, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			_ = ceiling.WaitGone(cleanup, kube, name)
		}()
	}
	binary, err := filepath.Abs(o.Controller)
	if err != nil {
		return nil, err
	}
	ropts := replicas.Options{Binary: binary, Kubeconfig: copts.KubeconfigPath(), Namespace: leases, WatchNamespace: ns,
		LogDir: filepath.Join(copts.Workdir(), "logs", "bench-"+suffix)}
	var running []*replicas.Replica
	defer func() {
		for _, r := range running {
			r.Stop(15 * time.Second)
		}
	}()
	for i := range o.Replicas {
		r, err := replicas.Start(ropts, fmt.Sprintf("virtshard-%d", i))
		if err != nil {
			return nil, err
		}
		running = append(running, r)
	}
	// Measure from the moment every range is held, as a warm deployment is.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return ownedRanges(ctx, running) == o.Ranges, nil
	}); err != nil {
		return nil, fmt.Errorf("replicas did not take all %d ranges: %w", o.Ranges, err)
	}

	ceilingWPS, ceilingPods, err := o.measureCeiling(ctx, kube, suffix)
	if err != nil {
		return nil, err
	}
	writesBefore, err := serverWrites(ctx, kube)
	if err != nil {
		return nil, fmt.Errorf("read the API server's request counters: %w", err)
	}
	start := time.Now()
	var created atomic.Int64
	createErr := make(chan error, 1)
	go func() {
		createErr <- workload.Create(ctx, kv, workload.Options{Namespace: ns, Count: o.VMIs, Concurrency: o.Creators, Rate: o.Rate, Prefix: "vmi"}, &created)
	}()
	var runningCount int
	last := time.Now()
	err = wait.PollUntilContextTimeout(ctx, time.Second, o.Timeout, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-createErr:
			if err != nil {
				return false, err
			}
		default:
		}
		byPhase, err := workload.Phases(ctx, kv, ns)
		if err != nil {
			return false, nil
		}
		runningCount = byPhase[virtv1.Running]
		if progress != nil && time.Since(last) >= 5*time.Second {
			last = time.Now()
			fmt.Fprintf(progress, "%6s created %d/%d  Pending %d  Scheduling %d  Scheduled %d  Running %d\n",
				time.Since(start).Round(time.Second), created.Load(), o.VMIs,
				byPhase[""]+byPhase[virtv1.Pending], byPhase[virtv1.Scheduling], byPhase[virtv1.Scheduled], runningCount)
		}
		return runningCount == o.VMIs, nil
	})
	duration := time.Since(start)
	if err != nil && runningCount == 0 {
		return nil, err
	}
	writesAfter, err := serverWrites(ctx, kube)
	if err != nil {
		return nil, fmt.Errorf("read the API server's request counters: %w", err)
	}
	vmiWPS := (writesAfter - writesBefore) / duration.Seconds()

	res := &ThroughputResult{Scenario: ScenarioThroughput, VMIs: o.VMIs, Replicas: o.Replicas, Running: runningCount,
		Stuck: o.VMIs - runningCount, DurationSeconds: duration.Seconds(), VMIsPerSecond: float64(runningCount) / duration.Seconds(),
		WritesPerVMI:          WritesPerVMI{ByVerbResource: map[string]float64{}},
		CeilingPodsPerSecond:  ceilingPods,
		CeilingRatio:          vmiWPS / ceilingWPS,
		AllClientWritesPerVMI: (writesAfter - writesBefore) / float64(o.VMIs)}
	if _, res.DuplicateLauncherPods, err = workload.LauncherPods(ctx, kube, ns); err != nil {
		return nil, err
	}
	var events float64
	for _, r := range running {
		families, err := r.Metrics(ctx)
		if err != nil {
			return nil, fmt.Errorf("scrape %s: %w", r.ID, err)
		}
		for key, v := range replicas.Writes(families) {
			switch {
			case replicas.ControllerWrite(key):
				res.WritesPerVMI.ByVerbResource[key] += v / float64(o.VMIs)
				res.WritesPerVMI.Total += v / float64(o.VMIs)
			case key == "create events":
				events += v
			}
		}
		res.ReplicaStats = append(res.ReplicaStats, ReplicaStats{
			Name:         r.ID,
			OwnedRanges:  int(replicas.Sum(families, "virtshard_shard_ranges_owned", nil)),
			PeakRSSBytes: peakRSS(r.PID()),
			CPUSeconds:   replicas.Sum(families, "process_cpu_seconds_total", nil),
		})
	}
	res.EventsPerVMI = events / float64(o.VMIs)
	return res, nil
}

// measureCeiling runs the bare-pod ceiling with as many pods as the run
// has VMIs and the same creators, and returns the API server's mutating
// requests per second during it and the pods per second.
func (o *Options) measureCeiling(ctx context.Context, kube kubernetes.Interface, suffix string) (writesPerSecond, podsPerSecond float64, err error) {
	ns := "bench-ceiling-" + suffix
	before, err := serverWrites(ctx, kube)
	if err != nil {
		return 0, 0, fmt.Errorf("read the API server's request counters: %w", err)
	}
	res, err := ceiling.Pods(ctx, kube, ceiling.Options{Count: o.VMIs, Concurrency: o.Creators, Namespace: ns, Timeout: o.Timeout})
	if err != nil {
		return 0, 0, fmt.Errorf("ceiling run: %w", err)
	}
	after, err := serverWrites(ctx, kube)
	if err != nil {
		return 0, 0, fmt.Errorf("read the API server's request counters: %w", err)
	}
	if err := ceiling.WaitGone(ctx, kube, ns); err != nil {
		return 0, 0, err
	}
	return (after - before) / res.Duration.Seconds(), res.PerSecond, nil
}

func ownedRanges(ctx context.Context, running []*replicas.Replica) int {
	total := 0.0
	for _, r := range running {
		families, err := r.Metrics(ctx)
		if err != nil {
			return 0
		}
		total += replicas.Sum(families, "virtshard_shard_ranges_owned", nil)
	}
	return int(total)
}

// peakRSS reads a process's peak resident set (VmHWM) from /proc, 0 if gone.
func peakRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if rest, ok := strings.CutPrefix(scanner.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
