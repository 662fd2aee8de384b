// Package app is virtshard-controller's command: options and wiring.
package app

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/controllers/vmi"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/controllers/node"
	"github.com/virtshard/virtshard/controllers/vm"
	"github.com/virtshard/virtshard/replica/serving"
	"github.com/virtshard/virtshard/shard"
)

// Options of one replica.
type Options struct {
	Kubeconfig    string
	Namespace     string
	Watch         string
	Name          string
	Identity      string
	RangeCount    int
	ShardKey      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// SuspectAfter is when others start warming a silent replica's ranges;
	// zero means the shard default (two retry periods).
	SuspectAfter time.Duration
	// HandoffWait bounds how long a replica keeps a range moved to another
	// replica still syncing its caches of it; zero means the shard default.
	HandoffWait time.Duration
	// WarmCaches starts the informers of a suspect replica's ranges before
	// they are taken over (shard.Preparer); off, they sync after the claim.
	WarmCaches bool
	QPS        float64
	Burst      int
	// Address of the HTTP endpoint; loopback unless SecureServing.
	Address string
	// SecureServing serves HTTPS and delegates authentication and
	// authorization of /metrics and /debug/pprof to the API server.
	SecureServing           bool
	TLSCertFile, TLSKeyFile string
	Pprof                   bool
	// Listener, when set, is served instead of listening on Address (tests).
	Listener      net.Listener
	LauncherImage string
	// SidecarShimImage runs hook sidecars that name no image.
	SidecarShimImage string
	// ImagePullSecret is added to every launcher pod; LauncherQEMUTimeout
	// is the base of virt-launcher's --qemu-timeout.
	ImagePullSecret     string
	LauncherQEMUTimeout time.Duration
	// SyncedLabels and SyncedAnnotations follow from a VM's template to
	// its VMI and on to the launcher pod, besides KubeVirt's own keys.
	SyncedLabels, SyncedAnnotations []string
	// KubeVirtNamespace is where the KubeVirt CR lives, whose configuration
	// the replicas follow.
	KubeVirtNamespace string
	// The controllers' own options, and their worker counts by name
	// (--<name>-workers), each defaulting to its declaration's.
	VMI       vmi.Options
	VM        vm.Options
	Migration migration.Options
	Node      node.Options
	Workers   map[string]int
	// PyroscopeAddress turns continuous profiling on (off when empty);
	// PyroscopeUploadRate is how often profiles are sent.
	PyroscopeAddress    string
	PyroscopeUploadRate time.Duration
	// AdjustConfig, when set, may change the API client config before the
	// clients are made (tests: impersonate, record requests).
	AdjustConfig func(*rest.Config)
	// Registry receives the replica's metrics; nil means a fresh one. Tests
	// running several replicas in one process pass their own.
	Registry *prometheus.Registry
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Namespace:     shard.DefaultNamespace(),
		Name:          "virtshard",
		Identity:      shard.DefaultIdentity(),
		RangeCount:    shard.DefaultRangeCount,
		ShardKey:      "uid",
		LeaseDuration: shard.DefaultLeaseDuration,
		RenewDeadline: shard.DefaultRenewDeadline,
		RetryPeriod:   shard.DefaultRetryPeriod,
		WarmCaches:    true,
		QPS:           200,
		Burst:         400,
		Address:       "127.0.0.1:8080",
		LauncherImage: "quay.io/kubevirt/virt-launcher:v1.8.1",

		SidecarShimImage:    template.DefaultOptions().SidecarShimImage,
		LauncherQEMUTimeout: template.DefaultOptions().QEMUTimeout,

		KubeVirtNamespace: clusterconfig.DefaultNamespace,

		VMI:       vmi.DefaultOptions(),
		VM:        vm.DefaultOptions(),
		Migration: migration.DefaultOptions(),
		Node:      node.DefaultOptions(),

		PyroscopeUploadRate: 15 * time.Second,
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file; empty means $KUBECONFIG, ~/.kube/config, or in-cluster")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of the shard Leases and assignment (default $POD_NAMESPACE)")
	fs.StringVar(&o.Watch, "watch-namespace", o.Watch, "manage VMIs of this namespace only; empty means all namespaces")
	fs.StringVar(&o.Name, "name", o.Name, "name of this sharded controller: prefix of its Leases")
	fs.StringVar(&o.Identity, "identity", o.Identity, "this replica's identity (default $POD_NAME, else the hostname)")
	fs.IntVar(&o.RangeCount, "ranges", o.RangeCount, "number of hash ranges, a power of two; all replicas must agree")
	fs.StringVar(&o.ShardKey, "shard-key", o.ShardKey, "what places a VMI in a range: uid or namespace")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "range lease duration")
	fs.DurationVar(&o.RenewDeadline, "renew-deadline", o.RenewDeadline, "stop acting on a range this long after its last renewal started")
	fs.DurationVar(&o.RetryPeriod, "retry-period", o.RetryPeriod, "lease renew and retry period")
	fs.DurationVar(&o.SuspectAfter, "suspect-after", o.SuspectAfter, "warm the caches of a replica's ranges once its member lease is unchanged this long, to take them over fast if it dies; 0: two retry periods, at most the renew deadline")
	fs.DurationVar(&o.HandoffWait, "handoff-wait", o.HandoffWait, "keep acting on a range the assignment moved to another replica until that replica's caches of it synced, at most this long; 0: 2m")
	fs.BoolVar(&o.WarmCaches, "warm-caches", o.WarmCaches, "start the informers of a suspect replica's ranges before taking them over; false: sync them after the claim (less memory and API load while a replica only looks dead, slower takeovers at large object counts)")
	fs.Float64Var(&o.QPS, "kube-api-qps", o.QPS, "client QPS to the API server")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "client burst to the API server")
	fs.StringVar(&o.Address, "address", o.Address, "address of /metrics, /healthz, /readyz (and /debug/pprof); a non-loopback address needs --secure-serving")
	fs.BoolVar(&o.SecureServing, "secure-serving", o.SecureServing, "serve HTTPS and let only clients the API server authenticates (TokenReview) and authorizes (SubjectAccessReview on the path) reach /metrics and /debug/pprof; /healthz and /readyz stay open")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "serving certificate of --secure-serving; empty: a self-signed one made at start")
	fs.StringVar(&o.TLSKeyFile, "tls-private-key-file", o.TLSKeyFile, "private key of --tls-cert-file")
	fs.BoolVar(&o.Pprof, "pprof", o.Pprof, "serve /debug/pprof on --address, behind the same protection as /metrics")
	fs.StringVar(&o.LauncherImage, "launcher-image", o.LauncherImage, "virt-launcher image of launcher pods")
	fs.StringVar(&o.ImagePullSecret, "image-pull-secret", o.ImagePullSecret, "secret of launcher pods for pulling virt-launcher and container disks")
	fs.Func("launcher-qemu-timeout", "seconds virt-launcher waits for QEMU, the base of its --qemu-timeout (default 240)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive number of seconds, got %q", v)
		}
		o.LauncherQEMUTimeout = time.Duration(n) * time.Second
		return nil
	})
	fs.Func("additional-launcher-labels-sync", "comma-separated label keys that follow from a VM's template to its VMI and on to the launcher pod", keyList(&o.SyncedLabels))
	fs.Func("additional-launcher-annotations-sync", "comma-separated annotation keys that follow from a VM's template to its VMI and on to the launcher pod", keyList(&o.SyncedAnnotations))
	fs.StringVar(&o.SidecarShimImage, "sidecar-shim-image", o.SidecarShimImage, "image of hook sidecars that name none (virt-operator gives virt-controller the install's sidecar-shim image)")
	fs.StringVar(&o.KubeVirtNamespace, "kubevirt-namespace", o.KubeVirtNamespace, "namespace of the KubeVirt CR whose spec.configuration the replicas follow (KubeVirt's defaults without one)")
	o.VMI.AddFlags(fs)
	o.VM.AddFlags(fs)
	o.Migration.AddFlags(fs)
	o.Node.AddFlags(fs)
	// A worker flag per declared controller: declaring one adds its flag.
	if o.Workers == nil {
		o.Workers = map[string]int{}
	}
	for _, d := range o.declarations() {
		if _, set := o.Workers[d.Name]; !set {
			o.Workers[d.Name] = d.Workers
		}
		fs.Var(workers{o.Workers, d.Name}, d.Name+"-workers", "reconcile workers of the "+d.Name+" controller")
	}
	fs.StringVar(&o.PyroscopeAddress, "pyroscope-address", o.PyroscopeAddress, "Pyroscope server to send continuous profiles to (e.g. http://pyroscope:4040); empty: off")
	fs.DurationVar(&o.PyroscopeUploadRate, "pyroscope-upload-rate", o.PyroscopeUploadRate, "how often profiles are sent to --pyroscope-address")
}

// Parse parses args, including klog's flags, and validates.
func (o *Options) Parse(args []string) error {
	fs := flag.NewFlagSet("virtshard-controller", flag.ContinueOnError)
	o.AddFlags(fs)
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return o.Validate()
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if _, err := shard.NewRanges(o.RangeCount, shard.KeyUID); err != nil {
		errs = append(errs, err)
	}
	if _, err := shard.ParseKey(o.ShardKey); err != nil {
		errs = append(errs, err)
	}
	if err := o.shardTimings().ValidateTimings(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, o.VMI.Validate(), o.VM.Validate(), o.Migration.Validate(), o.Node.Validate())
	for name, n := range o.Workers {
		if n < 1 {
			errs = append(errs, fmt.Errorf("--%s-workers must be at least 1", name))
		}
	}
	if err := (serving.Options{Address: o.Address, Listener: o.Listener, Secure: o.SecureServing}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together"))
	}
	if o.Identity == "" || o.Namespace == "" {
		errs = append(errs, errors.New("--identity and --namespace must not be empty"))
	}
	return errors.Join(errs...)
}

// keyList sets *keys from a comma-separated list; each use adds to it.
func keyList(keys *[]string) func(string) error {
	return func(v string) error {
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				*keys = append(*keys, k)
			}
		}
		return nil
	}
}

// workers is the flag.Value of one controller's worker count.
type workers struct {
	counts map[string]int
	name   string
}

func (w workers) String() string {
	if w.counts == nil {
		return "0"
	}
	return strconv.Itoa(w.counts[w.name])
}

func (w workers) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return err
	}
	w.counts[w.name] = n
	return nil
}

// shardTimings is the shard Config's lease timings as the replica will run
// them, defaults filled in.
func (o *Options) shardTimings() *shard.Config {
	c := &shard.Config{
		LeaseDuration: o.LeaseDuration,
		RenewDeadline: o.RenewDeadline,
		RetryPeriod:   o.RetryPeriod,
		SuspectAfter:  o.SuspectAfter,
		HandoffWait:   o.HandoffWait,
	}
	c.Complete()
	return c
}
