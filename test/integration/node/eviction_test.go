package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/controllers/node"
	"github.com/virtshard/virtshard/controllers/vmistatus"
	"github.com/virtshard/virtshard/test/controllertest"
)

// evict evicts the VMI's launcher pod on its node through the Eviction
// API, as kubectl drain does, and returns the refusal's message.
func (e *env) evict(vmi string) string {
	e.t.Helper()
	v, err := e.kv.VirtualMachineInstances(e.ns).Get(context.Background(), vmi, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	pods, err := e.kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: virtv1.CreatedByLabel + "=" + string(v.UID)})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, pod := range pods.Items {
		if pod.Spec.NodeName != v.Status.NodeName {
			continue
		}
		err := e.kube.PolicyV1().Evictions(e.ns).Evict(context.Background(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: e.ns}})
		if !apierrors.IsTooManyRequests(err) {
			e.t.Fatalf("eviction of %s's launcher pod %s: %v, want it refused with 429", vmi, pod.Name, err)
		}
		return err.Error()
	}
	e.t.Fatalf("VMI %s has no launcher pod on its node %s", vmi, v.Status.NodeName)
	return ""
}

// An eviction of a migratable VMI's launcher pod (a drain) is refused
// by virt-api's admitter, which marks the VMI; the VMI then migrates to
// another node through a kubevirt-evacuation- migration and the mark
// goes. A VMI that should migrate on eviction but cannot keeps its pod,
// and once its node carries the drain taint it is told so in KubeVirt's
// event.
func TestAnEvictedVMIMovesAndANonMigratableOneIsTold(t *testing.T) {
	e := newEnv(t)
	controllertest.VirtAPI(t, e.ns)
	drained := e.addNode("evicted")
	mover := workload.VMI("mover")
	stayer := workload.VMI("stayer")
	// Hyper-V passthrough keeps a VMI from migrating (the simulated
	// virt-handler reports it so, as virt-handler does).
	stayer.Spec.Domain.Features = &virtv1.Features{HypervPassthrough: &virtv1.HyperVPassthrough{Enabled: ptr.To(true)}}
	for _, vmi := range []*virtv1.VirtualMachineInstance{mover, stayer} {
		vmi.Spec.NodeSelector = map[string]string{poolLabel: e.ns}
		vmi.Spec.EvictionStrategy = ptr.To(virtv1.EvictionStrategyLiveMigrate)
		if _, err := e.kv.VirtualMachineInstances(e.ns).Create(context.Background(), vmi, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitVMI("both Running with their migratability reported", func(v *virtv1.VirtualMachineInstance) bool {
		return v.Status.Phase == virtv1.Running && vmistatus.Condition(v, virtv1.VirtualMachineInstanceIsMigratable) != nil
	}, "mover", "stayer")
	target := e.addNode("target")
	start := time.Now()

	if got, want := e.evict("mover"), `Eviction triggered evacuation of VMI "`+e.ns+`/mover"`; !strings.Contains(got, want) {
		t.Errorf("eviction of mover refused with %q, want %q", got, want)
	}
	if got, want := e.evict("stayer"), "VMI stayer is configured with an eviction strategy but is not live-migratable"; !strings.Contains(got, want) {
		t.Errorf("eviction of stayer refused with %q, want %q", got, want)
	}
	e.waitVMI("mover on the other node, its mark gone", func(v *virtv1.VirtualMachineInstance) bool {
		return v.Status.Phase == virtv1.Running && v.Status.NodeName == target && v.Status.EvacuationNodeName == "" &&
			v.Status.MigrationState != nil && v.Status.MigrationState.Completed
	}, "mover")
	t.Logf("mover evacuated %s after the eviction", time.Since(start).Round(time.Millisecond))
	migrations, err := e.kv.Migrations(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(migrations.Items) != 1 || !strings.HasPrefix(migrations.Items[0].Name, "kubevirt-evacuation-") ||
		migrations.Items[0].Spec.VMIName != "mover" || migrations.Items[0].Annotations[virtv1.EvacuationMigrationAnnotation] != drained {
		t.Errorf("migrations %v, want one kubevirt-evacuation- migration of mover off %s", migrationNames(migrations.Items), drained)
	}
	if v, err := e.kv.VirtualMachineInstances(e.ns).Get(context.Background(), "stayer", metav1.GetOptions{}); err != nil || v.Status.NodeName != drained || v.Status.Phase != virtv1.Running {
		t.Errorf("stayer: %v, want Running on %s still", err, drained)
	}

	taint := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"value":"fake","effect":"NoSchedule"},{"key":%q,"effect":"NoSchedule"}]}}`,
		cluster.KwokNodeTaintKey, node.DefaultDrainTaintKey)
	if _, err := e.kube.CoreV1().Nodes().Patch(context.Background(), drained, types.MergePatchType, []byte(taint), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	tainted := time.Now()
	var seen string
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := e.kube.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=stayer"})
		if err != nil {
			return false, nil
		}
		for _, ev := range events.Items {
			seen += ev.Reason + ": " + ev.Message + "; "
			if ev.Type == corev1.EventTypeNormal && ev.Reason == "FailedCreate" && ev.Message == "VirtualMachineInstance is not migrateable" {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Errorf("no KubeVirt event telling the drained node's stayer it cannot migrate; its events: %s", seen)
	}
	t.Logf("stayer told %s after the drain taint", time.Since(tainted).Round(time.Millisecond))
}

// waitVMI waits up to two minutes until ok holds for each named VMI.
func (e *env) waitVMI(what string, ok func(*virtv1.VirtualMachineInstance) bool, names ...string) {
	e.t.Helper()
	var last string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			v, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || !ok(v) {
				last = fmt.Sprintf("%s: %v %+v", name, err, v.Status)
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		e.t.Fatalf("not %s after two minutes; last seen %s", what, last)
	}
}

func migrationNames(ms []virtv1.VirtualMachineInstanceMigration) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name+"/"+m.Spec.VMIName)
	}
	return out
}
