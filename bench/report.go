package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/virtshard/virtshard/bench/ceiling"
)

// Report is the result of one scenario run: one JSON object.
type Report struct {
	Scenario string  `json:"scenario"`
	VMIs     int     `json:"vmis"`
	Replicas int     `json:"replicas"`
	Rate     float64 `json:"rate,omitempty"`
	Machine  Machine `json:"machine"`

	Running               int     `json:"running"`
	DuplicateLauncherPods int     `json:"duplicateLauncherPods"`
	Stuck                 int     `json:"stuck"`
	DurationSeconds       float64 `json:"durationSeconds"`
	VMIsPerSecond         float64 `json:"vmisPerSecond"`

	// Stopped says why the run ended early (the machine's memory ran low).
	Stopped string `json:"stopped,omitempty"`

	// ScheduledPerSecond and RunningPerSecond are the VMIs handed off
	// (phase Scheduled) and Running, each divided by the time from the
	// first create to the last of them seen so.
	ScheduledPerSecond float64 `json:"scheduledPerSecond"`
	RunningPerSecond   float64 `json:"runningPerSecond"`

	// CeilingPodsPerSecond is the bare-pod ceiling (scenario ceiling).
	CeilingPodsPerSecond float64 `json:"ceilingPodsPerSecond,omitempty"`

	// The floor (ceiling.Floor), measured in the same invocation with as
	// many VMIs: the bench makes only the writes any controller must (the
	// launcher pod, one hand-off), so its VMIs/s is this machine's limit
	// for any controller. FloorRatio is VMIsPerSecond over
	// FloorVMIsPerSecond; APIServerCPUPerVMI is the API server's CPU
	// seconds per VMI during the VMI run, FloorAPIServerCPUPerVMI the same
	// during the floor's, and APIServerCPURatio the first over the second.
	FloorVMIsPerSecond      float64 `json:"floorVMIsPerSecond,omitempty"`
	FloorRatio              float64 `json:"floorRatio,omitempty"`
	APIServerCPUPerVMI      float64 `json:"apiServerCPUPerVMI,omitempty"`
	FloorAPIServerCPUPerVMI float64 `json:"floorAPIServerCPUPerVMI,omitempty"`
	APIServerCPURatio       float64 `json:"apiServerCPURatio,omitempty"`

	// LatencySeconds is creation → Running from phaseTransitionTimestamps
	// (KubeVirt's definition: creationTimestamp has whole seconds);
	// HandoffLatencySeconds the same to Scheduled, the controller's part;
	// ObservedLatencySeconds from the bench's create call to its watch
	// seeing Running, to the millisecond.
	LatencySeconds         Percentiles `json:"latencySeconds"`
	LatencyVMIs            int         `json:"latencyVMIs"` // VMIs with a Running timestamp: the sample
	HandoffLatencySeconds  Percentiles `json:"handoffLatencySeconds"`
	ObservedLatencySeconds Percentiles `json:"observedLatencySeconds"`

	WritesPerVMI          WritesPerVMI `json:"writesPerVMI"`
	EventsPerVMI          float64      `json:"eventsPerVMI"`
	AllClientWritesPerVMI float64      `json:"allClientWritesPerVMI,omitempty"`
	// TerminatedWatchers are the watchers, by resource, that the API
	// server's watch cache closed during the flow because their buffers
	// were full (apiserver_terminated_watchers_total): every client's.
	TerminatedWatchers map[string]float64 `json:"apiServerTerminatedWatchers,omitempty"`
	ReplicaStats       []ReplicaStats     `json:"replicaStats"`
	// ClusterCPUSeconds is each control-plane process's CPU time during the
	// VMI run: where the machine's two cores went.
	ClusterCPUSeconds map[string]float64 `json:"clusterCPUSeconds,omitempty"`
	// NodeSideCPUSecondsPer1000VMIs is the CPU time of the simulated
	// virt-handler and of kwok (nodes and pods) during the VMI run, per
	// 1,000 VMIs Running: what the simulated node side costs.
	NodeSideCPUSecondsPer1000VMIs map[string]float64 `json:"nodeSideCPUSecondsPer1000VMIs,omitempty"`
	// CeilingClusterCPUSeconds is the same during the bare-pod ceiling run,
	// FloorClusterCPUSeconds during the floor run.
	CeilingClusterCPUSeconds map[string]float64 `json:"ceilingClusterCPUSeconds,omitempty"`
	FloorClusterCPUSeconds   map[string]float64 `json:"floorClusterCPUSeconds,omitempty"`

	// Throughput over the run: VMIs/s to Running in each tenth of the VMIs,
	// and the first and the last of them; ScheduledPerSecondByTenth is the
	// same for the controllers' handoffs (phase Scheduled), without the node
	// side's part.
	VMIsPerSecondByTenth      []float64 `json:"vmisPerSecondByTenth,omitempty"`
	ScheduledPerSecondByTenth []float64 `json:"scheduledPerSecondByTenth,omitempty"`
	FirstTenthVMIsPerSecond   float64   `json:"firstTenthVMIsPerSecond,omitempty"`
	LastTenthVMIsPerSecond    float64   `json:"lastTenthVMIsPerSecond,omitempty"`

	// Failover and rolling: time until a stopped replica's ranges were held
	// again, the worst one, and each handoff.
	TakeoverSeconds float64   `json:"takeoverSeconds,omitempty"`
	HandoffSeconds  []float64 `json:"handoffSeconds,omitempty"`
	// FaultLatencySeconds is LatencySeconds of the VMIs created from a fault
	// until its ranges were held again plus 5 s (chaos: any fault), and
	// QuietLatencySeconds (chaos) that of the others.
	FaultLatencySeconds *Percentiles `json:"faultLatencySeconds,omitempty"`
	QuietLatencySeconds *Percentiles `json:"quietLatencySeconds,omitempty"`

	// Ranges is how many hash ranges the replicas share. From the
	// timeline's samples, once a second: MinActiveRanges is the fewest the
	// live replicas acted on at once, first seen at MinActiveAtSeconds, and
	// UnservedRangeSeconds adds up the ranges no replica acted on over the
	// flow (16 ranges for 10 s are 160): the work a takeover, a handoff or a
	// stall held up.
	Ranges               int     `json:"ranges"`
	MinActiveRanges      int     `json:"minActiveRanges"`
	MinActiveAtSeconds   float64 `json:"minActiveAtSeconds"`
	UnservedRangeSeconds float64 `json:"unservedRangeSeconds"`

	// Fleet scenario: KubeVirt's virt-controller's run, then the replicas'.
	Fleets []FleetRun `json:"fleets,omitempty"`

	// Drain scenario: KubeVirt's virt-controller's run, then the replicas'.
	Drains []DrainRun `json:"drains,omitempty"`

	// Upgrade scenario: KubeVirt's virt-controller's run, then the
	// replicas'.
	Upgrades []UpgradeRun `json:"upgrades,omitempty"`

	// Latency scenario: the open-loop runs (at --rate and at half the
	// throughput measured first).
	LatencyRuns []LatencyRun `json:"latencyRuns,omitempty"`

	// Chaos scenario: the faults injected; the replica writes the audit log
	// showed and those outside the writer's tenure of the object's range
	// (with up to 20 of them described).
	Faults                []FaultRecord `json:"faults,omitempty"`
	AuditedWrites         int           `json:"auditedWrites,omitempty"`
	FencedWriteViolations *int          `json:"fencedWriteViolations,omitempty"`
	ViolationSamples      []string      `json:"violationSamples,omitempty"`
	// DelayedRefusedWrites are writes the partition held back and the
	// server refused on delivery: sent inside the tenure, not violations.
	DelayedRefusedWrites int `json:"delayedRefusedWrites,omitempty"`
	// HeldChunks are the chunks of bytes each partition held back and
	// delivered after it, as its proxy recorded them: what a refused write
	// is matched against to excuse it (DelayedRefusedWrites), kept so that
	// one the check did not match can be looked at.
	HeldChunks []HeldChunk `json:"heldChunks,omitempty"`
	// ChaosMigrations are the VMIs migrated over and over beside the
	// flow, against the limits, and the VSOCK CIDs given under the faults.
	ChaosMigrations *ChaosMigrations `json:"chaosMigrations,omitempty"`

	// Migration is the migrations scenario's result, after the VMI run the
	// rest of the report describes (an object of its own: its
	// durationSeconds are per migration).
	Migration *MigrationStats `json:"migration,omitempty"`

	Timeline []Sample `json:"timeline,omitempty"`
}

// Machine is where the run happened.
type Machine struct {
	Cores       int   `json:"cores"`
	MemoryBytes int64 `json:"memoryBytes"`
	Nodes       int   `json:"kwokNodes"`
}

// Percentiles of a latency, in seconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

func percentiles(sorted []time.Duration) Percentiles {
	return Percentiles{
		P50: ceiling.Percentile(sorted, 0.50).Seconds(),
		P95: ceiling.Percentile(sorted, 0.95).Seconds(),
		P99: ceiling.Percentile(sorted, 0.99).Seconds(),
	}
}

// HeldChunk is a chunk of a replica's bytes a partition held back: when the
// replica sent it and when the proxy delivered it.
type HeldChunk struct {
	Replica   string    `json:"replica"`
	Sent      time.Time `json:"sent"`
	Delivered time.Time `json:"delivered"`
}

// LatencyRun is one open-loop run of the latency scenario.
type LatencyRun struct {
	Rate            float64     `json:"rate"`
	VMIs            int         `json:"vmis"`
	Running         int         `json:"running"`
	LatencySeconds  Percentiles `json:"latencySeconds"`
	HandoffSeconds  Percentiles `json:"handoffLatencySeconds"`
	ObservedSeconds Percentiles `json:"observedLatencySeconds"`
}

// WritesPerVMI is the controllers' writes to pods and VMIs per VMI.
type WritesPerVMI struct {
	Total          float64            `json:"total"`
	ByVerbResource map[string]float64 `json:"byVerbResource"`
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeText prints the report for a person.
func (r *Report) writeText(out io.Writer) {
	if r.Scenario == ScenarioCeiling {
		fmt.Fprintf(out, "ceiling: %d bare pods Running in %.1f s = %.1f pods/s; latency p50/p95/p99 %s\n",
			r.Running, r.DurationSeconds, r.CeilingPodsPerSecond, r.ObservedLatencySeconds)
		fmt.Fprintf(out, "control plane CPU seconds: %s\n", sortedMap(r.CeilingClusterCPUSeconds))
		return
	}
	if r.Scenario == ScenarioFleet {
		r.writeFleets(out)
		return
	}
	if r.Scenario == ScenarioDrain {
		writeDrainMarkdown(out, r)
		return
	}
	if r.Scenario == ScenarioUpgrade {
		writeUpgradeMarkdown(out, r)
		return
	}
	fmt.Fprintf(out, "%s: %d VMIs through %d replicas: %d Running in %.1f s = %.1f VMIs/s (to Scheduled: %.1f VMIs/s); %d stuck, %d duplicate launcher pods\n",
		r.Scenario, r.VMIs, r.Replicas, r.Running, r.DurationSeconds, r.VMIsPerSecond, r.ScheduledPerSecond, r.Stuck, r.DuplicateLauncherPods)
	if r.Stopped != "" {
		fmt.Fprintf(out, "%s\n", r.Stopped)
	}
	fmt.Fprintf(out, "latency create→Running p50/p95/p99 observed by the bench %s (from the API's whole-second timestamps %s, to Scheduled %s)\n",
		r.ObservedLatencySeconds, r.LatencySeconds, r.HandoffLatencySeconds)
	for _, l := range r.LatencyRuns {
		fmt.Fprintf(out, "  open loop at %.1f VMIs/s, %d VMIs: create→Running observed %s (timestamps %s, to Scheduled %s)\n",
			l.Rate, l.VMIs, l.ObservedSeconds, l.LatencySeconds, l.HandoffSeconds)
	}
	fmt.Fprintf(out, "writes per VMI: %.2f %s; events per VMI: %.2f; all clients' writes per VMI: %.2f\n",
		r.WritesPerVMI.Total, sortedMap(r.WritesPerVMI.ByVerbResource), r.EventsPerVMI, r.AllClientWritesPerVMI)
	if len(r.TerminatedWatchers) > 0 {
		fmt.Fprintf(out, "watchers the API server closed as too slow (every client's): %s\n", sortedMap(r.TerminatedWatchers))
	}
	if r.FloorVMIsPerSecond > 0 {
		fmt.Fprintf(out, "floor in the same run: %.1f VMIs/s (ratio %.2f); API server CPU per VMI %.1f ms against the floor's %.1f ms (ratio %.2f)\n",
			r.FloorVMIsPerSecond, r.FloorRatio, 1000*r.APIServerCPUPerVMI, 1000*r.FloorAPIServerCPUPerVMI, r.APIServerCPURatio)
	}
	if len(r.VMIsPerSecondByTenth) > 0 {
		fmt.Fprintf(out, "VMIs/s by tenth of the VMIs, to Running: %s; to Scheduled: %s\n",
			formatRates(r.VMIsPerSecondByTenth), formatRates(r.ScheduledPerSecondByTenth))
	}
	if r.Ranges > 0 && r.DurationSeconds > 0 {
		fmt.Fprintf(out, "ranges acted on: at least %d of %d (first at %.0f s); %.0f range-seconds unserved, %.2f%% of the flow's\n",
			r.MinActiveRanges, r.Ranges, r.MinActiveAtSeconds, r.UnservedRangeSeconds,
			100*r.UnservedRangeSeconds/(float64(r.Ranges)*r.DurationSeconds))
	}
	if len(r.HandoffSeconds) > 0 {
		fmt.Fprintf(out, "takeover %.2f s (each: %v)\n", r.TakeoverSeconds, r.HandoffSeconds)
	}
	if r.FaultLatencySeconds != nil {
		fmt.Fprintf(out, "latency of VMIs created during the fault: %s\n", *r.FaultLatencySeconds)
	}
	if r.QuietLatencySeconds != nil {
		fmt.Fprintf(out, "latency of VMIs created outside every fault: %s\n", *r.QuietLatencySeconds)
	}
	r.writeFleets(out)
	for _, f := range r.Faults {
		fmt.Fprintf(out, "  fault at %5.1f s: %-17s %-12s lasted %4.1f s, all ranges acted on again %.2f s later\n",
			f.AtSeconds, f.Kind, f.Replica, f.DurationSeconds, f.RecoverySeconds)
	}
	if r.FencedWriteViolations != nil {
		fmt.Fprintf(out, "audit: %d replica writes checked, %d fenced-write violations; %d writes held back by the partition and refused on delivery\n",
			r.AuditedWrites, *r.FencedWriteViolations, r.DelayedRefusedWrites)
		for _, v := range r.ViolationSamples {
			fmt.Fprintf(out, "  violation: %s\n", v)
		}
	}
	if c := r.ChaosMigrations; c != nil {
		fmt.Fprintf(out, "beside the flow: %d migrations of %d VMIs created (of those kept, %d succeeded, %d failed, %d unfinished); in flight at most %d in the cluster (limit %d) and %d out of one node (limit %d), %d samples; %d VSOCK CIDs given, %d of them twice\n",
			c.Created, c.VMIs, c.Succeeded, c.Failed, c.Unfinished, c.MaxInFlightCluster, c.LimitPerCluster, c.MaxOutboundPerNode, c.LimitPerNode, c.Samples, c.CIDs, c.DuplicateCIDs)
	}
	if m := r.Migration; m != nil {
		fmt.Fprintf(out, "migrations: %d, %d succeeded, %d failed, %.2f/s, duration %s; in flight at most %d in the cluster (limit %d) and %d out of one node (limit %d), %d samples\n",
			m.Migrations, m.Succeeded, m.Failed, m.MigrationsPerSecond, m.DurationSeconds, m.MaxInFlightCluster, m.LimitPerCluster,
			m.MaxOutboundPerNode, m.LimitPerNode, m.Samples)
		fmt.Fprintf(out, "controller writes per migration: %.2f %s (replica stats below cover the migrations)\n",
			m.WritesPerMigration.Total, sortedMap(m.WritesPerMigration.ByVerbResource))
	}
	if len(r.ClusterCPUSeconds) > 0 {
		fmt.Fprintf(out, "control plane CPU seconds during the VMI run: %s\n", sortedMap(r.ClusterCPUSeconds))
	}
	if len(r.NodeSideCPUSecondsPer1000VMIs) > 0 {
		fmt.Fprintf(out, "node side CPU seconds per 1,000 VMIs: %s\n", sortedMap(r.NodeSideCPUSecondsPer1000VMIs))
	}
	if len(r.FloorClusterCPUSeconds) > 0 {
		fmt.Fprintf(out, "control plane CPU seconds during the floor run: %s\n", sortedMap(r.FloorClusterCPUSeconds))
	}
	if len(r.CeilingClusterCPUSeconds) > 0 && r.Scenario != ScenarioCeiling {
		fmt.Fprintf(out, "control plane CPU seconds during the ceiling run: %s\n", sortedMap(r.CeilingClusterCPUSeconds))
	}
	for _, s := range r.ReplicaStats {
		fmt.Fprintf(out, "  %s: %d ranges, %d cached VMIs, peak RSS %.0f MiB, CPU %.1f s, %d watch restarts, %d relists\n",
			s.Name, s.OwnedRanges, s.CachedVMIs, float64(s.PeakRSSBytes)/(1<<20), s.CPUSeconds, s.WatchRestarts, s.Relists)
	}
}

// failures lists what makes a chaos run fail: anything lost, done twice
// or written outside its writer's tenure.
func (r *Report) failures() []string {
	if r.Scenario != ScenarioChaos {
		return nil
	}
	var out []string
	if r.Stuck > 0 {
		out = append(out, fmt.Sprintf("%d VMIs stuck", r.Stuck))
	}
	if r.DuplicateLauncherPods > 0 {
		out = append(out, fmt.Sprintf("%d duplicate launcher pods", r.DuplicateLauncherPods))
	}
	for _, f := range r.Fleets {
		if f.NotReady != "" {
			out = append(out, "fleets not ready: "+f.NotReady)
		}
		if n := f.DuplicateVMIs + f.DuplicateVMs; n != 0 {
			out = append(out, fmt.Sprintf("fleets: %d VMIs and %d VMs created beyond one per member", f.DuplicateVMIs, f.DuplicateVMs))
		}
		if f.EndedVMIs != 0 {
			// Replaced, so not duplicates; but no fault of a run should
			// end a VMI.
			out = append(out, fmt.Sprintf("fleets: %d VMIs ended (Failed or Succeeded)", f.EndedVMIs))
		}
	}
	if r.FencedWriteViolations == nil || *r.FencedWriteViolations > 0 {
		out = append(out, "fenced-write violations (see the report)")
	}
	if c := r.ChaosMigrations; c != nil {
		if c.MaxInFlightCluster > c.LimitPerCluster || c.MaxOutboundPerNode > c.LimitPerNode {
			out = append(out, fmt.Sprintf("migration limits exceeded: %d in flight (limit %d), %d out of a node (limit %d)",
				c.MaxInFlightCluster, c.LimitPerCluster, c.MaxOutboundPerNode, c.LimitPerNode))
		}
		if c.DuplicateCIDs > 0 || c.CIDs < c.VMIs {
			out = append(out, fmt.Sprintf("VSOCK CIDs: %d of %d VMIs have one, %d given twice", c.CIDs, c.VMIs, c.DuplicateCIDs))
		}
		if c.Created == 0 || c.Samples == 0 {
			out = append(out, "no migration beside the flow was made or sampled")
		}
	}
	return out
}

func (p Percentiles) String() string { return fmt.Sprintf("%.2f/%.2f/%.2f s", p.P50, p.P95, p.P99) }

func sortedMap(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%.2f", k, m[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func formatRates(rates []float64) string {
	parts := make([]string, len(rates))
	for i, r := range rates {
		parts[i] = fmt.Sprintf("%.0f", r)
	}
	return strings.Join(parts, ", ")
}

// setAvailability computes the range figures from the timeline, of ranges
// shared ranges; samples without a count (-1) are skipped, and without any
// count the figures stay unset.
func (r *Report) setAvailability(ranges int) {
	minActive, minAt, unserved, last, counted := ranges, 0.0, 0.0, 0.0, false
	for _, s := range r.Timeline {
		if s.ActiveRanges < 0 {
			continue
		}
		if s.ActiveRanges < minActive {
			minActive, minAt = s.ActiveRanges, s.Seconds
		}
		// A sample stands for the time since the one before it.
		unserved += float64(max(ranges-s.ActiveRanges, 0)) * (s.Seconds - last)
		last, counted = s.Seconds, true
	}
	if counted {
		r.Ranges, r.MinActiveRanges, r.MinActiveAtSeconds, r.UnservedRangeSeconds = ranges, minActive, minAt, unserved
	}
}

// setTenths computes the by-tenth rates from the timeline.
func (r *Report) setTenths() {
	r.VMIsPerSecondByTenth = byTenth(r.Timeline, r.Running, running)
	r.ScheduledPerSecondByTenth = byTenth(r.Timeline, r.Running, scheduled)
	if r.VMIsPerSecondByTenth != nil {
		r.FirstTenthVMIsPerSecond, r.LastTenthVMIsPerSecond = r.VMIsPerSecondByTenth[0], r.VMIsPerSecondByTenth[9]
	}
}
