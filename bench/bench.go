package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/virtshard/virtshard/bench/ceiling"
	"github.com/virtshard/virtshard/bench/cluster"
)

// Scenarios the bench knows.
const ScenarioPodCeiling = "pod-ceiling"

// Options of one bench invocation.
type Options struct {
	Scenario    string
	Nodes       int
	Pods        int
	Concurrency []int
	Runs        int
	Output      string
	Timeout     time.Duration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Scenario:    ScenarioPodCeiling,
		Nodes:       cluster.DefaultNodes,
		Pods:        2000,
		Concurrency: []int{1, 10, 50},
		Runs:        3,
		Output:      "text",
		Timeout:     10 * time.Minute,
	}
}

// Parse reads flags from args and validates them.
func (o *Options) Parse(args []string) error {
	flags := flag.NewFlagSet("virtshard-bench", flag.ContinueOnError)
	flags.StringVar(&o.Scenario, "scenario", o.Scenario, "scenario to run: "+ScenarioPodCeiling)
	flags.IntVar(&o.Nodes, "nodes", o.Nodes, "kwok nodes in the cluster")
	flags.IntVar(&o.Pods, "pods", o.Pods, "pods per run (pod-ceiling)")
	concurrency := intList(o.Concurrency)
	flags.Var(&concurrency, "concurrency", "comma-separated concurrent creators, one series each (pod-ceiling)")
	flags.IntVar(&o.Runs, "runs", o.Runs, "runs per series; the report gives the median run")
	flags.StringVar(&o.Output, "output", o.Output, "report format: text, json or markdown")
	flags.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound on each run")
	if err := flags.Parse(args); err != nil {
		return err
	}
	o.Concurrency = concurrency
	return o.Validate()
}

// Validate checks the options.
func (o *Options) Validate() error {
	switch {
	case o.Scenario != ScenarioPodCeiling:
		return fmt.Errorf("unknown scenario %q", o.Scenario)
	case !slices.Contains([]string{"text", "json", "markdown"}, o.Output):
		return fmt.Errorf("unknown output %q: want text, json or markdown", o.Output)
	case o.Pods <= 0 || o.Runs <= 0 || o.Nodes <= 0 || len(o.Concurrency) == 0:
		return fmt.Errorf("--pods, --runs, --nodes and --concurrency must be positive")
	}
	for _, c := range o.Concurrency {
		if c <= 0 {
			return fmt.Errorf("--concurrency values must be positive, got %d", c)
		}
	}
	return nil
}

// Series is the runs of one parameter point, and the median run.
type Series struct {
	Median ceiling.Result   `json:"median"`
	Runs   []ceiling.Result `json:"runs"`
}

// Run brings up the cluster if needed, runs the scenario and writes the report.
func (o *Options) Run(ctx context.Context, out io.Writer) error {
	copts, err := cluster.DefaultOptions()
	if err != nil {
		return err
	}
	copts.Nodes = o.Nodes
	if _, err := cluster.Up(ctx, copts); err != nil {
		return err
	}
	cfg, err := copts.RESTConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var report []Series
	for _, concurrency := range o.Concurrency {
		var s Series
		for run := range o.Runs {
			ns := fmt.Sprintf("bench-ceiling-c%d-r%d-%d", concurrency, run, time.Now().Unix())
			res, err := ceiling.Run(ctx, client, ceiling.Options{Pods: o.Pods, Concurrency: concurrency, Namespace: ns, Timeout: o.Timeout})
			if err != nil {
				return fmt.Errorf("pod-ceiling run (concurrency %d): %w", concurrency, err)
			}
			s.Runs = append(s.Runs, res)
			// Let the namespace controller clear the pods first, so the next
			// run does not pay for this one's cleanup.
			if err := ceiling.WaitGone(ctx, client, ns); err != nil {
				return err
			}
		}
		byRate := slices.Clone(s.Runs)
		slices.SortFunc(byRate, func(a, b ceiling.Result) int { return int(a.Duration - b.Duration) })
		s.Median = byRate[len(byRate)/2]
		report = append(report, s)
	}
	return o.write(out, report)
}

func (o *Options) write(out io.Writer, report []Series) error {
	switch o.Output {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"scenario": o.Scenario, "nodes": o.Nodes, "series": report})
	case "markdown":
		fmt.Fprintf(out, "| pods | creators | pods/s (create→Running) | create/s | p50 | p95 | p99 | runs (pods/s) |\n")
		fmt.Fprintf(out, "|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, s := range report {
			m := s.Median
			fmt.Fprintf(out, "| %d | %d | %.0f | %.0f | %s | %s | %s | %s |\n", m.Pods, m.Concurrency, m.PodsPerSecond, m.CreatePerSecond,
				round(m.P50), round(m.P95), round(m.P99), rates(s.Runs))
		}
	default:
		for _, s := range report {
			m := s.Median
			fmt.Fprintf(out, "pods=%d creators=%d: %.0f pods/s create→Running (%s total), create %.0f/s, latency p50 %s p95 %s p99 %s; runs %s\n",
				m.Pods, m.Concurrency, m.PodsPerSecond, round(m.Duration), m.CreatePerSecond, round(m.P50), round(m.P95), round(m.P99), rates(s.Runs))
		}
	}
	return nil
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func rates(runs []ceiling.Result) string {
	parts := make([]string, len(runs))
	for i, r := range runs {
		parts[i] = fmt.Sprintf("%.0f", r.PodsPerSecond)
	}
	return strings.Join(parts, ", ")
}
