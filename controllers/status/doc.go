// Package status batches a controller's writes to one object: every intent
// (a mutation of the object) that arrives for a key before its flush is
// applied to the latest copy and sent as one JSON merge patch, with the
// object's resourceVersion as precondition, so a patch computed from a
// stale cache can never overwrite someone else's newer write (kwok's
// node-side stage, another replica in a handoff). On conflict the object is
// re-read and the intents re-applied.
//
// Each intent carries how long it may wait. Urgent intents (the handoff to
// the node agent, a failure) flush within a few milliseconds; lazy ones (an
// intermediate phase nobody waits for) may wait, so that they ride along
// with the next urgent one: most VMIs then reach Scheduled with a single
// status patch, the phases in between recorded with their own timestamps.
package status
