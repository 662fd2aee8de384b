// Package caches owns the informers of every shard range a replica
// holds, shared by all of the replica's controllers, and of the
// cluster-wide kinds. It serves any kind a controller declares (Kind:
// resource, shard.Placement, list-watch, trim, indexes): a range's objects
// of a kind are listed and watched once, however many controllers read
// them, and the informers of all the ranges share one watch per kind and
// selection on the API server (shard.SharedWatch), so that a replica holds
// a few watches, not a few per range.
//
// It implements shard.Handler. When a range is acquired it starts the
// range's informers, waits for them to sync, and then tells each consumer
// (the runtime of each controller), in registration order; when the range
// is released it tells them in reverse order and only then stops the
// informers, so a controller may read the caches while it hands the range
// off.
//
// Placement follows shard.Placement: an object of a kind placed by its
// owner's range or its own key (VMIs) comes from two informers (by range
// label, and by key without a range label), which Objects presents as one;
// Kind.Locate finds the held range that has a key.
//
// It must not act on objects, and it names no kind: the kinds are
// declared by their readers (package kinds, or a controller's own).
package caches
