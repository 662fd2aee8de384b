package fake

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"
)

func TestFakeStoresPatchesAndRecords(t *testing.T) {
	ctx := context.Background()
	c := NewClientset(&virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}})
	if _, err := c.VirtualMachineInstances("ns").Patch(ctx, "a", types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := c.VirtualMachineInstances("ns").Get(ctx, "a", metav1.GetOptions{})
	if err != nil || got.Status.Phase != virtv1.Running {
		t.Fatalf("after the patch: %v, %v", got, err)
	}
	if _, err := c.Migrations("ns").Create(ctx, &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: "m"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := c.Migrations("ns").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("migrations: %v, %v", list, err)
	}
	if n := len(c.Actions()); n != 4 {
		t.Errorf("%d actions recorded, want 4 (patch, get, create, list)", n)
	}
}
