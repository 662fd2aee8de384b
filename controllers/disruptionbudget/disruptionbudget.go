// Package disruptionbudget is virtshard's disruption-budget controller:
// what KubeVirt v1.8.1's virt-controller does with PodDisruptionBudgets
// (pkg/virt-controller/watch/drain/disruptionbudget). Since v1.8 KubeVirt
// creates none: virt-api's eviction admitter protects launcher pods. The
// loop only deletes the PodDisruptionBudgets a VMI controls, which older
// installs created and left behind, and records SuccessfulDelete (or
// FailedDelete) on the VMI.
//
// A PodDisruptionBudget is placed by its own key (shard.OwnKey): the API
// server filters the watch by it, and deleting one needs nothing of its
// VMI, so the replica holding the budget's range deletes it, whichever
// holds the VMI. It is the worked example of docs/architecture.md.
package disruptionbudget

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/shard"
)

// Event reasons, KubeVirt's.
const (
	ReasonSuccessfulDelete = "SuccessfulDelete"
	ReasonFailedDelete     = "FailedDelete"
)

// PDBs are PodDisruptionBudgets, on their own range.
var PDBs = caches.Kind[*policyv1.PodDisruptionBudget]{
	Resource:  "poddisruptionbudgets",
	Placement: shard.OwnKey,
	ListWatch: func(c caches.Clients, ns string) cache.ListerWatcher {
		pdbs := c.Kube.PolicyV1().PodDisruptionBudgets(ns)
		return caches.ListWatchOf(pdbs.List, pdbs.Watch)
	},
	Trim: shard.TrimForCache,
}

// Declare declares the controller; KubeVirt runs it with 3 threads
// (defaultControllerThreads).
func Declare() sharded.Declaration {
	return sharded.Declaration{Name: "disruption-budget", Workers: 3, EventSource: "disruptionbudget-controller", New: func(env *sharded.Env, rt *sharded.Runtime) (*sharded.Controller, error) {
		return newController(env, rt).declare(), nil
	}}
}

// Controller is the disruption-budget controller of one replica.
type Controller struct {
	env *sharded.Env
	rt  *sharded.Runtime
}

func newController(env *sharded.Env, rt *sharded.Runtime) *Controller {
	return &Controller{env: env, rt: rt}
}

// declare: a budget a VMI controls queues itself; nothing is kept per
// range.
func (c *Controller) declare() *sharded.Controller {
	return &sharded.Controller{
		Watches: []sharded.Watch{sharded.On(PDBs, sharded.Events[*policyv1.PodDisruptionBudget]{Keys: ownedByVMI}, nil)},
		Sync:    c.sync,
	}
}

// ownedByVMI queues a budget under its own key if a VMI controls it.
func ownedByVMI(pdb *policyv1.PodDisruptionBudget) []string {
	if vmiOf(pdb) == nil {
		return nil
	}
	return sharded.ItsOwnKey(pdb)
}

// vmiOf is the reference of the VMI that controls pdb, or nil.
func vmiOf(pdb *policyv1.PodDisruptionBudget) *corev1.ObjectReference {
	ref := metav1.GetControllerOf(pdb)
	if ref == nil || ref.Kind != virtv1.VirtualMachineInstanceGroupVersionKind.Kind {
		return nil
	}
	return &corev1.ObjectReference{
		Kind: ref.Kind, APIVersion: ref.APIVersion, Namespace: pdb.Namespace, Name: ref.Name, UID: ref.UID,
	}
}

// sync deletes the budget if a VMI controls it, with its UID as a
// precondition: a budget of the same name made since is not touched.
func (c *Controller) sync(ctx context.Context, it sharded.Item) (time.Duration, error) {
	r := c.env.Caches.Get(it.Range)
	if r == nil {
		return 0, nil
	}
	pdb, exists, err := PDBs.In(r).Get(it.Key)
	if err != nil || !exists || pdb.DeletionTimestamp != nil {
		return 0, err
	}
	vmi := vmiOf(pdb)
	if vmi == nil {
		return 0, nil // its controller changed: nothing of ours
	}
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
		return c.env.Kube.PolicyV1().PodDisruptionBudgets(pdb.Namespace).Delete(ctx, pdb.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &pdb.UID},
		})
	})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return 0, nil // gone already, or another budget now has the name
	case errors.Is(err, sharded.ErrNotHeld):
		return 0, err // the range moved on: nothing was sent
	case err != nil:
		c.env.Recorder.Eventf(vmi, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting the PodDisruptionBudget %s: %v", pdb.Name, err)
		return 0, fmt.Errorf("delete PodDisruptionBudget %s: %w", it.Key, err)
	}
	c.env.Recorder.Eventf(vmi, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted PodDisruptionBudget %s", pdb.Name)
	return 0, nil
}
