// Package optimisticfake is client-go's fake clientset with the API
// server's optimistic concurrency: a create sets resourceVersion 1, and an
// update of a stale object is refused with a conflict, where the fake's
// tracker alone takes any update. For unit tests of code whose correctness
// rests on resourceVersion preconditions (leases, permits).
package optimisticfake

import (
	"errors"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// NewClientset returns a fake clientset holding objects that refuses stale
// updates.
func NewClientset(objects ...runtime.Object) *fake.Clientset {
	client := fake.NewClientset(objects...)
	Install(&client.Fake, client.Tracker())
	return client
}

// Install makes a fake client, whose objects tracker holds, refuse stale
// updates and number the resourceVersions of what it creates and updates.
func Install(client *k8stesting.Fake, tracker k8stesting.ObjectTracker) {
	client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(metav1.Object)
		obj.SetResourceVersion("1")
		return false, nil, nil
	})
	client.PrependReactor("update", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(metav1.Object)
		stored, err := tracker.Get(a.GetResource(), a.GetNamespace(), obj.GetName())
		if err != nil {
			return true, nil, err
		}
		rv := stored.(metav1.Object).GetResourceVersion()
		if obj.GetResourceVersion() != rv {
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), obj.GetName(), errors.New("the object has been modified"))
		}
		n, _ := strconv.Atoi(rv)
		obj.SetResourceVersion(strconv.Itoa(n + 1))
		return false, nil, nil // the tracker stores it
	})
}
