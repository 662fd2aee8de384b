package deploy_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	poolv1 "kubevirt.io/api/pool/v1beta1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/virtshard/virtshard/bench/cdi"
	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/cmd/virtshard-controller/app"
	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/node"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

// access is one kind of API request: verb, group and resource (with its
// subresource), as RBAC sees it.
type access struct{ verb, group, resource string }

func (a access) String() string {
	if a.group == "" {
		return a.verb + " " + a.resource
	}
	return a.verb + " " + a.resource + "." + a.group
}

// rarelyCalled are granted verbs the workload below does not reach, each
// with the code path that needs it. Everything else granted must be called.
var rarelyCalled = map[access]string{
	{"patch", "", "events"}: "client-go's event recorder patches an event that repeats within its aggregation window",
	{"delete", "kubevirt.io", "virtualmachineinstancemigrations"}: "the migration controller keeps the 5 newest finished migrations of a VMI and deletes older ones",
	{"get", "", "pods"}: "the migration controller confirms a target pod missing from its cache before it fails the migration; " +
		"the VMI controller reads the launcher pod a create was answered AlreadyExists for",
	{"get", "kubevirt.io", "virtualmachines"}: "the VM controller reads its VM afresh before it adopts an orphan VMI (KubeVirt's RecheckDeletionTimestamp)",
	{"patch", "", "pods"}:                     "the VMI controller restores a launcher pod's range label that someone edited (controllers/vmi restoreRangeLabel)",
	{"get", "kubevirt.io", "virtualmachineinstances"}: "the status batcher re-reads a VMI whose patch conflicted; the VM controller tells " +
		"a VMI its create made from a foreign one or an orphan of that name; the migration controller checks a VMI missing from its cache",
	{"delete", "apps", "controllerrevisions"}: "the VM controller deletes a VM's older start revisions when it starts the VM at a new generation",
	{"get", "apps", "controllerrevisions"}: "the VM controller reads an instance type's revision its range cache does not hold yet, " +
		"or the one a create was answered AlreadyExists for",
	{"get", "instancetype.kubevirt.io", "virtualmachineinstancetypes"}: "the VM controller reads an instance type or preference " +
		"its cache does not hold yet (KubeVirt's finders)",
	{"get", "instancetype.kubevirt.io", "virtualmachineclusterinstancetypes"}: "the same",
	{"get", "instancetype.kubevirt.io", "virtualmachinepreferences"}:          "the same",
	{"get", "instancetype.kubevirt.io", "virtualmachineclusterpreferences"}:   "the same",
	{"patch", "", "nodes"}: "the node controller labels a node whose virt-handler heartbeat went stale unschedulable " +
		"(test/integration/node covers it; this workload stops no node's heartbeat)",
	{"list", "apps", "daemonsets"}: "the node controller looks up virt-handler's DaemonSet when an unresponsive node has VMIs " +
		"and no virt-handler pod (this workload stops no node's heartbeat)",
	{"create", "", "pods/eviction"}: "the workload updater evicts the launcher pod of a VMI on an outdated launcher that " +
		"cannot migrate, when the KubeVirt CR's strategy allows Evict (test/integration/workloadupdate covers it)",
	{"patch", "kubevirt.io", "kubevirts/status"}: "the workload updater writes the count of outdated VMIs to a deployed " +
		"KubeVirt CR's status (test/integration/workloadupdate covers it)",
	{"list", "k8s.cni.cncf.io", "network-attachment-definitions"}: "NetworkAttachmentDefinitions are watched only where Multus' CRD is " +
		"installed (not on the local cluster), for the launcher pod's SR-IOV resources",
	{"watch", "k8s.cni.cncf.io", "network-attachment-definitions"}: "the same",
}

// listFallback reports whether a is a list of a resource the replica
// watches: informers list and watch in one streaming request (watch-list),
// and fall back to a plain list when the server refuses or cuts it.
func listFallback(a access, calls map[access]int) bool {
	return a.verb == "list" && calls[access{"watch", a.group, a.resource}] > 0
}

// recorder records every request a client sends, and the forbidden ones.
type recorder struct {
	mu        sync.Mutex
	calls     map[access]int
	forbidden map[access]int
}

func (r *recorder) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		a, ok := parseAccess(req)
		if !ok {
			return resp, err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.calls[a]++
		if err == nil && resp.StatusCode == http.StatusForbidden {
			r.forbidden[a]++
		}
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// requests parses API paths as the API server's authorizer does.
var requests = &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// parseAccess reads verb, group and resource (with its subresource) from a
// resource request, as RBAC sees it; discovery and other non-resource paths
// are not resource requests.
func parseAccess(req *http.Request) (access, bool) {
	info, err := requests.NewRequestInfo(req)
	if err != nil || !info.IsResourceRequest {
		return access{}, false
	}
	resource := info.Resource
	if info.Subresource != "" {
		resource += "/" + info.Subresource
	}
	return access{info.Verb, info.APIGroup, resource}, true
}

// grants expands RBAC rules into the accesses they allow.
func grants(rules []rbacv1.PolicyRule) map[access]bool {
	out := map[access]bool{}
	for _, rule := range rules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					out[access{v, g, res}] = true
				}
			}
		}
	}
	return out
}

// The replicas run under exactly the deployed ServiceAccount's rules (the
// test impersonates it), through every controller's path; every request
// they make is granted, and every grant but the listed rare ones is used.
func TestRBACIsExactlyWhatTheControllersCall(t *testing.T) {
	ctx := context.Background()
	cfg := clustertest.Config(t)
	kube := kubernetes.NewForConfigOrDie(cfg)
	kv, err := kubevirt.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := clustertest.Namespace(t)

	// The deployed rules, bound to a ServiceAccount of the test namespace
	// (the Role there too: the test's replica keeps its Leases in it).
	objs := render(t, "default")
	var clusterRole rbacv1.ClusterRole
	var role rbacv1.Role
	var delegator rbacv1.ClusterRoleBinding
	object(t, objs, "ClusterRole", "virtshard-controller", &clusterRole)
	object(t, objs, "Role", "virtshard-controller", &role)
	object(t, objs, "ClusterRoleBinding", "virtshard-controller-auth-delegator", &delegator)
	if delegator.RoleRef.Name != "system:auth-delegator" {
		t.Fatalf("the auth delegator binding refers to %s", delegator.RoleRef.Name)
	}
	sa := "virtshard-controller"
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}}
	name := "virtshard-rbac-" + ns
	createClusterRole(t, kube, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: clusterRole.Rules},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-delegator"}, Subjects: subjects, RoleRef: delegator.RoleRef})
	if _, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: role.Rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	granted := grants(append(clusterRole.Rules, role.Rules...))
	// What system:auth-delegator grants.
	granted[access{"create", "authentication.k8s.io", "tokenreviews"}] = true
	granted[access{"create", "authorization.k8s.io", "subjectaccessreviews"}] = true

	rec := &recorder{calls: map[access]int{}, forbidden: map[access]int{}}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	replica := controllertest.Start(t, ns, "replica-rbac", func(o *app.Options) {
		o.AdjustConfig = func(c *rest.Config) {
			c.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", ns, sa)}
			c.Wrap(rec.wrap)
		}
		o.SecureServing, o.Listener = true, listener
	})

	w := &rbacWorkload{t: t, ns: ns, kube: kube, kv: kv}
	w.run()
	w.scrape(sa, "https://"+listener.Addr().String()+"/metrics")
	if err := replica.Stop(); err != nil {
		t.Errorf("replica stopped with %v", err)
	}
	// The account cannot read Secrets, even in its own namespace.
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", ns, sa)}
	if _, err := kubernetes.NewForConfigOrDie(as).CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the controller's account lists Secrets: %v, want forbidden", err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var called []string
	for a, n := range rec.calls {
		called = append(called, fmt.Sprintf("%s ×%d", a, n))
	}
	sort.Strings(called)
	t.Logf("the replica called:\n  %s", strings.Join(called, "\n  "))
	for a, n := range rec.forbidden {
		t.Errorf("%s was forbidden %d times", a, n)
	}
	for a := range rec.calls {
		if !granted[a] {
			t.Errorf("%s is called but not granted", a)
		}
	}
	for a := range granted {
		if rec.calls[a] == 0 && rarelyCalled[a] == "" && !listFallback(a, rec.calls) {
			t.Errorf("%s is granted but never called: remove it, or list it in rarelyCalled with the path that needs it", a)
		}
	}
	for a := range granted {
		if a.resource == "secrets" {
			t.Errorf("%s is granted: the controllers read no Secrets", a)
		}
	}
	for a := range rarelyCalled {
		if !granted[a] {
			t.Errorf("rarelyCalled lists %s, which is not granted", a)
		}
	}
}

func createClusterRole(t *testing.T, kube kubernetes.Interface, role *rbacv1.ClusterRole, bindings ...*rbacv1.ClusterRoleBinding) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	for _, b := range bindings {
		if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
		})
	}
}

// rbacWorkload drives every controller: a VM started, migrated and halted;
// a VMI evacuated from a drained node; deletions.
type rbacWorkload struct {
	t    *testing.T
	ns   string
	kube kubernetes.Interface
	kv   *kubevirt.Clientset
}

const rbacPoolLabel = "virtshard.io/test-pool"

func (w *rbacWorkload) run() {
	t, ctx := w.t, context.Background()

	// A VM: the VM controller creates its VMI, the VMI controller its pod.
	always, halted := virtv1.RunStrategyAlways, virtv1.RunStrategyHalted
	template := workload.AsWritten("template")
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "vm"},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: &always, Template: &virtv1.VirtualMachineInstanceTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: template.Labels}, Spec: template.Spec}},
	}
	if _, err := w.kv.VirtualMachines(w.ns).Create(ctx, vm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitRunning("vm", "")

	// A migration of it: the migration controller's path.
	m := &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: "migrate-vm"}, Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: "vm"}}
	if _, err := w.kv.Migrations(w.ns).Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.poll("migration migrate-vm Succeeded", func(ctx context.Context) bool {
		got, err := w.kv.Migrations(w.ns).Get(ctx, m.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == virtv1.MigrationSucceeded
	})

	// A drained node: the node controller creates an evacuation migration.
	drained, other := w.addNode("drained"), w.addNode("other")
	vmi := workload.VMI("evacuee")
	vmi.Spec.NodeSelector = map[string]string{rbacPoolLabel: w.ns}
	vmi.Spec.EvictionStrategy = ptr.To(virtv1.EvictionStrategyLiveMigrate) // the cluster's default is None
	vmi.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
		Weight: 100, Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{drained}}}},
	}}}}
	if _, err := w.kv.VirtualMachineInstances(w.ns).Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	on := w.waitRunning("evacuee", "")
	if on != drained {
		drained, other = other, drained
	}
	taint := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"value":"fake","effect":"NoSchedule"},{"key":%q,"effect":"NoSchedule"}]}}`,
		cluster.KwokNodeTaintKey, node.DefaultDrainTaintKey)
	if _, err := w.kube.CoreV1().Nodes().Patch(ctx, drained, types.MergePatchType, []byte(taint), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitRunning("evacuee", other)

	// A PodDisruptionBudget an older KubeVirt made for it: the
	// disruption-budget controller deletes it.
	evacuee, err := w.kv.VirtualMachineInstances(w.ns).Get(ctx, "evacuee", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-disruption-budget-evacuee",
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(evacuee, virtv1.VirtualMachineInstanceGroupVersionKind)}},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{virtv1.CreatedByLabel: string(evacuee.UID)}}},
	}
	if _, err := w.kube.PolicyV1().PodDisruptionBudgets(w.ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitGone("PodDisruptionBudget of evacuee", func(ctx context.Context) error {
		_, err := w.kube.PolicyV1().PodDisruptionBudgets(w.ns).Get(ctx, pdb.Name, metav1.GetOptions{})
		return err
	})

	// A VMI replica set of two over an orphan that matches it: the replica
	// set controller records its API version, reads it afresh and adopts
	// the orphan, creates one more and writes its status; scaled to one,
	// it deletes one.
	setLabels := map[string]string{"rbac-set": "web"}
	orphan := workload.AsWritten("orphan")
	orphan.Labels = setLabels
	if _, err := w.kv.VirtualMachineInstances(w.ns).Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	set := &virtv1.VirtualMachineInstanceReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "set"},
		Spec: virtv1.VirtualMachineInstanceReplicaSetSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: setLabels},
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: setLabels}, Spec: template.Spec}},
	}
	if _, err := w.kv.ReplicaSets(w.ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.setReplicas(2, setLabels)
	if _, err := w.kv.ReplicaSets(w.ns).Patch(ctx, "set", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	w.setReplicas(1, setLabels)
	if err := w.kv.ReplicaSets(w.ns).Delete(ctx, "set", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// A VM pool of two halted VMs: the pool controller puts its finalizer
	// on the pool, creates its revision and VMs; a new template rewrites
	// them (and prunes the old revision); scaled to one, it deletes one and
	// lets it go; deleted, it lets the last go and takes its finalizer off.
	pool := &poolv1.VirtualMachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool"},
		Spec: poolv1.VirtualMachinePoolSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"rbac-pool": "a"}},
			VirtualMachineTemplate: &poolv1.VirtualMachineTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"rbac-pool": "a"}},
				Spec: virtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: template.Spec}}}},
	}
	if _, err := w.kv.Pools(w.ns).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.poolVMs("pool VMs pool-0 and pool-1", "pool-1", "pool-0", "pool-1")
	if _, err := w.kv.Pools(w.ns).Patch(ctx, "pool", types.MergePatchType, []byte(`{"spec":{"virtualMachineTemplate":{"metadata":{"annotations":{"rbac":"2"}}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	w.poolVMs("pool VMs at revision pool-2", "pool-2", "pool-0", "pool-1")
	if _, err := w.kv.Pools(w.ns).Patch(ctx, "pool", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	w.poolVMs("pool scaled to 1", "", "pool-0")
	if err := w.kv.Pools(w.ns).Delete(ctx, "pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitGone("pool", func(ctx context.Context) error {
		_, err := w.kv.Pools(w.ns).Get(ctx, "pool", metav1.GetOptions{})
		return err
	})

	// A halted VM with DataVolume templates: the VM controller creates the
	// first (an import); the second clones, through a DataSource it reads,
	// a claim of another namespace, and asks whether the VM's service
	// account may (it may not: no DataVolume, a Failure condition).
	source := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource", "metadata": map[string]any{"name": "golden"},
		"spec": map[string]any{"source": map[string]any{"pvc": map[string]any{"namespace": "default", "name": "golden-image"}}},
	}}
	dyn := dynamic.NewForConfigOrDie(clustertest.Config(t))
	if _, err := dyn.Resource(cdi.DataSources).Namespace(w.ns).Create(ctx, source, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	disks := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "disks"},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: template.Spec},
			DataVolumeTemplates: []virtv1.DataVolumeTemplateSpec{
				{ObjectMeta: metav1.ObjectMeta{Name: "disks-blank"}, Spec: cdiv1.DataVolumeSpec{
					Source:  &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
					Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "disks-clone"}, Spec: cdiv1.DataVolumeSpec{
					SourceRef: &cdiv1.DataVolumeSourceRef{Kind: cdiv1.DataVolumeDataSource, Name: "golden"},
					Storage:   &cdiv1.StorageSpec{}}},
			}},
	}
	if _, err := w.kv.VirtualMachines(w.ns).Create(ctx, disks, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("VM disks, last seen: %s", last)
		}
	})
	w.poll("VM disks's blank DataVolume, and its clone refused", func(ctx context.Context) bool {
		got, err := w.kv.VirtualMachines(w.ns).Get(ctx, "disks", metav1.GetOptions{})
		if err != nil {
			return false
		}
		_, blankErr := dyn.Resource(cdi.DataVolumes).Namespace(w.ns).Get(ctx, "disks-blank", metav1.GetOptions{})
		last = fmt.Sprintf("blank DataVolume: %v; status %+v", blankErr, got.Status)
		return blankErr == nil && slices.ContainsFunc(got.Status.Conditions, func(c virtv1.VirtualMachineCondition) bool {
			return c.Type == virtv1.VirtualMachineFailure && strings.Contains(c.Message, "not authorized")
		})
	})
	if err := w.kv.VirtualMachines(w.ns).Delete(ctx, "disks", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitGone("VM disks", func(ctx context.Context) error {
		_, err := w.kv.VirtualMachines(w.ns).Get(ctx, "disks", metav1.GetOptions{})
		return err
	})

	// A halted VM with a cluster-wide instance type and a namespaced
	// preference: the VM controller stores both as revisions and names them
	// in the VM's status.
	itName := "rbac-" + w.ns
	for _, o := range []struct {
		gvr      schema.GroupVersionResource
		kind, ns string
		name     string
		spec     map[string]any
	}{
		{caches.ClusterInstancetypeGVR, "VirtualMachineClusterInstancetype", "", itName, map[string]any{"cpu": map[string]any{"guest": int64(1)}, "memory": map[string]any{"guest": "64Mi"}}},
		{caches.PreferenceGVR, "VirtualMachinePreference", w.ns, "pref", map[string]any{"devices": map[string]any{"preferredDiskBus": "virtio"}}},
	} {
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "instancetype.kubevirt.io/v1beta1", "kind": o.kind,
			"metadata": map[string]any{"name": o.name}, "spec": o.spec}}
		if _, err := dyn.Resource(o.gvr).Namespace(o.ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = dyn.Resource(caches.ClusterInstancetypeGVR).Delete(context.Background(), itName, metav1.DeleteOptions{})
	})
	sized := template.DeepCopy()
	sized.Spec.Domain.Resources, sized.Spec.Domain.CPU = virtv1.ResourceRequirements{}, nil
	typed := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "typed"},
		Spec: virtv1.VirtualMachineSpec{RunStrategy: &halted, Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: sized.Spec},
			Instancetype: &virtv1.InstancetypeMatcher{Name: itName},
			Preference:   &virtv1.PreferenceMatcher{Name: "pref", Kind: "VirtualMachinePreference"}},
	}
	if _, err := w.kv.VirtualMachines(w.ns).Create(ctx, typed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.poll("VM typed's instance type and preference revisions in its status", func(ctx context.Context) bool {
		got, err := w.kv.VirtualMachines(w.ns).Get(ctx, "typed", metav1.GetOptions{})
		return err == nil && got.Status.InstancetypeRef != nil && got.Status.InstancetypeRef.ControllerRevisionRef != nil &&
			got.Status.PreferenceRef != nil && got.Status.PreferenceRef.ControllerRevisionRef != nil
	})
	if err := w.kv.VirtualMachines(w.ns).Delete(ctx, "typed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Halting the VM deletes its VMI; deleting the VM and the VMI releases
	// their finalizers.
	patch := fmt.Sprintf(`{"spec":{"runStrategy":%q}}`, halted)
	if _, err := w.kv.VirtualMachines(w.ns).Patch(ctx, "vm", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitGone("VMI vm", func(ctx context.Context) error {
		_, err := w.kv.VirtualMachineInstances(w.ns).Get(ctx, "vm", metav1.GetOptions{})
		return err
	})
	if err := w.kv.VirtualMachines(w.ns).Delete(ctx, "vm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitGone("VM vm", func(ctx context.Context) error {
		_, err := w.kv.VirtualMachines(w.ns).Get(ctx, "vm", metav1.GetOptions{})
		return err
	})
	if err := w.kv.VirtualMachineInstances(w.ns).Delete(ctx, "evacuee", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitGone("VMI evacuee", func(ctx context.Context) error {
		_, err := w.kv.VirtualMachineInstances(w.ns).Get(ctx, "evacuee", metav1.GetOptions{})
		return err
	})
}

// setReplicas waits until the replica set reports n replicas and n VMIs
// with its labels are left, none of them being deleted.
func (w *rbacWorkload) setReplicas(n int32, labels map[string]string) {
	w.poll(fmt.Sprintf("replica set of %d", n), func(ctx context.Context) bool {
		set, err := w.kv.ReplicaSets(w.ns).Get(ctx, "set", metav1.GetOptions{})
		if err != nil || set.Status.Replicas != n {
			return false
		}
		vmis, err := w.kv.VirtualMachineInstances(w.ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: labels})})
		if err != nil {
			return false
		}
		live := int32(0)
		for _, v := range vmis.Items {
			if v.DeletionTimestamp == nil && metav1.GetControllerOf(&v) != nil {
				live++
			}
		}
		return live == n && int32(len(vmis.Items)) == n
	})
}

// poolVMs waits until the VMs labelled as the pool's that are not being
// deleted are names, each at revision (any, when empty).
func (w *rbacWorkload) poolVMs(what, revision string, names ...string) {
	w.poll(what, func(ctx context.Context) bool {
		vms, err := w.kv.VirtualMachines(w.ns).List(ctx, metav1.ListOptions{LabelSelector: "rbac-pool=a"})
		if err != nil {
			return false
		}
		var live []string
		for _, v := range vms.Items {
			if v.DeletionTimestamp != nil {
				continue
			}
			if revision != "" && v.Labels[virtv1.VirtualMachinePoolRevisionName] != revision {
				return false
			}
			live = append(live, v.Name)
		}
		slices.Sort(live)
		return slices.Equal(live, names)
	})
}

// scrape asks the replica's protected /metrics with the ServiceAccount's
// own token: the replica reviews it with the API server.
func (w *rbacWorkload) scrape(sa, url string) {
	t, ctx := w.t, context.Background()
	tr, err := w.kube.CoreV1().ServiceAccounts(w.ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
	// The replica's certificate is self-signed.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The controller's own account may not read /metrics: only reviewed.
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /metrics with the controller's token: %s, want 403", resp.Status)
	}
}

func (w *rbacWorkload) addNode(suffix string) string {
	n := cluster.NewNode(w.ns+"-"+suffix, 110)
	n.Labels[rbacPoolLabel] = w.ns
	if _, err := w.kube.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = w.kube.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	w.poll("node "+n.Name+" Ready", func(ctx context.Context) bool {
		got, err := w.kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		return err == nil && slices.ContainsFunc(got.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		})
	})
	return n.Name
}

// waitRunning waits until VMI name runs (on node, if given) and returns its
// node.
func (w *rbacWorkload) waitRunning(name, on string) string {
	var at string
	w.poll("VMI "+name+" Running "+on, func(ctx context.Context) bool {
		vmi, err := w.kv.VirtualMachineInstances(w.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || vmi.Status.Phase != virtv1.Running || (on != "" && vmi.Status.NodeName != on) {
			return false
		}
		at = vmi.Status.NodeName
		return true
	})
	return at
}

func (w *rbacWorkload) waitGone(what string, get func(context.Context) error) {
	w.poll(what+" gone", func(ctx context.Context) bool { return apierrors.IsNotFound(get(ctx)) })
}

func (w *rbacWorkload) poll(what string, done func(context.Context) bool) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return done(ctx), nil
	})
	if err != nil {
		w.t.Fatalf("waiting for %s: %v", what, err)
	}
}
