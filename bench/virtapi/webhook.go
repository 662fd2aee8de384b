// Package virtapi plays virt-api's mutating webhook on the local cluster,
// which has no virt-api, for the namespaces a bench run labels: the
// differential harness's runs and the fleet scenario's, so that both
// controllers meet the objects a KubeVirt install gives them.
package virtapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/apidefaults"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
)

// Label marks the namespaces the webhook acts in ("true").
const Label = "bench.virtshard.io/virt-api"

// Webhook plays virt-api's mutating webhook for the scenarios'
// namespaces, which the local cluster has no virt-api to mutate: a VMI,
// whether a scenario or a controller creates it, gets virt-api's
// create-time defaults (controllers/apidefaults, held against KubeVirt's
// own mutator by the conformance tests), a migration its selector label
// and finalizer (migration-create-mutator.go), a VM its firmware UUID
// and PCI topology version (vm-mutator.go). Without it, each controller
// would meet objects no KubeVirt cluster has: KubeVirt's VM controller
// creates VMIs that virt-api finalizes and defaults.
//
// virt-api draws firmware UUIDs at random; here a UUID is derived from the
// object's namespace-free name, so that both runs create the same objects.
// virt-api's other VM defaults (SetVirtualMachineDefaults) are not
// played: both controllers meet a VM as written.
type Webhook struct {
	name   string
	kube   kubernetes.Interface
	kv     *kubevirt.Clientset
	server *http.Server
	caPEM  []byte
	url    string // of the server; /mutate and /evict are its paths
}

// Start serves the webhook on a loopback port and registers it as the
// MutatingWebhookConfiguration name, and its eviction admitter as the
// ValidatingWebhookConfiguration name (replacing those a run left).
func Start(ctx context.Context, cfg *rest.Config, name string) (*Webhook, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return nil, fmt.Errorf("webhook certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &Webhook{name: name, kube: kube, kv: kv, caPEM: certPEM, url: "https://" + listener.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", w.serve)
	mux.HandleFunc("/evict", w.serve)
	w.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}
	go func() { _ = w.server.ServeTLS(listener, "", "") }()
	if err := w.register(ctx); err != nil {
		_ = w.server.Close()
		return nil, err
	}
	return w, nil
}

// Stop unregisters the webhook and stops serving it.
func (w *Webhook) Stop(ctx context.Context) error {
	errs := []error{w.server.Close()}
	for _, err := range []error{
		w.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, w.name, metav1.DeleteOptions{}),
		w.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, w.name, metav1.DeleteOptions{}),
	} {
		if !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (w *Webhook) register(ctx context.Context) error {
	mutate := w.url + "/mutate"
	hook := func(name, resource string) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:                    name + "." + w.name + ".virtshard.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &mutate, CABundle: w.caPEM},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](10),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{Label: "true"}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{virtv1.SchemeGroupVersion.Group}, APIVersions: []string{"v1"},
					Resources: []string{resource}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
		}
	}
	config := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: w.name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			hook("vmis", "virtualmachineinstances"),
			hook("migrations", "virtualmachineinstancemigrations"),
			hook("vms", "virtualmachines"),
		},
	}
	configs := w.kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if err := configs.Delete(ctx, w.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the webhook an earlier run left: %w", err)
	}
	if _, err := configs.Create(ctx, config, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("register the webhook: %w", err)
	}
	evict := w.url + "/evict"
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: w.name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "evictions." + w.name + ".virtshard.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &evict, CABundle: w.caPEM},
			AdmissionReviewVersions: []string{"v1"},
			// It marks the VMI, in a dry run when the eviction is one.
			SideEffects:       ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			FailurePolicy:     ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:    ptr.To[int32](10),
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{Label: "true"}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods/eviction"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
		}},
	}
	validatings := w.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if err := validatings.Delete(ctx, w.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the eviction webhook an earlier run left: %w", err)
	}
	if _, err := validatings.Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("register the eviction webhook: %w", err)
	}
	return nil
}

// WaitServed waits until the API server calls the webhooks for ns, a
// namespace labelled Label: a VMI created there in a dry run comes back
// with virt-api's finalizer, and an eviction of ProbePod is refused with
// ProbeMessage.
func (w *Webhook) WaitServed(ctx context.Context, dyn dynamic.Interface, ns string) error {
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": "webhook-probe"},
		"spec":     map[string]any{"domain": map[string]any{"devices": map[string]any{}, "resources": map[string]any{"requests": map[string]any{"memory": "64Mi"}}}},
	}}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := dyn.Resource(virtv1.SchemeGroupVersion.WithResource("virtualmachineinstances")).Namespace(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err
			return false, nil
		}
		return slices.Contains(got.GetFinalizers(), virtv1.VirtualMachineInstanceFinalizer), nil
	})
	if err != nil {
		return fmt.Errorf("the API server does not call the harness's webhook (last error %v): %w", last, err)
	}
	// And the eviction admitter: an eviction let through by mistake would
	// delete a launcher pod.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = w.kube.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: ProbePod, Namespace: ns},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
		return last != nil && strings.Contains(last.Error(), ProbeMessage), nil
	})
	if err != nil {
		return fmt.Errorf("the API server does not call the harness's eviction webhook (last error %v): %w", last, err)
	}
	return nil
}

func (w *Webhook) serve(rw http.ResponseWriter, req *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(req.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(rw, "want an AdmissionReview", http.StatusBadRequest)
		return
	}
	if req.URL.Path == "/evict" {
		review.Response = w.admitEviction(req.Context(), review.Request)
	} else {
		review.Response = admitCreate(review.Request)
	}
	review.Request = nil
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(&review)
}

// admitCreate answers a create of a kubevirt.io object with mutate's patch.
func admitCreate(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	patch, err := mutate(req.Resource.Resource, req.Object.Raw)
	if err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Message: err.Error(), Code: http.StatusUnprocessableEntity,
			Reason: metav1.StatusReasonInvalid}
	} else if patch != nil {
		resp.Patch, resp.PatchType = patch, ptr.To(admissionv1.PatchTypeJSONPatch)
	}
	return resp
}

// mutate returns the JSON patch virt-api's webhook would answer for a
// create of raw, a resource of kubevirt.io.
func mutate(resource string, raw []byte) ([]byte, error) {
	var fields map[string]any
	switch resource {
	case "virtualmachineinstances":
		vmi := &virtv1.VirtualMachineInstance{}
		if err := json.Unmarshal(raw, vmi); err != nil {
			return nil, err
		}
		if vmi.Spec.Domain.Firmware == nil {
			vmi.Spec.Domain.Firmware = &virtv1.Firmware{}
		}
		if vmi.Spec.Domain.Firmware.UUID == "" {
			// A replica set's members have names the server drew
			// (KubeVirt) or virtshard derived: theirs is the set's,
			// shared, so that runs of both agree.
			name := vmi.Name
			if ref := metav1.GetControllerOf(vmi); ref != nil && ref.Kind == "VirtualMachineInstanceReplicaSet" {
				name = "member-of-" + ref.Name
			}
			vmi.Spec.Domain.Firmware.UUID = DerivedUUID("vmi", name)
		}
		if err := apidefaults.Apply(vmi, clusterconfig.DefaultConfig("amd64"), metav1.Now()); err != nil {
			return nil, fmt.Errorf("virt-api would refuse VMI %s: %w", vmi.Name, err)
		}
		fields = map[string]any{"metadata": vmi.ObjectMeta, "spec": vmi.Spec, "status": vmi.Status}
	case "virtualmachineinstancemigrations":
		m := &virtv1.VirtualMachineInstanceMigration{}
		if err := json.Unmarshal(raw, m); err != nil {
			return nil, err
		}
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		m.Labels[virtv1.MigrationSelectorLabel] = m.Spec.VMIName
		m.Finalizers = append(m.Finalizers, virtv1.VirtualMachineInstanceMigrationFinalizer)
		fields = map[string]any{"metadata": m.ObjectMeta}
	case "virtualmachines":
		vm := &virtv1.VirtualMachine{}
		if err := json.Unmarshal(raw, vm); err != nil {
			return nil, err
		}
		if vm.Spec.Template == nil {
			return nil, nil // virt-api's validation refuses it; the controllers meet it as it is
		}
		if vm.Spec.Template.Spec.Domain.Firmware == nil {
			vm.Spec.Template.Spec.Domain.Firmware = &virtv1.Firmware{}
		}
		if vm.Spec.Template.Spec.Domain.Firmware.UUID == "" {
			vm.Spec.Template.Spec.Domain.Firmware.UUID = DerivedUUID("vm", vm.Name)
		}
		if _, set := vm.Spec.Template.ObjectMeta.Annotations[virtv1.PciTopologyVersionAnnotation]; !set {
			metav1.SetMetaDataAnnotation(&vm.Spec.Template.ObjectMeta, virtv1.PciTopologyVersionAnnotation, virtv1.PciTopologyVersionV3)
		}
		fields = map[string]any{"spec": vm.Spec}
	default:
		return nil, nil
	}
	var ops []map[string]any
	for _, path := range []string{"metadata", "spec", "status"} {
		if v, ok := fields[path]; ok {
			// add replaces a member that exists.
			ops = append(ops, map[string]any{"op": "add", "path": "/" + path, "value": v})
		}
	}
	return json.Marshal(ops)
}

// DerivedUUID stands for a UUID virt-api draws at random: the same in
// every run.
func DerivedUUID(kind, name string) types.UID {
	return types.UID(uuid.NewSHA1(uuid.NameSpaceOID, []byte("differential/"+kind+"/"+name)).String())
}
