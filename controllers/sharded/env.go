package sharded

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/shard"
)

// Env is what the replica gives every controller it declares, as
// KubeVirt's virt-controller gives each of its controllers the one informer
// factory, clients and recorder.
type Env struct {
	Kube     kubernetes.Interface
	KubeVirt kubevirt.Interface
	Metadata metadata.Interface
	Dynamic  dynamic.Interface

	Ranges shard.Ranges
	// Caches are the range caches and the cluster-wide ones: every kind a
	// controller declares in its Watches is served there.
	Caches *caches.Ranges
	// Objects are the cluster-wide caches a launcher pod is rendered from.
	Objects *caches.TemplateObjects
	// ClusterConfig is the KubeVirt CR's configuration, current.
	ClusterConfig ClusterConfig
	// Template are the launcher pod's images and labels.
	Template template.Options

	// ReplicaNamespace and Name place the objects the replicas keep for
	// themselves (the migration permit table), as they place the Leases.
	ReplicaNamespace, Name string

	Recorder record.EventRecorder
	// RecorderFor, when set, records events under a source component of
	// their own: the runtime gives a controller that declares an
	// EventSource its Recorder from it.
	RecorderFor func(component string) record.EventRecorder
	// Registry receives the controllers' own metrics.
	Registry prometheus.Registerer
	// Clock drives time-driven state; nil means the real clock.
	Clock clock.WithTicker
}

// ClusterConfig is the KubeVirt CR's configuration as a
// clusterconfig.Watcher serves it.
type ClusterConfig interface {
	Current() *clusterconfig.Config
	OnChange(func(*clusterconfig.Config))
}
