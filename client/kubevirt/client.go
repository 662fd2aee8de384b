package kubevirt

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	virtv1 "kubevirt.io/api/core/v1"
	migrationsv1 "kubevirt.io/api/migrations/v1alpha1"
	poolv1 "kubevirt.io/api/pool/v1beta1"
)

// Scheme knows the core Kubernetes types, the kubevirt.io/v1 types, the
// pool.kubevirt.io/v1beta1 ones and migrations.kubevirt.io/v1alpha1's.
var Scheme = runtime.NewScheme()

var (
	codecs         = serializer.NewCodecFactory(Scheme)
	parameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	// Scheme registration is static data, not wiring: doing it once here keeps
	// every caller from having to remember it.
	utilruntime.Must(scheme.AddToScheme(Scheme))
	utilruntime.Must(virtv1.AddToScheme(Scheme))
	utilruntime.Must(poolv1.AddToScheme(Scheme))
	utilruntime.Must(migrationsv1.AddToScheme(Scheme))
}

// Client is the typed client of one namespace's objects of a kubevirt.io/v1
// resource, T, listed as L. The Clientset's clients and the fake's
// (package fake) both implement it.
type Client[T runtime.Object, L runtime.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, listOpts metav1.ListOptions) error
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// VirtualMachineInstanceInterface is the typed client of one namespace's VMIs.
type VirtualMachineInstanceInterface = Client[*virtv1.VirtualMachineInstance, *virtv1.VirtualMachineInstanceList]

// VirtualMachineInterface is the typed client of one namespace's VMs.
type VirtualMachineInterface = Client[*virtv1.VirtualMachine, *virtv1.VirtualMachineList]

// MigrationInterface is the typed client of one namespace's VMI migrations.
type MigrationInterface = Client[*virtv1.VirtualMachineInstanceMigration, *virtv1.VirtualMachineInstanceMigrationList]

// ReplicaSetInterface is the typed client of one namespace's VMI replica
// sets.
type ReplicaSetInterface = Client[*virtv1.VirtualMachineInstanceReplicaSet, *virtv1.VirtualMachineInstanceReplicaSetList]

// PoolInterface is the typed client of one namespace's VM pools
// (pool.kubevirt.io/v1beta1).
type PoolInterface = Client[*poolv1.VirtualMachinePool, *poolv1.VirtualMachinePoolList]

// MigrationPolicyInterface is the typed client of the MigrationPolicies
// (migrations.kubevirt.io/v1alpha1, cluster-scoped).
type MigrationPolicyInterface = Client[*migrationsv1.MigrationPolicy, *migrationsv1.MigrationPolicyList]

// Interface gives typed clients for the kubevirt.io/v1 resources the
// controllers use, the VM pools of pool.kubevirt.io and the
// MigrationPolicies of migrations.kubevirt.io.
type Interface interface {
	VirtualMachineInstances(namespace string) VirtualMachineInstanceInterface
	VirtualMachines(namespace string) VirtualMachineInterface
	Migrations(namespace string) MigrationInterface
	ReplicaSets(namespace string) ReplicaSetInterface
	Pools(namespace string) PoolInterface
	MigrationPolicies() MigrationPolicyInterface
}

var _ Interface = (*Clientset)(nil)

// Clientset gives typed clients for the kubevirt.io/v1 resources, VM
// pools and MigrationPolicies.
type Clientset struct {
	rest, pools, policies rest.Interface
}

// NewForConfig returns a Clientset for cfg. cfg is copied, not changed.
func NewForConfig(cfg *rest.Config) (*Clientset, error) {
	client, err := restClient(cfg, virtv1.GroupVersion)
	if err != nil {
		return nil, err
	}
	pools, err := restClient(cfg, poolv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	policies, err := restClient(cfg, migrationsv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &Clientset{rest: client, pools: pools, policies: policies}, nil
}

// restClient is a REST client of one API group version, cfg copied.
func restClient(cfg *rest.Config, gv schema.GroupVersion) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("build %s REST client: %w", gv, err)
	}
	return client, nil
}

// RESTClient returns the underlying REST client.
func (c *Clientset) RESTClient() rest.Interface { return c.rest }

// VirtualMachineInstances returns the VMI client of namespace ("" for all namespaces).
func (c *Clientset) VirtualMachineInstances(namespace string) VirtualMachineInstanceInterface {
	return gentype.NewClientWithList(
		"virtualmachineinstances", c.rest, parameterCodec, namespace,
		func() *virtv1.VirtualMachineInstance { return &virtv1.VirtualMachineInstance{} },
		func() *virtv1.VirtualMachineInstanceList { return &virtv1.VirtualMachineInstanceList{} },
	)
}

// VirtualMachines returns the VM client of namespace ("" for all namespaces).
func (c *Clientset) VirtualMachines(namespace string) VirtualMachineInterface {
	return gentype.NewClientWithList(
		"virtualmachines", c.rest, parameterCodec, namespace,
		func() *virtv1.VirtualMachine { return &virtv1.VirtualMachine{} },
		func() *virtv1.VirtualMachineList { return &virtv1.VirtualMachineList{} },
	)
}

// Migrations returns the VMI migration client of namespace ("" for all namespaces).
func (c *Clientset) Migrations(namespace string) MigrationInterface {
	return gentype.NewClientWithList(
		"virtualmachineinstancemigrations", c.rest, parameterCodec, namespace,
		func() *virtv1.VirtualMachineInstanceMigration { return &virtv1.VirtualMachineInstanceMigration{} },
		func() *virtv1.VirtualMachineInstanceMigrationList {
			return &virtv1.VirtualMachineInstanceMigrationList{}
		},
	)
}

// ReplicaSets returns the VMI replica set client of namespace ("" for all namespaces).
func (c *Clientset) ReplicaSets(namespace string) ReplicaSetInterface {
	return gentype.NewClientWithList(
		"virtualmachineinstancereplicasets", c.rest, parameterCodec, namespace,
		func() *virtv1.VirtualMachineInstanceReplicaSet { return &virtv1.VirtualMachineInstanceReplicaSet{} },
		func() *virtv1.VirtualMachineInstanceReplicaSetList {
			return &virtv1.VirtualMachineInstanceReplicaSetList{}
		},
	)
}

// Pools returns the VM pool client of namespace ("" for all namespaces).
func (c *Clientset) Pools(namespace string) PoolInterface {
	return gentype.NewClientWithList(
		"virtualmachinepools", c.pools, parameterCodec, namespace,
		func() *poolv1.VirtualMachinePool { return &poolv1.VirtualMachinePool{} },
		func() *poolv1.VirtualMachinePoolList { return &poolv1.VirtualMachinePoolList{} },
	)
}

// MigrationPolicies returns the MigrationPolicy client.
func (c *Clientset) MigrationPolicies() MigrationPolicyInterface {
	return gentype.NewClientWithList(
		"migrationpolicies", c.policies, parameterCodec, "",
		func() *migrationsv1.MigrationPolicy { return &migrationsv1.MigrationPolicy{} },
		func() *migrationsv1.MigrationPolicyList { return &migrationsv1.MigrationPolicyList{} },
	)
}
