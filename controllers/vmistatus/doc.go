// Package vmistatus holds the changes to a VMI's status that more than one
// controller makes, so that each is made one way: the VMI controller
// applies them through its status batcher, the others to a copy they send
// as one merge patch (patch.Merge). It also holds the readings of a VMI's
// status that more than one controller acts on (Migrating, Migratable),
// so that they agree.
package vmistatus
