package migration_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	migrationsv1 "kubevirt.io/api/migrations/v1alpha1"

	"github.com/virtshard/virtshard/bench/handler"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/test/controllertest"
)

// waitMigration waits up to two minutes until ok holds for the named
// migration (nil once it is gone) and returns what it saw last.
func (e *env) waitMigration(name, what string, ok func(*virtv1.VirtualMachineInstanceMigration) bool) *virtv1.VirtualMachineInstanceMigration {
	e.t.Helper()
	var last *virtv1.VirtualMachineInstanceMigration
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := e.kv.Migrations(e.ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			m = nil
		case err != nil:
			return false, nil
		}
		last = m
		return ok(m), nil
	}); err != nil {
		e.t.Fatalf("migration %s not %s after two minutes; last seen %+v; its events: %s", name, what, last, e.eventsOf(name))
	}
	return last
}

// A MigrationPolicy that selects a VMI by its labels and its namespace's
// has its settings in the VMI's migration state, over the KubeVirt CR's,
// with its name; a looser policy (fewer labels matched) loses to it.
func TestAPolicysSettingsReachTheMigrationState(t *testing.T) {
	e := newEnv(t)
	controllertest.StartN(t, e.ns, 3, nil)
	ctx := context.Background()
	selected := map[string]string{"policy-test": e.ns}
	tight := &migrationsv1.MigrationPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-tight"},
		Spec: migrationsv1.MigrationPolicySpec{
			Selectors: &migrationsv1.Selectors{
				VirtualMachineInstanceSelector: migrationsv1.LabelSelector(selected),
				NamespaceSelector:              migrationsv1.LabelSelector{corev1.LabelMetadataName: e.ns},
			},
			BandwidthPerMigration:   ptr.To(resource.MustParse("64Mi")),
			CompletionTimeoutPerGiB: ptr.To[int64](300),
			AllowAutoConverge:       ptr.To(true),
		},
	}
	loose := &migrationsv1.MigrationPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-loose"},
		Spec: migrationsv1.MigrationPolicySpec{
			Selectors:             &migrationsv1.Selectors{VirtualMachineInstanceSelector: migrationsv1.LabelSelector(selected)},
			BandwidthPerMigration: ptr.To(resource.MustParse("16Mi")),
		},
	}
	for _, p := range []*migrationsv1.MigrationPolicy{tight, loose} {
		if _, err := e.kv.MigrationPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.kv.MigrationPolicies().Delete(context.Background(), p.Name, metav1.DeleteOptions{}) })
	}
	vmi := workload.VMI("policed")
	for k, v := range selected {
		vmi.Labels[k] = v
	}
	workload.Spread(vmi)
	if _, err := e.kv.VirtualMachineInstances(e.ns).Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning("policed")
	e.migrate("policed", nil)
	m := e.waitMigration("mig-policed", "Succeeded", func(m *virtv1.VirtualMachineInstanceMigration) bool {
		return m != nil && m.Status.Phase == virtv1.MigrationSucceeded
	})
	got, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, "policed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ms := got.Status.MigrationState
	if ms == nil || ms.MigrationPolicyName == nil || *ms.MigrationPolicyName != tight.Name || ms.MigrationConfiguration == nil {
		t.Fatalf("the VMI's migration state %+v names no policy %s with its configuration", ms, tight.Name)
	}
	c := ms.MigrationConfiguration
	if c.BandwidthPerMigration == nil || c.BandwidthPerMigration.Cmp(resource.MustParse("64Mi")) != 0 ||
		ptr.Deref(c.CompletionTimeoutPerGiB, 0) != 300 || !ptr.Deref(c.AllowAutoConverge, false) {
		t.Errorf("migration configuration %+v, want the tight policy's bandwidth 64Mi, 300 s per GiB and auto-converge", c)
	}
	if ptr.Deref(c.ParallelMigrationsPerCluster, 0) == 0 {
		t.Errorf("migration configuration %+v lacks the CR's settings the policy left alone", c)
	}
	if m.Status.MigrationState == nil || ptr.Deref(m.Status.MigrationState.MigrationPolicyName, "") != tight.Name {
		t.Errorf("the migration's own migration state %+v does not name policy %s", m.Status.MigrationState, tight.Name)
	}
}

// Deleting a running migration aborts it: the migration is marked
// AbortRequested, the VMI's migration state asks the source node to
// abort (KubeVirt's SuccessfulAbortMigration event), the node reports the migration failed with the abort succeeded,
// and the migration fails and goes, the VMI running where it was.
func TestDeletingARunningMigrationAbortsIt(t *testing.T) {
	e := newEnv(t)
	controllertest.StartN(t, e.ns, 3, nil)
	ctx := context.Background()
	vmi := workload.VMI("stayer")
	vmi.Annotations = map[string]string{handler.MigrationDurationAnnotation: "10m"}
	workload.Spread(vmi)
	if _, err := e.kv.VirtualMachineInstances(e.ns).Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	source := e.waitRunning("stayer")
	e.migrate("stayer", nil)
	e.waitMigration("mig-stayer", "Running", func(m *virtv1.VirtualMachineInstanceMigration) bool {
		return m != nil && m.Status.Phase == virtv1.MigrationRunning
	})
	if err := e.kv.Migrations(e.ns).Delete(ctx, "mig-stayer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitMigration("mig-stayer", "gone", func(m *virtv1.VirtualMachineInstanceMigration) bool { return m == nil })
	got, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, "stayer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ms := got.Status.MigrationState
	if got.Status.Phase != virtv1.Running || got.Status.NodeName != source {
		t.Errorf("VMI %s on %q, want Running on its source %s", got.Status.Phase, got.Status.NodeName, source)
	}
	if ms == nil || !ms.AbortRequested || ms.AbortStatus != virtv1.MigrationAbortSucceeded || !ms.Failed || ms.Completed {
		t.Errorf("VMI migration state %+v, want the abort requested and succeeded, failed, not completed", ms)
	}
	events := e.eventsOf("mig-stayer")
	for _, want := range []string{"SuccessfulAbortMigration: Migration is ready to be canceled by virt-handler.", "FailedMigration: source node reported migration failed"} {
		if !strings.Contains(events, want) {
			t.Errorf("events of the migration %q lack KubeVirt's %q", events, want)
		}
	}
}

// waitRunning waits until the VMI runs and returns its node.
func (e *env) waitRunning(name string) string {
	e.t.Helper()
	var node string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		v, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || v.Status.Phase != virtv1.Running {
			return false, nil
		}
		node = v.Status.NodeName
		return true, nil
	}); err != nil {
		e.t.Fatalf("VMI %s not Running after two minutes", name)
	}
	return node
}
