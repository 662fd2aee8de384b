package differential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/handler"
	"github.com/virtshard/virtshard/bench/kubevirt"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/template"
)

// Captured are the kinds a checkpoint captures, besides those a scenario
// creates: everything today's controllers write in a namespace.
var Captured = []schema.GroupVersionResource{
	virtv1.SchemeGroupVersion.WithResource("virtualmachineinstances"),
	virtv1.SchemeGroupVersion.WithResource("virtualmachines"),
	virtv1.SchemeGroupVersion.WithResource("virtualmachineinstancemigrations"),
	corev1.SchemeGroupVersion.WithResource("pods"),
	corev1.SchemeGroupVersion.WithResource("events"),
	{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
	{Group: "apps", Version: "v1", Resource: "controllerrevisions"},
}

// Runner runs scenarios on a cluster, under whichever controller runs
// there.
type Runner struct {
	Dynamic dynamic.Interface
	Mapper  meta.RESTMapper
	// Poll is how often waits look; 100 ms when zero.
	Poll time.Duration
}

// Capture is one checkpoint's objects, as the API returned them.
type Capture struct {
	Checkpoint string
	Objects    []*unstructured.Unstructured
}

// Run runs s in namespace ns, which must exist, and returns its captures
// in checkpoint order.
func (r *Runner) Run(ctx context.Context, s *Scenario, ns string) (_ []Capture, err error) {
	kinds := slices.Clone(Captured)
	var out []Capture
	var restore func(context.Context) error
	defer func() {
		if restore != nil {
			err = errors.Join(err, restore(context.WithoutCancel(ctx)))
		}
	}()
	for i, st := range s.Steps {
		var err error
		switch {
		case st.Configure != nil || st.WorkloadUpdateStrategy != nil:
			field, fragment := "configuration", st.Configure
			if st.WorkloadUpdateStrategy != nil {
				field, fragment = "workloadUpdateStrategy", st.WorkloadUpdateStrategy
			}
			var undo func(context.Context) error
			undo, err = r.configure(ctx, field, fragment)
			if restore == nil {
				restore = undo // the CR's spec the scenario began with
			} else if undo != nil {
				prev := restore
				restore = func(ctx context.Context) error { return errors.Join(undo(ctx), prev(ctx)) }
			}
		case st.Create != nil:
			var gvr schema.GroupVersionResource
			var namespaced bool
			gvr, namespaced, err = r.create(ctx, ns, st.Create)
			if namespaced && !slices.Contains(kinds, gvr) {
				kinds = append(kinds, gvr)
			}
		case st.Patch != nil:
			err = r.patch(ctx, ns, st.Patch)
		case st.Delete != nil:
			err = r.delete(ctx, ns, *st.Delete)
		case st.Node != nil:
			err = r.node(ctx, ns, st.Node)
		case st.Request != nil:
			err = r.request(ctx, ns, st.Request)
		case st.Wait != nil && st.Wait.Quiet.Duration > 0:
			err = r.quiet(ctx, ns, kinds, st.Wait)
		case st.Wait != nil && st.Wait.Absent && st.Wait.Field == "":
			err = r.waitAbsent(ctx, ns, st.Wait)
		case st.Wait != nil:
			err = r.waitField(ctx, ns, st.Wait)
		case st.Checkpoint != "":
			var objs []*unstructured.Unstructured
			objs, err = r.capture(ctx, ns, kinds)
			out = append(out, Capture{Checkpoint: st.Checkpoint, Objects: objs})
		}
		if err != nil {
			return out, fmt.Errorf("scenario %s, step %d: %w", s.Name, i+1, err)
		}
	}
	return out, nil
}

// resource is the resource of kind, and whether it is namespaced.
func (r *Runner) resource(kind string, apiVersion string) (schema.GroupVersionResource, bool, error) {
	var gk schema.GroupKind
	var versions []string
	if apiVersion != "" {
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			return schema.GroupVersionResource{}, false, err
		}
		gk, versions = gv.WithKind(kind).GroupKind(), []string{gv.Version}
	} else {
		gk = schema.GroupKind{Kind: kind}
		if g, ok := groupOf[kind]; ok {
			gk.Group = g
		}
	}
	m, err := r.Mapper.RESTMapping(gk, versions...)
	if err != nil {
		return schema.GroupVersionResource{}, false, fmt.Errorf("kind %s: %w", kind, err)
	}
	return m.Resource, m.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

// groupOf is the API group of the kinds a step names without an
// apiVersion.
var groupOf = map[string]string{
	"VirtualMachineInstance":           virtv1.SchemeGroupVersion.Group,
	"VirtualMachine":                   virtv1.SchemeGroupVersion.Group,
	"VirtualMachineInstanceMigration":  virtv1.SchemeGroupVersion.Group,
	"VirtualMachineInstanceReplicaSet": virtv1.SchemeGroupVersion.Group,
	"VirtualMachinePool":               "pool.kubevirt.io",
	"KubeVirt":                         virtv1.SchemeGroupVersion.Group,
	"DataVolume":                       "cdi.kubevirt.io",
	"PodDisruptionBudget":              "policy",
	"ControllerRevision":               "apps",
	"MigrationPolicy":                  "migrations.kubevirt.io",
}

func (r *Runner) client(ns string, gvr schema.GroupVersionResource, namespaced bool) dynamic.ResourceInterface {
	if namespaced {
		return r.Dynamic.Resource(gvr).Namespace(ns)
	}
	return r.Dynamic.Resource(gvr)
}

func (r *Runner) create(ctx context.Context, ns string, obj *unstructured.Unstructured) (schema.GroupVersionResource, bool, error) {
	gvr, namespaced, err := r.resource(obj.GetKind(), obj.GetAPIVersion())
	if err != nil {
		return gvr, false, err
	}
	obj = obj.DeepCopy()
	if namespaced {
		obj.SetNamespace(ns)
	}
	_, err = r.client(ns, gvr, namespaced).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return gvr, false, fmt.Errorf("create %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return gvr, namespaced, nil
}

func (r *Runner) patch(ctx context.Context, ns string, p *PatchStep) error {
	gvr, namespaced, err := r.resource(p.Kind, "")
	if err != nil {
		return err
	}
	data, err := json.Marshal(p.Patch)
	if err != nil {
		return err
	}
	pt := types.MergePatchType
	if p.Type == "json" {
		pt = types.JSONPatchType
	}
	var sub []string
	if p.Subresource != "" {
		sub = []string{p.Subresource}
	}
	if _, err := r.client(ns, gvr, namespaced).Patch(ctx, p.Name, pt, data, metav1.PatchOptions{}, sub...); err != nil {
		return fmt.Errorf("patch %s %s: %w", p.Kind, p.Name, err)
	}
	return nil
}

func (r *Runner) delete(ctx context.Context, ns string, ref Ref) error {
	gvr, namespaced, err := r.resource(ref.Kind, "")
	if err != nil {
		return err
	}
	if err := r.client(ns, gvr, namespaced).Delete(ctx, ref.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete %s %s: %w", ref.Kind, ref.Name, err)
	}
	return nil
}

var (
	vmis  = virtv1.SchemeGroupVersion.WithResource("virtualmachineinstances")
	pods  = corev1.SchemeGroupVersion.WithResource("pods")
	nodes = corev1.SchemeGroupVersion.WithResource("nodes")
)

// node plays the node side's part.
func (r *Runner) node(ctx context.Context, ns string, n *NodeStep) error {
	switch n.Action {
	case NodeFail, NodeSucceed:
		// What virt-handler writes when the domain ends.
		phase := virtv1.Failed
		if n.Action == NodeSucceed {
			phase = virtv1.Succeeded
		}
		patch := fmt.Sprintf(`{"status":{"phase":%q}}`, phase)
		_, err := r.Dynamic.Resource(vmis).Namespace(ns).Patch(ctx, n.VMI, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	case NodeDeleteLauncherPod:
		return r.eachLauncherPod(ctx, ns, n, func(p *unstructured.Unstructured) error {
			if err := r.Dynamic.Resource(pods).Namespace(ns).Delete(ctx, p.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			return nil
		})
	case NodeEvict:
		// As kubectl drain: an eviction of the launcher pod on the VMI's
		// node, which virt-api's admitter (bench/virtapi) refuses with 429
		// and answers by marking the VMI for evacuation.
		node, err := r.nodeOf(ctx, ns, n.VMI)
		if err != nil {
			return err
		}
		return r.eachLauncherPod(ctx, ns, n, func(p *unstructured.Unstructured) error {
			if name, _, _ := unstructured.NestedString(p.Object, "spec", "nodeName"); name != node {
				return nil
			}
			eviction := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "policy/v1", "kind": "Eviction",
				"metadata": map[string]any{"name": p.GetName(), "namespace": ns}}}
			_, err := r.Dynamic.Resource(pods).Namespace(ns).Create(ctx, eviction, metav1.CreateOptions{}, "eviction")
			if apierrors.IsTooManyRequests(err) {
				return nil
			}
			return err
		})
	case NodeStop:
		return r.stopNode(ctx, n.Node)
	case NodeStaleHeartbeat:
		node, err := r.nodeOf(ctx, ns, n.VMI)
		if err != nil {
			return err
		}
		if err := r.stopNode(ctx, node); err != nil {
			return err
		}
		return r.staleHeartbeat(ctx, node)
	case NodeHangLauncherPod:
		return r.eachLauncherPod(ctx, ns, n, func(p *unstructured.Unstructured) error {
			containers, _, _ := unstructured.NestedSlice(p.Object, "spec", "containers")
			var statuses []any
			for _, c := range containers {
				name, _, _ := unstructured.NestedString(c.(map[string]any), "name")
				image, _, _ := unstructured.NestedString(c.(map[string]any), "image")
				statuses = append(statuses, map[string]any{"name": name, "image": image, "imageID": "", "ready": false, "restartCount": int64(0),
					"state": map[string]any{"terminated": map[string]any{"exitCode": int64(0), "reason": "Completed"}}})
			}
			patch, err := json.Marshal(map[string]any{"status": map[string]any{"containerStatuses": statuses}})
			if err != nil {
				return err
			}
			_, err = r.Dynamic.Resource(pods).Namespace(ns).Patch(ctx, p.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}, "status")
			return err
		})
	case NodeOutdateLauncher:
		return r.eachLauncherPod(ctx, ns, n, func(p *unstructured.Unstructured) error {
			patch := fmt.Sprintf(`{"spec":{"containers":[{"name":%q,"image":%q}]}}`, template.ComputeContainer, PreviousLauncherImage)
			_, err := r.Dynamic.Resource(pods).Namespace(ns).Patch(ctx, p.GetName(), types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
			return err
		})
	}
	return fmt.Errorf("node action %q", n.Action)
}

// eachLauncherPod runs do on each launcher pod of the step's VMI; a VMI
// with none is an error.
func (r *Runner) eachLauncherPod(ctx context.Context, ns string, n *NodeStep, do func(*unstructured.Unstructured) error) error {
	vmi, err := r.Dynamic.Resource(vmis).Namespace(ns).Get(ctx, n.VMI, metav1.GetOptions{})
	if err != nil {
		return err
	}
	list, err := r.Dynamic.Resource(pods).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: virtv1.CreatedByLabel + "=" + string(vmi.GetUID())})
	if err != nil {
		return err
	}
	if len(list.Items) == 0 {
		return fmt.Errorf("VMI %s has no launcher pod to %s", n.VMI, n.Action)
	}
	for i := range list.Items {
		if err := do(&list.Items[i]); err != nil {
			return err
		}
	}
	return nil
}

// nodeOf is the node the VMI runs on.
func (r *Runner) nodeOf(ctx context.Context, ns, name string) (string, error) {
	vmi, err := r.Dynamic.Resource(vmis).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	node, _, err := unstructured.NestedString(vmi.Object, "status", "nodeName")
	if err != nil || node == "" {
		return "", fmt.Errorf("VMI %s is on no node (%v)", name, err)
	}
	return node, nil
}

// stopNode stops the node's kubelet and simulated virt-handler (the
// harness starts it again after the scenarios).
func (r *Runner) stopNode(ctx context.Context, node string) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, handler.StoppedAnnotation)
	_, err := r.Dynamic.Resource(nodes).Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// staleHeartbeat dates the node's heartbeat back by three times
// virt-controller's five-minute timeout, and again if a heartbeat the
// stopping virt-handler sent lands after it, until the handler is seen
// silent for a few seconds.
func (r *Runner) staleHeartbeat(ctx context.Context, node string) error {
	stale := time.Now().Add(-15 * time.Minute).UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, virtv1.VirtHandlerHeartbeat, stale)
	quiet := time.Time{}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := r.Dynamic.Resource(nodes).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if n.GetAnnotations()[virtv1.VirtHandlerHeartbeat] != stale {
			if _, err := r.Dynamic.Resource(nodes).Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return false, err
			}
			quiet = time.Now()
			return false, nil
		}
		return time.Since(quiet) > 3*time.Second, nil
	})
}

var vms = virtv1.SchemeGroupVersion.WithResource("virtualmachines")

// request appends a state change request to a VM's status, as virt-api's
// subresources do; a Stop names the UID of the VMI running now.
func (r *Runner) request(ctx context.Context, ns string, q *RequestStep) error {
	var add []map[string]any
	if q.Action == RequestStop || q.Action == RequestRestart {
		vmi, err := r.Dynamic.Resource(vmis).Namespace(ns).Get(ctx, q.VM, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("%s VM %s: its VMI: %w", q.Action, q.VM, err)
		}
		add = append(add, map[string]any{"action": string(virtv1.StopRequest), "uid": string(vmi.GetUID())})
	}
	if q.Action == RequestStart || q.Action == RequestRestart {
		start := map[string]any{"action": string(virtv1.StartRequest)}
		if q.Paused {
			start["data"] = map[string]string{virtv1.StartRequestDataPausedKey: virtv1.StartRequestDataPausedTrue}
		}
		add = append(add, start)
	}
	vm, err := r.Dynamic.Resource(vms).Namespace(ns).Get(ctx, q.VM, metav1.GetOptions{})
	if err != nil {
		return err
	}
	reqs, _, _ := unstructured.NestedSlice(vm.Object, "status", "stateChangeRequests")
	for _, a := range add {
		reqs = append(reqs, a)
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": vm.GetResourceVersion()},
		"status":   map[string]any{"stateChangeRequests": reqs},
	})
	if err != nil {
		return err
	}
	if _, err := r.Dynamic.Resource(vms).Namespace(ns).Patch(ctx, q.VM, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("%s VM %s: %w", q.Action, q.VM, err)
	}
	return nil
}

func (r *Runner) poll() time.Duration {
	if r.Poll > 0 {
		return r.Poll
	}
	return 100 * time.Millisecond
}

func timeout(w *WaitStep) time.Duration {
	if w.Timeout.Duration > 0 {
		return w.Timeout.Duration
	}
	return DefaultWaitTimeout
}

// waitField waits until the object's field has the value, or is absent.
func (r *Runner) waitField(ctx context.Context, ns string, w *WaitStep) error {
	gvr, namespaced, err := r.resource(w.Kind, "")
	if err != nil {
		return err
	}
	path := strings.Split(w.Field, ".")
	want := fmt.Sprint(w.Value)
	var last any
	err = wait.PollUntilContextTimeout(ctx, r.poll(), timeout(w), true, func(ctx context.Context) (bool, error) {
		obj, err := r.client(ns, gvr, namespaced).Get(ctx, w.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			last = "<no object>"
			return false, nil
		}
		if err != nil {
			return false, err
		}
		v, found, _ := unstructured.NestedFieldNoCopy(obj.Object, path...)
		if !found {
			last = "<no field>"
			return w.Absent, nil
		}
		last = v
		return !w.Absent && fmt.Sprint(v) == want, nil
	})
	if err != nil {
		if w.Absent {
			return fmt.Errorf("wait for %s %s without %s: last %v: %w", w.Kind, w.Name, w.Field, last, err)
		}
		return fmt.Errorf("wait for %s %s %s=%v: last %v: %w", w.Kind, w.Name, w.Field, w.Value, last, err)
	}
	return nil
}

// waitAbsent waits until the object is gone.
func (r *Runner) waitAbsent(ctx context.Context, ns string, w *WaitStep) error {
	gvr, namespaced, err := r.resource(w.Kind, "")
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, r.poll(), timeout(w), true, func(ctx context.Context) (bool, error) {
		if w.Name == "" {
			// None of the kind left: what the garbage collector removes
			// after its owner, under names the scenario cannot know.
			list, err := r.client(ns, gvr, namespaced).List(ctx, metav1.ListOptions{})
			return err == nil && len(list.Items) == 0, err
		}
		_, err := r.client(ns, gvr, namespaced).Get(ctx, w.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return fmt.Errorf("wait for %s %s to be gone: %w", w.Kind, w.Name, err)
	}
	return nil
}

// quiet waits until no captured object has changed for w.Quiet.
func (r *Runner) quiet(ctx context.Context, ns string, kinds []schema.GroupVersionResource, w *WaitStep) error {
	var last string
	since := time.Now()
	err := wait.PollUntilContextTimeout(ctx, r.poll(), timeout(w)+w.Quiet.Duration, true, func(ctx context.Context) (bool, error) {
		objs, err := r.capture(ctx, ns, kinds)
		if err != nil {
			return false, err
		}
		var b strings.Builder
		for _, o := range objs {
			fmt.Fprintf(&b, "%s/%s@%s;", o.GetKind(), o.GetName(), o.GetResourceVersion())
		}
		if state := b.String(); state != last {
			last, since = state, time.Now()
		}
		return time.Since(since) >= w.Quiet.Duration, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %s without a change: %w", w.Quiet.Duration, err)
	}
	return nil
}

// capture lists every object of kinds in ns, sorted by kind and name.
func (r *Runner) capture(ctx context.Context, ns string, kinds []schema.GroupVersionResource) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, gvr := range kinds {
		list, err := r.Dynamic.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue // the API is not served here (no CDI, say)
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
	}
	slices.SortFunc(out, func(a, b *unstructured.Unstructured) int {
		if c := strings.Compare(a.GetKind(), b.GetKind()); c != 0 {
			return c
		}
		return strings.Compare(a.GetName(), b.GetName())
	})
	return out, nil
}

// configSettle is how long a change of the KubeVirt CR is given to reach
// the controller before the scenario goes on: KubeVirt's virt-controller
// gives no sign that it has read the CR, and an informer of this machine's
// cluster sees a change well within it.
const configSettle = 2 * time.Second

// configure merges fragment into the KubeVirt CR's spec.configuration and
// returns what puts the configuration back as it was.
func (r *Runner) configure(ctx context.Context, field string, fragment map[string]any) (restore func(context.Context) error, err error) {
	crs := r.Dynamic.Resource(clusterconfig.KubeVirtResource).Namespace(kubevirt.Namespace)
	cr, err := crs.Get(ctx, kubevirt.CRName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get the KubeVirt CR: %w", err)
	}
	before, _, err := unstructured.NestedFieldCopy(cr.Object, "spec", field)
	if err != nil {
		return nil, fmt.Errorf("read the KubeVirt CR's %s: %w", field, err)
	}
	data, err := json.Marshal(map[string]any{"spec": map[string]any{field: fragment}})
	if err != nil {
		return nil, err
	}
	if _, err := crs.Patch(ctx, kubevirt.CRName, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("set the KubeVirt CR's %s: %w", field, err)
	}
	if err := sleep(ctx, configSettle); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		// The whole field back, by an update: a merge patch cannot take
		// back a field the fragment added inside another.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cr, err := crs.Get(ctx, kubevirt.CRName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if before == nil {
				unstructured.RemoveNestedField(cr.Object, "spec", field)
			} else if err := unstructured.SetNestedField(cr.Object, before, "spec", field); err != nil {
				return err
			}
			_, err = crs.Update(ctx, cr, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("restore the KubeVirt CR's %s: %w", field, err)
		}
		return sleep(ctx, configSettle)
	}, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
