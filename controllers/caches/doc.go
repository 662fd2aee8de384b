// Package caches owns the informers of every shard range a replica
// holds, shared by all of the replica's controllers: a range's VMIs, its
// launcher pods and its VirtualMachines are listed and watched once, however
// many controllers read them. The informers of all the ranges share one
// watch per resource on the API server (two for VMIs: shard.SharedWatch),
// so that a replica holds four watches, not four per range.
//
// It implements shard.Handler. When a range is acquired it starts the
// range's informers, waits for them to sync, and then tells each controller
// (a Consumer), in registration order; when the range is released it tells
// them in reverse order and only then stops the informers, so a controller
// may read the caches while it hands the range off.
//
// Placement follows shard.Ranges.Owner: a VMI that a VirtualMachine created
// carries the VM's range label and belongs to the VM's range; every other
// object belongs to the range its own key hashes to. So a range's VMIs come
// from two informers (by range label, and by key without a range label),
// which VMIs presents as one.
//
// It must not act on objects: it holds no clients beyond the ones its
// informers list and watch with.
package caches
