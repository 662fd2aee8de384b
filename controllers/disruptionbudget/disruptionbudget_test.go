package disruptionbudget

import (
	"context"
	"slices"
	"strings"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
)

type fixture struct {
	*shardedtest.Fixture
	c *Controller
}

func newFixture(t *testing.T, objects ...runtime.Object) *fixture {
	t.Helper()
	f, c := shardedtest.StartController(t, "disruption-budget", func(env *sharded.Env, rt *sharded.Runtime) (*Controller, *sharded.Controller, error) {
		c := newController(env, rt)
		return c, c.declare(), nil
	}, shardedtest.Cluster{Objects: objects})
	return &fixture{f, c}
}

func (f *fixture) sync(pdb *policyv1.PodDisruptionBudget) error {
	_, err := f.c.sync(context.Background(), sharded.Item{Range: f.Ranges.Of(pdb), Key: pdb.Namespace + "/" + pdb.Name})
	return err
}

// pdb is a budget controlled by an object of kind, as older KubeVirt
// installs made for their VMIs (kubevirt-disruption-budget-*).
func pdb(name, kind string) *policyv1.PodDisruptionBudget {
	p := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}}
	if kind != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: kind, Name: "vmi-a", UID: "vmi-uid", Controller: ptr.To(true)}}
	}
	return p
}

func TestSyncDeletesABudgetAVMIControlsAndSaysSoOnTheVMI(t *testing.T) {
	budget := pdb("kubevirt-disruption-budget-a", virtv1.VirtualMachineInstanceGroupVersionKind.Kind)
	f := newFixture(t, budget)
	if err := f.sync(budget); err != nil {
		t.Fatal(err)
	}
	if got := f.KubeWrites(); !slices.Equal(got, []string{"delete poddisruptionbudgets"}) {
		t.Fatalf("writes %q, want the budget deleted", got)
	}
	del := f.Kube.Actions()[len(f.Kube.Actions())-1].(k8stesting.DeleteAction)
	if p := del.GetDeleteOptions().Preconditions; p == nil || ptr.Deref(p.UID, "") != budget.UID {
		t.Errorf("delete preconditions %+v, want the budget's UID", p)
	}
	events := f.Events()
	if len(events) != 1 || !strings.HasPrefix(events[0], "Normal SuccessfulDelete Deleted PodDisruptionBudget kubevirt-disruption-budget-a") {
		t.Errorf("events %q, want one SuccessfulDelete", events)
	}
}

func TestSyncLeavesBudgetsNoVMIControls(t *testing.T) {
	for _, tc := range []struct{ name, kind string }{
		{"a budget nobody controls", ""},
		{"a budget a Deployment controls", "Deployment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			budget := pdb("other", tc.kind)
			f := newFixture(t, budget)
			if err := f.sync(budget); err != nil {
				t.Fatal(err)
			}
			if got := f.KubeWrites(); len(got) != 0 {
				t.Errorf("writes %q, want none", got)
			}
		})
	}
}

func TestSyncSendsNothingForARangeNotHeld(t *testing.T) {
	budget := pdb("kubevirt-disruption-budget-a", virtv1.VirtualMachineInstanceGroupVersionKind.Kind)
	f := newFixture(t, budget)
	f.Fence.Cut()
	if err := f.sync(budget); err == nil {
		t.Error("no error from a sync whose write the fence refused")
	}
	if got := f.KubeWrites(); len(got) != 0 {
		t.Errorf("writes %q, want none", got)
	}
	if events := f.Events(); len(events) != 0 {
		t.Errorf("events %q, want none: nothing was tried", events)
	}
}

func TestEventsQueueOnlyBudgetsAVMIControls(t *testing.T) {
	if got := ownedByVMI(pdb("a", virtv1.VirtualMachineInstanceGroupVersionKind.Kind)); !slices.Equal(got, []string{"default/a"}) {
		t.Errorf("a VMI's budget queues %q, want its own key", got)
	}
	if got := ownedByVMI(pdb("b", "Deployment")); got != nil {
		t.Errorf("a Deployment's budget queues %q, want nothing", got)
	}
}
