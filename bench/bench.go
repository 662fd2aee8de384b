package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/virtshard/virtshard/bench/ceiling"
	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/controllers/kubevirt"
)

// Scenarios the bench knows.
const (
	// ScenarioPodCeiling: plain pods to Running, through the scheduler and kwok.
	ScenarioPodCeiling = "pod-ceiling"
	// ScenarioVMIStageCeiling: handed-off VMIs to Running, through kwok's VMI stage.
	ScenarioVMIStageCeiling = "vmi-stage-ceiling"
	// ScenarioThroughput: VMIs as fast as possible through replica processes.
	ScenarioThroughput = "throughput"
)

var scenarios = []string{ScenarioPodCeiling, ScenarioVMIStageCeiling, ScenarioThroughput}

// Options of one bench invocation.
type Options struct {
	Scenarios   []string
	Nodes       int
	Count       int
	Concurrency []int
	Runs        int
	Output      string
	Timeout     time.Duration

	// Throughput scenario.
	Controller string
	Replicas   int
	VMIs       int
	Creators   int
	Rate       float64
	Ranges     int
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Scenarios:   []string{ScenarioPodCeiling},
		Nodes:       cluster.DefaultNodes,
		Count:       2000,
		Concurrency: []int{1, 10, 50},
		Runs:        3,
		Output:      "text",
		Timeout:     10 * time.Minute,
		Controller:  "bin/virtshard-controller",
		Replicas:    3,
		VMIs:        2000,
		Creators:    16,
		Ranges:      64,
	}
}

// Parse reads flags from args and validates them.
func (o *Options) Parse(args []string) error {
	flags := flag.NewFlagSet("virtshard-bench", flag.ContinueOnError)
	scenarioList := strings.Join(o.Scenarios, ",")
	flags.StringVar(&scenarioList, "scenario", scenarioList, "comma-separated scenarios, run side by side: "+strings.Join(scenarios, ", "))
	flags.IntVar(&o.Nodes, "nodes", o.Nodes, "kwok nodes in the cluster")
	flags.IntVar(&o.Count, "count", o.Count, "objects per run")
	concurrency := intList(o.Concurrency)
	flags.Var(&concurrency, "concurrency", "comma-separated concurrent creators, one series each (pod-ceiling)")
	flags.IntVar(&o.Runs, "runs", o.Runs, "runs per series; the report gives the median run")
	flags.StringVar(&o.Output, "output", o.Output, "report format: text, json or markdown")
	flags.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound on each run")
	flags.StringVar(&o.Controller, "controller", o.Controller, "virtshard-controller binary (throughput)")
	flags.IntVar(&o.Replicas, "replicas", o.Replicas, "controller replicas (throughput)")
	flags.IntVar(&o.VMIs, "vmis", o.VMIs, "VMIs to create (throughput)")
	flags.IntVar(&o.Creators, "creators", o.Creators, "concurrent VMI creators (throughput)")
	flags.Float64Var(&o.Rate, "rate", o.Rate, "VMIs created per second, 0 is as fast as possible (throughput)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	o.Scenarios = strings.Split(scenarioList, ",")
	o.Concurrency = concurrency
	return o.Validate()
}

// Validate checks the options.
func (o *Options) Validate() error {
	for _, sc := range o.Scenarios {
		if !slices.Contains(scenarios, sc) {
			return fmt.Errorf("unknown scenario %q: want %s", sc, strings.Join(scenarios, ", "))
		}
	}
	if slices.Contains(o.Scenarios, ScenarioThroughput) && len(o.Scenarios) > 1 {
		return fmt.Errorf("run %s on its own", ScenarioThroughput)
	}
	switch {
	case o.Replicas <= 0 || o.VMIs <= 0 || o.Creators <= 0 || o.Rate < 0:
		return fmt.Errorf("--replicas, --vmis and --creators must be positive, --rate not negative")
	case !slices.Contains([]string{"text", "json", "markdown"}, o.Output):
		return fmt.Errorf("unknown output %q: want text, json or markdown", o.Output)
	case o.Count <= 0 || o.Runs <= 0 || o.Nodes <= 0 || len(o.Concurrency) == 0:
		return fmt.Errorf("--count, --runs, --nodes and --concurrency must be positive")
	}
	for _, c := range o.Concurrency {
		if c <= 0 {
			return fmt.Errorf("--concurrency values must be positive, got %d", c)
		}
	}
	return nil
}

// Series is the runs of one scenario and parameter point, and the median run.
type Series struct {
	Scenario string           `json:"scenario"`
	Median   ceiling.Result   `json:"median"`
	Runs     []ceiling.Result `json:"runs"`
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
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if o.Scenarios[0] == ScenarioThroughput {
		var progress io.Writer = os.Stderr
		if o.Output == "json" {
			progress = nil
		}
		res, err := o.runThroughput(ctx, copts, client, kv, progress)
		if err != nil {
			return err
		}
		return o.writeThroughput(out, res)
	}
	var report []Series
	for _, concurrency := range o.Concurrency {
		// Scenarios alternate run by run, so that they share the machine's
		// moods alike and compare side by side.
		series := make([]Series, len(o.Scenarios))
		for run := range o.Runs {
			for si, scenario := range o.Scenarios {
				ns := fmt.Sprintf("bench-%s-c%d-r%d-%d", scenario, concurrency, run, time.Now().Unix())
				opts := ceiling.Options{Count: o.Count, Concurrency: concurrency, Namespace: ns, Timeout: o.Timeout, Nodes: o.Nodes}
				var res ceiling.Result
				if scenario == ScenarioPodCeiling {
					res, err = ceiling.Pods(ctx, client, opts)
				} else {
					res, err = ceiling.VMIStage(ctx, client, kv, opts)
				}
				if err != nil {
					return fmt.Errorf("%s run (concurrency %d): %w", scenario, concurrency, err)
				}
				series[si].Scenario = scenario
				series[si].Runs = append(series[si].Runs, res)
				// Let the namespace controller clear the objects first, so the
				// next run does not pay for this one's cleanup.
				if err := ceiling.WaitGone(ctx, client, ns); err != nil {
					return err
				}
			}
		}
		for _, s := range series {
			byTime := slices.Clone(s.Runs)
			slices.SortFunc(byTime, func(a, b ceiling.Result) int { return int(a.Duration - b.Duration) })
			s.Median = byTime[len(byTime)/2]
			report = append(report, s)
		}
	}
	return o.write(out, report)
}

func (o *Options) write(out io.Writer, report []Series) error {
	switch o.Output {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"nodes": o.Nodes, "series": report})
	case "markdown":
		fmt.Fprintf(out, "| scenario | objects | creators | Running/s | create/s | p50 | p95 | p99 | runs (Running/s) |\n")
		fmt.Fprintf(out, "|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, s := range report {
			m := s.Median
			fmt.Fprintf(out, "| %s | %d | %d | %.0f | %.0f | %s | %s | %s | %s |\n", s.Scenario, m.Count, m.Concurrency, m.PerSecond, m.CreatePerSecond,
				round(m.P50), round(m.P95), round(m.P99), rates(s.Runs))
		}
	default:
		for _, s := range report {
			m := s.Median
			fmt.Fprintf(out, "%s count=%d creators=%d: %.0f/s create→Running (%s total), create %.0f/s, latency p50 %s p95 %s p99 %s; runs %s\n",
				s.Scenario, m.Count, m.Concurrency, m.PerSecond, round(m.Duration), m.CreatePerSecond, round(m.P50), round(m.P95), round(m.P99), rates(s.Runs))
		}
	}
	return nil
}

func (o *Options) writeThroughput(out io.Writer, r *ThroughputResult) error {
	if o.Output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(out, "throughput: %d VMIs through %d replicas: %d Running in %.1f s = %.1f VMIs/s; %d stuck, %d duplicate launcher pods\n",
		r.VMIs, r.Replicas, r.Running, r.DurationSeconds, r.VMIsPerSecond, r.Stuck, r.DuplicateLauncherPods)
	fmt.Fprintf(out, "writes per VMI: %.2f %v; events per VMI: %.2f; all clients' writes per VMI: %.2f\n",
		r.WritesPerVMI.Total, r.WritesPerVMI.ByVerbResource, r.EventsPerVMI, r.AllClientWritesPerVMI)
	fmt.Fprintf(out, "bare-pod ceiling in the same run: %.1f pods/s; ceilingRatio (API writes/s, VMI run over ceiling run): %.2f\n",
		r.CeilingPodsPerSecond, r.CeilingRatio)
	for _, s := range r.ReplicaStats {
		fmt.Fprintf(out, "  %s: %d ranges, peak RSS %.0f MiB, CPU %.1f s\n", s.Name, s.OwnedRanges, float64(s.PeakRSSBytes)/(1<<20), s.CPUSeconds)
	}
	return nil
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func rates(runs []ceiling.Result) string {
	parts := make([]string, len(runs))
	for i, r := range runs {
		parts[i] = fmt.Sprintf("%.0f", r.PerSecond)
	}
	return strings.Join(parts, ", ")
}
