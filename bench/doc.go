// Package bench drives virtshard's benchmark scenarios against the local
// kwok cluster (package cluster) and reports their figures. It is what
// bench/cmd/virtshard-bench runs; nothing in virtshard's controllers imports it.
package bench
