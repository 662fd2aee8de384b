package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/virtshard/virtshard/client/kubevirt"
)

// DefaultName is the kwok cluster name of the local cluster.
const DefaultName = "virtshard"

// Options say where the cluster's binaries and state live and how big it is.
type Options struct {
	// Root is the repository root: binaries are in Root/bin, manifests in
	// Root/deploy, state in Root/.cluster.
	Root string
	// Name is the kwok cluster name.
	Name string
	// Nodes is how many kwok nodes Up makes sure exist.
	Nodes int
}

// DefaultOptions returns the options of the project's local cluster, with
// Root found from the working directory (or $VIRTSHARD_ROOT).
func DefaultOptions() (Options, error) {
	root, err := FindRoot()
	if err != nil {
		return Options{}, err
	}
	return Options{Root: root, Name: DefaultName, Nodes: DefaultNodes}, nil
}

// FindRoot returns $VIRTSHARD_ROOT, or the closest parent directory of the
// working directory whose go.mod is virtshard's.
func FindRoot() (string, error) {
	if root := os.Getenv("VIRTSHARD_ROOT"); root != "" {
		return filepath.Abs(root)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/virtshard/virtshard\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("virtshard repository root not found above the working directory: set VIRTSHARD_ROOT")
		}
		dir = parent
	}
}

func (o Options) bin(name string) string { return filepath.Join(o.Root, "bin", name) }

// Workdir is kwokctl's working directory (KWOK_WORKDIR).
func (o Options) Workdir() string { return filepath.Join(o.Root, ".cluster") }

// KubeconfigPath is where kwokctl writes the cluster's kubeconfig.
func (o Options) KubeconfigPath() string {
	return filepath.Join(o.Workdir(), "clusters", o.Name, "kubeconfig.yaml")
}

// RESTConfig returns a client config for the cluster with client-side rate
// limiting off: the bench measures the server, not client-go's token bucket.
func (o Options) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.KubeconfigPath())
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", o.KubeconfigPath(), err)
	}
	cfg.QPS = -1
	cfg.Burst = 0
	return cfg, nil
}

// Up starts the cluster unless it already runs, then makes sure the CRDs,
// the kwok Stages and opts.Nodes nodes are there. started says whether this
// call started it. Concurrent callers (several test binaries) are serialized
// by a file lock.
func Up(ctx context.Context, opts Options) (started bool, err error) {
	unlock, err := Flock(filepath.Join(opts.Workdir(), "up.lock"), syscall.LOCK_EX)
	if err != nil {
		return false, err
	}
	defer unlock()
	return upLocked(ctx, opts)
}

func upLocked(ctx context.Context, opts Options) (started bool, err error) {
	logger := klog.FromContext(ctx)
	if err := opts.checkBinaries(); err != nil {
		return false, err
	}
	healthy := opts.healthy(ctx)
	if why := opts.outdated(); healthy && why != "" {
		logger.Info("Recreating the local cluster: "+why, "name", opts.Name)
		healthy = false
	}
	if !healthy {
		if _, statErr := os.Stat(filepath.Join(opts.Workdir(), "clusters", opts.Name)); statErr == nil {
			// State of a cluster whose processes are gone (a new session, a
			// crash): start over rather than resurrect half of it.
			logger.Info("Removing a stale local cluster", "name", opts.Name)
			if err := downLocked(ctx, opts); err != nil {
				return false, err
			}
		}
		logger.Info("Creating the local cluster", "name", opts.Name)
		begin := time.Now()
		if err := opts.create(ctx); err != nil {
			return false, err
		}
		started = true
		logger.Info("Local cluster created", "name", opts.Name, "took", time.Since(begin).Round(time.Millisecond))
	}
	if err := opts.install(ctx); err != nil {
		return started, err
	}
	cfg, err := opts.RESTConfig()
	if err != nil {
		return started, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return started, err
	}
	if err := EnsureNodes(ctx, client, NodeOptions{Count: opts.Nodes}); err != nil {
		return started, err
	}
	if err := waitNodesReady(ctx, client, opts.Nodes); err != nil {
		return started, err
	}
	if err := opts.ensureHandler(ctx); err != nil {
		return started, err
	}
	// The probe runs once per start of the simulated virt-handler: later
	// callers (other test binaries) may find it busy with someone else's
	// VMIs, which proves nothing.
	verified := opts.nodeSideVerified()
	if _, err := os.Stat(verified); err == nil {
		return started, nil
	}
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		return started, err
	}
	if err := opts.probeNodeSide(ctx, client, kv); err != nil {
		return started, err
	}
	return started, os.WriteFile(verified, nil, 0o644)
}

// Down deletes the cluster and its data. Deleting a cluster that does not
// exist is not an error.
func Down(ctx context.Context, opts Options) error {
	unlock, err := Flock(filepath.Join(opts.Workdir(), "up.lock"), syscall.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	return downLocked(ctx, opts)
}

func downLocked(ctx context.Context, opts Options) error {
	if _, err := os.Stat(filepath.Join(opts.Workdir(), "clusters", opts.Name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := opts.stopHandler(ctx); err != nil {
		return err
	}
	return opts.kwokctl(ctx, "delete", "cluster", "--name", opts.Name, "--kubeconfig", opts.noKubeconfig())
}

// noKubeconfig is a path that never exists: kwokctl delete takes it as an
// empty kubeconfig to remove the cluster's context from, leaving the user's
// ~/.kube/config alone ("" is refused there).
func (o Options) noKubeconfig() string { return filepath.Join(o.Workdir(), "no-kubeconfig") }

func (o Options) checkBinaries() error {
	for _, name := range []string{"kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", handlerBinary} {
		if _, err := os.Stat(o.bin(name)); err != nil {
			return fmt.Errorf("%s is not built (run `make tools` in %s): %w", name, o.Root, err)
		}
	}
	return nil
}

// healthy reports whether the cluster's API server answers /readyz.
func (o Options) healthy(ctx context.Context) bool {
	cfg, err := o.RESTConfig()
	if err != nil {
		return false
	}
	// A loaded server answers /readyz late, not never.
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false
	}
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil && string(body) == "ok"
}

func (o Options) create(ctx context.Context) error {
	args := []string{
		"create", "cluster",
		"--name", o.Name,
		"--runtime", "binary",
		"--etcd-binary", o.bin("etcd"),
		"--kube-apiserver-binary", o.bin("kube-apiserver"),
		"--kube-controller-manager-binary", o.bin("kube-controller-manager"),
		"--kube-scheduler-binary", o.bin("kube-scheduler"),
		"--kwok-controller-binary", o.bin("kwok"),
		"--kube-feature-gates", "ShardedListAndWatch=true",
		"--disable-qps-limits",
		// Deleting a namespace deletes each kind of its content in one
		// delete-collection call, which the API server works through one
		// object at a time by default: a namespace that held a bench run's
		// thousands of events took seconds to go.
		"--extra-args", "kube-apiserver=delete-collection-workers=8",
		// Stages are API objects, so Stages for the KubeVirt CRDs, which
		// exist only after the cluster started, can be added later. With
		// Stages in a config file, kwok exits when their CRD is missing.
		"--enable-crds", "Stage",
		// Leave the user's ~/.kube/config alone.
		"--kubeconfig", "",
		"--wait", "1m",
	}
	audit, err := o.auditArgs()
	if err != nil {
		return err
	}
	kwokConfigFile, err := o.writeWorkfile("kwok-config.yaml", kwokConfig)
	if err != nil {
		return err
	}
	args = append(append(args, audit...), "--config", kwokConfigFile)
	if err := o.kwokctl(ctx, args...); err != nil {
		return err
	}
	// kwokctl exits 0 even when --wait timed out: check for ourselves.
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return o.healthy(ctx), nil
	})
}

// writeWorkfile writes data to the file name in the workdir and returns
// its path.
func (o Options) writeWorkfile(name, data string) (string, error) {
	path := filepath.Join(o.Workdir(), name)
	if err := os.MkdirAll(o.Workdir(), 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, []byte(data), 0o644)
}

// savedConfigPath is where kwokctl saved the running cluster's
// configuration (its components' arguments, kwok's own configuration).
func (o Options) savedConfigPath() string {
	return filepath.Join(o.Workdir(), "clusters", o.Name, "kwok.yaml")
}

// outdated says why the running cluster was created by an older virtshard
// and must be created again ("" if it is current).
func (o Options) outdated() string {
	saved, err := os.ReadFile(o.savedConfigPath())
	if err != nil {
		return "its saved configuration does not read: " + err.Error()
	}
	args, err := apiserverArgsOf(saved)
	switch {
	case err != nil:
		return err.Error()
	case !audited(args):
		return "it was created without the audit policy"
	case !kwokConfigured(saved):
		return "it was created without kwok's configuration"
	}
	return ""
}

// install applies the KubeVirt CRDs, CDI's that KubeVirt reads with the
// simulated CDI's StorageClasses (bench/cdi), the CSI snapshot CRDs with
// the simulated provisioner's snapshot class (bench/csi), and the kwok Stages: kwok's
// default node and pod Stages (copied from the pinned kwok module by `make
// tools`) and deploy/kwok/stages, which plays a stopped kubelet.
//
// kwok starts a Stage's controller when the Stage appears and retries a
// failed start only on the next Stage event, and a CRD is Established before
// its group is in /openapi/v3, which kwok reads. So the CRDs go first and the
// Stages only once the group is published.
func (o Options) install(ctx context.Context) error {
	crds := filepath.Join(o.Root, "deploy", "crds")
	// kubectl wait takes no kustomization: name the CRD files.
	crdFiles, err := filepath.Glob(filepath.Join(crds, "*.kubevirt.io.yaml"))
	if err != nil || len(crdFiles) == 0 {
		return fmt.Errorf("no CRDs in %s (run make generate): %v", crds, err)
	}
	cdi := filepath.Join(o.Root, "bench", "cdi")
	cdiFiles, err := filepath.Glob(filepath.Join(cdi, "crds", "*.yaml"))
	if err != nil || len(cdiFiles) == 0 {
		return fmt.Errorf("no CDI CRDs in %s (run make generate): %v", filepath.Join(cdi, "crds"), err)
	}
	csi := filepath.Join(o.Root, "bench", "csi")
	csiFiles, err := filepath.Glob(filepath.Join(csi, "crds", "*.yaml"))
	if err != nil || len(csiFiles) == 0 {
		return fmt.Errorf("no CSI snapshot CRDs in %s (run make generate): %v", filepath.Join(csi, "crds"), err)
	}
	waitCRDs := []string{"wait", "--for=condition=Established", "--timeout=60s"}
	for _, f := range slices.Concat(crdFiles, cdiFiles, csiFiles) {
		waitCRDs = append(waitCRDs, "-f", f)
	}
	steps := [][]string{
		{"wait", "--for=condition=Established", "--timeout=60s", "crd/stages.kwok.x-k8s.io"},
		{"apply", "--server-side", "--force-conflicts", "-k", crds},
		{"apply", "--server-side", "--force-conflicts", "-f", filepath.Join(cdi, "crds"), "-f", filepath.Join(cdi, "storageclasses.yaml"),
			"-f", filepath.Join(csi, "crds")},
		waitCRDs,
		// A snapshot class is an object of those CRDs.
		{"apply", "--server-side", "--force-conflicts", "-f", filepath.Join(csi, "snapshotclasses.yaml")},
	}
	for _, step := range steps {
		if err := o.kubectl(ctx, step...); err != nil {
			return err
		}
	}
	if err := o.waitOpenAPI(ctx, "apis/kubevirt.io/v1"); err != nil {
		return err
	}
	// A cluster created by an older version has kwok Stages that played
	// virt-handler before the simulated one did: they would act twice.
	if err := o.kubectl(ctx, append([]string{"delete", "stage", "--ignore-not-found"}, retiredStages...)...); err != nil {
		return err
	}
	return o.kubectl(ctx, "apply", "--server-side", "--force-conflicts",
		"-f", filepath.Join(o.Root, "bin", "kwok-stages"), "-f", filepath.Join(o.Root, "deploy", "kwok", "stages"))
}

// retiredStages played KubeVirt's node side before bench/handler did.
var retiredStages = []string{"vmi-running", "vmi-delete", "vmi-migration-target", "vmi-migration-complete", "launcher-migrated"}

// waitOpenAPI waits until /openapi/v3 lists path.
func (o Options) waitOpenAPI(ctx context.Context, path string) error {
	cfg, err := o.RESTConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		paths, err := client.Discovery().OpenAPIV3().Paths()
		if err != nil {
			return false, nil // still starting: try again
		}
		_, ok := paths[path]
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %s in /openapi/v3: %w", path, err)
	}
	return nil
}

func (o Options) kwokctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, o.bin("kwokctl"), args...)
	// kwokctl runs the kubectl it finds first on PATH: make that ours, the
	// server's version, rather than whatever the machine has.
	cmd.Env = append(os.Environ(),
		"KWOK_WORKDIR="+o.Workdir(),
		"PATH="+filepath.Join(o.Root, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	return run(cmd)
}

func (o Options) kubectl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, o.bin("kubectl"), append([]string{"--kubeconfig", o.KubeconfigPath()}, args...)...)
	return run(cmd)
}

func run(cmd *exec.Cmd) error {
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(cmd.Path), strings.Join(cmd.Args[1:], " "), err, out.String())
	}
	return nil
}
