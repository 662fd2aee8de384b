// Package differential is the differential harness: one scripted scenario
// run under KubeVirt v1.8.1's virt-controller and again under virtshard,
// and every object and event the two leave behind compared field by field.
//
// A scenario is data (scenario.go): steps that create, patch and delete
// objects, play the node's part, wait, and name checkpoints. At a
// checkpoint the harness captures the scenario's objects, and the
// normalizer (normalize.go) turns what differs between any two runs —
// UIDs, resourceVersions, timestamps, generated names — into stable
// tokens, so that what is left to differ is what the controllers did.
// Differences virtshard makes on purpose are listed, each with its
// reason, in one place (differences.go); anything else is a failure.
//
// It drives both controllers and reads what they wrote; it must not be
// imported by product code.
package differential
