package audit_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/virtshard/virtshard/bench/audit"
	"github.com/virtshard/virtshard/bench/faults"
	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/shard"
	"github.com/virtshard/virtshard/test/clustertest"
)

// Short lease timings, so that a stall shorter than client-go's 10 s TLS
// handshake timeout outlasts a lease: without the fence's deadline, a
// write held inside the stalled replica would leave when the stall ends.
const (
	fenceLease = 4 * time.Second
	fenceStall = 8 * time.Second
)

// A replica whose API traffic stalls in the middle of its work (its
// connections dropped, new ones never completing, through the bench's TCP
// proxy) has writes under way and queued. It abandons every one of them at
// its range's fence deadline, so that when traffic flows again, after
// another replica has taken its ranges over, none of them reaches the API
// server: the audit log shows no write of any replica outside its tenure.
func TestStalledReplicaSendsNothingAfterItsFenceDeadline(t *testing.T) {
	ctx := context.Background()
	opts := clustertest.Options(t)
	ns := clustertest.Namespace(t)
	dir := t.TempDir()

	start, kubeconfig := audited(t, opts, dir)
	server, err := url.Parse(clustertest.Config(t).Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faults.NewProxy(server.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	proxied := filepath.Join(dir, "kubeconfig-proxied")
	if err := faults.RedirectKubeconfig(kubeconfig, proxied, proxy.Addr()); err != nil {
		t.Fatal(err)
	}
	timings := []string{"--lease-duration=" + fenceLease.String(), "--renew-deadline=3s", "--retry-period=1s"}
	startReplica := func(id, kubeconfig string) *replicas.Replica {
		r, err := replicas.Start(replicas.Options{Binary: clustertest.ControllerBinary(t), Kubeconfig: kubeconfig,
			Namespace: ns, WatchNamespace: ns, LogDir: dir, Args: timings}, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Stop(15 * time.Second) })
		return r
	}
	stalled := startReplica("stalled", proxied)
	steady := startReplica("steady", kubeconfig)
	for _, r := range []*replicas.Replica{stalled, steady} {
		waitForMetric(t, r, "virtshard_shard_ranges_active", nil, func(v float64) bool { return v > 0 })
	}

	kv, err := kubevirt.NewForConfig(clustertest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	const total = 300
	// create makes VMIs from..to-1, 20 at a time: a burst that leaves
	// the replicas a backlog.
	create := func(from, to int) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 20 {
			wg.Go(func() {
				for i := range next {
					if _, err := kv.VirtualMachineInstances(ns).Create(ctx, workload.VMI(fmt.Sprintf("vmi-%03d", i)), metav1.CreateOptions{}); err != nil {
						t.Error(err)
					}
				}
			})
		}
		for i := from; i < to; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	// Stall the replica while it works through a burst: launcher pods to
	// create, status patches waiting in its batcher.
	create(0, 200)
	proxy.Stall()
	create(200, total)
	time.Sleep(fenceStall) // the fault itself: traffic flows again only after the leases lapsed
	proxy.Restore()
	waitRunning(t, kv, ns, total)

	metrics, err := stalled.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	abandoned := replicas.Sum(metrics, "virtshard_controller_fenced_writes_total", map[string]string{"reason": "deadline"})
	expired := replicas.Sum(metrics, "virtshard_shard_handoffs_total", map[string]string{"reason": "expiry"})
	t.Logf("the stalled replica abandoned %.0f writes at their fence deadline and gave up %.0f ranges for expiry", abandoned, expired)
	if abandoned == 0 || expired == 0 {
		t.Error("the stall caught no write under way or took no range: the test proves nothing")
	}
	stalled.Stop(15 * time.Second)
	steady.Stop(15 * time.Second)

	res := checkAudit(t, kv, ns, start, fenceLease)
	if res.Checked < total {
		t.Errorf("the audit log has %d replica writes: too few to prove anything", res.Checked)
	}
	for _, v := range res.Violations {
		t.Errorf("fenced-write violation: %s", v)
	}
	if len(res.Violations) > 0 {
		logLeaseWrites(t, opts, start, ns, res.Violations)
	}
}

// checkAudit checks every range-bound write of the replicas in namespace
// ns since audit log offset from: VMIs by their owner range, launcher pods
// by their range label.
func checkAudit(t *testing.T, kv *kubevirt.Clientset, ns string, from int64, lease time.Duration) audit.Result {
	t.Helper()
	ctx := context.Background()
	ranges, err := shard.NewRanges(shard.DefaultRangeCount, shard.KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]int{}
	vmis, err := kv.VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vmis.Items {
		owner["virtualmachineinstances/"+v.Name] = ranges.Owner(&v)
	}
	pods, err := kubernetes.NewForConfigOrDie(clustertest.Config(t)).CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if i, err := strconv.Atoi(p.Labels[shard.LabelRange]); err == nil {
			owner["pods/"+p.Name] = i
		}
	}
	auditLog, err := clustertest.Options(t).OpenAuditLog(from)
	if err != nil {
		t.Fatal(err)
	}
	defer auditLog.Close()
	res, err := audit.Checker{
		LeaseNamespace: ns, LeasePrefix: "virtshard-range-", MemberPrefix: "virtshard-member-", LeaseDuration: lease,
		RangeOf: func(resource, namespace, name string) (int, bool) {
			i, ok := owner[resource+"/"+name]
			return i, ok && namespace == ns
		},
	}.Check(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checked %d replica writes against %d range and %d member lease writes", res.Checked, res.LeaseWrites, res.MemberLeaseWrites)
	if res.LeaseWrites == 0 {
		t.Error("the audit log has no range lease writes: nothing to check against")
	}
	return res
}

// waitForMetric waits until the sum of metric name's series matching
// labels satisfies ok.
func waitForMetric(t *testing.T, r *replicas.Replica, name string, labels map[string]string, ok func(float64) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		metrics, err := r.Metrics(ctx)
		return err == nil && ok(replicas.Sum(metrics, name, labels)), nil
	})
	if err != nil {
		t.Fatalf("replica %s: %s never as wanted", r.ID, name)
	}
}
