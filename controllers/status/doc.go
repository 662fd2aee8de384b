// Package status batches a controller's writes to one object: every intent
// (a mutation of the object) that arrives for a key before its flush is
// applied to the latest copy and sent as one JSON merge patch, with the
// object's resourceVersion as precondition, so a patch computed from a
// stale cache can never overwrite someone else's newer write (kwok's
// node-side stage, another replica in a handoff). On conflict the object is
// re-read and the intents re-applied.
//
// An urgent intent (the handoff to the node agent, a failure) carries how
// long it may wait and flushes within a few milliseconds; a lazy one (an
// intermediate phase nobody waits for) waits as the batcher's Config says,
// longer while it is busy, so that it rides along with the next urgent one:
// most VMIs then reach Scheduled with a single status patch, the phases in
// between recorded with their own timestamps. Patches go through the
// fenced writer of the controller.
package status
