package vmi

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// A VMI's CDI DataVolumes, as KubeVirt v1.8.1's VMI controller reads them
// (pkg/virt-controller/watch/vmi/datavolumes.go, pkg/storage/types): the
// launcher pod waits until each is populated (or waits for its first
// consumer), a failed one fails the VMI before it has a pod, and the VMI's
// DataVolumesReady condition sums up their Ready conditions.

// DataVolume phases KubeVirt acts on (cdiv1.DataVolumePhase).
const (
	dvSucceeded         = "Succeeded"
	dvFailed            = "Failed"
	dvWaitFirstConsumer = "WaitForFirstConsumer"
	dvPendingPopulation = "PendingPopulation"
)

// Reasons and messages of DataVolumesReady.
const (
	msgAllDVsReady    = "All of the VMI's DVs are bound and ready"
	msgNotAllDVsReady = "Not all of the VMI's DVs are ready"
)

// dataVolume is what the cache keeps of a DataVolume.
type dataVolume struct {
	name  string
	phase string
	// ready is its Ready condition's status; Unknown without one.
	ready corev1.ConditionStatus
}

// populated: the VMI may start on it (IsSucceededOrPendingPopulation).
func (d dataVolume) populated() bool {
	return d.phase == dvSucceeded || d.phase == dvPendingPopulation
}

// dataVolumeFrom reads a DataVolume: its phase and the status of its
// Ready condition.
func dataVolumeFrom(u *unstructured.Unstructured) dataVolume {
	d := dataVolume{name: u.GetName(), ready: corev1.ConditionUnknown}
	d.phase, _, _ = unstructured.NestedString(u.Object, "status", "phase")
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			if s, ok := m["status"].(string); ok {
				d.ready = corev1.ConditionStatus(s)
			}
			break
		}
	}
	return d
}

// dataVolumes finds DataVolumes by namespace and name.
type dataVolumes interface {
	DataVolume(namespace, name string) (dataVolume, bool)
}

// dataVolumeStore is the DataVolume cache, read as dataVolumes.
type dataVolumeStore struct{ store cache.Store }

func (d dataVolumeStore) DataVolume(namespace, name string) (dataVolume, bool) {
	obj, exists, _ := d.store.GetByKey(namespace + "/" + name)
	if !exists {
		return dataVolume{}, false
	}
	return dataVolumeFrom(obj.(*unstructured.Unstructured)), true
}

// dataVolumes is the DataVolume cache; nil when the cluster does not serve
// CDI.
func (c *Controller) dataVolumes() dataVolumes {
	if c.env.Objects.DataVolumes == nil {
		return nil
	}
	return dataVolumeStore{c.env.Objects.DataVolumes.GetStore()}
}

// cdiConfig is CDI's config; nil when the cluster does not serve CDI.
func (c *Controller) cdiConfig() cdiConfig {
	if c.env.Objects.CDIs == nil {
		return nil
	}
	return c.env.Objects
}

// dataVolumesOf lists the DataVolumes of vmi's volumes that exist, in
// volume order: those DataVolume volumes name, and those controlling the
// claims of PVC volumes (ListDataVolumesFromVolumes). It lists none on a
// cluster without CDI (dvs nil).
func dataVolumesOf(vmi *virtv1.VirtualMachineInstance, claims claims, dvs dataVolumes) []dataVolume {
	if dvs == nil {
		return nil
	}
	var out []dataVolume
	for _, vol := range vmi.Spec.Volumes {
		name := ""
		switch {
		case vol.DataVolume != nil:
			name = vol.DataVolume.Name
		case vol.PersistentVolumeClaim != nil:
			if pvc, ok := claims.PVC(vmi.Namespace, vol.PersistentVolumeClaim.ClaimName); ok {
				if owner := metav1.GetControllerOf(pvc); owner != nil && owner.Kind == "DataVolume" {
					name = owner.Name
				}
			}
		}
		if name == "" {
			continue
		}
		if d, ok := dvs.DataVolume(vmi.Namespace, name); ok {
			out = append(out, d)
		}
	}
	return out
}

// dataVolumeState is what a VMI's DataVolumes say of its start
// (areDataVolumesReady, HasFailedDataVolumes, HasWFFCDataVolumes).
type dataVolumeState struct {
	// failed: one failed, which fails the VMI before it has a pod.
	failed bool
	// importing: one is neither populated nor waiting for its first
	// consumer, so no pod may be created.
	importing bool
	// firstConsumer: one waits for a pod to be scheduled before it
	// imports (WaitForFirstConsumer).
	firstConsumer bool
}

// blocked: the launcher pod may not be created yet.
func (s dataVolumeState) blocked() bool { return s.failed || s.importing || s.firstConsumer }

func stateOf(dvs []dataVolume) dataVolumeState {
	var s dataVolumeState
	for _, d := range dvs {
		s.failed = s.failed || d.phase == dvFailed
		s.firstConsumer = s.firstConsumer || d.phase == dvWaitFirstConsumer
		s.importing = s.importing || (!d.populated() && d.phase != dvWaitFirstConsumer)
	}
	return s
}

// setDataVolumesReady is aggregateDataVolumesConditions: True when every
// DataVolume is Ready, False when any is not, Unknown otherwise; left
// alone for a VMI with none. As KubeVirt's UpdateCondition, the condition
// is replaced only when its status or reason changes, and has no times.
func setDataVolumesReady(v *virtv1.VirtualMachineInstance, dvs []dataVolume) {
	if len(dvs) == 0 {
		return
	}
	c := virtv1.VirtualMachineInstanceCondition{
		Type:    virtv1.VirtualMachineInstanceDataVolumesReady,
		Status:  corev1.ConditionTrue,
		Reason:  virtv1.VirtualMachineInstanceReasonAllDVsReady,
		Message: msgAllDVsReady,
	}
	for _, d := range dvs {
		if d.ready == corev1.ConditionTrue {
			continue
		}
		c.Reason = virtv1.VirtualMachineInstanceReasonNotAllDVsReady
		if d.ready == corev1.ConditionFalse || c.Status == corev1.ConditionTrue {
			c.Status = d.ready
		}
	}
	if c.Status != corev1.ConditionTrue {
		c.Message = msgNotAllDVsReady
	}
	vmistatus.UpdateCondition(v, c)
}
