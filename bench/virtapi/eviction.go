package virtapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/controllers/vmistatus"
)

// deschedulerAnnotation marks an eviction the descheduler asks for; the
// VMI it evacuates is annotated so that its migration gets the
// descheduler's priority.
const deschedulerAnnotation, deschedulerValue = "requested-by", "sigs.k8s.io/descheduler"

// ProbePod is the pod name the eviction webhook refuses with ProbeMessage
// whatever the namespace holds: WaitServed evicts it (in a dry run) to see
// the API server call the webhook.
const ProbePod, ProbeMessage = "webhook-probe", "the harness's eviction webhook is served"

// evictionAnswer is what virt-api's pod eviction admitter
// (validating-webhook/admitters/pod-eviction-admitter.go) answers for an
// eviction of pod: a launcher pod whose VMI leaves its node on eviction
// is not evicted; its VMI is marked for evacuation off the pod's node
// (mark, the JSON patch of the VMI) and the eviction refused with 429, so
// that a drain retries until the VMI has migrated away. Everything else
// is let through. Hotplug attachment pods are issue 32's (none exist
// yet). cluster is the eviction strategy of the KubeVirt CR.
func evictionAnswer(pod *corev1.Pod, vmi *virtv1.VirtualMachineInstance, cluster *virtv1.EvictionStrategy, eviction *policyv1.Eviction) (mark []byte, refusal string) {
	if pod.Labels[virtv1.AppLabel] != template.LauncherLabelValue || kinds.PodFinished(pod) || vmi == nil {
		return nil, ""
	}
	strategy := vmi.Spec.EvictionStrategy
	if strategy == nil {
		strategy = cluster
	}
	migratable := vmistatus.Migratable(vmi)
	switch ptr.Deref(strategy, virtv1.EvictionStrategyNone) {
	case virtv1.EvictionStrategyLiveMigrate:
		if !migratable {
			return nil, fmt.Sprintf("VMI %s is configured with an eviction strategy but is not live-migratable", vmi.Name)
		}
	case virtv1.EvictionStrategyLiveMigrateIfPossible:
		if !migratable {
			return nil, ""
		}
	case virtv1.EvictionStrategyExternal:
	default:
		return nil, ""
	}
	evacuation := fmt.Sprintf("Eviction triggered evacuation of VMI \"%s/%s\"", vmi.Namespace, vmi.Name)
	switch {
	case vmi.Status.EvacuationNodeName != "":
		return nil, "Evacuation in progress: " + evacuation
	case vmi.Status.NodeName != pod.Spec.NodeName:
		return nil, "Eviction request for target Pod"
	}
	ops := []map[string]any{{"op": "add", "path": "/status/evacuationNodeName", "value": pod.Spec.NodeName}}
	if eviction.Annotations[deschedulerAnnotation] == deschedulerValue {
		if len(vmi.Annotations) == 0 {
			ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations",
				"value": map[string]string{virtv1.EvictionSourceAnnotation: "descheduler"}})
		} else {
			ops = append(ops, map[string]any{"op": "replace", "path": "/metadata/annotations/" + escapePointer(virtv1.EvictionSourceAnnotation),
				"value": "descheduler"})
		}
	}
	mark, err := json.Marshal(ops)
	if err != nil {
		return nil, err.Error()
	}
	return mark, evacuation
}

// escapePointer escapes a JSON pointer's reference token (RFC 6901).
var escapePointer = strings.NewReplacer("~", "~0", "/", "~1").Replace

// admitEviction answers an AdmissionRequest for pods/eviction.
func (w *Webhook) admitEviction(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Name == ProbePod {
		return refused(req, ProbeMessage)
	}
	pod, err := w.kube.CoreV1().Pods(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	}
	var vmi *virtv1.VirtualMachineInstance
	if name, ok := pod.Annotations[virtv1.DomainAnnotation]; ok && pod.Labels[virtv1.AppLabel] == template.LauncherLabelValue {
		if vmi, err = w.kv.VirtualMachineInstances(req.Namespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return refused(req, fmt.Sprintf("kubevirt failed getting the vmi: %v", err))
		}
	}
	eviction := &policyv1.Eviction{}
	if err := json.Unmarshal(req.Object.Raw, eviction); err != nil {
		return refused(req, fmt.Sprintf("failed to parse the eviction object: %v", err))
	}
	mark, refusal := evictionAnswer(pod, vmi, clusterconfig.DefaultConfig("amd64").EvictionStrategy(), eviction)
	if mark != nil {
		opts := metav1.PatchOptions{}
		if ptr.Deref(req.DryRun, false) || (eviction.DeleteOptions != nil && len(eviction.DeleteOptions.DryRun) > 0) {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := w.kv.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.JSONPatchType, mark, opts); err != nil {
			return refused(req, fmt.Sprintf("kubevirt failed marking the vmi for eviction: %v", err))
		}
	}
	if refusal == "" {
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	}
	return refused(req, refusal)
}

// refused is virt-api's refusal of an eviction: 429, which kubectl drain
// retries.
func refused(req *admissionv1.AdmissionRequest, message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: false,
		Result: &metav1.Status{Status: metav1.StatusFailure, Message: message, Code: http.StatusTooManyRequests}}
}
