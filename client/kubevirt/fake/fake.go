// Package fake is a kubevirt.Interface backed by client-go's object
// tracker, for unit tests of controllers in sample-controller's style: seed
// it with objects, run a sync, and read the actions it recorded.
package fake

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"
	migrationsv1 "kubevirt.io/api/migrations/v1alpha1"
	poolv1 "kubevirt.io/api/pool/v1beta1"

	"github.com/virtshard/virtshard/client/kubevirt"
)

// Clientset is a fake kubevirt.Interface; its embedded Fake records the
// actions and takes reactors, as client-go's fake clientsets do.
type Clientset struct {
	k8stesting.Fake
	tracker k8stesting.ObjectTracker
}

var _ kubevirt.Interface = (*Clientset)(nil)

// NewClientset returns a fake holding objects.
func NewClientset(objects ...runtime.Object) *Clientset {
	tracker := k8stesting.NewObjectTracker(kubevirt.Scheme, serializer.NewCodecFactory(kubevirt.Scheme).UniversalDecoder())
	for _, obj := range objects {
		if err := tracker.Add(obj); err != nil {
			panic(err)
		}
	}
	c := &Clientset{tracker: tracker}
	c.AddReactor("*", "*", k8stesting.ObjectReaction(tracker))
	c.AddWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := tracker.Watch(action.GetResource(), action.GetNamespace())
		return true, w, err
	})
	return c
}

// IsWatchListSemanticsUnSupported tells the reflectors to list and then
// watch: the tracker cannot stream a list as a watch.
func (c *Clientset) IsWatchListSemanticsUnSupported() bool { return true }

// Tracker is the fake's object store.
func (c *Clientset) Tracker() k8stesting.ObjectTracker { return c.tracker }

// VirtualMachineInstances implements kubevirt.Interface.
func (c *Clientset) VirtualMachineInstances(namespace string) kubevirt.VirtualMachineInstanceInterface {
	return gentype.NewFakeClientWithList(&c.Fake, namespace,
		virtv1.SchemeGroupVersion.WithResource("virtualmachineinstances"), virtv1.VirtualMachineInstanceGroupVersionKind,
		func() *virtv1.VirtualMachineInstance { return &virtv1.VirtualMachineInstance{} },
		func() *virtv1.VirtualMachineInstanceList { return &virtv1.VirtualMachineInstanceList{} },
		func(dst, src *virtv1.VirtualMachineInstanceList) { dst.ListMeta = src.ListMeta },
		func(list *virtv1.VirtualMachineInstanceList) []*virtv1.VirtualMachineInstance {
			return pointers(list.Items)
		},
		func(list *virtv1.VirtualMachineInstanceList, items []*virtv1.VirtualMachineInstance) {
			list.Items = values(items)
		},
	)
}

// VirtualMachines implements kubevirt.Interface.
func (c *Clientset) VirtualMachines(namespace string) kubevirt.VirtualMachineInterface {
	return gentype.NewFakeClientWithList(&c.Fake, namespace,
		virtv1.SchemeGroupVersion.WithResource("virtualmachines"), virtv1.VirtualMachineGroupVersionKind,
		func() *virtv1.VirtualMachine { return &virtv1.VirtualMachine{} },
		func() *virtv1.VirtualMachineList { return &virtv1.VirtualMachineList{} },
		func(dst, src *virtv1.VirtualMachineList) { dst.ListMeta = src.ListMeta },
		func(list *virtv1.VirtualMachineList) []*virtv1.VirtualMachine { return pointers(list.Items) },
		func(list *virtv1.VirtualMachineList, items []*virtv1.VirtualMachine) { list.Items = values(items) },
	)
}

// Migrations implements kubevirt.Interface.
func (c *Clientset) Migrations(namespace string) kubevirt.MigrationInterface {
	return gentype.NewFakeClientWithList(&c.Fake, namespace,
		virtv1.SchemeGroupVersion.WithResource("virtualmachineinstancemigrations"), virtv1.VirtualMachineInstanceMigrationGroupVersionKind,
		func() *virtv1.VirtualMachineInstanceMigration { return &virtv1.VirtualMachineInstanceMigration{} },
		func() *virtv1.VirtualMachineInstanceMigrationList {
			return &virtv1.VirtualMachineInstanceMigrationList{}
		},
		func(dst, src *virtv1.VirtualMachineInstanceMigrationList) { dst.ListMeta = src.ListMeta },
		func(list *virtv1.VirtualMachineInstanceMigrationList) []*virtv1.VirtualMachineInstanceMigration {
			return pointers(list.Items)
		},
		func(list *virtv1.VirtualMachineInstanceMigrationList, items []*virtv1.VirtualMachineInstanceMigration) {
			list.Items = values(items)
		},
	)
}

// ReplicaSets implements kubevirt.Interface.
func (c *Clientset) ReplicaSets(namespace string) kubevirt.ReplicaSetInterface {
	return gentype.NewFakeClientWithList(&c.Fake, namespace,
		virtv1.SchemeGroupVersion.WithResource("virtualmachineinstancereplicasets"), virtv1.VirtualMachineInstanceReplicaSetGroupVersionKind,
		func() *virtv1.VirtualMachineInstanceReplicaSet { return &virtv1.VirtualMachineInstanceReplicaSet{} },
		func() *virtv1.VirtualMachineInstanceReplicaSetList {
			return &virtv1.VirtualMachineInstanceReplicaSetList{}
		},
		func(dst, src *virtv1.VirtualMachineInstanceReplicaSetList) { dst.ListMeta = src.ListMeta },
		func(list *virtv1.VirtualMachineInstanceReplicaSetList) []*virtv1.VirtualMachineInstanceReplicaSet {
			return pointers(list.Items)
		},
		func(list *virtv1.VirtualMachineInstanceReplicaSetList, items []*virtv1.VirtualMachineInstanceReplicaSet) {
			list.Items = values(items)
		},
	)
}

// Pools implements kubevirt.Interface.
func (c *Clientset) Pools(namespace string) kubevirt.PoolInterface {
	return gentype.NewFakeClientWithList(&c.Fake, namespace,
		poolv1.SchemeGroupVersion.WithResource("virtualmachinepools"), poolv1.SchemeGroupVersion.WithKind("VirtualMachinePool"),
		func() *poolv1.VirtualMachinePool { return &poolv1.VirtualMachinePool{} },
		func() *poolv1.VirtualMachinePoolList { return &poolv1.VirtualMachinePoolList{} },
		func(dst, src *poolv1.VirtualMachinePoolList) { dst.ListMeta = src.ListMeta },
		func(list *poolv1.VirtualMachinePoolList) []*poolv1.VirtualMachinePool { return pointers(list.Items) },
		func(list *poolv1.VirtualMachinePoolList, items []*poolv1.VirtualMachinePool) {
			list.Items = values(items)
		},
	)
}

// MigrationPolicies implements kubevirt.Interface.
func (c *Clientset) MigrationPolicies() kubevirt.MigrationPolicyInterface {
	return gentype.NewFakeClientWithList(&c.Fake, "",
		migrationsv1.SchemeGroupVersion.WithResource("migrationpolicies"), migrationsv1.SchemeGroupVersion.WithKind("MigrationPolicy"),
		func() *migrationsv1.MigrationPolicy { return &migrationsv1.MigrationPolicy{} },
		func() *migrationsv1.MigrationPolicyList { return &migrationsv1.MigrationPolicyList{} },
		func(dst, src *migrationsv1.MigrationPolicyList) { dst.ListMeta = src.ListMeta },
		func(list *migrationsv1.MigrationPolicyList) []*migrationsv1.MigrationPolicy {
			return pointers(list.Items)
		},
		func(list *migrationsv1.MigrationPolicyList, items []*migrationsv1.MigrationPolicy) {
			list.Items = values(items)
		},
	)
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

func values[T any](items []*T) []T {
	out := make([]T, len(items))
	for i, item := range items {
		out[i] = *item
	}
	return out
}

// Writes lists the actions of any fake clientset that change something, as
// "verb resource[/subresource]", in order: what a controller's unit test
// asserts its sync sent.
func Writes(actions []k8stesting.Action) []string {
	var out []string
	for _, a := range actions {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		w := a.GetVerb() + " " + a.GetResource().Resource
		if a.GetSubresource() != "" {
			w += "/" + a.GetSubresource()
		}
		out = append(out, w)
	}
	return out
}
