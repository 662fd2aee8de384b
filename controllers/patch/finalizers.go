package patch

import (
	"encoding/json"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AddFinalizer is a merge patch that adds finalizer to obj's finalizers,
// or nil when obj has it already.
func AddFinalizer(obj metav1.Object, finalizer string) []byte {
	if slices.Contains(obj.GetFinalizers(), finalizer) {
		return nil
	}
	return finalizers(obj, append(slices.Clone(obj.GetFinalizers()), finalizer))
}

// RemoveFinalizer is a merge patch that removes finalizer from obj's
// finalizers, or nil when obj does not have it.
func RemoveFinalizer(obj metav1.Object, finalizer string) []byte {
	if !slices.Contains(obj.GetFinalizers(), finalizer) {
		return nil
	}
	return finalizers(obj, slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(f string) bool { return f == finalizer }))
}

// finalizers sets obj's whole finalizer list: a merge patch replaces a
// list, and an empty one must be sent as [], not null, to clear it.
func finalizers(obj metav1.Object, list []string) []byte {
	if list == nil {
		list = []string{}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion(), "finalizers": list}})
	if err != nil {
		panic(err) // strings only: it cannot fail
	}
	return patch
}
