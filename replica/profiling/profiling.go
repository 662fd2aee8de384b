// Package profiling sends a replica's profiles to a Pyroscope server
// (continuous profiling with github.com/grafana/pyroscope-go): CPU,
// allocations, heap in use, goroutines, and mutex and block contention,
// tagged with the replica. Controllers run their workers under the pprof
// label controller=<name> (Do), so a flame graph splits by controller.
//
// It is off unless a server address is given.
package profiling

import (
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/grafana/pyroscope-go"
	"k8s.io/klog/v2"
)

// Application is the application name the profiles are sent under.
const Application = "virtshard-controller"

// Options of continuous profiling.
type Options struct {
	// ServerAddress of the Pyroscope server, e.g. http://pyroscope:4040.
	ServerAddress string
	// Replica tags every profile.
	Replica string
	// UploadRate is how often profiles are sent (default 15 s).
	UploadRate time.Duration
}

// Contention sampling: one in mutexFraction contended mutex events, and
// blocking events of about blockRate nanoseconds. Both are cheap at these
// rates and off by default in Go.
const (
	mutexFraction = 10
	blockRate     = int(100 * time.Microsecond)
)

// Start starts sending profiles; stop flushes the last ones and stops.
func Start(o Options) (stop func() error, err error) {
	if o.ServerAddress == "" {
		return func() error { return nil }, nil
	}
	if o.UploadRate <= 0 {
		o.UploadRate = 15 * time.Second
	}
	runtime.SetMutexProfileFraction(mutexFraction)
	runtime.SetBlockProfileRate(blockRate)
	profiler, err := pyroscope.Start(pyroscope.Config{
		ApplicationName: Application,
		ServerAddress:   o.ServerAddress,
		Tags:            map[string]string{"replica": o.Replica},
		UploadRate:      o.UploadRate,
		Logger:          logger{},
		ProfileTypes: []pyroscope.ProfileType{
			pyroscope.ProfileCPU, pyroscope.ProfileAllocObjects, pyroscope.ProfileAllocSpace,
			pyroscope.ProfileInuseObjects, pyroscope.ProfileInuseSpace, pyroscope.ProfileGoroutines,
			pyroscope.ProfileMutexCount, pyroscope.ProfileMutexDuration, pyroscope.ProfileBlockCount, pyroscope.ProfileBlockDuration,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("start continuous profiling: %w", err)
	}
	return profiler.Stop, nil
}

// Do runs f with the pprof label controller=name, which every profile
// sample taken in f (and in goroutines it starts) carries.
func Do(ctx context.Context, name string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels("controller", name), f)
}

// logger sends pyroscope-go's messages to klog: errors at V(0), the rest
// at V(4).
type logger struct{}

func (logger) Infof(format string, args ...any)  { klog.V(4).Infof(format, args...) }
func (logger) Debugf(format string, args ...any) { klog.V(5).Infof(format, args...) }
func (logger) Errorf(format string, args ...any) { klog.Errorf(format, args...) }
