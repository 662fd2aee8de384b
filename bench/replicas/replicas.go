// Package replicas runs virtshard-controller replicas as separate local
// processes, as a StatefulSet would run them as pods, so that their CPU and
// memory can be measured and one can be killed, and reads their metrics.
package replicas

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/virtshard/virtshard/bench/endpoint"
	"github.com/virtshard/virtshard/bench/proc"
)

// Options of a set of replicas.
type Options struct {
	// Binary is the virtshard-controller executable.
	Binary string
	// Kubeconfig, Namespace (of the Leases) and WatchNamespace are passed on.
	Kubeconfig     string
	Namespace      string
	WatchNamespace string
	// LogDir receives one log file per replica.
	LogDir string
	// Args are extra flags for every replica.
	Args []string
}

// Replica is one running process.
type Replica struct {
	ID      string
	Address string
	cmd     *exec.Cmd
	done    chan struct{}
}

// Start starts replica id and waits until its HTTP endpoint answers.
//
// The port is picked free and then handed to the process, so another
// process can take it in between; the replica then exits at once, and is
// started again on another port.
func Start(opts Options, id string) (*Replica, error) {
	const attempts = 5
	for attempt := 1; ; attempt++ {
		r, err := start(opts, id)
		if err == nil || !errors.Is(err, errAddressInUse) || attempt == attempts {
			return r, err
		}
	}
}

var errAddressInUse = errors.New("address already in use")

func start(opts Options, id string) (*Replica, error) {
	addr, err := proc.FreeAddress()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
		return nil, err
	}
	// Append: a restarted replica keeps its predecessor's log, as a pod's
	// previous container log is kept.
	logPath := filepath.Join(opts.LogDir, id+".log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	logStart, err := log.Seek(0, io.SeekEnd)
	if err != nil {
		log.Close()
		return nil, err
	}
	args := []string{"--kubeconfig", opts.Kubeconfig, "--namespace", opts.Namespace, "--identity", id,
		"--address", addr, "--kube-api-qps", "-1"}
	if opts.WatchNamespace != "" {
		args = append(args, "--watch-namespace", opts.WatchNamespace)
	}
	cmd := exec.Command(opts.Binary, append(args, opts.Args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start replica %s: %w", id, err)
	}
	r := &Replica{ID: id, Address: addr, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(r.done) }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if _, err := r.Get(ctx, "/healthz"); err == nil {
			return r, nil
		}
		select {
		case <-r.done:
			tail := proc.LogTail(logPath, logStart)
			if strings.Contains(tail, "address already in use") {
				return nil, fmt.Errorf("replica %s on %s: %w", id, addr, errAddressInUse)
			}
			return nil, fmt.Errorf("replica %s exited at start: %s", id, tail)
		case <-ctx.Done():
			r.Kill()
			return nil, fmt.Errorf("replica %s did not answer on %s within a minute", id, addr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop asks the replica to hand its ranges off and exit (SIGTERM), and
// kills it after timeout.
func (r *Replica) Stop(timeout time.Duration) {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(timeout):
		r.Kill()
	}
}

// Kill kills the replica without a handoff, as a crash would.
func (r *Replica) Kill() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// Freeze stops the process (SIGSTOP) without its knowing: thawed, it goes
// on from where it was, believing what it believed, as a replica on a
// paused VM or a stalled node does.
func (r *Replica) Freeze() error { return r.cmd.Process.Signal(syscall.SIGSTOP) }

// Thaw resumes a frozen replica (SIGCONT).
func (r *Replica) Thaw() error { return r.cmd.Process.Signal(syscall.SIGCONT) }

// Exited reports whether the process is gone.
func (r *Replica) Exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// PID is the process id.
func (r *Replica) PID() int { return r.cmd.Process.Pid }

// Get fetches path (with its query) from the replica's HTTP endpoint.
func (r *Replica) Get(ctx context.Context, path string) ([]byte, error) {
	return endpoint.Get(ctx, http.DefaultClient, "http://"+r.Address+path, r.ID)
}

// Metrics scrapes the replica's /metrics.
//
// It gives up after 2 s: a frozen replica never answers.
func (r *Replica) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return endpoint.Metrics(ctx, http.DefaultClient, "http://"+r.Address+"/metrics", r.ID)
}

// Shared says whether the replicas have shared out the ranges: each has
// seen the same assignment, is given some ranges by it and acts on all of
// them. Until then a range may still move (once its new holder's caches
// synced), and what its objects get may be done twice.
func Shared(ctx context.Context, running []*Replica) bool {
	generation := -1.0
	for _, r := range running {
		families, err := r.Metrics(ctx)
		if err != nil {
			return false
		}
		gen := Sum(families, "virtshard_shard_assignment_generation", nil)
		assigned := Sum(families, "virtshard_shard_ranges_assigned", nil)
		if gen == 0 || (generation >= 0 && gen != generation) || assigned == 0 ||
			Sum(families, "virtshard_shard_ranges_active", nil) != assigned {
			return false
		}
		generation = gen
	}
	return len(running) > 0
}

// Sum adds up every series of a counter or gauge family whose labels
// include match.
func Sum(families map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	f := families[name]
	if f == nil {
		return 0
	}
	total := 0.0
	for _, m := range f.GetMetric() {
		labels := endpoint.Labels(m)
		ok := true
		for k, v := range match {
			ok = ok && labels[k] == v
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		}
	}
	return total
}

// Writes returns virtshard_api_writes_total by "verb resource".
func Writes(families map[string]*dto.MetricFamily) map[string]float64 {
	return endpoint.CountByVerbResource(families, "virtshard_api_writes_total")
}

// ControllerWrite reports whether a "verb resource" key of Writes is one of
// the controller's writes that "writes per VMI" counts: to pods and VMIs,
// their subresources (a launcher pod's status) included.
func ControllerWrite(key string) bool {
	resource := WriteResource(key)
	return resource == "pods" || resource == "virtualmachineinstances"
}

// WriteResource is the resource of a "verb resource" key of Writes, its
// subresource cut off.
func WriteResource(key string) string {
	_, resource, _ := strings.Cut(key, " ")
	resource, _, _ = strings.Cut(resource, "/")
	return resource
}
