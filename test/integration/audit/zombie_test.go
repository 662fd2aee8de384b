package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/audit"
	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/bench/replicas"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/shard"
	"github.com/virtshard/virtshard/test/clustertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// A replica frozen (SIGSTOP) for twice the lease duration while VMIs keep
// coming wakes up believing it holds its ranges, which others took over.
// The API server's audit log shows that no replica, the zombie least of
// all, wrote to an object outside its tenure of the object's range.
func TestZombieReplicaMakesNoFencedWrite(t *testing.T) {
	ctx := context.Background()
	opts := clustertest.Options(t)
	ns := clustertest.Namespace(t)
	dir := t.TempDir()

	start, kubeconfig := audited(t, opts, dir)
	var procs []*replicas.Replica
	for i := range 3 {
		r, err := replicas.Start(replicas.Options{Binary: clustertest.ControllerBinary(t), Kubeconfig: kubeconfig,
			Namespace: ns, WatchNamespace: ns, LogDir: dir}, fmt.Sprintf("replica-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Thaw(); r.Stop(15 * time.Second) })
		procs = append(procs, r)
	}

	kv, err := kubevirt.NewForConfig(clustertest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	const total = 300
	create := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := kv.VirtualMachineInstances(ns).Create(ctx, workload.VMI(fmt.Sprintf("vmi-%03d", i)), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Freeze one replica in the middle of its work (syncs queued, status
	// patches waiting in its batcher, watch events in flight) for twice
	// the lease duration; VMIs keep coming, some of them into its ranges.
	create(0, 100)
	zombie := procs[1]
	if err := zombie.Freeze(); err != nil {
		t.Fatal(err)
	}
	create(100, 200)
	time.Sleep(2*shard.DefaultLeaseDuration - 3*time.Second)
	if err := zombie.Thaw(); err != nil {
		t.Fatal(err)
	}
	create(200, total)
	waitRunning(t, kv, ns, total)

	// The zombie found, on waking, that its leases had expired.
	metrics, err := zombie.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := replicas.Sum(metrics, "virtshard_shard_handoffs_total", map[string]string{"reason": "expiry"}); n == 0 {
		t.Error("the frozen replica gave up no range for expiry: it was not a zombie")
	}
	for _, r := range procs {
		r.Stop(15 * time.Second)
	}

	res := checkAudit(t, kv, ns, start, shard.DefaultLeaseDuration)
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

// audited returns where the audit log ends now (the run's events follow)
// and a kubeconfig in dir for the one user the cluster's API server audits,
// which the replicas authenticate as.
func audited(t *testing.T, opts cluster.Options, dir string) (start int64, kubeconfig string) {
	t.Helper()
	start, err := opts.AuditLogEnd()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := opts.WriteAuditedKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return start, kubeconfig
}

// logLeaseWrites logs every write to the Leases of the violated ranges, for
// a failure that the cluster's audit log will not outlive.
func logLeaseWrites(t *testing.T, opts cluster.Options, from int64, ns string, violations []audit.Violation) {
	leases := map[string]bool{}
	for _, v := range violations {
		leases[fmt.Sprintf("virtshard-range-%d", v.Range)] = true
	}
	log, err := opts.OpenAuditLog(from)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	err = audit.Scan(log, func(ev *auditv1.Event) error {
		if ev.ObjectRef == nil || ev.ObjectRef.Namespace != ns || !leases[ev.ObjectRef.Name] {
			return nil
		}
		code := int32(0)
		if ev.ResponseStatus != nil {
			code = ev.ResponseStatus.Code
		}
		var lease coordinationv1.Lease
		if ev.RequestObject != nil {
			_ = json.Unmarshal(ev.RequestObject.Raw, &lease)
		}
		t.Logf("lease write: %s %s (resourceVersion %q) received %s completed %s by %s: HTTP %d, holder %q",
			ev.Verb, ev.ObjectRef.Name, lease.ResourceVersion, ev.RequestReceivedTimestamp.Format(time.RFC3339Nano),
			ev.StageTimestamp.Format(time.RFC3339Nano), ev.UserAgent, code, ptr.Deref(lease.Spec.HolderIdentity, ""))
		return nil
	})
	if err != nil {
		t.Errorf("reading the audit log: %v", err)
	}
}

func waitRunning(t *testing.T, kv *kubevirt.Clientset, ns string, n int) {
	t.Helper()
	// The last phases listed, and the last list error: a list cut short by
	// the deadline must not hide what the one before it saw.
	var phases map[virtv1.VirtualMachineInstancePhase]int
	var listErr error
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		listed, err := workload.Phases(ctx, kv, ns)
		if err != nil {
			listErr = err
			return false, nil
		}
		phases = listed
		return phases[virtv1.Running] >= n, nil
	})
	if err != nil {
		// The phases tell a slow run from VMIs stuck at one step.
		logNotRunning(t, kv, ns)
		t.Fatalf("fewer than %d VMIs Running after 3 minutes; VMIs by phase: %v (last list error: %v)", n, phases, listErr)
	}
}

// logNotRunning logs every VMI of ns that is not Running with its
// conditions, and the events about it: why it is where it is.
func logNotRunning(t *testing.T, kv *kubevirt.Clientset, ns string) {
	ctx := context.Background()
	vmis, err := kv.VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("list VMIs: %v", err)
		return
	}
	events, err := kubernetes.NewForConfigOrDie(clustertest.Config(t)).CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("list events: %v", err)
	}
	for _, v := range vmis.Items {
		if v.Status.Phase == virtv1.Running {
			continue
		}
		t.Logf("VMI %s: phase %q, node %q, conditions %+v", v.Name, v.Status.Phase, v.Status.NodeName, v.Status.Conditions)
		if events == nil {
			continue
		}
		for _, e := range events.Items {
			if e.InvolvedObject.UID == v.UID {
				t.Logf("  event %s %s from %s: %s", e.Type, e.Reason, e.Source.Component, e.Message)
			}
		}
	}
}
