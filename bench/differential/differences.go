package differential

// Known is every way virtshard differs from KubeVirt v1.8.1's
// virt-controller on purpose, each with its reason. A difference the
// harness finds that no entry covers fails the run: fix virtshard, or, if
// KubeVirt is plainly wrong, add it here with the KubeVirt code it comes
// from.
var Known = []Difference{
	{
		Kind: "VirtualMachineInstance", Path: "metadata.labels[virtshard.io/range]", Outcomes: []Outcome{Extra},
		Reason: "a VM's VMI carries its VM's range, so that the replica holding the VM holds the VMI (docs/sharding.md)",
	},
	{
		Kind: "Pod", Path: "metadata.labels[virtshard.io/range]", Outcomes: []Outcome{Extra},
		Reason: "a launcher pod carries its VMI's range: its own uid hashes elsewhere (docs/sharding.md)",
	},
	{
		Kind: "Pod", Path: "metadata.generateName", Outcomes: []Outcome{Missing},
		Reason: "a launcher pod's name is derived from its VMI, not generated: the API server then refuses a second " +
			"launcher pod for one VMI, even from two replicas that both think they hold its range (docs/architecture.md)",
		KubeVirt: "pkg/virt-controller/services/template.go: RenderLaunchManifest (GenerateName)",
	},
	{
		Kind: "*", Path: "metadata.generation", Outcomes: []Outcome{Differ},
		Reason: "the API server counts the object's writes there (every write of a VMI, which has no status " +
			"subresource); virtshard coalesces status changes into fewer writes. The report gives the counts.",
	},
	{
		Kind: "Event", Path: "count", Outcomes: []Outcome{Differ},
		Reason: "an event a controller records on every sync of its object (migrationTargetPodUnschedulable, a " +
			"canceled migration's FailedMigration) is counted as often as it synced; KubeVirt syncs again after " +
			"each of its own writes, virtshard writes less",
	},
	{
		Kind: "VirtualMachineInstance", Path: "status.phaseTransitionTimestamps[*].**", Outcomes: []Outcome{Extra},
		Reason: "KubeVirt fails a Scheduled or Running VMI whose launcher pod is gone through a patch that leaves " +
			"the Failed transition out of phaseTransitionTimestamps; virtshard records every phase it moves a VMI to",
		KubeVirt: "pkg/virt-controller/watch/vmi/lifecycle.go: updateStatus (IsRunning, IsScheduled) and prepareVMIPatch",
	},
}
