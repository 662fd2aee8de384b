package kinds

import (
	corev1 "k8s.io/api/core/v1"
)

// TrimPod is the launcher pods' informer transform: the cache keeps only
// what the controllers read of a launcher pod, so that a range's pods cost
// a fraction of their size (a rendered launcher pod is about 10 KB of JSON,
// two thirds of it the spec; pods were half of a replica's live heap).
//
// Kept: the whole metadata but managed fields; the node name; each
// container's name and image (the compute container's image is the
// launcher's version); each volume's name and image reference
// (hotplugged volumes are those the pod lacks; a migration target pins
// the source's container-disk digests); the phase, QoS class and
// conditions; each container status's name, image ID and termination,
// and each init container status's name and image ID (the source's
// digests). Everything else (init containers, resources, environment,
// mounts, affinity, addresses …) is dropped: a reader of a new field adds
// it here.
//
// Cached pods are therefore partial: they are read, and patched by name
// and UID, never updated whole.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	// A new object: the one given is the watch's, which others may read.
	out := &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: pod.ObjectMeta}
	out.ManagedFields = nil
	out.Spec.NodeName = pod.Spec.NodeName
	for _, c := range pod.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image})
	}
	for _, v := range pod.Spec.Volumes {
		kept := corev1.Volume{Name: v.Name}
		if v.Image != nil {
			kept.Image = &corev1.ImageVolumeSource{Reference: v.Image.Reference}
		}
		out.Spec.Volumes = append(out.Spec.Volumes, kept)
	}
	out.Status.Phase = pod.Status.Phase
	out.Status.QOSClass = pod.Status.QOSClass
	out.Status.Conditions = pod.Status.Conditions
	for _, s := range pod.Status.ContainerStatuses {
		kept := corev1.ContainerStatus{Name: s.Name, ImageID: s.ImageID}
		kept.State.Terminated = s.State.Terminated
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, kept)
	}
	for _, s := range pod.Status.InitContainerStatuses {
		out.Status.InitContainerStatuses = append(out.Status.InitContainerStatuses, corev1.ContainerStatus{Name: s.Name, ImageID: s.ImageID})
	}
	return out, nil
}
