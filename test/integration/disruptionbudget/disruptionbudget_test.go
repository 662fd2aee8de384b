package disruptionbudget_test

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/disruptionbudget"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// A PodDisruptionBudget an older KubeVirt made for a VMI is deleted, with
// an event on the VMI, by whichever of two replicas holds the budget's
// range; a budget of the user's own is left alone.
func TestBudgetsOfVMIsAreDeletedAndOthersKept(t *testing.T) {
	ns, kube, kv := controllertest.Clients(t)
	ctx := context.Background()
	vmi, err := kv.VirtualMachineInstances(ns).Create(ctx, &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{Resources: virtv1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	budget := func(name string, owners ...metav1.OwnerReference) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: ptr.To(intstr.FromInt32(1)),
				Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{virtv1.CreatedByLabel: string(vmi.UID)}},
			},
		}
	}
	// As KubeVirt before v1.8 made them: controlled by the VMI.
	left := budget("kubevirt-disruption-budget-a", *metav1.NewControllerRef(vmi, virtv1.VirtualMachineInstanceGroupVersionKind))
	if _, err := kube.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, left, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	users := budget("users-own")
	if _, err := kube.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, users, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	controllertest.StartN(t, ns, 2, nil)

	var events []corev1.Event
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, left.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, nil
		}
		list, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + vmi.Name + ",reason=" + disruptionbudget.ReasonSuccessfulDelete})
		if err != nil {
			return false, nil
		}
		events = list.Items
		return len(events) > 0, nil
	})
	if err != nil {
		t.Fatalf("the VMI's budget not deleted with a %s event on the VMI within a minute (events %+v)", disruptionbudget.ReasonSuccessfulDelete, events)
	}
	e := events[0]
	if e.InvolvedObject.Kind != "VirtualMachineInstance" || e.InvolvedObject.UID != vmi.UID || e.Message != "Deleted PodDisruptionBudget "+left.Name ||
		e.Type != corev1.EventTypeNormal || len(events) != 1 {
		t.Errorf("events %+v, want one Normal %s on VMI %s: %q", events, disruptionbudget.ReasonSuccessfulDelete, vmi.UID, "Deleted PodDisruptionBudget "+left.Name)
	}
	if _, err := kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, users.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the user's own budget: %v, want it kept", err)
	}
}
