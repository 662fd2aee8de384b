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
		Kind: "VirtualMachineInstance", Path: "metadata.labels[virtshard.io/fleet-range]", Outcomes: []Outcome{Extra},
		Reason: "a replica set's VMI carries its set's range, and a pool VM's VMI its pool's, so that the replica " +
			"holding the fleet sees them while they spread over every replica (docs/sharding.md)",
	},
	{
		Kind: "Pod", Path: "metadata.labels[virtshard.io/range]", Outcomes: []Outcome{Extra},
		Reason: "a launcher pod carries its VMI's range: its own uid hashes elsewhere (docs/sharding.md)",
	},
	{
		Kind: "ControllerRevision", Path: "metadata.labels[virtshard.io/range]", Outcomes: []Outcome{Extra},
		Reason: "a VM's start revision carries its VM's range, and a pool's revision its pool's, so that the owner's " +
			"replica caches it (docs/sharding.md)",
	},
	{
		Kind: "VirtualMachine", Path: "metadata.labels[virtshard.io/fleet-range]", Outcomes: []Outcome{Extra},
		Reason: "a pool's VM carries its pool's range, so that the replica holding the pool sees its VMs while their " +
			"own keys spread them over every replica (docs/sharding.md)",
	},
	{
		Kind: "Event", Path: "count", Outcomes: []Outcome{Differ},
		Reason: "an event a controller records on every sync of its object (migrationTargetPodUnschedulable, a " +
			"canceled migration's FailedMigration, a migration's MigrationBackoff) is counted as often as it synced; " +
			"the number of syncs is each controller's own (KubeVirt syncs again after each of its own writes, " +
			"virtshard writes less; in vmi-evacuation-backoff virtshard's migration syncs more during the backoff)",
	},
	{
		Kind: "VirtualMachineInstance", Path: "status.phaseTransitionTimestamps[*].**", Outcomes: []Outcome{Extra},
		Reason: "KubeVirt fails a Scheduled or Running VMI whose launcher pod is gone through a patch that leaves " +
			"the Failed transition out of phaseTransitionTimestamps; virtshard records every phase it moves a VMI to",
		KubeVirt: "pkg/virt-controller/watch/vmi/lifecycle.go: updateStatus (IsRunning, IsScheduled) and prepareVMIPatch",
	},

	{
		Kind: "Event", Object: "<event:VirtualMachine/*/FailedCreate#*>", Path: "**", Outcomes: []Outcome{Extra},
		Reason: "virtshard records an event with each Failure condition it sets on a VM, once, so that bad input is " +
			"seen where events are read; KubeVirt's VM controller sets the condition only",
		KubeVirt: "pkg/virt-controller/watch/vm/vm.go: processFailureCondition",
	},
	{
		Kind: "Event", Object: "<event:VirtualMachineInstance/*/FailedCreate#*>", Path: "**", Outcomes: []Outcome{Extra},
		Reason: "virtshard records an event with the Synchronized=False condition of a VMI whose launcher pod cannot " +
			"be rendered (bad input gets a condition and an event); KubeVirt's VMI controller sets the condition only",
		KubeVirt: "pkg/virt-controller/watch/vmi/vmi.go: sync (failed to render launch manifest)",
	},
	{
		Kind: "Event", Object: "<event:VirtualMachineInstanceReplicaSet/*/InvalidSpec#*>", Path: "**", Outcomes: []Outcome{Extra},
		Reason: "virtshard says why it leaves a replica set it cannot act on alone, in an event and a ReplicaFailure " +
			"condition (bad input gets a condition and an event); KubeVirt's replica set controller only logs it",
		KubeVirt: "pkg/virt-controller/watch/replicaset/replicaset.go: execute (Invalid controller spec)",
	},
	{
		Kind: "VirtualMachineInstanceReplicaSet", Path: "status.conditions[ReplicaFailure].**", Outcomes: []Outcome{Extra},
		Reason:   "the ReplicaFailure condition (reason InvalidSpec) of a replica set virtshard cannot act on; KubeVirt only logs it",
		KubeVirt: "pkg/virt-controller/watch/replicaset/replicaset.go: execute (Invalid controller spec)",
	},
	{
		Kind: "Event", Object: "<event:VirtualMachinePool/*/InvalidSpec#*>", Path: "**", Outcomes: []Outcome{Extra},
		Reason: "virtshard says why it leaves a VM pool it cannot act on alone, in an event and a ReplicaFailure " +
			"condition (bad input gets a condition and an event); KubeVirt's pool controller only logs it",
		KubeVirt: "pkg/virt-controller/watch/pool/pool.go: execute (Selector does not match template labels)",
	},
	{
		Kind: "VirtualMachinePool", Path: "status.conditions[ReplicaFailure].**", Outcomes: []Outcome{Extra},
		Reason:   "the ReplicaFailure condition (reason InvalidSpec) of a VM pool virtshard cannot act on; KubeVirt only logs it",
		KubeVirt: "pkg/virt-controller/watch/pool/pool.go: execute (Selector does not match template labels)",
	},
	{
		Kind: "Event", Object: "<event:VirtualMachineInstanceReplicaSet/*/SuccessfulDelete#*>", Path: "message", Outcomes: []Outcome{Differ},
		Reason: "which members a replica set's scale-down removes is KubeVirt's cache order, no order at all (virtshard " +
			"gives up the newest); the events name the gone members' UIDs, which no capture holds, numbered as they " +
			"first appear, so two such events may name them in either order",
		KubeVirt: "pkg/virt-controller/watch/replicaset/replicaset.go: scale (vmis[0:maxDiff])",
	},
	{
		Kind: "Event", Object: "<event:VirtualMachinePool/*/SuccessfulDelete#*>", Path: "**", Outcomes: []Outcome{Missing},
		Reason: "KubeVirt's proactive update records \"Successfully updated resource\" (reason SuccessfulDelete) for every VM " +
			"not ready whose VMI it looks at, on every sync while the VM starts, whether it updated anything or not; " +
			"virtshard records it only for a VMI it restarted or relabelled, or a VM it deleted",
		KubeVirt: "pkg/virt-controller/watch/pool/pool.go: handleUnhealthyVMIs (handleResourceUpdate for proactiveUpdateTypeNone)",
	},
	{
		Kind: "VirtualMachine", Path: "status.volumeSnapshotStatuses[*].**", Outcomes: []Outcome{Missing},
		Reason: "KubeVirt's snapshot controller says of each volume of a VM whether it can be snapshotted (a " +
			"VolumeSnapshotClass for its claim's StorageClass); virtshard has no snapshot controller yet",
		KubeVirt: "pkg/storage/snapshot/snapshot.go: updateVolumeSnapshotStatuses",
		Issue:    32,
	},
	// The launcher pod's unpaused condition: kwok's pod stage sets it (status
	// only) when it gets to the pod before the controller, and then neither
	// controller patches it; whichever comes first is the cluster's timing.
	// Its status stays compared.
	{
		Kind: "Pod", Path: "status.conditions[kubevirt.io/virtual-machine-unpaused].reason", Outcomes: []Outcome{Missing, Extra},
		Reason: unpausedRace,
	},
	{
		Kind: "Pod", Path: "status.conditions[kubevirt.io/virtual-machine-unpaused].message", Outcomes: []Outcome{Missing, Extra},
		Reason: unpausedRace,
	},
	{
		Kind: "Pod", Path: "status.conditions[kubevirt.io/virtual-machine-unpaused].lastProbeTime", Outcomes: []Outcome{Missing, Extra},
		Reason: unpausedRace,
	},
	// KubeVirt's start revision of a VM with an instance type holds the
	// instance type's annotations in its template only when the sync that
	// starts the VM is one that checked the instance type for conflicts
	// (the check merges them into that sync's VM). Which sync starts it is
	// KubeVirt's cache timing: in a loaded run of the whole corpus it was a
	// later one, and the restart judgement that compares the start with the
	// VM then came out otherwise (the VMI's generation and the VM's
	// observedGeneration moved on). Alone, the scenario matches field for
	// field. Seen in the run of 5c448e4, vm-instancetype only.
	{
		Kind: "ControllerRevision", Object: "revision-start-vm-<uid:VirtualMachine/typed>-*",
		Path: "data.spec.template.metadata.annotations[instancetype.example.org/size]", Outcomes: []Outcome{Missing, Extra},
		Reason: instancetypeStartRace, KubeVirt: "pkg/virt-controller/watch/vm/vm.go: startVMI (createVMRevision) after the instancetype store's conflict check",
	},
	{
		Kind: "VirtualMachine", Object: "typed", Path: "status.observedGeneration", Outcomes: []Outcome{Differ},
		Reason: instancetypeStartRace,
	},
	{
		Kind: "VirtualMachineInstance", Object: "typed", Path: "metadata.annotations[kubevirt.io/vm-generation]", Outcomes: []Outcome{Differ},
		Reason: instancetypeStartRace,
	},
	{
		Kind: "Event", Object: "<event:PersistentVolumeClaim/*/ExternalProvisioning#*>", Path: "**", Outcomes: []Outcome{Missing, Extra},
		Reason: "no controller under test writes it: kube-controller-manager's PersistentVolume controller posts it when " +
			"it looks at a claim the scheduler gave a node before the simulated CDI's provisioner made its volume, " +
			"which is the cluster's timing, in either run",
	},
	{
		Kind: "Event", Object: "<event:VirtualMachineInstance/*/FailedCreate#[2-9]*>", Path: "**", Outcomes: []Outcome{Missing},
		Reason:   targetPodNamed,
		KubeVirt: "pkg/virt-controller/watch/migration/migration.go: createTargetPod (GenerateName, \"Error creating pod: %v\")",
	},
	{
		// The tenth and on: client-go's recorder combines similar events.
		Kind: "Event", Object: "<event:VirtualMachineInstance/*/FailedCreate#1[0-9]*>", Path: "**", Outcomes: []Outcome{Missing},
		Reason: targetPodNamed,
	},
	{
		Kind: "Event", Object: "<event:VirtualMachineInstance/*/FailedCreate#1>", Path: "message", Outcomes: []Outcome{Differ},
		Reason: targetPodNamed + "; KubeVirt's message names a pod never made, virtshard's the target pod made later",
	},
	{
		Kind: "Event", Object: "<event:Pod/*/FailedScheduling#[2-9]>", Path: "**", Outcomes: []Outcome{Missing, Extra, Differ},
		Reason: schedulerRetries,
	},
	{
		Kind: "Event", Object: "<event:Pod/*/FailedScheduling#1>", Path: "series.**", Outcomes: []Outcome{Missing, Extra, Differ},
		Reason: schedulerRetries,
	},
	{
		// Seen once, in the full run of 8627e03, under KubeVirt; equal in
		// the runs before.
		Kind: "Event", Object: "<event:VirtualMachineInstance/manual/Stopped#2>", Path: "**", Outcomes: []Outcome{Missing, Extra},
		Reason: "no controller under test writes it: the simulated virt-handler posts it when it sees the stopped VM's " +
			"VMI deleted while still Running, and whether it looks before the VMI controller has finalized the VMI is " +
			"the two processes' timing, in either run",
	},
	{
		Kind: "Event", Object: "<event:VirtualMachinePool/*/FailedUpdate#*>", Path: "**", Outcomes: []Outcome{Missing},
		Reason: "letting a deleted VM go races the VM controller taking its own finalizer off: the patch's test of the " +
			"finalizers read fails. KubeVirt posts \"Error removing finalizer\" and tries on its next sync; virtshard " +
			"reads the VM again and sends the patch again at once, and posts the event only if that fails too",
		KubeVirt: "pkg/virt-controller/watch/pool/pool.go: statePreservationCleanupforVM (removeFinalizer)",
	},
	{
		Kind: "Event", Object: "<event:VirtualMachinePool/*/SuccessfulDelete#*>", Path: "count", Outcomes: []Outcome{Differ},
		Reason:   "the same: KubeVirt's count adds the syncs that updated nothing, a number of its cache's timing",
		KubeVirt: "pkg/virt-controller/watch/pool/pool.go: handleUnhealthyVMIs (handleResourceUpdate for proactiveUpdateTypeNone)",
	},
	{
		Kind: "Event", Object: "<event:VirtualMachineInstance/<member-of-*-gone>/*>", Path: "involvedObject.uid", Outcomes: []Outcome{Differ},
		Reason: "which members a replica set's scale-down removes is KubeVirt's cache order, no order at all (virtshard " +
			"gives up the newest); the events of those gone name UIDs no capture holds, numbered as they first appear",
		KubeVirt: "pkg/virt-controller/watch/replicaset/replicaset.go: scale (vmis[0:maxDiff])",
	},
	{
		Kind: "Event", Object: "<event:VirtualMachineInstanceMigration/*/FailedHandOver#*>", Path: "**", Outcomes: []Outcome{Missing},
		Reason: "KubeVirt's handoff patch tests the VMI's migration state, and fails when its own VMI controller " +
			"wrote the VMI in between; it records the failure and retries. virtshard's handoff is one merge patch",
		KubeVirt: "pkg/virt-controller/watch/migration/migration.go: handleTargetPodHandoff",
	},
	{
		Kind: "Event", Object: "<event:VirtualMachineInstanceMigration/*/FailedAbortMigration#*>", Path: "**", Outcomes: []Outcome{Missing, Extra},
		Reason: "either controller's abort request patches the VMI's migration state at the version it read, and fails, " +
			"records FailedAbortMigration and retries when the VMI was written in between (by the node side or its own VMI " +
			"controller); whether a write comes in between is the two processes' timing (seen once under KubeVirt, in a subset run)",
		KubeVirt: "pkg/virt-controller/watch/migration/migration.go: markMigrationAbortInVmiStatus",
	},
	{
		Kind: "Event", Object: "<event:VirtualMachineInstanceMigration/*/FailedMigration#2>", Path: "**", Outcomes: []Outcome{Missing},
		Reason: "a migration fails once; KubeVirt reports it again (\"Migration failed because target pod shutdown during " +
			"migration\") when the target's launcher exits before its own Failed write is back in its cache, and its " +
			"sync of the stale migration takes the target pod's end for a new failure",
		KubeVirt: "pkg/virt-controller/watch/migration/migration.go: updateStatus (PodIsDown before the VMI's Failed)",
	},

	// Not built yet: each closes with the issue that builds it. (None
	// today: the VM's observed generation, the last one, is built.)
}

// targetPodNamed explains the events of a migration's target pod the API
// server refused again and again.
const targetPodNamed = "a migration target pod refused (a ResourceQuota) is tried again: KubeVirt generates its name at " +
	"each try, so each refusal's \"Error creating pod\" names another pod and is an event of its own; virtshard derives " +
	"the name from the migration, the same at every try (docs/architecture.md), so its refusals are one event, counted"

// schedulerRetries explains a launcher pod's FailedScheduling events
// after the first.
const schedulerRetries = "no controller under test writes it: the scheduler tries an unschedulable pod again when a " +
	"claim, volume or class anywhere in the cluster changes, and whether such a change came after its first try (a " +
	"series on its event, or a second one) is the cluster's timing, in either run; the first try's event is compared"

// instancetypeStartRace explains a start revision with or without the
// instance type's annotations, and what follows from it.
const instancetypeStartRace = "KubeVirt merges the instance type's annotations into the VM's template only in a sync that checks " +
	"the instance type for conflicts; whether the sync that starts the VM (and stores its start revision) is that one " +
	"is KubeVirt's cache timing, and the restart judgement against the start follows from it"

// unpausedRace explains a launcher pod's unpaused condition without the
// controller's reason, message and probe time in one run.
const unpausedRace = "kwok's pod stage sets the launcher pod's readiness-gate condition itself (status True, nothing else) " +
	"when it gets to the pod before the controller does; both controllers then leave it as it is (KubeVirt's " +
	"syncPausedConditionToPod patches only a status that differs), so which one wrote it is the cluster's timing"
