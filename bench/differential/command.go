package differential

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/virtshard/virtshard/bench/cluster"
)

// Command is the virtshard-differential command's options.
type Command struct {
	Scenarios  string
	Controller string
	Replicas   int
	Parallel   int
	// ReplicaArgs are extra flags of every replica, space-separated.
	ReplicaArgs string
	// Report, when set, also receives the report.
	Report string
	// Dump, when set, receives each checkpoint's normalized objects.
	Dump string
}

// ErrDifferences is returned when the run found a difference not on the
// list, or a scenario did not reach its end.
var ErrDifferences = errors.New("differences not on the list of known ones (bench/differential/differences.go), or scenarios that did not finish")

// Parse reads flags.
func (c *Command) Parse(args []string) error {
	fs := flag.NewFlagSet("virtshard-differential", flag.ContinueOnError)
	fs.StringVar(&c.Scenarios, "scenarios", "bench/differential/scenarios", "directory of scenario files (*.yaml, docs/controller.md gives their format)")
	fs.StringVar(&c.Controller, "controller", "bin/virtshard-controller", "virtshard-controller binary")
	fs.IntVar(&c.Replicas, "replicas", 3, "virtshard replicas")
	fs.IntVar(&c.Parallel, "parallel", 8, "scenarios run at once under one controller")
	fs.StringVar(&c.ReplicaArgs, "replica-args", "", "extra flags of every virtshard replica, space-separated (\"-v=4\")")
	fs.StringVar(&c.Report, "report", "", "also write the report to this file")
	fs.StringVar(&c.Dump, "dump", "", "write each checkpoint's normalized objects under both controllers to this directory (<scenario>/<checkpoint>.<controller>.yaml)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if c.Replicas < 1 || c.Parallel < 1 {
		return errors.New("--replicas and --parallel must be positive")
	}
	return nil
}

// Run brings the local cluster up, runs the scenarios under both
// controllers and writes the report to out.
func (c *Command) Run(ctx context.Context, out io.Writer) error {
	scenarios, err := LoadDir(c.Scenarios)
	if err != nil {
		return err
	}
	copts, err := cluster.DefaultOptions()
	if err != nil {
		return err
	}
	started, err := cluster.Up(ctx, copts)
	if err != nil {
		return err
	}
	if started {
		// As the tests: a cluster this run started, it stops.
		defer func() {
			if err := cluster.Down(context.WithoutCancel(ctx), copts); err != nil {
				fmt.Fprintln(out, "stop the local cluster:", err)
			}
		}()
	}
	binary, err := filepath.Abs(c.Controller)
	if err != nil {
		return err
	}
	begin := time.Now()
	results, err := Run(ctx, scenarios, Options{Cluster: copts, Controller: binary, Replicas: c.Replicas, ReplicaArgs: strings.Fields(c.ReplicaArgs), Parallel: c.Parallel,
		Logf: func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "both runs took %s\n\n", time.Since(begin).Round(time.Second))
	writers := []io.Writer{out}
	if c.Report != "" {
		f, err := os.Create(c.Report)
		if err != nil {
			return err
		}
		defer f.Close()
		writers = append(writers, f)
	}
	if err := WriteReport(io.MultiWriter(writers...), results); err != nil {
		return err
	}
	if c.Dump != "" {
		if err := Dump(c.Dump, results); err != nil {
			return err
		}
	}
	if Failed(results) {
		return ErrDifferences
	}
	return nil
}
