// Package ceiling measures the local cluster's bare-pod ceiling: how fast plain
// pods go from create to Running through the real scheduler and kwok, with no
// virtshard in the path. Every VMI figure of the bench is held against it.
package ceiling
