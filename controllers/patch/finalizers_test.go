package patch

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFinalizerPatches(t *testing.T) {
	obj := func(finalizers ...string) metav1.Object {
		return &metav1.ObjectMeta{ResourceVersion: "7", Finalizers: finalizers}
	}
	observed := func(finalizers ...string) metav1.Object {
		o := obj(finalizers...)
		ObserveAPIVersion(o)
		return o
	}
	for _, tt := range []struct {
		name string
		got  []byte
		want string
	}{
		{"adding keeps the others and carries the resourceVersion", AddFinalizer(obj("a"), "b"),
			`{"metadata":{"finalizers":["a","b"],"resourceVersion":"7"}}`},
		{"adding one that is there is no patch", AddFinalizer(obj("a", "b"), "b"), ``},
		{"removing keeps the others", RemoveFinalizer(obj("a", "b", "c"), "b"),
			`{"metadata":{"finalizers":["a","c"],"resourceVersion":"7"}}`},
		{"removing the last sends an empty list, not null", RemoveFinalizer(obj("b"), "b"),
			`{"metadata":{"finalizers":[],"resourceVersion":"7"}}`},
		{"removing one that is not there is no patch", RemoveFinalizer(obj("a"), "b"), ``},
		{"managing adds the finalizer and records the API version", Manage(obj("a"), "b"),
			`{"metadata":{"annotations":{"kubevirt.io/latest-observed-api-version":"v1","kubevirt.io/storage-observed-api-version":"v1"},"finalizers":["a","b"],"resourceVersion":"7"}}`},
		{"managing an object with the finalizer records the API version only", Manage(obj("b"), "b"),
			`{"metadata":{"annotations":{"kubevirt.io/latest-observed-api-version":"v1","kubevirt.io/storage-observed-api-version":"v1"},"resourceVersion":"7"}}`},
		{"managing an object managed already is no patch", Manage(observed("b"), "b"), ``},
		{"managing an object whose API version is recorded adds the finalizer only", Manage(observed(), "b"),
			`{"metadata":{"finalizers":["b"],"resourceVersion":"7"}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Errorf("got %s, want %s", tt.got, tt.want)
			}
		})
	}
}

func TestObserveAPIVersionReportsAChangeOnce(t *testing.T) {
	obj := &metav1.ObjectMeta{Annotations: map[string]string{"kept": "yes"}}
	if !ObserveAPIVersion(obj) {
		t.Fatal("recording the API version on an object without it reports no change")
	}
	if ObserveAPIVersion(obj) {
		t.Error("recording it again reports a change")
	}
	if obj.Annotations["kept"] != "yes" || obj.Annotations["kubevirt.io/storage-observed-api-version"] != "v1" {
		t.Errorf("annotations %v", obj.Annotations)
	}
}
