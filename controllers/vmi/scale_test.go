package vmi_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/cluster"
)

// The scale tests run replicas as separate processes of the real binary,
// so that one can be killed (SIGKILL) like a crashed pod.

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

func controllerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := cluster.FindRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "virtshard-controller-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "virtshard-controller")
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

type process struct {
	id   string
	cmd  *exec.Cmd
	addr string
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startProcess(t *testing.T, ns, id string) *process {
	t.Helper()
	addr := freeAddr(t)
	log, err := os.Create(filepath.Join(t.TempDir(), id+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(controllerBinary(t), "--kubeconfig", kubeconfig(t), "--namespace", ns, "--identity", id,
		"--watch-namespace", ns, "--address", addr, "--kube-api-qps", "-1")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{id: id, cmd: cmd, addr: addr}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
		}
		log.Close()
	})
	return p
}

// writes scrapes virtshard_api_writes_total by resource.
func (p *process) writes(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", p.id, err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, name := range []string{"virtshard_status_patch_conflicts_total", "virtshard_shard_handoffs_total"} {
		if f := families[name]; f != nil {
			for _, m := range f.GetMetric() {
				out[name] += m.GetCounter().GetValue()
			}
		}
	}
	if f := families["virtshard_api_writes_total"]; f != nil {
		for _, m := range f.GetMetric() {
			labels := model.LabelSet{}
			for _, l := range m.GetLabel() {
				labels[model.LabelName(l.GetName())] = model.LabelValue(l.GetValue())
			}
			out[string(labels["resource"])+" "+string(labels["verb"])] += m.GetCounter().GetValue()
		}
	}
	return out
}

// createVMIs creates n VMIs with 16 concurrent creators.
func createVMIs(t *testing.T, e *env, n int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if _, err := e.kv.VirtualMachineInstances(e.ns).Create(context.Background(), newVMI(fmt.Sprintf("vmi-%05d", i)), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create VMI: %v", err)
	}
}

// waitAllRunning waits until n VMIs are Running, logging progress.
func waitAllRunning(t *testing.T, e *env, n int, timeout time.Duration) {
	t.Helper()
	last := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := e.kv.VirtualMachineInstances(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		byPhase := map[virtv1.VirtualMachineInstancePhase]int{}
		for _, v := range list.Items {
			byPhase[v.Status.Phase]++
		}
		if time.Since(last) > 10*time.Second {
			t.Logf("VMIs by phase: %v", byPhase)
			last = time.Now()
		}
		return byPhase[virtv1.Running] == n, nil
	})
	if err != nil {
		t.Fatalf("not all %d VMIs Running within %s", n, timeout)
	}
}

// assertOneLauncherPodEach checks there is exactly one launcher pod per VMI.
func assertOneLauncherPodEach(t *testing.T, e *env, n int) {
	t.Helper()
	pods, err := e.kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: virtv1.AppLabel + "=virt-launcher"})
	if err != nil {
		t.Fatal(err)
	}
	perVMI := map[string]int{}
	for _, p := range pods.Items {
		perVMI[p.Labels[virtv1.CreatedByLabel]]++
	}
	duplicates := 0
	for _, c := range perVMI {
		duplicates += c - 1
	}
	if len(perVMI) != n || duplicates != 0 {
		t.Errorf("%d launcher pods for %d VMIs (%d with a pod), %d duplicates; want one each", len(pods.Items), n, len(perVMI), duplicates)
	}
}

func scaleCount(t *testing.T) int {
	if s := os.Getenv("VIRTSHARD_SCALE_VMIS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 2000
}

func TestTwoThousandVMIsWithThreeReplicas(t *testing.T) {
	n := scaleCount(t)
	e := newEnv(t, 0)
	var procs []*process
	for i := range 3 {
		procs = append(procs, startProcess(t, e.ns, fmt.Sprintf("replica-%d", i)))
	}
	start := time.Now()
	createVMIs(t, e, n)
	waitAllRunning(t, e, n, 10*time.Minute)
	t.Logf("%d VMIs Running %s after the first create", n, time.Since(start).Round(time.Millisecond))
	assertOneLauncherPodEach(t, e, n)

	total := map[string]float64{}
	for _, p := range procs {
		for k, v := range p.writes(t) {
			total[k] += v
		}
	}
	var controllerWrites float64
	for k, v := range total {
		resource := strings.Fields(k)[0]
		if resource == "pods" || resource == "virtualmachineinstances" {
			controllerWrites += v
		}
	}
	perVMI := controllerWrites / float64(n)
	t.Logf("writes by resource and verb: %v", total)
	events, err := e.kube.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
	if err == nil {
		byReason := map[string]int32{}
		for _, ev := range events.Items {
			byReason[ev.Reason] += ev.Count
		}
		t.Logf("events by reason: %v", byReason)
	}
	t.Logf("controller writes per VMI (pods and VMIs): %.2f; events per VMI: %.2f", perVMI, total["events create"]/float64(n))
	if perVMI > 2.5 {
		t.Errorf("%.2f controller writes per VMI on the way to Running, want at most 2.5", perVMI)
	}
}

func TestKilledReplicaMidRunLosesNoVMI(t *testing.T) {
	n := scaleCount(t)
	e := newEnv(t, 0)
	var procs []*process
	for i := range 3 {
		procs = append(procs, startProcess(t, e.ns, fmt.Sprintf("replica-%d", i)))
	}
	created := make(chan struct{})
	go func() { createVMIs(t, e, n); close(created) }()
	// Kill one replica (SIGKILL: no handoff) once a third of the VMIs exist.
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := e.kv.VirtualMachineInstances(e.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) >= n/3, nil
	}); err != nil {
		t.Fatal("VMIs were not created")
	}
	if err := procs[1].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s", procs[1].id)
	<-created
	waitAllRunning(t, e, n, 10*time.Minute)
	assertOneLauncherPodEach(t, e, n)
}
