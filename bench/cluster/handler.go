package cluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/virtshard/virtshard/bench/proc"
)

// HandlerUser is the identity of the simulated virt-handler
// (bench/handler): virt-handler's own service account, as the API server's
// records name it.
const HandlerUser = "system:serviceaccount:kubevirt:kubevirt-handler"

// CDIUser is the identity of the simulated CDI (bench/cdi), which runs in
// the simulated virt-handler's process: CDI's service account.
const CDIUser = "system:serviceaccount:cdi:cdi-sa"

// handlerBinary is the simulated virt-handler's binary in bin/.
const handlerBinary = "virtshard-handler"

func (o Options) clusterDir() string { return filepath.Join(o.Workdir(), "clusters", o.Name) }

// handlerPidFile is in kwokctl's pids/, beside the control plane's: the
// bench measures the CPU time of every process there.
func (o Options) handlerPidFile() string {
	return filepath.Join(o.clusterDir(), "pids", handlerBinary+".pid")
}

// HandlerLogPath is the simulated virt-handler's log.
func (o Options) HandlerLogPath() string {
	return filepath.Join(o.clusterDir(), "logs", handlerBinary+".log")
}

// nodeSideVerified is a file that says the running simulated virt-handler
// passed the probe.
func (o Options) nodeSideVerified() string {
	return filepath.Join(o.clusterDir(), "node-side-verified")
}

// handlerPid is the running simulated virt-handler's pid, or 0.
func (o Options) handlerPid() int {
	raw, err := os.ReadFile(o.handlerPidFile())
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || !alive(pid) {
		return 0
	}
	return pid
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	state, err := proc.State(pid)
	return err == nil && state != 'Z'
}

// ensureHandler makes sure the simulated virt-handler runs, from the
// current bin/virtshard-handler: one started from an older build is
// replaced. It runs detached, as the cluster's own processes do, and
// outlives the process that started it.
func (o Options) ensureHandler(ctx context.Context) error {
	binary := o.bin(handlerBinary)
	built, err := fileDigest(binary)
	if err != nil {
		return fmt.Errorf("%s is not built (run `make tools` in %s): %w", handlerBinary, o.Root, err)
	}
	if pid := o.handlerPid(); pid != 0 {
		// go build rewrites its output even when nothing changed: compare
		// what runs with what is built, not their times.
		running, err := fileDigest(fmt.Sprintf("/proc/%d/exe", pid))
		if err == nil && running == built {
			return nil
		}
		klog.FromContext(ctx).Info("Restarting the simulated virt-handler: its binary changed")
		if err := o.stopHandler(ctx); err != nil {
			return err
		}
	}
	if err := os.Remove(o.nodeSideVerified()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	kubeconfig := filepath.Join(o.clusterDir(), handlerBinary+"-kubeconfig.yaml")
	if err := o.writeUserKubeconfig(kubeconfig, HandlerUser); err != nil {
		return err
	}
	cdiKubeconfig := filepath.Join(o.clusterDir(), "cdi-kubeconfig.yaml")
	if err := o.writeUserKubeconfig(cdiKubeconfig, CDIUser); err != nil {
		return err
	}
	log, err := os.OpenFile(o.HandlerLogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(binary, "--kubeconfig", kubeconfig, "--node-selector", KwokNodeTypeLabel+"="+KwokNodeType,
		"--cdi-kubeconfig", cdiKubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", handlerBinary, err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return os.WriteFile(o.handlerPidFile(), []byte(strconv.Itoa(pid)), 0o644)
}

// fileDigest is the SHA-256 of the file at path.
func fileDigest(path string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// stopHandler stops the simulated virt-handler, if it runs, and waits
// until it has exited.
func (o Options) stopHandler(ctx context.Context) error {
	pid := o.handlerPid()
	if pid == 0 {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s (pid %d): %w", handlerBinary, pid, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return !alive(pid), nil
	})
	if err != nil {
		return fmt.Errorf("%s (pid %d) did not exit: %w", handlerBinary, pid, err)
	}
	return os.Remove(o.handlerPidFile())
}
