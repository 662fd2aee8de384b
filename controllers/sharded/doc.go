// Package sharded is the runtime every controller runs on. A controller
// is a Declaration (name, default workers, constructor); its constructor
// returns a Controller: the kinds it watches and which items their events
// queue (Watch, Events), its Sync, what it forgets of a range handed off,
// and a background loop if it has one.
//
// The runtime owns the rest, the same for every controller: it registers
// the declared kinds with the range caches (package caches), adds the
// cluster-wide handlers before any range is taken and the range handlers
// as each range is acquired, runs the work queue and workers for the Items
// (range and key; Cluster for an item of no range), admits a sync only
// while its range is held and not being handed off (Gate) and waits for
// the syncs under way at a handoff, recovers from panics, labels CPU
// profiles with the controller's name, and records each reconcile's
// duration and result. Every write a controller sends goes through its
// Writer, which sends nothing for a range not held and gives the request
// the fence's deadline.
//
// It knows no controller and no kind: adding either edits nothing here.
package sharded
