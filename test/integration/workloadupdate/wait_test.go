package workloadupdate_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/client/kubevirt"
)

// waitVMI polls the VMI ns/name until ok holds and returns it; after
// timeout it fails the test with the VMI last seen.
func waitVMI(t *testing.T, kv *kubevirt.Clientset, ns, name, what string, timeout time.Duration, ok func(*virtv1.VirtualMachineInstance) bool) *virtv1.VirtualMachineInstance {
	t.Helper()
	var last *virtv1.VirtualMachineInstance
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		v, err := kv.VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = v
		return ok(v), nil
	}); err != nil {
		t.Fatalf("VMI not %s after %s; last seen %+v", what, timeout, last)
	}
	return last
}

// theWorkloadUpdateMigration waits up to a minute until every migration
// in ns has ended (a migration ends after its VMI shows the move: the node
// reports it completed, then the migration controller marks it), and
// returns the only one if it is a kubevirt-workload-update- migration that
// succeeded; otherwise the test fails and it returns nil.
func theWorkloadUpdateMigration(t *testing.T, kv *kubevirt.Clientset, ns string) *virtv1.VirtualMachineInstanceMigration {
	t.Helper()
	var migrations *virtv1.VirtualMachineInstanceMigrationList
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := kv.Migrations(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		migrations = list
		return !slices.ContainsFunc(list.Items, func(m virtv1.VirtualMachineInstanceMigration) bool { return !m.IsFinal() }), nil
	}); err != nil && migrations == nil {
		t.Fatal(err)
	}
	if len(migrations.Items) != 1 || !strings.HasPrefix(migrations.Items[0].Name, "kubevirt-workload-update-") ||
		migrations.Items[0].Status.Phase != virtv1.MigrationSucceeded {
		var names []string
		for _, m := range migrations.Items {
			names = append(names, m.Name+"/"+string(m.Status.Phase))
		}
		t.Errorf("migrations %v, want one kubevirt-workload-update- migration, Succeeded", names)
		return nil
	}
	return &migrations.Items[0]
}
