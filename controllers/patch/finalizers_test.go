package patch

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFinalizerPatches(t *testing.T) {
	obj := func(finalizers ...string) metav1.Object {
		return &metav1.ObjectMeta{ResourceVersion: "7", Finalizers: finalizers}
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
	} {
		t.Run(tt.name, func(t *testing.T) {
			if string(tt.got) != tt.want {
				t.Errorf("got %s, want %s", tt.got, tt.want)
			}
		})
	}
}
