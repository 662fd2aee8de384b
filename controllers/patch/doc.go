// Package patch builds the JSON merge patches that more than one
// controller sends. Each carries the resourceVersion of the object it was
// made from, so that it applies to that version only: a patch made from a
// stale cache, or sent by a replica whose range moved on, conflicts
// instead of overwriting what someone else wrote since.
//
// It sends nothing: controllers send through their fenced writer.
package patch
