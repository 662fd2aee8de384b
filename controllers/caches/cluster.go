package caches

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/shard"
)

// ByVMIName indexes migrations by the namespace/name of their VMI.
const ByVMIName = "vmiName"

// Cluster holds the cluster-wide caches every replica keeps whole because
// they are few and small: migrations (a replica acts only on those of VMIs
// it holds) and nodes (cluster-scoped; a replica acts only on its own VMIs
// on them).
type Cluster struct {
	Migrations cache.SharedIndexInformer
	Nodes      cache.SharedIndexInformer
}

// NewCluster returns the cluster-wide caches; Run starts them.
func NewCluster(cfg Config) *Cluster {
	kv, ns := cfg.KubeVirt, cfg.Namespace
	migrations := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kv.Migrations(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kv.Migrations(ns).Watch(ctx, o)
		},
	}, kv), &virtv1.VirtualMachineInstanceMigration{}, 0, cache.Indexers{ByVMIName: func(obj any) ([]string, error) {
		m := obj.(*virtv1.VirtualMachineInstanceMigration)
		return []string{m.Namespace + "/" + m.Spec.VMIName}, nil
	}})
	nodes := informers.NewSharedInformerFactory(cfg.Kube, 0).Core().V1().Nodes().Informer()
	// SetTransform fails only on a started informer; these are new.
	_ = migrations.SetTransform(shard.TrimForCache)
	_ = nodes.SetTransform(trimNode)
	return &Cluster{Migrations: migrations, Nodes: nodes}
}

// trimNode keeps what the controllers read of a node: its metadata (less
// managed fields), taints and conditions. Images and volumes can be most of
// a node object.
func trimNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	node.ManagedFields = nil
	node.Status = corev1.NodeStatus{Conditions: node.Status.Conditions}
	return node, nil
}

// Run starts the caches and waits until they synced.
func (c *Cluster) Run(ctx context.Context) error {
	go c.Migrations.RunWithContext(ctx)
	go c.Nodes.RunWithContext(ctx)
	if !cache.WaitForNamedCacheSync("cluster", ctx.Done(), c.Migrations.HasSynced, c.Nodes.HasSynced) {
		return fmt.Errorf("cluster-wide caches did not sync: %w", ctx.Err())
	}
	return nil
}

// Migrations of the VMI namespace/name, from the cache.
func (c *Cluster) MigrationsOf(vmiKey string) []*virtv1.VirtualMachineInstanceMigration {
	objs, _ := c.Migrations.GetIndexer().ByIndex(ByVMIName, vmiKey)
	out := make([]*virtv1.VirtualMachineInstanceMigration, 0, len(objs))
	for _, obj := range objs {
		out = append(out, obj.(*virtv1.VirtualMachineInstanceMigration))
	}
	return out
}
