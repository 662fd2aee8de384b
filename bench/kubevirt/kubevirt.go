package kubevirt

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/bench/endpoint"
	"github.com/virtshard/virtshard/bench/proc"
)

// The images virt-operator v1.8.1 gives virt-controller with the default
// registry (pkg/virt-operator/resource/generate/components/deployments.go,
// NewControllerDeployment). virt-controller only writes them into the pods
// it renders; kwok runs those pods without pulling anything.
const (
	DefaultLauncherImage = "quay.io/kubevirt/virt-launcher:v1.8.1"
	exporterImage        = "quay.io/kubevirt/virt-exportserver:v1.8.1"
	sidecarShimImage     = "quay.io/kubevirt/sidecar-shim:v1.8.1"
)

// Options of the virt-controller process.
type Options struct {
	// Binary is virt-controller's executable; the cluster root's
	// bin/virt-controller (make tools) when empty.
	Binary string
	// LogDir receives virt-controller.log, appended to; the cluster's logs
	// directory when empty.
	LogDir string
	// LauncherImage is passed as --launcher-image; DefaultLauncherImage
	// when empty.
	LauncherImage string
	// Args are extra flags, e.g. --vmi-controller-threads or -v.
	Args []string
	// Kubeconfig is the one virt-controller connects with; the cluster's
	// when empty. The differential harness gives it the audited user's, so
	// that its writes can be counted.
	Kubeconfig string
	// Timeout bounds the wait until the process leads; 2 minutes when zero.
	// A Lease left by another identity costs one lease duration (15 s).
	Timeout time.Duration
}

func (o *Options) complete(copts cluster.Options) {
	if o.Binary == "" {
		o.Binary = filepath.Join(copts.Root, "bin", "virt-controller")
	}
	if o.LogDir == "" {
		o.LogDir = filepath.Join(filepath.Dir(copts.KubeconfigPath()), "logs")
	}
	if o.Kubeconfig == "" {
		o.Kubeconfig = copts.KubeconfigPath()
	}
	if o.LauncherImage == "" {
		o.LauncherImage = DefaultLauncherImage
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
}

// Controller is a running virt-controller process.
type Controller struct {
	opts       Options
	kubeconfig string
	kube       kubernetes.Interface
	// identity is virt-controller's leader identity: this host's name
	// (os.Hostname in application.go), as the child inherits it.
	identity string
	certDir  string
	certFile string
	keyFile  string
	http     *http.Client

	address string
	cmd     *exec.Cmd
	done    chan struct{}
	// started is when the process was started.
	started time.Time
}

// Start makes sure the cluster has what KubeVirt's virt-controller needs
// (its CRDs, namespace and KubeVirt CR), starts bin/virt-controller against
// the cluster with the admin kubeconfig, its HTTPS port on a free loopback
// port, and returns once it leads: its caches synced and its controllers
// started. Stop it with Stop.
func Start(ctx context.Context, copts cluster.Options, opts Options) (*Controller, error) {
	logger := klog.FromContext(ctx)
	begin := time.Now()
	opts.complete(copts)
	if _, err := os.Stat(opts.Binary); err != nil {
		return nil, fmt.Errorf("virt-controller is not built (run `make tools` in %s): %w", copts.Root, err)
	}
	cfg, err := copts.RESTConfig()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	identity, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("hostname, virt-controller's leader identity: %w", err)
	}
	if err := ensureCRDs(ctx, dyn, copts.Root); err != nil {
		return nil, err
	}
	if err := ensureNamespace(ctx, kube); err != nil {
		return nil, err
	}
	if err := ensureKubeVirt(ctx, dyn); err != nil {
		return nil, err
	}
	if err := ensureHandlerDaemonSet(ctx, kube); err != nil {
		return nil, err
	}
	if err := checkLease(ctx, kube, identity); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
		return nil, err
	}

	c := &Controller{opts: opts, kubeconfig: opts.Kubeconfig, kube: kube, identity: identity}
	if c.certDir, err = os.MkdirTemp("", "virt-controller-"); err != nil {
		return nil, err
	}
	certFile, keyFile, pool, err := servingCert(c.certDir)
	if err != nil {
		os.RemoveAll(c.certDir)
		return nil, err
	}
	c.certFile, c.keyFile = certFile, keyFile
	c.http = &http.Client{
		Timeout: 5 * time.Second,
		// Verified against the certificate Start made. virt-controller
		// verifies a client certificate if one is sent, and trusts none: send
		// none.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}

	// The port is picked free and then handed to the process, so another
	// process can take it in between; virt-controller then exits, and is
	// started again on another port.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		err = c.start(ctx)
		if err == nil || !errors.Is(err, errAddressInUse) || attempt == attempts {
			break
		}
	}
	if err != nil {
		os.RemoveAll(c.certDir)
		return nil, err
	}
	logger.Info("KubeVirt's virt-controller leads", "pid", c.Pid(), "metrics", c.MetricsURL(), "log", c.LogPath(),
		"took", time.Since(begin).Round(time.Millisecond), "sinceExec", time.Since(c.started).Round(time.Millisecond))
	return c, nil
}

var errAddressInUse = errors.New("address already in use")

// start starts the process and waits until it leads.
func (c *Controller) start(ctx context.Context) error {
	address, err := proc.FreeAddress()
	if err != nil {
		return err
	}
	c.address = address
	_, port, _ := net.SplitHostPort(address)
	log, err := os.OpenFile(c.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	logStart, err := log.Seek(0, io.SeekEnd)
	if err != nil {
		log.Close()
		return err
	}
	// The flags virt-operator passes (NewControllerDeployment), and what a
	// pod gets from its mounts: the kubeconfig instead of the service
	// account (virt-controller does not read $KUBECONFIG), the serving
	// certificate instead of the kubevirt-controller-certs Secret.
	args := []string{
		"--kubeconfig", c.kubeconfig,
		"--listen", "127.0.0.1", "--port", port,
		"--prom-cert-file", c.certFile, "--prom-key-file", c.keyFile,
		"--launcher-image", c.opts.LauncherImage,
		"--exporter-image", exporterImage,
	}
	cmd := exec.Command(c.opts.Binary, append(args, c.opts.Args...)...)
	cmd.Env = append(os.Environ(), "SIDECAR_SHIM_IMAGE="+sidecarShimImage)
	cmd.Stdout, cmd.Stderr = log, log
	// Killed with this process: a virt-controller left behind would go on
	// acting on every VMI of the shared cluster, beside the next run's
	// controllers. (The signal comes when the thread that started it ends;
	// Go ends a thread only under a goroutine that exits locked to it.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start virt-controller: %w", err)
	}
	c.cmd, c.done, c.started = cmd, make(chan struct{}), time.Now()
	go func() { _ = cmd.Wait(); log.Close(); close(c.done) }()

	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for {
		if c.leads(ctx) {
			return nil
		}
		select {
		case <-c.done:
			tail := proc.LogTail(c.LogPath(), logStart)
			if strings.Contains(tail, "address already in use") {
				return fmt.Errorf("virt-controller on %s: %w", c.address, errAddressInUse)
			}
			return fmt.Errorf("virt-controller exited at start: %s", tail)
		case <-ctx.Done():
			c.kill()
			return fmt.Errorf("virt-controller did not lead within %s (see %s): %w", c.opts.Timeout, c.LogPath(), ctx.Err())
		case <-ticker.C:
		}
	}
}

// leads reports whether virt-controller's /leader says it leads, which it
// does once it holds the Lease and its caches synced (application.go,
// leaderProbe; the endpoint answers 200 to followers too).
func (c *Controller) leads(ctx context.Context) bool {
	body, err := c.get(ctx, "/leader")
	if err != nil {
		return false
	}
	var probe struct {
		APIServer struct {
			Leader string `json:"leader"`
		} `json:"apiserver"`
	}
	return json.Unmarshal(body, &probe) == nil && probe.APIServer.Leader == "true"
}

func (c *Controller) get(ctx context.Context, path string) ([]byte, error) {
	return endpoint.Get(ctx, c.http, "https://"+c.address+path, "virt-controller")
}

// Stop stops the process and deletes its leader Lease. virt-controller
// handles no signal: SIGTERM ends it at once, and it never releases its
// Lease (its election does not set ReleaseOnCancel), which would otherwise
// stay held for a lease duration. Read its CPU time and memory (bench/proc)
// before Stop: they go with the process.
func (c *Controller) Stop(ctx context.Context) error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.kill()
	}
	if err := os.RemoveAll(c.certDir); err != nil {
		return err
	}
	return c.deleteLease(ctx)
}

// deleteLease deletes virt-controller's Lease if this process's identity
// holds it.
func (c *Controller) deleteLease(ctx context.Context) error {
	leases := c.kube.CoordinationV1().Leases(Namespace)
	lease, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get Lease %s/%s: %w", Namespace, LeaseName, err)
	}
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != c.identity {
		klog.FromContext(ctx).Info("Leaving virt-controller's Lease to its holder", "holder", holder)
		return nil
	}
	err = leases.Delete(ctx, LeaseName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &lease.ResourceVersion}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Lease %s/%s: %w", Namespace, LeaseName, err)
	}
	return nil
}

func (c *Controller) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// Pid is the process id.
func (c *Controller) Pid() int { return c.cmd.Process.Pid }

// Done is closed when the process has exited. virt-controller exits 1 when
// it loses its Lease, and 0 when the cluster's configuration changes whether
// CDI's DataVolume API is there or DRA is on (in a pod, the kubelet restarts
// it).
func (c *Controller) Done() <-chan struct{} { return c.done }

// LogPath is the process's log.
func (c *Controller) LogPath() string { return filepath.Join(c.opts.LogDir, "virt-controller.log") }

// MetricsURL is virt-controller's Prometheus endpoint, HTTPS with Start's
// self-signed certificate.
func (c *Controller) MetricsURL() string { return "https://" + c.address + "/metrics" }

// Scrape reads virt-controller's metrics. It may take long: with 5,000
// VMIs and their pods a scrape outlasted the 5 s the probes allow.
func (c *Controller) Scrape(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	client := *c.http
	client.Timeout = 2 * time.Minute
	return endpoint.Metrics(ctx, &client, c.MetricsURL(), "virt-controller")
}

// RequestsMetric counts virt-controller's API requests (KubeVirt's
// pkg/monitoring/metrics/common/client), its leader election's included.
const RequestsMetric = "kubevirt_rest_client_requests_total"

// Requests returns RequestsMetric by "VERB resource", as KubeVirt labels
// them (rt_wrapper.go): verbs GET, LIST, WATCH, CREATE, UPDATE, PATCH,
// DELETE; a subresource counts as its resource ("PATCH pods" includes a
// pod's status).
func Requests(families map[string]*dto.MetricFamily) map[string]float64 {
	return endpoint.CountByVerbResource(families, RequestsMetric)
}

// Writes returns the writes among Requests in the shape of
// bench/replicas.Writes, "verb resource" with RBAC's lower-case verbs
// (create, update, patch, delete), so that replicas.ControllerWrite and
// WriteResource apply to both controllers. Unlike virtshard's count,
// KubeVirt's has no subresource: "patch pods" holds a pod's status patches.
func Writes(families map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for key, n := range Requests(families) {
		verb, resource, _ := strings.Cut(key, " ")
		switch verb {
		case "CREATE", "UPDATE", "PATCH", "DELETE":
			out[strings.ToLower(verb)+" "+resource] += n
		}
	}
	return out
}
