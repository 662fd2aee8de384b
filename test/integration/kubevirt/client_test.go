package kubevirt_test

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/test/clustertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

func newVMI(name string) *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "probe"}},
		Spec: virtv1.VirtualMachineInstanceSpec{
			Domain: virtv1.DomainSpec{
				Resources: virtv1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
			},
		},
	}
}

func TestVMIRoundTripsThroughTheTypedClient(t *testing.T) {
	ctx := context.Background()
	ns := clustertest.Namespace(t)
	client, err := kubevirt.NewForConfig(clustertest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	vmis := client.VirtualMachineInstances(ns)

	created, err := vmis.Create(ctx, newVMI("probe"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create VMI: %v", err)
	}
	if created.UID == "" || created.ResourceVersion == "" {
		t.Fatalf("created VMI lacks uid or resourceVersion: %+v", created.ObjectMeta)
	}

	got, err := vmis.Get(ctx, "probe", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get VMI: %v", err)
	}
	if got.UID != created.UID || got.Labels["app"] != "probe" {
		t.Errorf("read back %+v, want uid %s and label app=probe", got.ObjectMeta, created.UID)
	}
	if mem := got.Spec.Domain.Resources.Requests[corev1.ResourceMemory]; mem.String() != "64Mi" {
		t.Errorf("memory request read back as %q, want 64Mi", mem.String())
	}

	// The VMI CRD has no status subresource: status is written through the
	// main resource, which is how virtshard's patches go.
	patch := []byte(`{"status":{"phase":"Pending"}}`)
	patched, err := vmis.Patch(ctx, "probe", types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patch VMI status: %v", err)
	}
	if patched.Status.Phase != virtv1.Pending {
		t.Errorf("phase after patch = %q, want Pending", patched.Status.Phase)
	}

	list, err := vmis.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list VMIs: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "probe" {
		t.Errorf("list returned %d items, want just probe", len(list.Items))
	}

	if err := vmis.Delete(ctx, "probe", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete VMI: %v", err)
	}
	if _, err := vmis.Get(ctx, "probe", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: err = %v, want NotFound", err)
	}
}

func TestInvalidVMIIsRejectedByKubeVirtSchema(t *testing.T) {
	ctx := context.Background()
	ns := clustertest.Namespace(t)
	client, err := kubevirt.NewForConfig(clustertest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	// KubeVirt's real CRD schema (not a hand-written one) types cpu.cores as
	// an integer and requires spec: the server must refuse both. The typed
	// client cannot even express these, so send raw JSON.
	for name, body := range map[string]string{
		"cores-as-string": `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"bad"},` +
			`"spec":{"domain":{"devices":{},"cpu":{"cores":"many"}}}}`,
		"no-spec": `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"bad"}}`,
	} {
		err := client.RESTClient().Post().Namespace(ns).Resource("virtualmachineinstances").
			SetHeader("Content-Type", "application/json").Body([]byte(body)).Do(ctx).Error()
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: create err = %v, want Invalid", name, err)
		}
	}
}
