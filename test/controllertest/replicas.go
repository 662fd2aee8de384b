// Package controllertest runs virtshard replicas inside a test process
// against the local cluster, as the binary runs them, for the controllers'
// integration tests. Tests that need separate processes (kill -9, RSS) use
// bench/replicas instead.
package controllertest

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/bench/virtapi"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/cmd/virtshard-controller/app"
	"github.com/virtshard/virtshard/test/clustertest"
)

// Clients returns a fresh namespace of the local cluster for t, and clients
// of the cluster.
func Clients(t testing.TB) (ns string, kube kubernetes.Interface, kv *kubevirt.Clientset) {
	t.Helper()
	cfg := clustertest.Config(t)
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return clustertest.Namespace(t), kubernetes.NewForConfigOrDie(cfg), kv
}

// Replica is one replica running in the test process.
type Replica struct {
	Registry *prometheus.Registry
	cancel   context.CancelFunc
	done     chan error
	stop     sync.Once
	err      error
}

// Stop stops the replica gracefully (as SIGTERM does), waits for it and
// returns what Run returned; later calls return the same.
func (r *Replica) Stop() error {
	r.stop.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

// Start runs a replica with identity id over namespace ns (its Leases live
// there too). configure may adjust the options. The replica is stopped at
// the end of the test.
func Start(t *testing.T, ns, id string, configure func(*app.Options)) *Replica {
	t.Helper()
	opts := app.NewOptions()
	opts.Kubeconfig = Kubeconfig(t)
	opts.Namespace = ns
	opts.Watch = ns
	opts.Identity = id
	opts.Address = "127.0.0.1:0"
	opts.QPS, opts.Burst = -1, 0
	opts.Registry = prometheus.NewRegistry()
	// Short lazy waits keep the tests quick; the bench uses the defaults.
	opts.VMI.LazyStatusWait = time.Second
	if configure != nil {
		configure(opts)
	}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Replica{Registry: opts.Registry, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- opts.Run(ctx) }()
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

// StartN starts n replicas named replica-0 … replica-(n-1) and returns once
// they share the ranges as the assignment says, so that a test's objects
// stay with one replica while it runs: ranges moving are the shard tests'
// subject, and a move hides a phase change from the metrics.
func StartN(t *testing.T, ns string, n int, configure func(*app.Options)) map[string]*Replica {
	t.Helper()
	replicas := map[string]*Replica{}
	for i := range n {
		id := fmt.Sprintf("replica-%d", i)
		replicas[id] = Start(t, ns, id, configure)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return shared(replicas), nil
	}); err != nil {
		t.Fatalf("%d replicas did not share the ranges within 2 minutes", n)
	}
	return replicas
}

// shared says whether every replica has seen the same assignment, is given
// some of the ranges by it and acts on all of those.
func shared(replicas map[string]*Replica) bool {
	generation := -1.0
	for _, r := range replicas {
		families, err := r.Registry.Gather()
		if err != nil {
			return false
		}
		g := map[string]float64{}
		for _, f := range families {
			if len(f.GetMetric()) == 1 && f.GetMetric()[0].Gauge != nil {
				g[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		gen, assigned := g["virtshard_shard_assignment_generation"], g["virtshard_shard_ranges_assigned"]
		if gen == 0 || (generation >= 0 && gen != generation) || assigned == 0 || g["virtshard_shard_ranges_active"] != assigned {
			return false
		}
		generation = gen
	}
	return true
}

// Kubeconfig writes the test cluster's config to a file for a replica.
func Kubeconfig(t testing.TB) string {
	t.Helper()
	cfg := clustertest.Config(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	api := clientcmdapi.NewConfig()
	api.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, CertificateAuthority: cfg.CAFile}
	api.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData,
		ClientCertificate: cfg.CertFile, ClientKey: cfg.KeyFile}
	api.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	api.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*api, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// StartProcesses starts n replicas as separate processes of the real
// binary, named replica-0 …, so that one can be killed (SIGKILL) like a
// crashed pod; args are extra flags. Test cleanup stops them.
func StartProcesses(t *testing.T, ns string, n int, args ...string) []*replicas.Replica {
	t.Helper()
	var procs []*replicas.Replica
	for i := range n {
		r, err := replicas.Start(replicas.Options{
			Binary: clustertest.ControllerBinary(t), Kubeconfig: Kubeconfig(t), Namespace: ns, WatchNamespace: ns, LogDir: t.TempDir(), Args: args,
		}, fmt.Sprintf("replica-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Stop(15 * time.Second) })
		procs = append(procs, r)
	}
	return procs
}

// WaitShared waits up to 2 minutes until the replicas share out the ranges
// (every one on the same assignment, acting on all it is given).
func WaitShared(t *testing.T, procs []*replicas.Replica) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return replicas.Shared(ctx, procs), nil
	}); err != nil {
		t.Fatal("the replicas did not share out the ranges within 2 minutes")
	}
}

// VirtAPI plays virt-api's webhooks for namespace ns (bench/virtapi) until
// the test ends: what a KubeVirt install's virt-api defaults on create,
// and its pod eviction admitter.
func VirtAPI(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	cfg := clustertest.Config(t)
	hook, err := virtapi.Start(ctx, cfg, "virtshard-test-"+ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hook.Stop(context.Background()) })
	kube := kubernetes.NewForConfigOrDie(cfg)
	label := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, virtapi.Label)
	if _, err := kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(label), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := hook.WaitServed(ctx, dynamic.NewForConfigOrDie(cfg), ns); err != nil {
		t.Fatal(err)
	}
}
