// Package workload makes the VMIs that the demo and the bench drive:
// realistic VMIs, defaulted as virt-api stores them, that kwok's nodes run,
// created by concurrent creators, optionally arriving at a rate as a
// Poisson process.
package workload

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/apidefaults"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
)

// The realistic workload: the everyday VMI of KubeVirt's examples, a
// container-disk root disk with a cloud-init disk, the pod network through
// masquerade, one vCPU, one of four memory sizes from 128Mi to 1Gi, and
// live migration on eviction. kwok
// runs the launcher pods, so the image is never pulled.
const (
	DemoImage = "quay.io/kubevirt/cirros-container-disk-demo:v1.8.1"
	userData  = "#cloud-config\nssh_authorized_keys: []\n"
	// AppLabel labels every workload VMI.
	AppLabel = "virtshard-workload"
)

var memorySizes = []string{"128Mi", "256Mi", "512Mi", "1Gi"}

// AsWritten is a realistic VMI as a user writes it, before virt-api's
// defaults: what a VM's template holds. Its memory size follows from its
// name, so a run's sizes are the same every time.
func AsWritten(name string) *virtv1.VirtualMachineInstance {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	memory := memorySizes[h.Sum32()%uint32(len(memorySizes))]
	virtio := virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": AppLabel}},
		Spec: virtv1.VirtualMachineInstanceSpec{
			Tolerations: []corev1.Toleration{{Key: cluster.KwokNodeTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Domain: virtv1.DomainSpec{
				CPU: &virtv1.CPU{Cores: 1},
				Resources: virtv1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memory)},
				},
				Devices: virtv1.Devices{
					Disks: []virtv1.Disk{{Name: "containerdisk", DiskDevice: virtio}, {Name: "cloudinitdisk", DiskDevice: virtio}},
					Interfaces: []virtv1.Interface{{Name: "default",
						InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}}}},
				},
			},
			// As the VMs of KubeVirt's common templates: a drained node's
			// VMIs migrate away.
			EvictionStrategy:              ptr.To(virtv1.EvictionStrategyLiveMigrate),
			Networks:                      []virtv1.Network{*virtv1.DefaultPodNetwork()},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Volumes: []virtv1.Volume{
				{Name: "containerdisk", VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{Image: DemoImage}}},
				{Name: "cloudinitdisk", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{UserData: userData}}},
			},
		},
	}
}

// VMI is a realistic VMI as virt-api stores it: AsWritten with virt-api's
// create-time defaults for a cluster with KubeVirt's default configuration.
// The local cluster runs no virt-api, so the workload defaults its VMIs
// itself; the API server drops the status the defaults set.
func VMI(name string) *virtv1.VirtualMachineInstance {
	vmi := AsWritten(name)
	if err := apidefaults.Apply(vmi, defaultConfig, metav1.Now()); err != nil {
		// AsWritten is fixed: KubeVirt accepts it on every architecture.
		panic(fmt.Sprintf("defaults of the workload VMI: %v", err))
	}
	return vmi
}

// defaultConfig is for amd64, what the kwok nodes are.
var defaultConfig = clusterconfig.DefaultConfig("amd64")

// Bare is a VMI with only a memory request, for tests that give it their own
// devices or break it on purpose.
func Bare(name string) *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": AppLabel}},
		Spec: virtv1.VirtualMachineInstanceSpec{
			Tolerations: []corev1.Toleration{{Key: cluster.KwokNodeTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Domain: virtv1.DomainSpec{Resources: virtv1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
			}},
		},
	}
}

// Spread makes the scheduler spread the VMI's launcher pod over the nodes,
// one more at most on any node than on another, counting the workload's
// other launcher pods but not migration targets (or the spread could forbid
// a target its node). Left alone, the scheduler packs kwok nodes: a
// migration test would then hit only the per-node limit.
func Spread(vmi *virtv1.VirtualMachineInstance) {
	vmi.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{
			MatchLabels:      maps.Clone(vmi.Labels),
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: virtv1.MigrationJobLabel, Operator: metav1.LabelSelectorOpDoesNotExist}},
		},
	}}
}

// Options of a creation run.
type Options struct {
	Namespace   string
	Count       int
	Concurrency int
	// Rate is VMIs per second, arriving as a Poisson process (exponential
	// gaps, so that arrivals are not phase-locked to the whole seconds of
	// the API's timestamps; one fixed seed, so that runs send alike); 0
	// creates as fast as the creators can.
	Rate float64
	// Prefix names the VMIs Prefix-00000 and up.
	Prefix string
	// Spread spreads the VMIs over the nodes (see Spread).
	Spread bool
	// Sent, when set, is told each VMI's name and when its create call
	// started, once the call succeeded.
	Sent func(name string, at time.Time)
}

// Create creates opts.Count VMIs and counts them in created; it returns the
// first error, after which the creators stop.
func Create(ctx context.Context, kv *kubevirt.Clientset, opts Options, created *atomic.Int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var tick <-chan struct{}
	if opts.Rate > 0 {
		tick = arrivals(ctx, PoissonGaps(opts.Rate, opts.Count, arrivalSeed))
	}
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for range max(opts.Concurrency, 1) {
		wg.Go(func() {
			for ctx.Err() == nil {
				if tick != nil {
					select {
					case _, more := <-tick:
						if !more {
							return
						}
					case <-ctx.Done():
						return
					}
				}
				i := next.Add(1) - 1
				if i >= int64(opts.Count) {
					return
				}
				name := fmt.Sprintf("%s-%05d", opts.Prefix, i)
				sent := time.Now()
				vmi := VMI(name)
				if opts.Spread {
					Spread(vmi)
				}
				if err := createVMI(ctx, kv, opts.Namespace, vmi); err != nil {
					err = fmt.Errorf("create VMI %s: %w", name, err)
					firstErr.CompareAndSwap(nil, &err)
					cancel()
					return
				}
				if opts.Sent != nil {
					opts.Sent(name, sent)
				}
				created.Add(1)
			}
		})
	}
	wg.Wait()
	if errp := firstErr.Load(); errp != nil {
		return *errp
	}
	return ctx.Err()
}

// arrivalSeed seeds every open loop's arrival gaps.
const arrivalSeed = 1

// PoissonGaps are the n gaps between the arrivals of a Poisson process of
// rate a second: exponentially distributed, with mean 1/rate, drawn from
// seed.
func PoissonGaps(rate float64, n int, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	gaps := make([]time.Duration, n)
	for i := range gaps {
		gaps[i] = time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
	}
	return gaps
}

// arrivals sends one token per gap, each when its arrival time comes
// (measured from the start, so that a late token does not push the rest
// back), until ctx is done, and closes the channel after the last; a token
// waits for a free creator.
func arrivals(ctx context.Context, gaps []time.Duration) <-chan struct{} {
	out := make(chan struct{}, len(gaps))
	go func() {
		defer close(out)
		at := time.Now()
		for _, gap := range gaps {
			at = at.Add(gap)
			timer := time.NewTimer(time.Until(at))
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			out <- struct{}{}
		}
	}()
	return out
}

// createBackoff retries a create for about 30 s: longer than the API server
// takes to restart on this machine (3 s measured unloaded).
var createBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 12, Cap: 5 * time.Second}

// createVMI creates vmi, retrying while the API server is unreachable or
// overloaded (the chaos scenario restarts it). A create that went through
// before its connection broke comes back AlreadyExists on the retry, which
// counts as created.
func createVMI(ctx context.Context, kv *kubevirt.Clientset, namespace string, vmi *virtv1.VirtualMachineInstance) error {
	attempts := 0
	err := retry.OnError(createBackoff, transient, func() error {
		attempts++
		_, err := kv.VirtualMachineInstances(namespace).Create(ctx, vmi, metav1.CreateOptions{})
		return err
	})
	if attempts > 1 && apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// transient reports whether err is one a retry may not get again: the
// connection failed, or the server was busy or not ready. When the API
// server restarts, client-go closes the HTTP/2 connection a watch broke on,
// and the requests still on it fail "force closed"; one being written to
// the killed server fails with a broken pipe.
func transient(err error) bool {
	return utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsProbableEOF(err) ||
		errors.Is(err, syscall.EPIPE) ||
		utilnet.IsHTTP2ConnectionLost(err) || utilnet.IsTimeout(err) ||
		(err != nil && strings.Contains(err.Error(), "http2: client connection force closed")) ||
		apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err) || apierrors.IsTimeout(err)
}

// Phases counts the VMIs of namespace by phase ("" for none yet), from the
// API server's watch cache.
func Phases(ctx context.Context, kv *kubevirt.Clientset, namespace string) (map[virtv1.VirtualMachineInstancePhase]int, error) {
	list, err := kv.VirtualMachineInstances(namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	out := map[virtv1.VirtualMachineInstancePhase]int{}
	for _, v := range list.Items {
		out[v.Status.Phase]++
	}
	return out, nil
}

// LauncherPods counts the VMIs of namespace that have a launcher pod, and
// the launcher pods beyond one per VMI, migration target pods apart.
func LauncherPods(ctx context.Context, kube kubernetes.Interface, namespace string) (withPod, duplicates int, err error) {
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: virtv1.AppLabel + "=virt-launcher"})
	if err != nil {
		return 0, 0, err
	}
	perVMI := map[string]int{}
	for _, p := range pods.Items {
		if _, target := p.Labels[virtv1.MigrationJobLabel]; target {
			continue // a migration's target pod: the VMI's second pod by design
		}
		perVMI[p.Labels[virtv1.CreatedByLabel]]++
	}
	for _, n := range perVMI {
		duplicates += n - 1
	}
	return len(perVMI), duplicates, nil
}
