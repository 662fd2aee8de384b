// Package deploy_test checks the manifests in deploy/ against the local
// cluster's API server: every overlay is accepted, the replicas' pod spec
// passes Pod Security "restricted", and the RBAC is exactly what the
// controllers use (rbac_test.go).
package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/virtshard/virtshard/test/clustertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// kubectl runs the cluster's kubectl against the local cluster.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	opts := clustertest.Options(t)
	cmd := exec.Command(filepath.Join(opts.Root, "bin", "kubectl"), append([]string{"--kubeconfig", opts.KubeconfigPath()}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func overlay(t *testing.T, name string) string {
	return filepath.Join(clustertest.Options(t).Root, "deploy", name)
}

// render returns the objects of a kustomization.
func render(t *testing.T, name string) []*unstructured.Unstructured {
	t.Helper()
	out, err := kubectl(t, "kustomize", overlay(t, name))
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/%s: %v\n%s", name, err, out)
	}
	var objs []*unstructured.Unstructured
	decoder := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("decode deploy/%s: %v", name, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// object converts the rendered object of kind and name into out.
func object(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no %s %s in the manifests", kind, name)
}

// Every overlay is accepted by the API server (server-side dry run: schema,
// defaulting, admission), the monitoring one against the Prometheus
// Operator's CRDs. Applied server-side, as the README says: KubeVirt's CRDs
// are too large for client-side apply's last-applied annotation (256 KiB).
func TestOverlaysAreAcceptedByTheAPIServer(t *testing.T) {
	root := clustertest.Options(t).Root
	steps := [][]string{
		// The namespaced objects of a dry run need their namespace to exist.
		{"apply", "--server-side", "-f", filepath.Join(root, "deploy", "default", "namespace.yaml")},
		{"apply", "--server-side", "--force-conflicts", "-f", filepath.Join(root, "bin", "monitoring-crds")},
		{"wait", "--for=condition=Established", "--timeout=60s", "-f", filepath.Join(root, "bin", "monitoring-crds")},
	}
	for _, step := range steps {
		if out, err := kubectl(t, step...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(step, " "), err, out)
		}
	}
	for _, name := range []string{"default", "kwok", "monitoring"} {
		out, err := kubectl(t, "apply", "--server-side", "-k", overlay(t, name), "--dry-run=server")
		if err != nil {
			t.Errorf("kubectl apply --server-side -k deploy/%s --dry-run=server: %v\n%s", name, err, out)
			continue
		}
		if strings.Contains(out, "Warning") {
			t.Errorf("deploy/%s draws warnings:\n%s", name, out)
		}
		t.Logf("deploy/%s:\n%s", name, out)
	}
}

// The replicas' pod, as the StatefulSet would create it, is admitted into a
// namespace that enforces Pod Security "restricted"; the same pod running
// as root is not, so the namespace does enforce.
func TestStatefulSetPodPassesRestrictedPodSecurity(t *testing.T) {
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(clustertest.Config(t))
	ns := clustertest.Namespace(t)
	patch := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted","pod-security.kubernetes.io/enforce-version":"latest"}}}`)
	if _, err := kube.CoreV1().Namespaces().Patch(ctx, ns, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	object(t, render(t, "default"), "StatefulSet", "virtshard-controller", &sts)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sts.Spec.Template.Spec.ServiceAccountName}}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: sts.Name + "-0", Labels: sts.Spec.Template.Labels},
		Spec:       *sts.Spec.Template.Spec.DeepCopy(),
	}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the StatefulSet's pod is refused under restricted: %v", err)
	}

	root := pod.DeepCopy()
	root.Name = sts.Name + "-root"
	root.Spec.SecurityContext.RunAsNonRoot = nil
	root.Spec.SecurityContext.RunAsUser = new(int64)
	_, err := kube.CoreV1().Pods(ns).Create(ctx, root, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
		t.Errorf("a root pod in the restricted namespace: %v, want forbidden by Pod Security", err)
	}
}

// The StatefulSet has what a sharded controller's replicas need.
func TestStatefulSetShape(t *testing.T) {
	objs := render(t, "default")
	var sts appsv1.StatefulSet
	object(t, objs, "StatefulSet", "virtshard-controller", &sts)
	spec := sts.Spec.Template.Spec
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q, want Parallel", sts.Spec.PodManagementPolicy)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", sts.Spec.Replicas)
	}
	c := spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("the replica's identity and namespace come from %v, want the pod's name and namespace", env)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v, want /readyz (ranges synced)", c.ReadinessProbe)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want /healthz", c.LivenessProbe)
	}
	if !strings.Contains(strings.Join(c.Args, " "), "--secure-serving") {
		t.Errorf("args %v: the metrics endpoint must be protected outside loopback", c.Args)
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v, want memory requests and limits", c.Resources)
	}
	if len(spec.TopologySpreadConstraints) == 0 {
		t.Error("no topology spread constraints")
	}
	// A graceful stop hands the ranges off; it must not be cut short.
	if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < 20 {
		t.Errorf("terminationGracePeriodSeconds %v, want at least 20", spec.TerminationGracePeriodSeconds)
	}
	var svc corev1.Service
	object(t, objs, "Service", "virtshard-controller", &svc)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || sts.Spec.ServiceName != svc.Name {
		t.Errorf("service %s clusterIP %q, StatefulSet serviceName %q: want a headless governing service", svc.Name, svc.Spec.ClusterIP, sts.Spec.ServiceName)
	}
	found := false
	for _, o := range objs {
		found = found || o.GetKind() == "PodDisruptionBudget"
	}
	if !found {
		t.Error("no PodDisruptionBudget")
	}
}
