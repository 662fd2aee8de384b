// Package expectations tracks the writes a controller has made but not yet
// seen come back through its informers, so that a reconcile does not act
// twice on a stale cache (create a second launcher pod, delete twice).
//
// It follows Kubernetes' and KubeVirt's UID-tracking controller
// expectations — expected creations and deletions per key, the UIDs of
// expected deletions, expiry after five minutes — without their global
// mutex: counters are atomics in per-key records of a concurrent map, so
// workers on different keys never contend. Records are kept per shard range
// and a released range's records are dropped in one step.
package expectations
