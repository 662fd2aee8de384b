package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/virtshard/virtshard/bench/ceiling"
	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/client/kubevirt"
)

// Scenarios the bench knows.
const (
	// ScenarioPodCeiling and ScenarioFloor are the cluster's own limits as
	// series over creator counts, side by side: plain pods to Running, and
	// VMIs to Running with only the writes any controller must make, sent
	// by the bench (ceiling.Floor).
	ScenarioPodCeiling = "pod-ceiling"
	ScenarioFloor      = "floor"

	// The VMI scenarios, one report each.
	ScenarioCeiling    = "ceiling"
	ScenarioThroughput = "throughput"
	ScenarioLatency    = "latency"
	ScenarioScale      = "scale"
	ScenarioFailover   = "failover"
	ScenarioRolling    = "rolling"
	ScenarioSingleton  = "singleton"
	// ScenarioMigrations runs --vmis VMIs, then migrates --migrations of
	// them at once.
	ScenarioMigrations = "migrations"
	// ScenarioChaos runs --vmis VMIs while replicas are killed, frozen and
	// cut off and their API server restarts, and checks the API server's
	// audit log for fenced-write violations.
	ScenarioChaos = "chaos"
	// ScenarioKubeVirt runs the throughput burst through KubeVirt v1.8.1's
	// own virt-controller (bench/kubevirt) instead of virtshard.
	ScenarioKubeVirt = "kubevirt"
	// ScenarioFleet scales a VMI replica set of --vmis members up and down
	// and runs a pool of a tenth as many VMs with DataVolumes, under
	// KubeVirt's virt-controller and then under --replicas replicas.
	ScenarioFleet = "fleet"
	// ScenarioDrain runs --vmis VMIs and drains three nodes as kubectl
	// drain does, under KubeVirt's virt-controller and under --replicas
	// replicas.
	ScenarioDrain = "drain"
	// ScenarioUpgrade runs --vmis VMIs and upgrades the controller to a
	// new launcher image, KubeVirt's virt-controller and then the replicas
	// rolled from --previous-controller (bench/upgrade.go).
	ScenarioUpgrade = "upgrade"
)

var seriesScenarios = []string{ScenarioPodCeiling, ScenarioFloor}

// scenarioDefaults are each VMI scenario's --vmis, --replicas and --rate
// when not given.
var scenarioDefaults = map[string]struct {
	vmis, replicas int
	rate           float64
}{
	ScenarioCeiling:    {2000, 0, 0},
	ScenarioThroughput: {2000, 3, 0},
	ScenarioLatency:    {1000, 3, 10},
	ScenarioScale:      {50000, 4, 4},
	ScenarioFailover:   {4000, 4, 0},
	ScenarioRolling:    {4000, 4, 0},
	ScenarioSingleton:  {2000, 2, 0},
	ScenarioMigrations: {1000, 3, 0},
	ScenarioChaos:      {20000, 4, 20},
	ScenarioKubeVirt:   {2000, 1, 0},
	ScenarioFleet:      {5000, 3, 0},
	ScenarioDrain:      {2000, 3, 0},
	ScenarioUpgrade:    {2000, 3, 0},
}

// Suites run many scenarios and write BENCHMARKS.md's generated section.
const (
	SuiteFull  = "full"
	SuiteSmoke = "smoke"
	// SuiteCompare is the full suite's side-by-side part: KubeVirt's
	// virt-controller and virtshard on the same 2,000-VMI burst.
	SuiteCompare = "compare"
)

// Options of one bench invocation.
type Options struct {
	Scenarios []string
	Suite     string
	Nodes     int
	Output    string
	// Out receives raw data, plots and CPU profiles; Update is a markdown
	// file whose generated section a suite rewrites.
	Out, Update string
	// Reports, with a suite, rebuilds its summary from the reports a suite
	// wrote to that directory instead of running it.
	Reports string
	Timeout time.Duration

	// Series scenarios.
	Count       int
	Concurrency []int
	Runs        int

	// VMI scenarios.
	Controller string
	// PreviousController is the binary the upgrade scenario rolls the
	// replicas from (Controller when empty), PreviousName what it is
	// called in the report (its commit).
	PreviousController string
	PreviousName       string
	Replicas           int
	VMIs               int
	Creators           int
	Rate               float64
	Ranges             int
	// Migrations is how many of the VMIs the migrations scenario migrates
	// (0: a fifth).
	Migrations int
	// ReplicaArgs are extra flags for every replica, e.g. "-v=2".
	ReplicaArgs []string
	// MemoryFloorMiB ends a run early, with what it measured, when the
	// machine's available memory falls below it (0: never): a run too
	// large for the machine stops instead of taking the cluster down.
	MemoryFloorMiB int
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Scenarios:   []string{ScenarioThroughput},
		Nodes:       cluster.DefaultNodes,
		Count:       2000,
		Concurrency: []int{1, 10, 50},
		Runs:        3,
		Output:      "text",
		Controller:  "bin/virtshard-controller",
		Creators:    16,
		Ranges:      64,
		// Room for the end of a run: after the 20,000-VMI run's last
		// create, the API server grew by 1.5 GiB while the VMIs drained
		// and the bench read its figures (BENCHMARKS.md).
		MemoryFloorMiB: 3072,
	}
}

// Parse reads flags from args and validates them.
func (o *Options) Parse(args []string) error {
	flags := flag.NewFlagSet("virtshard-bench", flag.ContinueOnError)
	scenarioList := strings.Join(o.Scenarios, ",")
	flags.StringVar(&scenarioList, "scenario", scenarioList, "scenario: "+strings.Join(slices.Sorted(maps.Keys(scenarioDefaults)), ", ")+
		"; or comma-separated series scenarios, run side by side: "+strings.Join(seriesScenarios, ", "))
	flags.StringVar(&o.Suite, "suite", o.Suite, "run a suite of scenarios instead: full (make bench), compare (make bench-compare) or smoke (make bench-smoke)")
	flags.IntVar(&o.Nodes, "nodes", o.Nodes, "kwok nodes in the cluster")
	flags.StringVar(&o.Output, "output", o.Output, "report format: text, json or markdown")
	flags.StringVar(&o.Out, "out", o.Out, "directory for raw data, SVG plots and the replicas' CPU profiles")
	flags.StringVar(&o.Update, "update", o.Update, "markdown file whose generated section a suite rewrites (BENCHMARKS.md)")
	flags.StringVar(&o.Reports, "reports", o.Reports, "with --suite: rebuild the summary (and --update) from the reports a suite wrote to this directory, without running")
	flags.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound on each run (0: 5 min + 100 ms per VMI)")
	flags.IntVar(&o.Count, "count", o.Count, "objects per run (series scenarios)")
	concurrency := intList(o.Concurrency)
	flags.Var(&concurrency, "concurrency", "comma-separated concurrent creators, one series each (series scenarios)")
	flags.IntVar(&o.Runs, "runs", o.Runs, "runs per series; the report gives the median run (series scenarios)")
	flags.StringVar(&o.Controller, "controller", o.Controller, "virtshard-controller binary")
	flags.StringVar(&o.PreviousController, "previous-controller", o.PreviousController, "the virtshard-controller binary the upgrade scenario rolls the replicas from (default: --controller)")
	flags.StringVar(&o.PreviousName, "previous-name", o.PreviousName, "what the report calls --previous-controller, e.g. its commit")
	flags.IntVar(&o.Replicas, "replicas", o.Replicas, "controller replicas (default by scenario)")
	flags.IntVar(&o.VMIs, "vmis", o.VMIs, "VMIs to create (default by scenario)")
	flags.IntVar(&o.Creators, "creators", o.Creators, "concurrent VMI creators")
	flags.Float64Var(&o.Rate, "rate", o.Rate, "VMIs created per second, arriving as a Poisson process; 0 is as fast as possible (default by scenario)")
	flags.IntVar(&o.Migrations, "migrations", o.Migrations, "VMIs the migrations scenario migrates at once (0: a fifth of --vmis)")
	flags.IntVar(&o.MemoryFloorMiB, "memory-floor", o.MemoryFloorMiB, "end a run early when the machine's available memory falls below this many MiB (0: never)")
	replicaArgs := strings.Join(o.ReplicaArgs, " ")
	flags.StringVar(&replicaArgs, "replica-args", replicaArgs, "extra flags for every replica, space-separated (e.g. -v=2)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", flags.Args())
	}
	o.Scenarios = strings.Split(scenarioList, ",")
	o.ReplicaArgs = strings.Fields(replicaArgs)
	o.Concurrency = concurrency
	if len(o.Scenarios) == 1 {
		set := map[string]bool{}
		flags.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if d, ok := scenarioDefaults[o.Scenarios[0]]; ok {
			if !set["vmis"] {
				o.VMIs = d.vmis
			}
			if !set["replicas"] {
				o.Replicas = d.replicas
			}
			if !set["rate"] {
				o.Rate = d.rate
			}
		}
	}
	return o.Validate()
}

// Validate checks the options.
func (o *Options) Validate() error {
	_, vmiScenario := scenarioDefaults[o.Scenarios[0]]
	for _, sc := range o.Scenarios {
		if !slices.Contains(seriesScenarios, sc) && (!vmiScenario || len(o.Scenarios) > 1) {
			return fmt.Errorf("unknown scenario %q (VMI scenarios run one at a time): want one of %s, or a list of %s",
				sc, strings.Join(slices.Sorted(maps.Keys(scenarioDefaults)), ", "), strings.Join(seriesScenarios, ", "))
		}
	}
	switch {
	case o.Suite != "" && o.Suite != SuiteFull && o.Suite != SuiteCompare && o.Suite != SuiteSmoke:
		return fmt.Errorf("unknown suite %q: want %s, %s or %s", o.Suite, SuiteFull, SuiteCompare, SuiteSmoke)
	case (o.Update != "" || o.Reports != "") && o.Suite == "":
		return fmt.Errorf("--update and --reports need --suite")
	case vmiScenario && o.Scenarios[0] != ScenarioCeiling && o.Replicas <= 0:
		return fmt.Errorf("--replicas must be positive")
	case o.Scenarios[0] == ScenarioKubeVirt && o.Replicas != 1:
		return fmt.Errorf("%s runs KubeVirt's one active virt-controller: --replicas must be 1", ScenarioKubeVirt)
	case o.Scenarios[0] == ScenarioSingleton && o.Replicas != 2:
		return fmt.Errorf("%s runs 1 active and 1 standby replica: --replicas must be 2", ScenarioSingleton)
	case (o.Scenarios[0] == ScenarioFailover || o.Scenarios[0] == ScenarioChaos) && o.Replicas < 2:
		return fmt.Errorf("%s needs at least 2 replicas", o.Scenarios[0])
	case o.Migrations < 0 || o.Migrations > o.VMIs:
		return fmt.Errorf("--migrations must be between 0 and --vmis")
	case vmiScenario && (o.VMIs <= 0 || o.Creators <= 0 || o.Rate < 0):
		return fmt.Errorf("--vmis and --creators must be positive, --rate not negative")
	case o.MemoryFloorMiB < 0:
		return fmt.Errorf("--memory-floor must not be negative (0 turns it off)")
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

// timeout bounds one run.
func (o *Options) timeout(vmis int) time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	// 10 VMIs/s: a realistic 10,000-VMI burst ran at 11–13 VMIs/s; an
	// open-loop run lasts at least as long as its creations. A stalled run
	// ends earlier anyway (Stall).
	perVMI := 100 * time.Millisecond
	if o.Rate > 0 {
		perVMI = max(perVMI, time.Duration(float64(time.Second)/o.Rate))
	}
	return 5*time.Minute + time.Duration(vmis)*perVMI
}

// Series is the runs of one scenario and parameter point, and the median run.
type Series struct {
	Scenario string           `json:"scenario"`
	Median   ceiling.Result   `json:"median"`
	Runs     []ceiling.Result `json:"runs"`
}

// Run brings up the cluster if needed, runs the scenario or suite and
// writes the report.
func (o *Options) Run(ctx context.Context, out io.Writer) error {
	if o.Reports != "" {
		if o.Out == "" {
			o.Out = o.Reports
		}
		return (&env{o: o}).runSuite(ctx, out)
	}
	copts, err := cluster.DefaultOptions()
	if err != nil {
		return err
	}
	copts.Nodes = o.Nodes
	if _, err := cluster.Up(ctx, copts); err != nil {
		return err
	}
	e, err := newEnv(o, copts)
	if err != nil {
		return err
	}
	if o.Suite != "" {
		return e.runSuite(ctx, out)
	}
	if _, ok := scenarioDefaults[o.Scenarios[0]]; ok {
		r, err := e.runScenario(ctx, o.Scenarios[0], o.Out)
		if err != nil {
			return err
		}
		switch o.Output {
		case "json":
			err = writeJSON(out, r)
		case "markdown":
			writeMarkdown(out, []*Report{r})
		default:
			r.writeText(out)
		}
		if failures := r.failures(); len(failures) > 0 {
			return errors.Join(err, fmt.Errorf("%s failed: %s", r.Scenario, strings.Join(failures, "; ")))
		}
		return err
	}
	return o.runSeries(ctx, e.kube, e.kv, out)
}

// runSeries runs the series scenarios side by side.
func (o *Options) runSeries(ctx context.Context, client kubernetes.Interface, kv *kubevirt.Clientset, out io.Writer) error {
	var report []Series
	for _, concurrency := range o.Concurrency {
		// Scenarios alternate run by run, so that they share the machine's
		// moods alike and compare side by side.
		series := make([]Series, len(o.Scenarios))
		for run := range o.Runs {
			for si, scenario := range o.Scenarios {
				ns := fmt.Sprintf("bench-%s-c%d-r%d-%d", scenario, concurrency, run, time.Now().Unix())
				opts := ceiling.Options{Count: o.Count, Concurrency: concurrency, Namespace: ns, Timeout: o.timeout(o.Count)}
				var res ceiling.Result
				var err error
				if scenario == ScenarioPodCeiling {
					res, err = ceiling.Pods(ctx, client, opts)
				} else {
					res, err = ceiling.Floor(ctx, client, kv, opts)
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

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func rates(runs []ceiling.Result) string {
	parts := make([]string, len(runs))
	for i, r := range runs {
		parts[i] = fmt.Sprintf("%.0f", r.PerSecond)
	}
	return strings.Join(parts, ", ")
}
