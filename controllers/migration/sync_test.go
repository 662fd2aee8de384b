package migration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	migrationsv1 "kubevirt.io/api/migrations/v1alpha1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/kinds"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/sharded/shardedtest"
	"github.com/virtshard/virtshard/controllers/template"
	"github.com/virtshard/virtshard/shard"
)

// fixture is the migration controller on the test kit; a test calls sync
// on one migration.
type fixture struct {
	*shardedtest.Fixture
	c *Controller
}

func newFixture(t *testing.T, kubeObjects []runtime.Object, kvObjects ...runtime.Object) *fixture {
	t.Helper()
	// The VMIs' namespace, whose labels may select a MigrationPolicy.
	kubeObjects = append(kubeObjects, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "default", Labels: map[string]string{corev1.LabelMetadataName: "default", "tier": "gold"},
	}})
	// The source node, whose CPU the target's must be like.
	if !slices.ContainsFunc(kubeObjects, func(o runtime.Object) bool { n, ok := o.(*corev1.Node); return ok && n.Name == "node-1" }) {
		kubeObjects = append(kubeObjects, sourceNode(nil))
	}
	f, c := shardedtest.StartController(t, "migration", func(env *sharded.Env, rt *sharded.Runtime) (*Controller, *sharded.Controller, error) {
		c, err := newController(env, rt, DefaultOptions())
		if err != nil {
			return nil, nil, err
		}
		return c, c.declare(), nil
	}, shardedtest.Cluster{Objects: append(kubeObjects, kvObjects...)})
	return &fixture{f, c}
}

// sync syncs migration m in the range of its VMI (or its own, without one).
func (f *fixture) sync(t *testing.T, m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance) error {
	t.Helper()
	rng := f.Ranges.Of(m)
	if vmi != nil {
		rng = f.Ranges.Owner(vmi)
	}
	_, err := f.c.sync(context.Background(), item{Range: rng, Key: m.Namespace + "/" + m.Name})
	return err
}

func newMigration() *virtv1.VirtualMachineInstanceMigration {
	return &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m", UID: "m-uid", ResourceVersion: "2"},
		Spec:       virtv1.VirtualMachineInstanceMigrationSpec{VMIName: "a"},
	}
}

func runningVMI() *virtv1.VirtualMachineInstance {
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a", UID: "vmi-uid", ResourceVersion: "7"},
		Spec: virtv1.VirtualMachineInstanceSpec{Domain: virtv1.DomainSpec{Resources: virtv1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		}}},
		Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Running, NodeName: "node-1", SelinuxContext: "none"},
	}
}

// sourceNode is node-1, where the VMIs run, with labels.
func sourceNode(labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: labels}}
}

// sourcePod is vmi's running launcher pod.
func sourcePod(t *testing.T, vmi *virtv1.VirtualMachineInstance) *corev1.Pod {
	t.Helper()
	ranges, err := shard.NewRanges(4, shard.KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := template.Render(vmi, ranges.Owner(vmi), template.DefaultOptions(), clusterconfig.DefaultConfig("amd64"), nil)
	if err != nil {
		t.Fatal(err)
	}
	pod.UID, pod.Spec.NodeName, pod.Status.Phase = "source-uid", vmi.Status.NodeName, corev1.PodRunning
	return pod
}

// statusOf is the migration status of the last status update.
func statusOf(t *testing.T, actions []k8stesting.Action) virtv1.VirtualMachineInstanceMigrationStatus {
	t.Helper()
	for i := len(actions) - 1; i >= 0; i-- {
		if u, ok := actions[i].(k8stesting.UpdateAction); ok && u.GetSubresource() == "status" {
			return u.GetObject().(*virtv1.VirtualMachineInstanceMigration).Status
		}
	}
	t.Fatal("no status update")
	return virtv1.VirtualMachineInstanceMigrationStatus{}
}

func TestSyncStartsAMigrationOfARunningVMI(t *testing.T) {
	m, vmi := newMigration(), runningVMI()
	f := newFixture(t, []runtime.Object{sourcePod(t, vmi)}, m, vmi)
	if err := f.sync(t, m, vmi); err != nil {
		t.Fatal(err)
	}
	// The finalizer, then a permit, then the VMI's runtime user and the
	// target pod, then the status.
	want := []string{"patch virtualmachineinstancemigrations", "patch virtualmachineinstances", "update virtualmachineinstancemigrations/status"}
	if got := kvfake.Writes(f.KubeVirt.Actions()); !slices.Equal(got, want) {
		t.Fatalf("KubeVirt writes %q, want the finalizer patch, the VMI's runtime user and one status update", got)
	}
	user := string(f.KubeVirt.Actions()[1].(k8stesting.PatchAction).GetPatch())
	if !strings.Contains(user, `"runtimeUser":107`) || !strings.Contains(user, virtv1.DeprecatedNonRootVMIAnnotation) {
		t.Errorf("VMI patch %s: want the non-root user and annotation, as KubeVirt's setupVMIRuntimeUser", user)
	}
	finalizer := string(f.KubeVirt.Actions()[0].(k8stesting.PatchAction).GetPatch())
	if !strings.Contains(finalizer, Finalizer) || !strings.Contains(finalizer, `"resourceVersion":"2"`) {
		t.Errorf("finalizer patch %s: want %s at the cached resourceVersion", finalizer, Finalizer)
	}
	kube := kvfake.Writes(f.Kube.Actions())
	if !slices.Contains(kube, "create pods") || !slices.Contains(kube, "update configmaps") {
		t.Fatalf("kube writes %q, want a permit written and the target pod created", kube)
	}
	for _, a := range f.Kube.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "pods" {
			if pod := c.GetObject().(*corev1.Pod); pod.Annotations[virtv1.DeprecatedNonRootVMIAnnotation] != "true" {
				t.Errorf("target pod annotations %v: want the VMI's non-root annotation", pod.Annotations)
			}
		}
	}
	if phase := statusOf(t, f.KubeVirt.Actions()).Phase; phase != virtv1.MigrationScheduling {
		t.Errorf("phase %s, want Scheduling once the target pod exists", phase)
	}
}

// TestSyncSetsTheRuntimeUserOfAMigrationWaitingForASlot: as KubeVirt's,
// the VMI gets its runtime user before the limits are asked, so a
// migration that waits for a slot has set it; no target pod is created.
func TestSyncSetsTheRuntimeUserOfAMigrationWaitingForASlot(t *testing.T) {
	m, vmi := inPhase(newMigration(), virtv1.MigrationPending), runningVMI()
	other := inPhase(newMigration(), virtv1.MigrationRunning)
	other.Name, other.UID, other.Spec.VMIName = "other", "other-uid", "b"
	f := newFixture(t, []runtime.Object{sourcePod(t, vmi)}, m, vmi, other)
	f.c.opts.Limits = Limits{PerCluster: 1, PerNode: 2}
	full := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.c.permits.Namespace, Name: f.c.permits.Name},
		Data:       map[string]string{permitsKey: `{"other-uid":{"node":"node-9","granted":"` + time.Now().Format(time.RFC3339) + `"}}`},
	}
	if _, err := f.Kube.CoreV1().ConfigMaps(full.Namespace).Create(context.Background(), full, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Kube.ClearActions()
	if err := f.sync(t, m, vmi); err != nil {
		t.Fatal(err)
	}
	if got := kvfake.Writes(f.KubeVirt.Actions()); !slices.Contains(got, "patch virtualmachineinstances") {
		t.Errorf("KubeVirt writes %q, want the VMI's runtime user while the migration waits", got)
	}
	if got := kvfake.Writes(f.Kube.Actions()); slices.Contains(got, "create pods") {
		t.Errorf("kube writes %q: a target pod beyond the cluster's limit", got)
	}
}

func TestSyncRefusesAMigrationOfAVMIThatIsNotRunning(t *testing.T) {
	m, vmi := newMigration(), runningVMI()
	vmi.Status.Phase = virtv1.Scheduled
	f := newFixture(t, nil, m, vmi)
	if err := f.sync(t, m, vmi); err != nil {
		t.Fatal(err)
	}
	if kube := kvfake.Writes(f.Kube.Actions()); slices.Contains(kube, "create pods") {
		t.Errorf("kube writes %q: no target pod for a VMI that does not run", kube)
	}
	status := statusOf(t, f.KubeVirt.Actions())
	if status.Phase != virtv1.MigrationFailed || len(status.Conditions) == 0 || status.Conditions[len(status.Conditions)-1].Reason != ReasonVMINotRunning {
		t.Errorf("status %+v: want Failed for %s", status, ReasonVMINotRunning)
	}
}

func TestSyncFailsAMigrationWhoseVMIDoesNotExist(t *testing.T) {
	m := newMigration()
	f := newFixture(t, nil, m)
	if err := f.sync(t, m, nil); err != nil {
		t.Fatal(err)
	}
	status := statusOf(t, f.KubeVirt.Actions())
	if status.Phase != virtv1.MigrationFailed || status.Conditions[len(status.Conditions)-1].Reason != ReasonVMINotFound {
		t.Errorf("status %+v: want Failed for %s, once the API server confirmed it", status, ReasonVMINotFound)
	}
}

func TestSyncOfARangeNoLongerHeldSendsNothing(t *testing.T) {
	m, vmi := newMigration(), runningVMI()
	f := newFixture(t, []runtime.Object{sourcePod(t, vmi)}, m, vmi)
	f.Fence.Cut()
	if err := f.sync(t, m, vmi); err != nil && !errors.Is(err, sharded.ErrNotHeld) {
		t.Fatalf("sync returned %v, want nothing or ErrNotHeld (the worker drops the item)", err)
	}
	if got := append(kvfake.Writes(f.KubeVirt.Actions()), kvfake.Writes(f.Kube.Actions())...); len(got) != 0 {
		t.Errorf("writes %q for a range not held", got)
	}
}

func TestSyncHandsARunningTargetPodOffToTheNodes(t *testing.T) {
	m, vmi := newMigration(), runningVMI()
	f := newFixture(t, []runtime.Object{sourcePod(t, vmi)}, m, vmi)
	handOff := f.handOff(t, m, vmi)
	for _, want := range []string{`"migrationState"`, `"targetNode":"node-2"`, `"resourceVersion":"7"`, `"bandwidthPerMigration":"0"`} {
		if !strings.Contains(handOff, want) {
			t.Errorf("hand-off patch %q lacks %s", handOff, want)
		}
	}
	if strings.Contains(handOff, `"migrationPolicyName":"`) {
		t.Errorf("hand-off patch %q names a MigrationPolicy, none exists", handOff)
	}
}

// A migration hands over the configuration of the MigrationPolicy that
// matches its VMI and namespace, over the KubeVirt CR's, and the policy's
// name, as KubeVirt's handleTargetPodHandoff does.
func TestSyncHandsOverTheMatchingMigrationPolicy(t *testing.T) {
	m, vmi := newMigration(), runningVMI()
	vmi.Labels = map[string]string{"app": "db"}
	policy := func(name string, vmiSel, nsSel map[string]string, bandwidth string) *migrationsv1.MigrationPolicy {
		return &migrationsv1.MigrationPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: migrationsv1.MigrationPolicySpec{
			Selectors:             &migrationsv1.Selectors{VirtualMachineInstanceSelector: vmiSel, NamespaceSelector: nsSel},
			BandwidthPerMigration: ptr.To(resource.MustParse(bandwidth)),
		}}
	}
	f := newFixture(t, []runtime.Object{sourcePod(t, vmi)}, m, vmi,
		policy("by-app", map[string]string{"app": "db"}, nil, "32Mi"),
		policy("by-app-and-tier", map[string]string{"app": "db"}, map[string]string{"tier": "gold"}, "64Mi"),
		policy("other-app", map[string]string{"app": "web"}, nil, "16Mi"))
	handOff := f.handOff(t, m, vmi)
	for _, want := range []string{`"migrationPolicyName":"by-app-and-tier"`, `"bandwidthPerMigration":"64Mi"`, `"completionTimeoutPerGiB":150`} {
		if !strings.Contains(handOff, want) {
			t.Errorf("hand-off patch %q lacks %s", handOff, want)
		}
	}
}

// handOff runs m's target pod on node-2, syncs, and returns the hand-off
// patch of the VMI.
func (f *fixture) handOff(t *testing.T, m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance) string {
	t.Helper()
	if err := f.sync(t, m, vmi); err != nil {
		t.Fatal(err)
	}
	// The target pod runs and is ready on another node.
	var target *corev1.Pod
	for _, a := range f.Kube.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "pods" {
			target = c.GetObject().(*corev1.Pod).DeepCopy()
		}
	}
	target.UID, target.Spec.NodeName = "target-uid", "node-2"
	target.Status.Phase = corev1.PodRunning
	target.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := f.Kube.CoreV1().Pods(vmi.Namespace).Update(context.Background(), target, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The informers catch up with the pod and the migration's status.
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		r := f.Range(f.Ranges.Owner(vmi))
		m, _, _ := kinds.Migrations.All(f.Env.Caches).Get("default/m")
		for _, pod := range kinds.PodsOf(r, vmi) {
			if pod.UID == "target-uid" && pod.Status.Phase == corev1.PodRunning {
				return m != nil && m.Status.Phase == virtv1.MigrationScheduling, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("the caches never showed the running target pod")
	}
	f.KubeVirt.ClearActions()
	if err := f.sync(t, m, vmi); err != nil {
		t.Fatal(err)
	}
	var handOff string
	for _, a := range f.KubeVirt.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "virtualmachineinstances" {
			handOff = string(p.GetPatch())
		}
	}
	return handOff
}

// inPhase is m as it is once the controller took it to phase, its source
// node recorded and its finalizer set.
func inPhase(m *virtv1.VirtualMachineInstanceMigration, phase virtv1.VirtualMachineInstanceMigrationPhase) *virtv1.VirtualMachineInstanceMigration {
	m.Finalizers = []string{Finalizer}
	m.CreationTimestamp = metav1.Now()
	m.Status.Phase = phase
	m.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{SourceNode: "node-1", MigrationUID: m.UID}
	return m
}

// addTargetPod puts m's target pod, as the controller renders it and as
// edit leaves it, into the cluster, and waits until the caches show it.
func (f *fixture) addTargetPod(t *testing.T, m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance, source *corev1.Pod, edit func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	pod, err := f.c.renderTargetPod(f.Ranges.Owner(vmi), m, vmi, source)
	if err != nil {
		t.Fatal(err)
	}
	pod.UID, pod.Spec.NodeName = "target-uid", "node-2"
	pod.Status.Phase = corev1.PodPending // the API server's default
	edit(pod)
	if err := f.Kube.Tracker().Add(pod); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for _, p := range kinds.PodsOf(f.Range(f.Ranges.Owner(vmi)), vmi) {
			if p.UID == pod.UID {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("the range cache never showed the target pod")
	}
	f.Kube.ClearActions()
	return pod
}

// events drains the events recorded so far.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.Recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// failedFor checks that the last status update failed the migration,
// that its event says event, that the target pod was left to the node, as
// KubeVirt leaves it, and that the finalizer went last.
func (f *fixture) failedFor(t *testing.T, event string) {
	t.Helper()
	status := statusOf(t, f.KubeVirt.Actions())
	if status.Phase != virtv1.MigrationFailed {
		t.Errorf("status %+v: want Failed", status)
	}
	if got, want := f.events(), "Warning "+eventFailedMigration+" "+event; !slices.Contains(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	for _, a := range f.Kube.Actions() {
		if _, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == "pods" {
			t.Errorf("the target pod of a failed migration was deleted: the node's virt-launcher exits")
		}
	}
	kv := kvfake.Writes(f.KubeVirt.Actions())
	if len(kv) == 0 || kv[len(kv)-1] != "patch virtualmachineinstancemigrations" {
		t.Errorf("KubeVirt writes %q, want the finalizer released last", kv)
	}
}

// TestSyncTimesOutATargetPodThatNeverRuns: as KubeVirt's
// handlePendingPodTimeout, a target pod pending past a timeout (the
// migration's annotation, or the default) is deleted by UID with a
// SuccessfulDelete event saying which timeout; the status is not written,
// the pod's absence fails the migration on the next sync.
func TestSyncTimesOutATargetPodThatNeverRuns(t *testing.T) {
	for _, tc := range []struct {
		name       string
		annotation map[string]string
		message    string
		edit       func(*corev1.Pod)
	}{
		{"pending", nil, "pending pod default/%s timeout period exceeded", func(p *corev1.Pod) {
			p.CreationTimestamp = metav1.NewTime(time.Now().Add(-DefaultPendingTimeout - time.Minute))
		}},
		{"unschedulable", nil, "unschedulable pod default/%s timeout period exceeded", func(p *corev1.Pod) {
			p.CreationTimestamp = metav1.NewTime(time.Now().Add(-DefaultUnschedulableTimeout - time.Minute))
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, LastTransitionTime: p.CreationTimestamp}}
		}},
		{"unschedulable, annotated", map[string]string{virtv1.MigrationUnschedulablePodTimeoutSecondsAnnotation: "5"},
			"unschedulable pod default/%s timeout period exceeded", func(p *corev1.Pod) {
				p.CreationTimestamp = metav1.NewTime(time.Now().Add(-10 * time.Second))
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
					Reason: corev1.PodReasonUnschedulable, LastTransitionTime: p.CreationTimestamp}}
			}},
		{"pending, annotated", map[string]string{virtv1.MigrationPendingPodTimeoutSecondsAnnotation: "5"},
			"pending pod default/%s timeout period exceeded", func(p *corev1.Pod) {
				p.CreationTimestamp = metav1.NewTime(time.Now().Add(-10 * time.Second))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, vmi := inPhase(newMigration(), virtv1.MigrationScheduling), runningVMI()
			m.Annotations = tc.annotation
			source := sourcePod(t, vmi)
			f := newFixture(t, []runtime.Object{source}, m, vmi)
			pod := f.addTargetPod(t, m, vmi, source, tc.edit)
			if err := f.sync(t, m, vmi); err != nil {
				t.Fatal(err)
			}
			deleted := false
			for _, a := range f.Kube.Actions() {
				if d, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == "pods" {
					p := d.GetDeleteOptions().Preconditions
					deleted = d.GetName() == pod.Name && p != nil && p.UID != nil && *p.UID == pod.UID
				}
			}
			if !deleted {
				t.Errorf("kube writes %q: want the target pod deleted with its UID as precondition", kvfake.Writes(f.Kube.Actions()))
			}
			if got := kvfake.Writes(f.KubeVirt.Actions()); len(got) != 0 {
				t.Errorf("KubeVirt writes %q, want none: the next sync fails the migration", got)
			}
			want := "Normal SuccessfulDelete " + fmt.Sprintf(tc.message, pod.Name)
			if got := f.events(); !slices.Contains(got, want) {
				t.Errorf("events %q, want %q", got, want)
			}
		})
	}
}

func TestSyncLooksAgainWhenATargetPodWouldTimeOut(t *testing.T) {
	m, vmi := inPhase(newMigration(), virtv1.MigrationScheduling), runningVMI()
	source := sourcePod(t, vmi)
	f := newFixture(t, []runtime.Object{source}, m, vmi)
	f.addTargetPod(t, m, vmi, source, func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Minute)) })
	after, err := f.c.sync(context.Background(), item{Range: f.Ranges.Owner(vmi), Key: "default/m"})
	if err != nil {
		t.Fatal(err)
	}
	if want := DefaultPendingTimeout - time.Minute; after <= want-time.Minute || after > want {
		t.Errorf("look again after %s, want when the pending timeout ends (about %s)", after, want)
	}
	if got := append(kvfake.Writes(f.KubeVirt.Actions()), kvfake.Writes(f.Kube.Actions())...); len(got) != 0 {
		t.Errorf("writes %q for a target pod still within its timeouts, want none", got)
	}
}

func TestSyncFailsAMigrationTheSourceNodeReportsFailed(t *testing.T) {
	m, vmi := inPhase(newMigration(), virtv1.MigrationRunning), runningVMI()
	source := sourcePod(t, vmi)
	vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: m.UID, SourceNode: "node-1",
		TargetNode: "node-2", Completed: true, Failed: true}
	f := newFixture(t, []runtime.Object{source}, m, vmi)
	f.addTargetPod(t, m, vmi, source, func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })
	if err := f.sync(t, m, vmi); err != nil {
		t.Fatal(err)
	}
	f.failedFor(t, "source node reported migration failed")
	if ms := statusOf(t, f.KubeVirt.Actions()).MigrationState; ms == nil || !ms.Failed || ms.TargetNode != "node-2" {
		t.Errorf("migration state %+v, want the VMI's, failed on the way to node-2", ms)
	}
}

// TestSyncStampsTheTargetPodOnceItsDomainIsReady: a running migration
// whose target domain was detected stamps the target pod with the time, in
// Go's format, as KubeVirt's processMigrationPhase does; a stamped pod is
// not written again.
func TestSyncStampsTheTargetPodOnceItsDomainIsReady(t *testing.T) {
	m, vmi := inPhase(newMigration(), virtv1.MigrationRunning), runningVMI()
	source := sourcePod(t, vmi)
	ready := metav1.NewTime(time.Date(2026, 12, 5, 5, 43, 37, 0, time.UTC))
	vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: m.UID, SourceNode: "node-1",
		SourcePod: source.Name, TargetNode: "node-2", TargetNodeAddress: "10.0.0.2", StartTimestamp: &ready,
		TargetNodeDomainDetected: true, TargetNodeDomainReadyTimestamp: &ready}
	f := newFixture(t, []runtime.Object{source}, m, vmi)
	pod := f.addTargetPod(t, m, vmi, source, func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })
	if err := f.sync(t, m, vmi); err != nil {
		t.Fatal(err)
	}
	got, err := f.Kube.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := got.Annotations[virtv1.MigrationTargetReadyTimestamp]; v != "2026-12-05 05:43:37 +0000 UTC" {
		t.Errorf("annotation %s = %q, want KubeVirt's 2026-12-05 05:43:37 +0000 UTC", virtv1.MigrationTargetReadyTimestamp, v)
	}

	f.Kube.ClearActions()
	if err := f.c.stampTargetReady(context.Background(), item{Range: f.Ranges.Owner(vmi), Key: "default/m"}, got, vmi.Status.MigrationState); err != nil {
		t.Fatal(err)
	}
	if w := kvfake.Writes(f.Kube.Actions()); len(w) != 0 {
		t.Errorf("writes %q to a stamped pod", w)
	}
}

func TestSyncOfASucceededMigrationLeavesTheSourcePodAndKeepsTheNewestFive(t *testing.T) {
	m, vmi := inPhase(newMigration(), virtv1.MigrationRunning), runningVMI()
	source := sourcePod(t, vmi)
	vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: m.UID, SourceNode: "node-1",
		SourcePod: source.Name, TargetNode: "node-2", Completed: true}
	objects := []runtime.Object{m, vmi}
	// Six earlier migrations of the VMI that ended, oldest first.
	for i := range finishedToKeep + 1 {
		old := newMigration()
		old.Name, old.UID = "old-"+strconv.Itoa(i), types.UID("old-uid-"+strconv.Itoa(i))
		old.CreationTimestamp = metav1.NewTime(time.Now().Add(time.Duration(i-10) * time.Hour))
		old.Status.Phase = virtv1.MigrationSucceeded
		objects = append(objects, old)
	}
	f := newFixture(t, []runtime.Object{source}, objects...)
	f.addTargetPod(t, m, vmi, source, func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })
	if err := f.sync(t, m, vmi); err != nil {
		t.Fatal(err)
	}
	if phase := statusOf(t, f.KubeVirt.Actions()).Phase; phase != virtv1.MigrationSucceeded {
		t.Errorf("phase %s, want Succeeded", phase)
	}
	for _, a := range f.Kube.Actions() {
		if a.GetResource().Resource == "pods" && a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("a pod write (%s %s): the source pod's virt-launcher exits by itself", a.GetVerb(), a.GetSubresource())
		}
	}
	var deleted []string
	for _, a := range f.KubeVirt.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == "virtualmachineinstancemigrations" {
			if p := d.GetDeleteOptions().Preconditions; p == nil || p.UID == nil {
				t.Errorf("delete of %s without a UID precondition", d.GetName())
			}
			deleted = append(deleted, d.GetName())
		}
	}
	// The migration that just ended may not be in the cache as final yet:
	// one or two of the oldest go, never a newer one.
	if len(deleted) == 0 || deleted[0] != "old-0" || slices.Contains(deleted, "m") || slices.Contains(deleted, "old-5") {
		t.Errorf("deleted migrations %q, want the oldest (old-0, perhaps old-1) and no newer one", deleted)
	}
}

// A running migration its user deletes is not failed at once: it is
// marked AbortRequested, then the source node is asked to abort through
// the VMI's migration state (at the version read), as KubeVirt asks; the
// node's report of the failure ends it (TestSyncFailsAMigrationTheSourceNodeReportsFailed).
func TestSyncAsksTheNodesToAbortADeletedRunningMigration(t *testing.T) {
	running := func() (*virtv1.VirtualMachineInstanceMigration, *virtv1.VirtualMachineInstance, *corev1.Pod) {
		m, vmi := inPhase(newMigration(), virtv1.MigrationRunning), runningVMI()
		m.DeletionTimestamp = ptr.To(metav1.Now())
		source := sourcePod(t, vmi)
		start := metav1.Now()
		vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: m.UID, SourceNode: "node-1",
			SourcePod: source.Name, TargetNode: "node-2", TargetNodeAddress: "10.0.0.2", StartTimestamp: &start}
		return m, vmi, source
	}

	m, vmi, source := running()
	f := newFixture(t, []runtime.Object{source}, m, vmi)
	f.addTargetPod(t, m, vmi, source, func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })
	if err := f.sync(t, m, vmi); err != nil {
		t.Fatal(err)
	}
	status := statusOf(t, f.KubeVirt.Actions())
	if status.Phase != virtv1.MigrationRunning || !migrationCanceled(&virtv1.VirtualMachineInstanceMigration{Status: status}) {
		t.Errorf("status %+v, want Running and marked AbortRequested", status)
	}
	if got := patchesOf(f.KubeVirt.Actions(), "virtualmachineinstances"); len(got) != 0 {
		t.Errorf("VMI patched %q before the migration was marked", got)
	}

	m, vmi, source = running()
	m.Status.Conditions = []virtv1.VirtualMachineInstanceMigrationCondition{{Type: virtv1.VirtualMachineInstanceMigrationAbortRequested, Status: corev1.ConditionTrue}}
	f = newFixture(t, []runtime.Object{source}, m, vmi)
	f.addTargetPod(t, m, vmi, source, func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })
	if err := f.sync(t, m, vmi); err != nil {
		t.Fatal(err)
	}
	got := patchesOf(f.KubeVirt.Actions(), "virtualmachineinstances")
	if len(got) != 1 || !strings.Contains(got[0], `"abortRequested":true`) || !strings.Contains(got[0], `"resourceVersion":"7"`) {
		t.Errorf("VMI patches %q, want one asking for the abort at the version read", got)
	}
	for _, a := range f.KubeVirt.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && u.GetSubresource() == "status" {
			if phase := u.GetObject().(*virtv1.VirtualMachineInstanceMigration).Status.Phase; phase != virtv1.MigrationRunning {
				t.Errorf("phase %s written, want Running until the node reports the abort", phase)
			}
		}
	}
}

// A migration deleted before its hand-off fails at once, canceled.
func TestSyncFailsADeletedMigrationNotHandedOff(t *testing.T) {
	m, vmi := inPhase(newMigration(), virtv1.MigrationPending), runningVMI()
	m.DeletionTimestamp = ptr.To(metav1.Now())
	f := newFixture(t, []runtime.Object{sourcePod(t, vmi)}, m, vmi)
	if err := f.sync(t, m, vmi); err != nil {
		t.Fatal(err)
	}
	status := statusOf(t, f.KubeVirt.Actions())
	if status.Phase != virtv1.MigrationFailed || !migrationCanceled(&virtv1.VirtualMachineInstanceMigration{Status: status}) {
		t.Errorf("status %+v, want Failed and marked AbortRequested", status)
	}
}

// patchesOf are the bodies of resource's patches the fake recorded.
func patchesOf(actions []k8stesting.Action, resource string) []string {
	var out []string
	for _, a := range actions {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == resource {
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

// A target pod a ResourceQuota refuses: as KubeVirt, a FailedCreate warning
// on the VMI and the RejectedByResourceQuota condition on the migration,
// which stays Pending and is tried again; its permit goes back meanwhile.
// Once the pod is made, the condition goes.
func TestSyncMarksAMigrationWhoseTargetPodAQuotaRefuses(t *testing.T) {
	m, vmi := inPhase(newMigration(), virtv1.MigrationPending), runningVMI()
	f := newFixture(t, []runtime.Object{sourcePod(t, vmi)}, m, vmi)
	refused := apierrors.NewForbidden(corev1.Resource("pods"), "target",
		errors.New(`exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1`))
	f.Kube.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, refused })
	if err := f.sync(t, m, vmi); err == nil {
		t.Fatal("a refused target pod is no error")
	}
	st := statusOf(t, f.KubeVirt.Actions())
	if st.Phase != virtv1.MigrationPending || !slices.ContainsFunc(st.Conditions, rejectedByQuota) {
		t.Fatalf("status %+v, want Pending with the RejectedByResourceQuota condition", st)
	}
	if events := f.events(); !slices.ContainsFunc(events, func(e string) bool {
		return strings.HasPrefix(e, "Warning FailedCreate Error creating pod: ") && strings.Contains(e, "exceeded quota")
	}) {
		t.Errorf("events %q, want KubeVirt's FailedCreate", events)
	}
	held, err := f.c.permits.Holds(context.Background(), m.UID)
	if err != nil || held {
		t.Errorf("permit held %v (%v) while no target pod could be made", held, err)
	}

	rejected := m.DeepCopy()
	rejected.Status = st
	rejected.Status.Phase = virtv1.MigrationScheduling
	if got := slices.DeleteFunc(slices.Clone(rejected.Status.Conditions), rejectedByQuota); len(got) == len(rejected.Status.Conditions) {
		t.Fatal("no condition to take back")
	}
	g := newFixture(t, []runtime.Object{sourcePod(t, vmi)}, rejected, vmi)
	g.addTargetPod(t, rejected, vmi, sourcePod(t, vmi), func(*corev1.Pod) {})
	if err := g.sync(t, rejected, vmi); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, g.KubeVirt.Actions()); slices.ContainsFunc(st.Conditions, rejectedByQuota) {
		t.Errorf("conditions %+v once the target pod exists", st.Conditions)
	}
}
