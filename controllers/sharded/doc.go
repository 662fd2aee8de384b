// Package sharded is the runtime every sharded controller runs on: the
// work item (range and key), the per-range gate that keeps a controller
// from acting on a range it no longer holds and lets a handoff wait for
// the syncs under way, and the worker loop with its metrics.
//
// A controller provides, for each kind of object it watches, which keys
// its events queue (Events, made a handler by Handler: its own key, its
// controller's, ...) and a SyncFunc; the runtime runs the SyncFunc for each
// Item of a range the replica holds and is not handing off, requeues on
// error or on request, recovers from panics, labels CPU profiles with the
// controller's name, and records each reconcile's duration and result.
// Every write a controller sends goes through its Writer, which sends
// nothing for a range not held and gives the request the fence's deadline.
package sharded
