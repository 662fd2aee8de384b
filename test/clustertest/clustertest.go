// Package clustertest is the helper that integration tests share: it brings
// up the local cluster (or reuses a running one) once per test binary, hands
// out a rest.Config and a fresh namespace per test, and tears down the
// cluster when the last test binary that needed a cluster started by tests
// is done.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }
package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/virtshard/virtshard/bench/cluster"
)

// upTimeout bounds bring-up, which takes seconds once the tools are built.
const upTimeout = 3 * time.Minute

var (
	unshardedOnce  sync.Once
	unsharded      *cluster.UnshardedAPIServer
	unshardedError error
)

// UnshardedConfig returns a client config for a second kube-apiserver of the
// cluster, started once per test binary without the ShardedListAndWatch
// feature gate: a real server that ignores shard selectors.
func UnshardedConfig(t testing.TB) *rest.Config {
	t.Helper()
	Config(t)
	unshardedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), upTimeout)
		defer cancel()
		log := filepath.Join(opts.Workdir(), fmt.Sprintf("unsharded-apiserver-%d.log", os.Getpid()))
		unsharded, unshardedError = opts.StartUnshardedAPIServer(ctx, log)
	})
	if unshardedError != nil {
		t.Fatalf("unsharded kube-apiserver: %v", unshardedError)
	}
	return rest.CopyConfig(unsharded.Config)
}

var (
	opts    cluster.Options
	config  *rest.Config
	upError error
)

// Main brings the cluster up, runs the tests and releases the cluster. If the
// cluster cannot start, every test that asks for it fails with the reason.
func Main(m *testing.M) int {
	var release func()
	opts, upError = cluster.DefaultOptions()
	if upError == nil {
		release, upError = acquire()
	}
	if upError == nil {
		config, upError = opts.RESTConfig()
	}
	code := m.Run()
	if unsharded != nil {
		unsharded.Stop()
	}
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	if release != nil {
		release()
	}
	return code
}

var (
	buildOnce sync.Once
	buildDir  string
	binary    string
	buildErr  error
)

// ControllerBinary builds virtshard-controller once per test binary, for
// tests that run replicas as processes, and returns its path.
func ControllerBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := cluster.FindRoot()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, err = os.MkdirTemp("", "virtshard-controller-"); err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(buildDir, "virtshard-controller")
		out, err := exec.Command("go", "build", "-o", binary, filepath.Join(root, "cmd", "virtshard-controller")).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build virtshard-controller: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// Config returns the cluster's rest.Config, failing t if the cluster is not up.
func Config(t testing.TB) *rest.Config {
	t.Helper()
	if upError != nil {
		t.Fatalf("local cluster unavailable: %v", upError)
	}
	if config == nil {
		t.Fatal("clustertest.Main did not run: call it from TestMain")
	}
	return rest.CopyConfig(config)
}

// Options returns the local cluster's options.
func Options(t testing.TB) cluster.Options {
	Config(t)
	return opts
}

// Namespace creates a namespace for t and deletes it when t ends.
func Namespace(t testing.TB) string {
	t.Helper()
	client := kubernetes.NewForConfigOrDie(Config(t))
	name := strings.ToLower(fmt.Sprintf("t-%s-%d", sanitize(t.Name()), time.Now().UnixNano()%1e6))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func sanitize(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteRune('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > 40 {
		s = s[:40]
	}
	return strings.Trim(s, "-")
}

// acquire makes sure the cluster runs and registers this process as one of
// its users: a shared flock on users.lock held for the life of the test
// binary. The cluster is torn down only by a process that finds no other
// user, and only if tests started it (marker file); a cluster started with
// `make cluster-up` is left running.
func acquire() (release func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), upTimeout)
	defer cancel()
	unlock, err := cluster.Flock(filepath.Join(opts.Workdir(), "users.mutex"), syscall.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer unlock()

	started, err := cluster.Up(ctx, opts)
	if err != nil {
		return nil, err
	}
	marker := filepath.Join(opts.Workdir(), "started-by-tests")
	if started {
		if err := os.WriteFile(marker, nil, 0o644); err != nil {
			return nil, err
		}
	}
	unuse, err := cluster.Flock(filepath.Join(opts.Workdir(), "users.lock"), syscall.LOCK_SH)
	if err != nil {
		return nil, err
	}
	return func() {
		unlock, err := cluster.Flock(filepath.Join(opts.Workdir(), "users.mutex"), syscall.LOCK_EX)
		if err != nil {
			fmt.Fprintln(os.Stderr, "clustertest: release:", err)
			unuse()
			return
		}
		defer unlock()
		unuse()
		if _, err := os.Stat(marker); err != nil {
			return
		}
		last, err := cluster.Flock(filepath.Join(opts.Workdir(), "users.lock"), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil {
			return // another test binary still uses the cluster
		}
		defer last()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cluster.Down(ctx, opts); err != nil {
			fmt.Fprintln(os.Stderr, "clustertest: stop cluster:", err)
			return
		}
		os.Remove(marker)
	}, nil
}
