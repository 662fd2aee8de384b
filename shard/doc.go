// Package shard splits an object space among the replicas of a controller.
//
// The 64-bit FNV-1a hash space of KEP-5866 (server-side sharded list and
// watch, package k8s.io/apimachinery/pkg/sharding) is cut into a fixed number
// of contiguous ranges. Every range has a Lease; only its holder acts on the
// objects in it. One replica, elected with client-go's leader election,
// publishes which live member should hold which range (bounded-load
// consistent hashing); members release what it moved away and claim what it
// gave them. The range Lease, never the published assignment, is the truth
// about who may act.
//
// Package shard knows nothing about VMIs or any other kind: controllers hook
// in through per-range lifecycle callbacks and build their informers with
// the selectors and guards it provides.
package shard
