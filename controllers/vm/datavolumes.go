package vm

import (
	"context"
	"errors"
	"fmt"
	"maps"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/template"
)

// A VM's dataVolumeTemplates, as KubeVirt v1.8.1's VM controller makes
// them (pkg/virt-controller/watch/vm/vm.go: handleDataVolumes,
// handleCloneDataVolume, authorizeDataVolume; watch/util:
// CreateDataVolumeManifest; pkg/storage/types: GenerateDataVolumeFromTemplate,
// GetResolvedCloneSource): each template's DataVolume is created, owned by
// the VM, before its VMI; the VM starts once every one is populated.

// Event reasons of the DataVolumes a VM makes (KubeVirt's, spelling and all).
const (
	ReasonSuccessfulDataVolumeCreate   = "SuccessfulDataVolumeCreate"
	ReasonFailedDataVolumeCreate       = "FailedDataVolumeCreate"
	ReasonUnauthorizedDataVolumeCreate = "UnauthorizedDataVolumeCreate"
	ReasonSourcePVCNotAvailable        = "SourcePVCNotAvailabe"
	ReasonFailedDataVolumeImport       = "FailedDataVolumeImport"
)

// annAllowClaimAdoption lets CDI take over a claim of the DataVolume's
// name that exists already.
const annAllowClaimAdoption = "cdi.kubevirt.io/allowClaimAdoption"

var dataVolumeGVR = caches.DataVolumeGVR

// dataVolumeOf reads a DataVolume from the cache (trimmed,
// caches.TrimDataVolume); nil when there is none (or no CDI).
func (c *Controller) dataVolumeOf(namespace, name string) *cdiv1.DataVolume {
	if c.env.Objects == nil || c.env.Objects.DataVolumes == nil {
		return nil
	}
	obj, ok, _ := c.env.Objects.DataVolumes.GetStore().GetByKey(namespace + "/" + name)
	if !ok {
		return nil
	}
	dv := &cdiv1.DataVolume{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, dv); err != nil {
		return nil
	}
	return dv
}

// ensureDataVolumes creates the DataVolumes of vm's templates that do not
// exist, and says whether every one is populated (Succeeded,
// PendingPopulation, or waiting for its first consumer, which the VMI's
// temporary pod then is). A creation is expected until the cache sees it.
func (c *Controller) ensureDataVolumes(ctx context.Context, it item, vm *virtv1.VirtualMachine) (bool, error) {
	ready := true
	for _, t := range vm.Spec.DataVolumeTemplates {
		cur := c.dataVolumeOf(vm.Namespace, t.Name)
		if cur != nil {
			switch cur.Status.Phase {
			case cdiv1.Succeeded, cdiv1.WaitForFirstConsumer, cdiv1.PendingPopulation:
				continue
			case cdiv1.Failed:
				c.env.Recorder.Eventf(vm, corev1.EventTypeWarning, ReasonFailedDataVolumeImport, "DataVolume %s failed to import disk image", cur.Name)
			case cdiv1.Pending:
				if bound := dataVolumeCondition(cur, cdiv1.DataVolumeBound); bound != nil && bound.Status != corev1.ConditionTrue && bound.Reason == "ErrExceededQuota" {
					c.env.Recorder.Eventf(vm, corev1.EventTypeWarning, ReasonFailedDataVolumeImport, "DataVolume %s exceeds quota limits", cur.Name)
					return false, fmt.Errorf("DataVolume %s importer is not running due to an error: %v", cur.Name, bound.Message)
				}
			}
			ready = false
			continue
		}
		ready = false
		dv, err := c.dataVolumeFor(ctx, vm, t)
		if err != nil {
			return false, fmt.Errorf("unable to create DataVolume manifest: %v", err)
		}
		if err := c.checkClone(ctx, vm, dv); err != nil {
			return false, err
		}
		_, claimed := c.env.Objects.PVC(vm.Namespace, t.Name)
		body, err := runtime.DefaultUnstructuredConverter.ToUnstructured(dv)
		if err != nil {
			return false, err
		}
		c.dataVolumeExpectations.ExpectCreations(it.Range, it.Key, 1)
		err = c.rt.Write(ctx, it.Range, func(ctx context.Context) error {
			_, err := c.env.Dynamic.Resource(dataVolumeGVR).Namespace(vm.Namespace).Create(ctx, &unstructured.Unstructured{Object: body}, metav1.CreateOptions{})
			return err
		})
		if err != nil {
			c.dataVolumeExpectations.CreationObserved(it.Range, it.Key)
			if errors.Is(err, sharded.ErrNotHeld) {
				return false, nil // the range's holder makes it
			}
			if claimed && apierrors.IsAlreadyExists(err) {
				continue // a CDI too old to adopt the claim: KubeVirt goes on
			}
			c.env.Recorder.Eventf(vm, corev1.EventTypeWarning, ReasonFailedDataVolumeCreate, "Error creating DataVolume %s: %v", dv.Name, err)
			return false, fmt.Errorf("failed to create DataVolume: %v", err)
		}
		c.env.Recorder.Eventf(vm, corev1.EventTypeNormal, ReasonSuccessfulDataVolumeCreate, "Created DataVolume %s", dv.Name)
	}
	return ready, nil
}

// dataVolumeFor is the DataVolume of template t: its metadata and spec,
// claim adoption allowed, the VM's priority class unless it names one, its
// clone source resolved (a DataSource read, a namespace filled in), the
// VM's UID in kubevirt.io/created-by and the VM as controller.
func (c *Controller) dataVolumeFor(ctx context.Context, vm *virtv1.VirtualMachine, t virtv1.DataVolumeTemplateSpec) (*cdiv1.DataVolume, error) {
	dv := &cdiv1.DataVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "DataVolume"},
		ObjectMeta: *t.ObjectMeta.DeepCopy(),
		Spec:       *t.Spec.DeepCopy(),
	}
	dv.Labels = maps.Clone(t.Labels)
	if dv.Labels == nil {
		dv.Labels = map[string]string{}
	}
	dv.Annotations = maps.Clone(t.Annotations)
	if dv.Annotations == nil {
		dv.Annotations = map[string]string{}
	}
	dv.Annotations[annAllowClaimAdoption] = "true"
	if dv.Spec.PriorityClassName == "" && vm.Spec.Template != nil {
		dv.Spec.PriorityClassName = vm.Spec.Template.Spec.PriorityClassName
	}
	source, err := c.cloneSource(ctx, vm.Namespace, &dv.Spec)
	if err != nil {
		return nil, err
	}
	if source != nil {
		dv.Spec.SourceRef, dv.Spec.Source = nil, source
	}
	dv.Namespace = vm.Namespace
	dv.Labels[virtv1.CreatedByLabel] = string(vm.UID)
	dv.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)}
	return dv, nil
}

// cloneSource is a clone DataVolume's source with its namespace filled in:
// a sourceRef's DataSource read for its claim or snapshot (or, where it
// names another DataSource, the one it resolved to). Nil for a DataVolume
// that clones nothing.
func (c *Controller) cloneSource(ctx context.Context, namespace string, spec *cdiv1.DataVolumeSpec) (*cdiv1.DataVolumeSource, error) {
	ns, source := namespace, spec.Source.DeepCopy()
	if ref := spec.SourceRef; ref != nil && ref.Kind == cdiv1.DataVolumeDataSource {
		if ref.Namespace != nil {
			ns = *ref.Namespace
		}
		ds, err := c.dataSource(ctx, ns, ref.Name)
		if err != nil {
			return nil, err
		}
		resolved := ds.Spec.Source.DeepCopy()
		if ds.Spec.Source.DataSource != nil {
			resolved = ds.Status.Source.DeepCopy()
		}
		source = &cdiv1.DataVolumeSource{PVC: resolved.PVC, Snapshot: resolved.Snapshot}
	}
	switch {
	case source == nil:
		return nil, nil
	case source.PVC != nil:
		if source.PVC.Namespace == "" {
			source.PVC.Namespace = ns
		}
	case source.Snapshot != nil:
		if source.Snapshot.Namespace == "" {
			source.Snapshot.Namespace = ns
		}
	default:
		return nil, nil
	}
	return source, nil
}

// checkClone is handleCloneDataVolume: a clone's source claim missing is
// said in an event (the clone waits for it), and the VM's service account
// must be allowed to clone from the source's namespace.
func (c *Controller) checkClone(ctx context.Context, vm *virtv1.VirtualMachine, dv *cdiv1.DataVolume) error {
	if dv.Spec.SourceRef != nil {
		return errors.New("DataVolume sourceRef not supported")
	}
	if dv.Spec.Source == nil {
		return nil
	}
	if src := dv.Spec.Source.PVC; src != nil {
		if _, ok := c.env.Objects.PVC(src.Namespace, src.Name); !ok {
			c.env.Recorder.Eventf(vm, corev1.EventTypeWarning, ReasonSourcePVCNotAvailable,
				"Source PVC %s not available: Target PVC %s will remain unpopulated until source is created", src.Name, dv.Name)
		}
	}
	serviceAccount := "default"
	if vm.Spec.Template != nil {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			if v.ServiceAccount != nil {
				serviceAccount = v.ServiceAccount.ServiceAccountName
			}
		}
	}
	resp, err := dv.AuthorizeSA(vm.Namespace, dv.Name, &cloneAuth{ctx: ctx, c: c}, vm.Namespace, serviceAccount)
	if err == nil && !resp.Allowed {
		err = errors.New(resp.Reason)
	}
	if err != nil && !errors.Is(err, cdiv1.ErrNoTokenOkay) {
		c.env.Recorder.Eventf(vm, corev1.EventTypeWarning, ReasonUnauthorizedDataVolumeCreate, "Not authorized to create DataVolume %s: %v", dv.Name, err)
		return fmt.Errorf("not authorized to create DataVolume: %v", err)
	}
	return nil
}

// cloneAuth answers CDI's clone authorization (cdiv1.AuthorizeSA) from
// the API server: subject access reviews, namespaces and DataSources.
type cloneAuth struct {
	ctx context.Context
	c   *Controller
}

func (a *cloneAuth) CreateSar(sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
	return a.c.env.Kube.AuthorizationV1().SubjectAccessReviews().Create(a.ctx, sar, metav1.CreateOptions{})
}

// GetNamespace reads the namespace cache (metadata only, all CDI asks).
func (a *cloneAuth) GetNamespace(name string) (*corev1.Namespace, error) {
	obj, ok, err := a.c.env.Objects.NamespaceInformer.GetStore().GetByKey(name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
	}
	return &corev1.Namespace{ObjectMeta: obj.(*metav1.PartialObjectMetadata).ObjectMeta}, nil
}

func (a *cloneAuth) GetDataSource(namespace, name string) (*cdiv1.DataSource, error) {
	return a.c.dataSource(a.ctx, namespace, name)
}

// dataSource reads a DataSource, as KubeVirt does on each clone: they are
// few and read rarely, so no cache holds them.
func (c *Controller) dataSource(ctx context.Context, namespace, name string) (*cdiv1.DataSource, error) {
	u, err := c.env.Dynamic.Resource(dataVolumeGVR.GroupVersion().WithResource("datasources")).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	ds := &cdiv1.DataSource{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ds); err != nil {
		return nil, fmt.Errorf("read DataSource %s/%s: %w", namespace, name, err)
	}
	return ds, nil
}

func dataVolumeCondition(dv *cdiv1.DataVolume, t cdiv1.DataVolumeConditionType) *cdiv1.DataVolumeCondition {
	for i := range dv.Status.Conditions {
		if dv.Status.Conditions[i].Type == t {
			return &dv.Status.Conditions[i]
		}
	}
	return nil
}

// dataVolumeError is HasDataVolumeErrors: a DataVolume of the VM's
// template volumes Failed, or whose importer stopped on an error.
func (c *Controller) dataVolumeError(vm *virtv1.VirtualMachine) bool {
	for _, dv := range c.templateDataVolumes(vm) {
		if dv.Status.Phase == cdiv1.Failed {
			return true
		}
		if r := dataVolumeCondition(dv, cdiv1.DataVolumeRunning); r != nil && r.Status == corev1.ConditionFalse &&
			(r.Reason == "Error" || r.Reason == "ImagePullFailed") {
			return true
		}
	}
	return false
}

// dataVolumeProvisioning is HasDataVolumeProvisioning: a DataVolume of the
// VM's template volumes not yet populated, unless it only waits, unbound,
// for its first consumer.
func (c *Controller) dataVolumeProvisioning(vm *virtv1.VirtualMachine) bool {
	for _, dv := range c.templateDataVolumes(vm) {
		if dv.Status.Phase == cdiv1.Succeeded || dv.Status.Phase == cdiv1.PendingPopulation {
			continue
		}
		bound := dataVolumeCondition(dv, cdiv1.DataVolumeBound)
		if (bound != nil && bound.Status == corev1.ConditionTrue) || dv.Status.Phase != cdiv1.WaitForFirstConsumer {
			return true
		}
	}
	return false
}

// unboundClaim is HasUnboundPVC: a claim of the VM's template volumes that
// exists and is not Bound.
func (c *Controller) unboundClaim(vm *virtv1.VirtualMachine) bool {
	if vm.Spec.Template == nil {
		return false
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		name := template.VolumeClaim(v)
		if name == "" {
			continue
		}
		if pvc, ok := c.env.Objects.PVC(vm.Namespace, name); ok && pvc.Status.Phase != corev1.ClaimBound {
			return true
		}
	}
	return false
}

// templateDataVolumes are the DataVolumes the VM's template volumes name
// that the cache holds.
func (c *Controller) templateDataVolumes(vm *virtv1.VirtualMachine) []*cdiv1.DataVolume {
	if vm.Spec.Template == nil {
		return nil
	}
	var out []*cdiv1.DataVolume
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.DataVolume == nil {
			continue
		}
		if dv := c.dataVolumeOf(vm.Namespace, v.DataVolume.Name); dv != nil {
			out = append(out, dv)
		}
	}
	return out
}
