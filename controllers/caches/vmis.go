package caches

import (
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"
)

// VMIs are one range's VMIs, from two informers that never hold the same
// VMI: those a VM created, by the range label it stamped, and all others,
// by their own key.
type VMIs struct {
	Unlabelled cache.SharedIndexInformer
	Labelled   cache.SharedIndexInformer
}

func (v VMIs) informers() [2]cache.SharedIndexInformer {
	return [2]cache.SharedIndexInformer{v.Labelled, v.Unlabelled}
}

// Get returns the cached VMI with key namespace/name.
func (v VMIs) Get(key string) (*virtv1.VirtualMachineInstance, bool, error) {
	for _, inf := range v.informers() {
		obj, exists, err := inf.GetStore().GetByKey(key)
		if err != nil {
			return nil, false, err
		}
		if exists {
			return obj.(*virtv1.VirtualMachineInstance), true, nil
		}
	}
	return nil, false, nil
}

// ByIndex returns the cached VMIs whose indexer name yields value.
func (v VMIs) ByIndex(name, value string) ([]*virtv1.VirtualMachineInstance, error) {
	var out []*virtv1.VirtualMachineInstance
	for _, inf := range v.informers() {
		objs, err := inf.GetIndexer().ByIndex(name, value)
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			out = append(out, obj.(*virtv1.VirtualMachineInstance))
		}
	}
	return out, nil
}

// Keys lists the namespace/name of every cached VMI.
func (v VMIs) Keys() []string {
	return append(v.Labelled.GetStore().ListKeys(), v.Unlabelled.GetStore().ListKeys()...)
}

// Len counts the cached VMIs.
func (v VMIs) Len() int {
	return len(v.Labelled.GetStore().ListKeys()) + len(v.Unlabelled.GetStore().ListKeys())
}

// HasSynced reports whether both informers have synced.
func (v VMIs) HasSynced() bool { return v.Labelled.HasSynced() && v.Unlabelled.HasSynced() }

// AddEventHandler adds h to both informers. A VMI moves between them only
// if someone edits its range label; h then sees it deleted from one and
// added to the other.
func (v VMIs) AddEventHandler(h cache.ResourceEventHandler) error {
	for _, inf := range v.informers() {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	return nil
}

// Stores are the two informers' stores, labelled first, for overlays such
// as a mutation cache.
func (v VMIs) Stores() [2]cache.Store {
	return [2]cache.Store{v.Labelled.GetStore(), v.Unlabelled.GetStore()}
}

// List returns every cached VMI. The objects are the cache's: read only.
func (v VMIs) List() []*virtv1.VirtualMachineInstance {
	var out []*virtv1.VirtualMachineInstance
	for _, store := range v.Stores() {
		for _, obj := range store.List() {
			out = append(out, obj.(*virtv1.VirtualMachineInstance))
		}
	}
	return out
}
