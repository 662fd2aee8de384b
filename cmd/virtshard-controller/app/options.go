// Package app is virtshard-controller's command: options and wiring.
package app

import (
	"errors"
	"flag"
	"github.com/virtshard/virtshard/controllers/template"
	"net"
	"time"

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
	// WarmCaches starts the informers of a suspect replica's ranges before
	// they are taken over (shard.Preparer); off, they sync after the claim.
	WarmCaches    bool
	Workers       int
	StatusWorkers int
	QPS           float64
	Burst         int
	// Address of the HTTP endpoint; loopback unless SecureServing.
	Address string
	// SecureServing serves HTTPS and delegates authentication and
	// authorization of /metrics and /debug/pprof to the API server.
	SecureServing           bool
	TLSCertFile, TLSKeyFile string
	Pprof                   bool
	// Listener, when set, is served instead of listening on Address (tests).
	Listener      net.Listener
	LazyStatus    time.Duration
	BusyStatus    time.Duration
	BusyDepth     int
	UrgentStatus  time.Duration
	LauncherImage string
	// SidecarShimImage runs hook sidecars that name no image.
	SidecarShimImage string
	// KubeVirtNamespace is where the KubeVirt CR lives, whose configuration
	// the replicas follow.
	KubeVirtNamespace string
	// MaxStartBackoff caps the crash-loop backoff of VMs whose VMIs fail
	// before they run.
	MaxStartBackoff time.Duration
	// Migration limits (cluster-wide, across all replicas): overrides of
	// the KubeVirt CR's; 0 takes the CR's. And timeouts.
	MigrationsPerCluster          int
	OutboundMigrationsPerNode     int
	MigrationUnschedulableTimeout time.Duration
	MigrationPendingTimeout       time.Duration
	// NodeGracePeriod a node may be NotReady before its VMIs fail;
	// DrainTaintKey marks a node to evacuate: an override of the KubeVirt
	// CR's, "" takes the CR's.
	NodeGracePeriod time.Duration
	DrainTaintKey   string
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
		Workers:       8,
		StatusWorkers: 8,
		QPS:           200,
		Burst:         400,
		Address:       "127.0.0.1:8080",
		LazyStatus:    2 * time.Second,
		BusyStatus:    time.Minute,
		BusyDepth:     20,
		UrgentStatus:  5 * time.Millisecond,
		LauncherImage: "quay.io/kubevirt/virt-launcher:v1.8.1",

		SidecarShimImage: template.DefaultOptions().SidecarShimImage,

		KubeVirtNamespace: clusterconfig.DefaultNamespace,

		MaxStartBackoff: vm.DefaultMaxStartBackoff,

		MigrationUnschedulableTimeout: migration.DefaultUnschedulableTimeout,
		MigrationPendingTimeout:       migration.DefaultPendingTimeout,
		NodeGracePeriod:               node.DefaultGracePeriod,
		PyroscopeUploadRate:           15 * time.Second,
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
	fs.BoolVar(&o.WarmCaches, "warm-caches", o.WarmCaches, "start the informers of a suspect replica's ranges before taking them over; false: sync them after the claim (less memory and API load while a replica only looks dead, slower takeovers at large object counts)")
	fs.IntVar(&o.Workers, "workers", o.Workers, "reconcile workers of each controller")
	fs.IntVar(&o.StatusWorkers, "status-workers", o.StatusWorkers, "concurrent status patches")
	fs.Float64Var(&o.QPS, "kube-api-qps", o.QPS, "client QPS to the API server")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "client burst to the API server")
	fs.StringVar(&o.Address, "address", o.Address, "address of /metrics, /healthz, /readyz (and /debug/pprof); a non-loopback address needs --secure-serving")
	fs.BoolVar(&o.SecureServing, "secure-serving", o.SecureServing, "serve HTTPS and let only clients the API server authenticates (TokenReview) and authorizes (SubjectAccessReview on the path) reach /metrics and /debug/pprof; /healthz and /readyz stay open")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "serving certificate of --secure-serving; empty: a self-signed one made at start")
	fs.StringVar(&o.TLSKeyFile, "tls-private-key-file", o.TLSKeyFile, "private key of --tls-cert-file")
	fs.BoolVar(&o.Pprof, "pprof", o.Pprof, "serve /debug/pprof on --address, behind the same protection as /metrics")
	fs.DurationVar(&o.LazyStatus, "lazy-status-wait", o.LazyStatus, "how long an intermediate phase may wait to share a patch")
	fs.DurationVar(&o.BusyStatus, "busy-status-wait", o.BusyStatus, "the same while at least --busy-depth VMIs are queued or have status pending")
	fs.IntVar(&o.BusyDepth, "busy-depth", o.BusyDepth, "VMIs queued for a sync or with status pending from which the controller counts as busy")
	fs.DurationVar(&o.UrgentStatus, "urgent-status-wait", o.UrgentStatus, "batching window of other status writes")
	fs.StringVar(&o.LauncherImage, "launcher-image", o.LauncherImage, "virt-launcher image of launcher pods")
	fs.StringVar(&o.SidecarShimImage, "sidecar-shim-image", o.SidecarShimImage, "image of hook sidecars that name none (virt-operator gives virt-controller the install's sidecar-shim image)")
	fs.StringVar(&o.KubeVirtNamespace, "kubevirt-namespace", o.KubeVirtNamespace, "namespace of the KubeVirt CR whose spec.configuration the replicas follow (KubeVirt's defaults without one)")
	fs.DurationVar(&o.MaxStartBackoff, "max-start-backoff", o.MaxStartBackoff, "cap of the wait before a VM whose VMI failed before running is started again")
	fs.IntVar(&o.MigrationsPerCluster, "parallel-migrations-per-cluster", o.MigrationsPerCluster, "live migrations in flight in the whole cluster, across all replicas; 0: the KubeVirt CR's spec.configuration.migrations.parallelMigrationsPerCluster, followed live (5 without a CR)")
	fs.IntVar(&o.OutboundMigrationsPerNode, "parallel-outbound-migrations-per-node", o.OutboundMigrationsPerNode, "live migrations in flight out of one node; 0: the KubeVirt CR's parallelOutboundMigrationsPerNode, followed live (2 without a CR)")
	fs.DurationVar(&o.MigrationUnschedulableTimeout, "migration-unschedulable-timeout", o.MigrationUnschedulableTimeout, "fail a migration whose target pod is unschedulable this long")
	fs.DurationVar(&o.MigrationPendingTimeout, "migration-pending-timeout", o.MigrationPendingTimeout, "fail a migration whose target pod is not running this long")
	fs.DurationVar(&o.NodeGracePeriod, "node-grace-period", o.NodeGracePeriod, "fail the VMIs of a node NotReady this long")
	fs.StringVar(&o.DrainTaintKey, "drain-taint-key", o.DrainTaintKey, "key of the NoSchedule taint that marks a node whose VMIs are migrated away; empty: the KubeVirt CR's nodeDrainTaintKey, followed live (kubevirt.io/drain without a CR)")
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
	if o.Workers < 1 || o.StatusWorkers < 1 {
		errs = append(errs, errors.New("--workers and --status-workers must be at least 1"))
	}
	if o.MigrationsPerCluster < 0 || o.OutboundMigrationsPerNode < 0 {
		errs = append(errs, errors.New("migration limits must be at least 1, or 0 for the KubeVirt CR's"))
	}
	if o.MigrationUnschedulableTimeout <= 0 || o.MigrationPendingTimeout <= 0 {
		errs = append(errs, errors.New("migration timeouts must be positive"))
	}
	if o.NodeGracePeriod <= 0 {
		errs = append(errs, errors.New("--node-grace-period must be positive"))
	}
	if o.MaxStartBackoff <= 0 {
		errs = append(errs, errors.New("--max-start-backoff must be positive"))
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

// shardTimings is the shard Config's lease timings as the replica will run
// them, defaults filled in.
func (o *Options) shardTimings() *shard.Config {
	c := &shard.Config{
		LeaseDuration: o.LeaseDuration,
		RenewDeadline: o.RenewDeadline,
		RetryPeriod:   o.RetryPeriod,
		SuspectAfter:  o.SuspectAfter,
	}
	c.Complete()
	return c
}
