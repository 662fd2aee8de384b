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
		Kind: "Event", Path: "source.component", Outcomes: []Outcome{Differ},
		Reason: "events come from virtshard-controller; KubeVirt's from virt-controller",
	},
}
