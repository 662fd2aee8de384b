package workloadupdate_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

const (
	oldImage = "quay.io/kubevirt/virt-launcher:v1.8.0"
	newImage = "quay.io/kubevirt/virt-launcher:v1.8.1"
	// The CR's limits, low so that they bind.
	migrationLimit = 2
	batchSize      = 2
	batchInterval  = 10 * time.Second
)

// An upgrade of the controller to a new launcher image, as KubeVirt's
// workload updater carries it out: with three replicas of the new release,
// one of them killed mid-way, every VMI on the old launcher ends on the new
// one. Those that can migrate are migrated (kubevirt-workload-update-*), no
// more at once than parallelMigrationsPerCluster; the VMs whose VMIs
// cannot (Hyper-V passthrough) have their launcher pods evicted, no more
// within batchEvictionInterval than batchEvictionSize, and their VMs start
// them again. The KubeVirt CR's status counts the outdated VMIs down to 0.
func TestAnUpgradeUpdatesEveryWorkloadWithinTheLimits(t *testing.T) {
	ns, kube, kv := controllertest.Clients(t)
	ctx := context.Background()
	crs := dynamic.NewForConfigOrDie(clustertest.Config(t)).Resource(clusterconfig.KubeVirtResource).Namespace(ns)
	createKubeVirt(t, crs)
	args := func(image string) []string {
		return []string{"--launcher-image=" + image, "--kubevirt-namespace=" + ns}
	}
	old := controllertest.StartProcesses(t, ns, 3, args(oldImage)...)
	controllertest.WaitShared(t, old)

	const migratable, evicted = 4, 3
	for i := range migratable {
		vmi := workload.VMI(fmt.Sprintf("migrates-%d", i))
		workload.Spread(vmi)
		if _, err := kv.VirtualMachineInstances(ns).Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range evicted {
		template := workload.VMI("")
		template.Spec.Domain.Features = &virtv1.Features{HypervPassthrough: &virtv1.HyperVPassthrough{Enabled: ptr.To(true)}}
		vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("restarts-%d", i)},
			Spec: virtv1.VirtualMachineSpec{RunStrategy: ptr.To(virtv1.RunStrategyAlways),
				Template: &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: template.Labels}, Spec: template.Spec}}}
		if _, err := kv.VirtualMachines(ns).Create(ctx, vm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	onImage := func(ctx context.Context, image string) (int, error) {
		list, err := kv.VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		n := 0
		for _, vmi := range list.Items {
			if vmi.Status.Phase == virtv1.Running && vmi.DeletionTimestamp == nil && vmi.Status.LauncherContainerImageVersion == image {
				n++
			}
		}
		return n, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := onImage(ctx, oldImage)
		return err == nil && n == migratable+evicted, nil
	}); err != nil {
		t.Fatalf("the %d VMIs did not all run on the old launcher", migratable+evicted)
	}
	for _, r := range old {
		r.Stop(15 * time.Second)
	}

	upgraded := controllertest.StartProcesses(t, ns, 3, args(newImage)...)
	start := time.Now()
	maxInFlight, maxCount, killed := 0, 0, false
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		migrations, err := kv.Migrations(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		inFlight, succeeded := 0, 0
		for _, m := range migrations.Items {
			if !m.IsFinal() && m.Status.Phase != virtv1.MigrationPending && m.Status.Phase != virtv1.MigrationPhaseUnset {
				inFlight++
			}
			if m.Status.Phase == virtv1.MigrationSucceeded {
				succeeded++
			}
		}
		maxInFlight = max(maxInFlight, inFlight)
		// Mid-way: once a migration is done, a replica dies.
		if succeeded > 0 && !killed {
			upgraded[1].Kill()
			killed = true
			t.Logf("killed replica-1 %s into the upgrade, %d migrations succeeded", time.Since(start).Round(time.Second), succeeded)
		}
		count, found, err := outdatedCount(ctx, crs)
		if err != nil || !found {
			return false, nil
		}
		maxCount = max(maxCount, count)
		n, err := onImage(ctx, newImage)
		return err == nil && n == migratable+evicted && count == 0, nil
	}); err != nil {
		n, _ := onImage(ctx, newImage)
		count, _, _ := outdatedCount(ctx, crs)
		t.Fatalf("%d of %d VMIs on the new launcher, the CR counting %d outdated, after 4 minutes", n, migratable+evicted, count)
	}
	t.Logf("every VMI on the new launcher %s after the upgrade; at most %d migrations in flight, the CR counted at most %d outdated",
		time.Since(start).Round(time.Second), maxInFlight, maxCount)
	if !killed {
		t.Error("no replica was killed: no migration succeeded before the end")
	}
	if maxInFlight > migrationLimit {
		t.Errorf("%d migrations in flight at once, parallelMigrationsPerCluster %d", maxInFlight, migrationLimit)
	}
	if maxCount == 0 {
		t.Error("the KubeVirt CR never counted an outdated VMI")
	}

	migrations, err := kv.Migrations(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	moved := map[string]bool{}
	for _, m := range migrations.Items {
		if _, ok := m.Annotations[virtv1.WorkloadUpdateMigrationAnnotation]; !ok || !strings.HasPrefix(m.Name, "kubevirt-workload-update-") {
			t.Errorf("migration %s is not a workload update's", m.Name)
		}
		if m.Status.Phase == virtv1.MigrationSucceeded {
			moved[m.Spec.VMIName] = true
		}
	}
	if len(moved) != migratable {
		t.Errorf("workload update migrations moved %d VMIs, want the %d migratable ones", len(moved), migratable)
	}
	vmis, err := kv.VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(vmis.Items) != migratable+evicted {
		t.Errorf("%d VMIs at the end, want %d: none lost, none doubled", len(vmis.Items), migratable+evicted)
	}

	events, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=SuccessfulEvict"})
	if err != nil {
		t.Fatal(err)
	}
	var at []time.Time
	for _, e := range events.Items {
		if e.Source.Component != "workload-update-controller" {
			t.Errorf("eviction event from %q", e.Source.Component)
		}
		for range max(e.Count, 1) {
			at = append(at, e.FirstTimestamp.Time)
		}
	}
	if len(at) < evicted {
		t.Errorf("%d evictions recorded, want at least %d", len(at), evicted)
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	var offsets []string
	for _, a := range at {
		offsets = append(offsets, a.Sub(at[0]).String())
	}
	t.Logf("evictions at %v from the first", offsets)
	// Event times are whole seconds: allow one.
	for i := 0; i+batchSize < len(at); i++ {
		if gap := at[i+batchSize].Sub(at[i]); gap < batchInterval-time.Second {
			t.Errorf("evictions %d and %d %s apart: more than %d within %s", i, i+batchSize, gap, batchSize, batchInterval)
		}
	}
}

// createKubeVirt creates the test's KubeVirt CR as virt-operator leaves it
// deployed, with the workload update strategy and low limits.
func createKubeVirt(t *testing.T, crs dynamic.ResourceInterface) {
	t.Helper()
	ctx := context.Background()
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
		"metadata": map[string]any{"name": "kubevirt"},
		"spec": map[string]any{
			"configuration": map[string]any{"migrations": map[string]any{"parallelMigrationsPerCluster": int64(migrationLimit)}},
			"workloadUpdateStrategy": map[string]any{
				"workloadUpdateMethods": []any{"LiveMigrate", "Evict"},
				"batchEvictionSize":     int64(batchSize),
				"batchEvictionInterval": batchInterval.String(),
			},
		},
	}}
	created, err := crs.Create(ctx, cr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create KubeVirt CR: %v", err)
	}
	if err := unstructured.SetNestedField(created.Object, string(virtv1.KubeVirtPhaseDeployed), "status", "phase"); err != nil {
		t.Fatal(err)
	}
	if _, err := crs.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set the KubeVirt CR's phase: %v", err)
	}
}

func outdatedCount(ctx context.Context, crs dynamic.ResourceInterface) (int, bool, error) {
	cr, err := crs.Get(ctx, "kubevirt", metav1.GetOptions{})
	if err != nil {
		return 0, false, err
	}
	n, found, err := unstructured.NestedInt64(cr.Object, "status", "outdatedVirtualMachineInstanceWorkloads")
	return int(n), found, err
}
