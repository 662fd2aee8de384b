package deploy_test

// deploy/kubevirt, virtshard in a KubeVirt install (docs/kubevirt.md): its
// shape, its acceptance by the local API server (which serves KubeVirt's
// own CRDs, so the KubeVirt CR is checked against KubeVirt's schema), and
// the two KubeVirt behaviours the page relies on that can be run here: the
// PodDisruptionBudget virt-operator would ask for at 0 virt-controller
// replicas, and client-go's leader election in front of the held Lease.

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/virtshard/virtshard/test/clustertest"
)

const (
	// kubevirtNamespace is where KubeVirt's install and, in deploy/kubevirt,
	// virtshard run.
	kubevirtNamespace = "kubevirt"
	// virtControllerUser is the user virt-api's webhooks take for
	// virt-controller (KubeVirt v1.8.1, pkg/virt-api/webhooks/serviceaccounts.go).
	virtControllerUser = "system:serviceaccount:kubevirt:kubevirt-controller"
	// launcherImage is the virt-launcher image virt-operator v1.8.1 gives
	// virt-controller with the default registry.
	launcherImage = "quay.io/kubevirt/virt-launcher:v1.8.1"
)

// The overlay runs the replicas where virt-api's webhooks take their writes
// for virt-controller's, installs none of KubeVirt's objects, and keeps
// virt-controller an idle follower.
func TestKubeVirtOverlayShape(t *testing.T) {
	objs := render(t, "kubevirt")
	for _, o := range objs {
		switch o.GetKind() {
		case "CustomResourceDefinition", "Namespace", "ServiceAccount":
			t.Errorf("%s %s: the KubeVirt install owns it, the overlay must not apply it", o.GetKind(), o.GetName())
		}
		if ns := o.GetNamespace(); ns != "" && ns != kubevirtNamespace {
			t.Errorf("%s %s in namespace %q, want %q", o.GetKind(), o.GetName(), ns, kubevirtNamespace)
		}
	}

	var sts appsv1.StatefulSet
	object(t, objs, "StatefulSet", "virtshard-controller", &sts)
	pod := sts.Spec.Template.Spec
	if user := "system:serviceaccount:" + sts.Namespace + ":" + pod.ServiceAccountName; user != virtControllerUser {
		t.Errorf("the replicas run as %s, want %s: virt-api refuses reserved VMI labels from anyone else", user, virtControllerUser)
	}
	args := pod.Containers[0].Args
	for _, want := range []string{"--kubevirt-namespace=" + kubevirtNamespace, "--launcher-image=" + launcherImage, "--secure-serving"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}

	for _, o := range objs {
		if o.GetKind() != "ClusterRoleBinding" && o.GetKind() != "RoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding // the same subjects as a ClusterRoleBinding
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
			t.Fatal(err)
		}
		want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: pod.ServiceAccountName, Namespace: sts.Namespace}}
		if !slices.Equal(b.Subjects, want) {
			t.Errorf("%s %s binds %+v, want the replicas' service account %+v", o.GetKind(), b.Name, b.Subjects, want)
		}
	}

	var lease coordinationv1.Lease
	object(t, objs, "Lease", "virt-controller", &lease)
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Error("virt-controller's Lease has no holder: virt-controller would take it")
	}
	if d := lease.Spec.LeaseDurationSeconds; d == nil || *d != math.MaxInt32 {
		t.Errorf("virt-controller's Lease lasts %d s, want %d", ptrValue(d), math.MaxInt32)
	}

	// The KubeVirt CR, decoded strictly into KubeVirt's own type, and its
	// patches applied to virt-controller's Deployment as virt-operator's
	// applyPatch does (pkg/virt-operator/resource/apply/patches.go).
	var kv virtv1.KubeVirt
	for _, o := range objs {
		if o.GetKind() == "KubeVirt" {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &kv, true); err != nil {
				t.Fatalf("KubeVirt %s: %v", o.GetName(), err)
			}
		}
	}
	if kv.Name == "" {
		t.Fatal("no KubeVirt CR in the overlay")
	}
	deployment := virtControllerDeployment()
	for _, p := range kv.Spec.CustomizeComponents.Patches {
		if !strings.EqualFold(p.ResourceType, "Deployment") || !strings.EqualFold(p.ResourceName, "virt-controller") {
			t.Errorf("patch of %s %s: the overlay customizes virt-controller's Deployment only", p.ResourceType, p.ResourceName)
			continue
		}
		if err := applyComponentPatch(deployment, p); err != nil {
			t.Fatalf("virt-operator would fail on patch %q: %v", p.Patch, err)
		}
	}
	if r := deployment.Spec.Replicas; r == nil || *r < 1 {
		t.Errorf("virt-controller patched to %d replicas: at 0 virt-operator's reconcile stops at an invalid PodDisruptionBudget and the install is never Available", ptrValue(r))
	}
	if kv.Spec.CustomizeComponents.Flags != nil {
		t.Error("customizeComponents.flags replaces virt-controller's whole command; the overlay needs none")
	}
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// virtControllerDeployment is the part of virt-operator v1.8.1's
// virt-controller Deployment the overlay's patches touch (newBaseDeployment:
// 2 replicas).
func virtControllerDeployment() *appsv1.Deployment {
	replicas := int32(2)
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "virt-controller", Namespace: kubevirtNamespace},
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas},
	}
}

// applyComponentPatch is virt-operator's applyPatch for the three patch
// types, with the same libraries.
func applyComponentPatch(d *appsv1.Deployment, p virtv1.CustomizeComponentsPatch) error {
	old, err := json.Marshal(d)
	if err != nil {
		return err
	}
	var modified []byte
	switch p.Type {
	case virtv1.JSONPatchType:
		patch, err := jsonpatch.DecodePatch([]byte(p.Patch))
		if err != nil {
			return err
		}
		modified, err = patch.Apply(old)
		if err != nil {
			return err
		}
	case virtv1.MergePatchType:
		modified, err = jsonpatch.MergePatch(old, []byte(p.Patch))
	case virtv1.StrategicMergePatchType:
		modified, err = strategicpatch.StrategicMergePatch(old, []byte(p.Patch), &appsv1.Deployment{})
	default:
		return errUnsupportedPatchType
	}
	if err != nil {
		return err
	}
	*d = appsv1.Deployment{}
	return json.Unmarshal(modified, d)
}

// errUnsupportedPatchType is virt-operator's error for any other type.
var errUnsupportedPatchType = errors.New("PatchType is not supported")

// The overlay is accepted by the API server (server-side dry run, strict
// field validation), the KubeVirt CR against KubeVirt's CRD; the same CR
// with a field broken is refused, so the check has teeth. Namespaced objects
// go to a test namespace: a dry run needs its namespace, and the local
// cluster has no KubeVirt install to own `kubevirt`.
func TestKubeVirtOverlayIsAcceptedByTheAPIServer(t *testing.T) {
	ns := clustertest.Namespace(t)
	objs := render(t, "kubevirt")
	for _, o := range objs {
		if o.GetNamespace() != "" {
			o.SetNamespace(ns)
		}
	}
	out, err := dryRunApply(t, objs...)
	if err != nil {
		t.Fatalf("kubectl apply --server-side --dry-run=server deploy/kubevirt: %v\n%s", err, out)
	}
	if strings.Contains(out, "Warning") {
		t.Errorf("deploy/kubevirt draws warnings:\n%s", out)
	}
	t.Logf("deploy/kubevirt:\n%s", out)

	var kv *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "KubeVirt" {
			kv = o
		}
	}
	if kv == nil {
		t.Fatal("no KubeVirt CR in the overlay")
	}
	broken := []struct {
		name   string
		mutate func(spec map[string]any)
		want   string
	}{
		{"a misspelled customizeComponents is refused", func(s map[string]any) {
			s["customiseComponents"] = s["customizeComponents"]
			delete(s, "customizeComponents")
		}, "customiseComponents"},
		{"an unknown field in a patch is refused", func(s map[string]any) {
			patch(s)["resourceKind"] = patch(s)["resourceType"]
			delete(patch(s), "resourceType")
		}, "resourceKind"},
		{"an empty resourceName is refused", func(s map[string]any) { patch(s)["resourceName"] = "" }, "resourceName"},
		{"a patch given as an object is refused", func(s map[string]any) {
			patch(s)["patch"] = map[string]any{"spec": map[string]any{"replicas": 1}}
		}, "patch"},
	}
	for _, tc := range broken {
		t.Run(tc.name, func(t *testing.T) {
			o := kv.DeepCopy()
			tc.mutate(o.Object["spec"].(map[string]any))
			out, err := dryRunApply(t, o)
			if err == nil {
				t.Fatalf("the API server accepted a broken KubeVirt CR:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("refused, but not for %s:\n%s", tc.want, out)
			}
		})
	}
}

// patch is the KubeVirt CR's first customizeComponents patch.
func patch(spec map[string]any) map[string]any {
	return spec["customizeComponents"].(map[string]any)["patches"].([]any)[0].(map[string]any)
}

// dryRunApply applies objs server-side with --dry-run=server (kubectl's
// default strict field validation) and returns kubectl's output.
func dryRunApply(t *testing.T, objs ...*unstructured.Unstructured) (string, error) {
	t.Helper()
	file := writeObjects(t, objs...)
	return kubectl(t, "apply", "--server-side", "--dry-run=server", "-f", file)
}

// writeObjects writes objs as one YAML stream and returns the file.
func writeObjects(t *testing.T, objs ...*unstructured.Unstructured) string {
	t.Helper()
	var b strings.Builder
	for _, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	file := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// Why virt-controller cannot simply be scaled to 0 through
// customizeComponents: virt-operator gives virt-controller's Deployment a
// PodDisruptionBudget with minAvailable = replicas - 1
// (NewPodDisruptionBudgetForDeployment), creates it unless that is 0
// (syncPodDisruptionBudgetForDeployment), and the API server refuses -1.
func TestKubeVirtZeroVirtControllerReplicasMakeAnInvalidPDB(t *testing.T) {
	kube := kubernetes.NewForConfigOrDie(clustertest.Config(t))
	ns := clustertest.Namespace(t)
	minAvailable := intstr.FromInt32(0 - 1) // replicas - 1 at 0 replicas
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-controller-pdb", Labels: map[string]string{"kubevirt.io": "virt-controller-pdb"}},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvailable,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"kubevirt.io": "virt-controller"}},
		},
	}
	_, err := kube.PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), pdb, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("virt-controller's PodDisruptionBudget at 0 replicas (minAvailable -1): %v, want Invalid", err)
	}
	t.Logf("refused as virt-operator would see it: %v", err)
}

// The held Lease against client-go's leader election, configured as
// virt-controller configures it (a LeaseLock, no ReleaseOnCancel), with
// short timings. KubeVirt v1.8.1 builds with client-go v0.34.2; its
// tryAcquireOrRenew and isLeaseValid differ from this module's v0.37.2 only
// in logging and locking.
func TestKubeVirtHeldLeaseKeepsVirtControllerAFollower(t *testing.T) {
	var held coordinationv1.Lease
	object(t, render(t, "kubevirt"), "Lease", "virt-controller", &held)
	kube := kubernetes.NewForConfigOrDie(clustertest.Config(t))
	const leaseDuration = time.Second

	t.Run("a candidate never takes the held Lease", func(t *testing.T) {
		ns := clustertest.Namespace(t)
		createLease(t, kube, ns, held.Spec)
		c := startCandidate(t, kube, ns, held.Name, leaseDuration)
		waitFor(t, 10*time.Second, "the candidate to see the Lease's holder", func() bool {
			return c.elector.GetLeader() == *held.Spec.HolderIdentity
		})
		// Three of the candidate's own lease durations, thirty retries: had
		// it gone by its own duration it would have taken the Lease twice over.
		select {
		case <-c.started:
			t.Fatal("the candidate took the held Lease")
		case <-time.After(3 * leaseDuration):
		}
	})

	t.Run("the same candidate takes a Lease whose own duration has passed", func(t *testing.T) {
		ns := clustertest.Namespace(t)
		spec := *held.Spec.DeepCopy()
		one := int32(1)
		spec.LeaseDurationSeconds = &one
		createLease(t, kube, ns, spec)
		c := startCandidate(t, kube, ns, held.Name, leaseDuration)
		select {
		case <-c.started:
		case <-time.After(10 * time.Second):
			t.Fatal("the candidate did not take an expired Lease: the other case proves nothing")
		}
	})

	t.Run("a leader stops leading once the Lease is applied over it", func(t *testing.T) {
		ns := clustertest.Namespace(t)
		// Longer timings: a renewal missed under -race must not pass for
		// the takeover.
		c := startCandidate(t, kube, ns, held.Name, 4*leaseDuration)
		select {
		case <-c.started:
		case <-time.After(10 * time.Second):
			t.Fatal("the candidate did not create and take a free Lease")
		}
		select {
		case <-c.stopped:
			t.Fatal("the leader stopped leading before the takeover")
		default:
		}
		lease := &unstructured.Unstructured{}
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(held.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		lease.Object = raw
		lease.SetNamespace(ns)
		// As docs/kubevirt.md says: applied plainly, the Lease a running
		// leader holds is a conflict; it is taken over with --force-conflicts.
		file := writeObjects(t, lease)
		if out, err := kubectl(t, "apply", "--server-side", "-f", file); err == nil || !strings.Contains(out, "conflict") {
			t.Errorf("a plain apply over the leader's Lease: %v, want a conflict\n%s", err, out)
		}
		if out, err := kubectl(t, "apply", "--server-side", "--force-conflicts", "-f", file); err != nil {
			t.Fatalf("apply the held Lease over the leader's: %v\n%s", err, out)
		}
		select {
		case <-c.stopped:
		case <-time.After(10 * time.Second): // renew deadline 2 s
			t.Fatal("the leader kept leading after the Lease was applied over it")
		}
		if c.elector.GetLeader() != *held.Spec.HolderIdentity || c.elector.IsLeader() {
			t.Errorf("after the takeover the candidate sees leader %q (itself: %v)", c.elector.GetLeader(), c.elector.IsLeader())
		}
		got, err := kube.CoordinationV1().Leases(ns).Get(context.Background(), held.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *got.Spec.HolderIdentity != *held.Spec.HolderIdentity || *got.Spec.LeaseDurationSeconds != *held.Spec.LeaseDurationSeconds {
			t.Errorf("the Lease after the takeover: holder %q for %d s", *got.Spec.HolderIdentity, *got.Spec.LeaseDurationSeconds)
		}
	})
}

func createLease(t *testing.T, kube kubernetes.Interface, ns string, spec coordinationv1.LeaseSpec) {
	t.Helper()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "virt-controller", Namespace: ns}, Spec: spec}
	if _, err := kube.CoordinationV1().Leases(ns).Create(context.Background(), lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

type candidate struct {
	elector          *leaderelection.LeaderElector
	started, stopped chan struct{}
}

// startCandidate runs a leader election candidate for Lease ns/name until t
// ends.
func startCandidate(t *testing.T, kube kubernetes.Interface, ns, name string, leaseDuration time.Duration) *candidate {
	t.Helper()
	c := &candidate{started: make(chan struct{}), stopped: make(chan struct{})}
	var leading atomic.Bool
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
			Client:     kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: "virt-controller-" + ns},
		},
		LeaseDuration: leaseDuration,
		RenewDeadline: leaseDuration / 2,
		RetryPeriod:   leaseDuration / 10,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { leading.Store(true); close(c.started) },
			OnStoppedLeading: func() {
				if leading.Load() {
					close(c.stopped)
				}
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.elector = elector
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); elector.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, deadline time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %s waiting for %s", deadline, what)
		case <-tick.C:
		}
	}
}
