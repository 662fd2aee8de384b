package patch

import (
	"encoding/json"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
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

// The API version KubeVirt's controllers record on the objects they manage
// (kubevirt.io/api's ControllerAPILatestVersionObservedAnnotation and
// ControllerAPIStorageVersionObservedAnnotation): KubeVirt's VMI, VM and
// migration controllers write them before anything else
// (pkg/controller/controller.go, SetLatestApiVersionAnnotation), so that
// every object is rewritten at the storage version an upgrade moves to.
var observedAPIVersion = map[string]string{
	virtv1.ControllerAPILatestVersionObservedAnnotation:  virtv1.ApiLatestVersion,
	virtv1.ControllerAPIStorageVersionObservedAnnotation: virtv1.ApiStorageVersion,
}

// ObserveAPIVersion records the API version on obj, and reports whether
// it was not recorded already.
func ObserveAPIVersion(obj metav1.Object) bool {
	annotations := obj.GetAnnotations()
	changed := false
	for k, v := range observedAPIVersion {
		if annotations[k] != v {
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[k], changed = v, true
		}
	}
	if changed {
		obj.SetAnnotations(annotations)
	}
	return changed
}

// Manage is a merge patch that adds finalizer to obj and records the API
// version on it (ObserveAPIVersion), or nil when obj has both: the first
// write of a controller on an object it manages.
func Manage(obj metav1.Object, finalizer string) []byte {
	annotations := map[string]any{}
	for k, v := range observedAPIVersion {
		if obj.GetAnnotations()[k] != v {
			annotations[k] = v
		}
	}
	has := slices.Contains(obj.GetFinalizers(), finalizer)
	if has && len(annotations) == 0 {
		return nil
	}
	meta := map[string]any{"resourceVersion": obj.GetResourceVersion()}
	if !has {
		meta["finalizers"] = append(slices.Clone(obj.GetFinalizers()), finalizer)
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		panic(err) // strings only: it cannot fail
	}
	return patch
}
