package template

import (
	"encoding/json"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// Keys of a launcher pod's labels and annotations that follow its VMI's for
// as long as the pod lives, as KubeVirt's syncDynamicAnnotationsAndLabelsToPod
// keeps them (watch/vmi/lifecycle.go): the node the VMI is on, the
// outdated-launcher mark, the descheduler's eviction asks, and Velero's
// backup hooks. The node label is never removed: a VMI has it from the
// handoff on, and its pod gets it earlier, with its readiness gate, from
// the node it is scheduled to (controllers/vmi: syncUnpaused).
var (
	syncedLabels      = []string{virtv1.NodeNameLabel, virtv1.OutdatedLauncherImageLabel}
	syncedAnnotations = []string{
		"descheduler.alpha.kubernetes.io/evict",
		"descheduler.alpha.kubernetes.io/prefer-no-eviction",
		veleroPreHookContainer, veleroPreHookCommand, veleroPreHookTimeout,
		veleroPostHookContainer, veleroPostHookCommand,
	}
)

// MetadataSync is the merge patch that brings pod's synced labels and
// annotations, KubeVirt's and those opts add, to what vmi says (a key the
// VMI lacks is removed from the pod), or nil when they agree. It names
// only those keys, so it needs no resourceVersion: the pod's status moving
// on meanwhile is no conflict.
func MetadataSync(vmi *virtv1.VirtualMachineInstance, pod *corev1.Pod, opts Options) []byte {
	annotations := maps.Clone(vmi.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	maps.Copy(annotations, backupHookAnnotations(vmi))
	meta := map[string]any{}
	for field, sync := range map[string]struct {
		keys       []string
		want, have map[string]string
	}{
		"labels":      {append(slices.Clone(syncedLabels), opts.SyncedLabels...), vmi.Labels, pod.Labels},
		"annotations": {append(slices.Clone(syncedAnnotations), opts.SyncedAnnotations...), annotations, pod.Annotations},
	} {
		changes := map[string]any{}
		for _, k := range sync.keys {
			want, wanted := sync.want[k]
			have, has := sync.have[k]
			switch {
			case wanted && (!has || have != want):
				changes[k] = want
			case !wanted && has && k != virtv1.NodeNameLabel:
				changes[k] = nil
			}
		}
		if len(changes) > 0 {
			meta[field] = changes
		}
	}
	if len(meta) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		panic(err) // strings only: it cannot fail
	}
	return patch
}
