package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/pprof/profile"
	"k8s.io/client-go/kubernetes"

	"github.com/virtshard/virtshard/bench/replicas"
)

// profileWindow is the length of each CPU profile fetched from a replica;
// a run's profile is the merge of its windows, so at most one window is
// lost when a replica is killed.
const profileWindow = 5

// profiles fetches CPU profiles from replicas (started with --pprof) for
// as long as they run, and writes one merged profile per replica name.
type profiles struct {
	mu   sync.Mutex
	byID map[string][]*profile.Profile
	// heaps are the replicas' heap profiles at the end of the flow.
	heaps map[string][]byte
	wg    sync.WaitGroup
	ctx   context.Context
	close context.CancelFunc
}

func newProfiles(ctx context.Context) *profiles {
	ctx, cancel := context.WithCancel(ctx)
	return &profiles{byID: map[string][]*profile.Profile{}, heaps: map[string][]byte{}, ctx: ctx, close: cancel}
}

// collect fetches consecutive windows from r until it exits.
func (p *profiles) collect(r *replicas.Replica) {
	p.collectFrom(r.ID, r.Exited, func(ctx context.Context) ([]byte, error) {
		return r.Get(ctx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", profileWindow))
	})
}

// collectFromAPIServer fetches the API server's own CPU profile (its
// /debug/pprof, on by default) as id until stop is called; the window in
// flight then completes. Safe on nil.
func (p *profiles) collectFromAPIServer(kube kubernetes.Interface, id string) (stop func()) {
	if p == nil {
		return func() {}
	}
	var stopped atomic.Bool
	p.collectFrom(id, stopped.Load, func(ctx context.Context) ([]byte, error) {
		return kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(profileWindow)).Timeout(2 * profileWindow * time.Second).DoRaw(ctx)
	})
	return func() { stopped.Store(true) }
}

// collectFrom fetches windows from fetch until gone or the run ends. A
// failed fetch (the process starting or stopping) is retried after a
// pause; a process without any window is reported by write.
func (p *profiles) collectFrom(id string, gone func() bool, fetch func(context.Context) ([]byte, error)) {
	p.mu.Lock()
	if _, ok := p.byID[id]; !ok {
		p.byID[id] = nil
	}
	p.mu.Unlock()
	p.wg.Go(func() {
		for !gone() && p.ctx.Err() == nil {
			raw, err := fetch(p.ctx)
			var prof *profile.Profile
			if err == nil {
				prof, err = profile.Parse(bytes.NewReader(raw))
			}
			if err != nil {
				select {
				case <-p.ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
				continue
			}
			p.mu.Lock()
			p.byID[id] = append(p.byID[id], prof)
			p.mu.Unlock()
		}
	})
}

// heap fetches the heap profile of each replica in live now, when the
// flow has just ended and their caches hold every VMI of the run; write
// writes them as heap-<name>.pprof. A replica that does not answer within
// 10 s (one a fault froze or is killing) is left out and returned. Safe on
// nil.
func (p *profiles) heap(ctx context.Context, live []*replicas.Replica) (missing []string) {
	if p == nil {
		return nil
	}
	for _, r := range live {
		fetch, cancel := context.WithTimeout(ctx, 10*time.Second)
		// After a collection: otherwise the profile is the heap as of the
		// last one, garbage that has not been collected yet included.
		raw, err := r.Get(fetch, "/debug/pprof/heap?gc=1")
		cancel()
		if err != nil {
			missing = append(missing, r.ID)
			continue
		}
		p.mu.Lock()
		p.heaps[r.ID] = raw
		p.mu.Unlock()
	}
	return missing
}

// stop ends the collection and waits for the collectors; safe on nil.
func (p *profiles) stop() {
	if p != nil {
		p.close()
		p.wg.Wait()
	}
}

// write merges each replica's windows into DIR/cpu-<name>.pprof.
func (p *profiles) write(dir string) error {
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	var missing []string
	for id, windows := range p.byID {
		if len(windows) == 0 {
			missing = append(missing, id)
			continue
		}
		merged, err := profile.Merge(windows)
		if err != nil {
			return fmt.Errorf("merge %s's CPU profiles: %w", id, err)
		}
		f, err := os.Create(filepath.Join(dir, "cpu-"+id+".pprof"))
		if err != nil {
			return err
		}
		if err := merged.Write(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	for id, raw := range p.heaps {
		if err := os.WriteFile(filepath.Join(dir, "heap-"+id+".pprof"), raw, 0o644); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no CPU profile came from %v", missing)
	}
	return nil
}
