package vm

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
)

// withDataVolume gives vm a DataVolume template named disk (an HTTP
// import, or clone when set) and a volume on it.
func withDataVolume(vm *virtv1.VirtualMachine, clone *cdiv1.DataVolumeSourcePVC) *virtv1.VirtualMachine {
	source := &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "http://example.invalid/disk.img"}}
	if clone != nil {
		source = &cdiv1.DataVolumeSource{PVC: clone}
	}
	vm.Spec.DataVolumeTemplates = []virtv1.DataVolumeTemplateSpec{{
		ObjectMeta: metav1.ObjectMeta{Name: "disk", Labels: map[string]string{"tier": "gold"}},
		Spec:       cdiv1.DataVolumeSpec{Source: source},
	}}
	vm.Spec.Template.Spec.PriorityClassName = "vip"
	vm.Spec.Template.Spec.Volumes = []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{
		DataVolume: &virtv1.DataVolumeSource{Name: "disk"}}}}
	return vm
}

// dataVolume is DataVolume disk of vm in phase, with conditions.
func dataVolume(t *testing.T, vm *virtv1.VirtualMachine, phase cdiv1.DataVolumePhase, conds ...cdiv1.DataVolumeCondition) *unstructured.Unstructured {
	dv := &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: "disk", UID: "dv-uid", ResourceVersion: "1",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, virtv1.VirtualMachineGroupVersionKind)}},
		Status: cdiv1.DataVolumeStatus{Phase: phase, Conditions: conds},
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(dv)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: u}
}

func createdDataVolumes(t *testing.T, f *fixture) []*cdiv1.DataVolume {
	var out []*cdiv1.DataVolume
	for _, a := range f.Dynamic.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "datavolumes" {
			dv := &cdiv1.DataVolume{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(c.GetObject().(*unstructured.Unstructured).Object, dv); err != nil {
				t.Fatal(err)
			}
			out = append(out, dv)
		}
	}
	return out
}

func printable(t *testing.T, f *fixture) virtv1.VirtualMachinePrintableStatus {
	t.Helper()
	for _, a := range slices.Backward(f.KubeVirt.Actions()) {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" {
			return u.GetObject().(*virtv1.VirtualMachine).Status.PrintableStatus
		}
	}
	t.Fatalf("no status written: %q", kvfake.Writes(f.KubeVirt.Actions()))
	return ""
}

// KubeVirt's handleDataVolumes: the template's DataVolume first, owned by
// the VM, with its UID, claim adoption and the VM's priority class; the
// VMI waits for it.
func TestAVMMakesItsDataVolumesBeforeItsVMI(t *testing.T) {
	vm := withDataVolume(newVM(virtv1.RunStrategyAlways), nil)
	f := newFixture(t, vm)
	f.sync(t, vm)
	dvs := createdDataVolumes(t, f)
	if len(dvs) != 1 {
		t.Fatalf("created %d DataVolumes, want 1", len(dvs))
	}
	dv := dvs[0]
	if dv.Name != "disk" || dv.Namespace != vm.Namespace || !metav1.IsControlledBy(dv, vm) || dv.Labels[virtv1.CreatedByLabel] != string(vm.UID) ||
		dv.Labels["tier"] != "gold" || dv.Annotations[annAllowClaimAdoption] != "true" || dv.Spec.PriorityClassName != "vip" {
		t.Errorf("DataVolume %+v %+v: want the template's, controlled by the VM, its UID, claim adoption, priority class vip", dv.ObjectMeta, dv.Spec)
	}
	if w := kvfake.Writes(f.KubeVirt.Actions()); slices.Contains(w, "create virtualmachineinstances") {
		t.Errorf("writes %q: the VMI waits for its DataVolume", w)
	}
	if e := f.Events(); len(e) != 1 || !strings.Contains(e[0], "SuccessfulDataVolumeCreate Created DataVolume disk") {
		t.Errorf("events %q, want SuccessfulDataVolumeCreate", e)
	}
}

// Once its DataVolume is populated, the VM starts; an import that failed
// or errs says DataVolumeError, one still importing Provisioning.
func TestAVMStartsOnItsPopulatedDataVolumeAndSaysWhatItWaitsFor(t *testing.T) {
	for _, c := range []struct {
		name    string
		phase   cdiv1.DataVolumePhase
		conds   []cdiv1.DataVolumeCondition
		starts  bool
		status  virtv1.VirtualMachinePrintableStatus
		warning string
	}{
		{"succeeded", cdiv1.Succeeded, nil, true, virtv1.VirtualMachineStatusStarting, ""},
		{"importing", cdiv1.ImportInProgress, []cdiv1.DataVolumeCondition{{Type: cdiv1.DataVolumeBound, Status: corev1.ConditionTrue}},
			false, virtv1.VirtualMachineStatusProvisioning, ""},
		{"importer failing", cdiv1.ImportInProgress, []cdiv1.DataVolumeCondition{{Type: cdiv1.DataVolumeRunning, Status: corev1.ConditionFalse, Reason: "Error"}},
			false, virtv1.VirtualMachineStatusDataVolumeError, ""},
		{"failed", cdiv1.Failed, nil, false, virtv1.VirtualMachineStatusDataVolumeError, "FailedDataVolumeImport DataVolume disk failed to import disk image"},
	} {
		t.Run(c.name, func(t *testing.T) {
			vm := withDataVolume(newVM(virtv1.RunStrategyAlways), nil)
			f := newFixture(t, vm, dataVolume(t, vm, c.phase, c.conds...))
			f.sync(t, vm)
			if started := slices.Contains(kvfake.Writes(f.KubeVirt.Actions()), "create virtualmachineinstances"); started != c.starts {
				t.Errorf("VMI created: %v, want %v", started, c.starts)
			}
			if len(createdDataVolumes(t, f)) != 0 {
				t.Error("a DataVolume that exists was created again")
			}
			if got := printable(t, f); got != c.status {
				t.Errorf("printable status %s, want %s", got, c.status)
			}
			events := f.Events()
			if c.warning != "" && (len(events) == 0 || !strings.Contains(events[0], c.warning)) {
				t.Errorf("events %q, want %q", events, c.warning)
			}
		})
	}
}

// A claim the VM's volumes use that is not bound: WaitingForVolumeBinding
// while the VM is to run.
func TestAVMOnAnUnboundClaimWaitsForVolumeBinding(t *testing.T) {
	vm := newVM(virtv1.RunStrategyAlways)
	vm.Spec.Template.Spec.Volumes = []virtv1.Volume{{Name: "data", VolumeSource: virtv1.VolumeSource{
		PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: "data"},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	f := newFixture(t, vm, pvc)
	f.sync(t, vm)
	if got := printable(t, f); got != virtv1.VirtualMachineStatusWaitingForVolumeBinding {
		t.Errorf("printable status %s, want WaitingForVolumeBinding", got)
	}
}

// A clone the VM's service account may not make: no DataVolume, an
// UnauthorizedDataVolumeCreate event, and the VM's Failure condition.
func TestAVMMayNotCloneWhatItsServiceAccountCannot(t *testing.T) {
	vm := withDataVolume(newVM(virtv1.RunStrategyAlways), &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "image"})
	golden := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "golden"}}
	f := newFixture(t, vm, golden)
	var asked []string
	f.Kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		asked = append(asked, fmt.Sprintf("%s %s %s/%s", sar.Spec.User, sar.Spec.ResourceAttributes.Verb, sar.Spec.ResourceAttributes.Namespace, sar.Spec.ResourceAttributes.Resource))
		sar.Status.Allowed = false
		return true, sar, nil
	})
	if after := f.syncAfter(t, vm); after != dataVolumeRetry {
		t.Errorf("looks again after %s, want %s: the authorization may be granted later", after, dataVolumeRetry)
	}
	if len(createdDataVolumes(t, f)) != 0 {
		t.Error("a DataVolume was created for an unauthorized clone")
	}
	if len(asked) == 0 || !strings.HasPrefix(asked[0], "system:serviceaccount:default:default ") || !strings.Contains(asked[0], "golden/") {
		t.Errorf("access reviews %q, want the VM's default service account's in the source's namespace", asked)
	}
	events := f.Events()
	if !slices.ContainsFunc(events, func(e string) bool {
		return strings.Contains(e, "UnauthorizedDataVolumeCreate Not authorized to create DataVolume disk")
	}) {
		t.Errorf("events %q, want UnauthorizedDataVolumeCreate", events)
	}
	for _, a := range slices.Backward(f.KubeVirt.Actions()) {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" {
			st := u.GetObject().(*virtv1.VirtualMachine).Status
			if !slices.ContainsFunc(st.Conditions, func(c virtv1.VirtualMachineCondition) bool {
				return c.Type == virtv1.VirtualMachineFailure && c.Reason == "FailedCreate" && strings.Contains(c.Message, "not authorized")
			}) {
				t.Errorf("conditions %+v, want Failure FailedCreate saying why", st.Conditions)
			}
			return
		}
	}
	t.Error("no status written")
}
