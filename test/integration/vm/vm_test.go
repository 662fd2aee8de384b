package vm_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	virtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/virtshard/virtshard/bench/cdi"
	"github.com/virtshard/virtshard/bench/workload"
	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/cmd/virtshard-controller/app"
	"github.com/virtshard/virtshard/shard"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// maxStartBackoff is short so that a crash loop restarts within the test:
// its first wait is a 30th of it, 1 to 1.5 s.
const maxStartBackoff = 30 * time.Second

type env struct {
	t      *testing.T
	ns     string
	kube   kubernetes.Interface
	kv     *kubevirt.Clientset
	ranges shard.Ranges
}

// newEnv starts 3 replicas over a fresh namespace.
func newEnv(t *testing.T) *env {
	t.Helper()
	ns, kube, kv := controllertest.Clients(t)
	ranges, err := shard.NewRanges(shard.DefaultRangeCount, shard.KeyUID)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ns: ns, kube: kube, kv: kv, ranges: ranges}
	controllertest.StartN(t, e.ns, 3, func(o *app.Options) { o.VM.MaxStartBackoff = maxStartBackoff })
	return e
}

func (e *env) createVM(name string, strategy virtv1.VirtualMachineRunStrategy, mutate func(*virtv1.VirtualMachineInstance)) *virtv1.VirtualMachine {
	e.t.Helper()
	vmi := workload.AsWritten(name)
	if mutate != nil {
		mutate(vmi)
	}
	vm := &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: &strategy,
			Template:    &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: vmi.ObjectMeta, Spec: vmi.Spec},
		},
	}
	created, err := e.kv.VirtualMachines(e.ns).Create(context.Background(), vm, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create VM: %v", err)
	}
	return created
}

// waitVM waits until cond holds for the VM and returns it.
func (e *env) waitVM(name, what string, cond func(*virtv1.VirtualMachine) bool) *virtv1.VirtualMachine {
	e.t.Helper()
	var vm *virtv1.VirtualMachine
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		vm, err = e.kv.VirtualMachines(e.ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && cond(vm), nil
	})
	if err != nil {
		var status any
		if vm != nil {
			status = vm.Status
		}
		e.t.Fatalf("VM %s: %s not reached within 3 minutes; last status %+v", name, what, status)
	}
	return vm
}

func printable(s virtv1.VirtualMachinePrintableStatus) func(*virtv1.VirtualMachine) bool {
	return func(vm *virtv1.VirtualMachine) bool { return vm.Status.PrintableStatus == s }
}

// vmi returns the VM's VMI, or nil if there is none.
func (e *env) vmi(name string) *virtv1.VirtualMachineInstance {
	e.t.Helper()
	vmi, err := e.kv.VirtualMachineInstances(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return vmi
}

// waitRunningVMI waits for a Running VMI of the VM other than the one with
// uid not, checks it belongs to the VM and its range, and returns it.
func (e *env) waitRunningVMI(vm *virtv1.VirtualMachine, not types.UID) *virtv1.VirtualMachineInstance {
	e.t.Helper()
	var vmi *virtv1.VirtualMachineInstance
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		vmi = e.vmi(vm.Name)
		return vmi != nil && vmi.UID != not && vmi.Status.Phase == virtv1.Running, nil
	})
	if err != nil {
		current, _ := e.kv.VirtualMachines(e.ns).Get(context.Background(), vm.Name, metav1.GetOptions{})
		e.t.Fatalf("VM %s: no Running VMI (other than %q) within 3 minutes; last VMI %+v; VM status %+v", vm.Name, not, vmi, current.Status)
	}
	e.checkSameRange(vm, vmi)
	return vmi
}

// checkSameRange checks that the VMI, and its launcher pod, carry the VM's
// range: one range has one holder, so one replica acts on all three.
func (e *env) checkSameRange(vm *virtv1.VirtualMachine, vmi *virtv1.VirtualMachineInstance) {
	e.t.Helper()
	want := e.ranges.Of(vm)
	if ref := metav1.GetControllerOf(vmi); ref == nil || ref.UID != vm.UID {
		e.t.Errorf("VMI %s controlled by %+v, want VM %s", vmi.Name, ref, vm.UID)
	}
	if got := e.ranges.Owner(vmi); got != want || vmi.Labels[shard.LabelRange] != strconv.Itoa(want) {
		e.t.Errorf("VMI %s is placed in range %d (label %q), its VM in %d", vmi.Name, got, vmi.Labels[shard.LabelRange], want)
	}
	pods, err := e.kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: virtv1.CreatedByLabel + "=" + string(vmi.UID)})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, pod := range pods.Items {
		if pod.Labels[shard.LabelRange] != strconv.Itoa(want) {
			e.t.Errorf("launcher pod %s in range %q, its VM in %d", pod.Name, pod.Labels[shard.LabelRange], want)
		}
	}
}

// endVMI plays the node agent: the VMI ends in phase.
func (e *env) endVMI(vmi *virtv1.VirtualMachineInstance, phase virtv1.VirtualMachineInstancePhase) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"status":{"phase":%q}}`, phase)
	if _, err := e.kv.VirtualMachineInstances(e.ns).Patch(context.Background(), vmi.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) setStrategy(name string, strategy virtv1.VirtualMachineRunStrategy) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"runStrategy":%q}}`, strategy)
	if _, err := e.kv.VirtualMachines(e.ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// request appends a state change request to the VM's status, as virt-api's
// start and stop subresources do.
func (e *env) request(name string, req virtv1.VirtualMachineStateChangeRequest) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		vm, err := e.kv.VirtualMachines(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		vm.Status.StateChangeRequests = append(vm.Status.StateChangeRequests, req)
		_, err = e.kv.VirtualMachines(e.ns).UpdateStatus(ctx, vm, metav1.UpdateOptions{})
		return err == nil, nil // a conflict with the controller: try again
	})
	if err != nil {
		e.t.Fatalf("request %s on VM %s: %v", req.Action, name, err)
	}
}

func (e *env) waitNoVMI(name string) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		return e.vmi(name) == nil, nil
	}); err != nil {
		e.t.Fatalf("VM %s still has a VMI 3 minutes later", name)
	}
}

// stillNoVMI checks that no VMI appears for a while: what the controller
// must not do has no event to wait for.
func (e *env) stillNoVMI(name string, why string) {
	e.t.Helper()
	time.Sleep(2 * time.Second)
	if vmi := e.vmi(name); vmi != nil {
		e.t.Errorf("VM %s: a VMI %s exists (phase %s), want none: %s", name, vmi.UID, vmi.Status.Phase, why)
	}
}

func TestRunStrategies(t *testing.T) {
	e := newEnv(t)

	t.Run("Always starts the VMI and restarts it after it fails", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		vm := e.createVM("always", virtv1.RunStrategyAlways, nil)
		first := e.waitRunningVMI(vm, "")
		running := e.waitVM("always", "Running and ready", func(vm *virtv1.VirtualMachine) bool {
			return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning && vm.Status.Ready && vm.Status.Created
		})
		if !hasFinalizer(running.Finalizers) {
			t.Errorf("VM finalizers %v lack %s", running.Finalizers, virtv1.VirtualMachineControllerFinalizer)
		}
		if c := vmCondition(running, virtv1.VirtualMachineReady); c == nil || c.Status != "True" {
			t.Errorf("VM Ready condition %+v, want True mirrored from the VMI", c)
		}
		e.endVMI(first, virtv1.Failed)
		second := e.waitRunningVMI(vm, first.UID)
		if second.UID == first.UID {
			t.Fatal("the failed VMI was not replaced")
		}
		// It had run before failing: no start failure, no backoff.
		vm = e.waitVM("always", "Running again", printable(virtv1.VirtualMachineStatusRunning))
		if vm.Status.StartFailure != nil {
			t.Errorf("start failure %+v for a VMI that had run", vm.Status.StartFailure)
		}
	})

	t.Run("changing the strategy stops and starts the VM", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		vm := e.createVM("switch", virtv1.RunStrategyAlways, nil)
		first := e.waitRunningVMI(vm, "")
		e.setStrategy("switch", virtv1.RunStrategyHalted)
		e.waitNoVMI("switch")
		e.waitVM("switch", "Stopped and not created", func(vm *virtv1.VirtualMachine) bool {
			return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusStopped && !vm.Status.Created && !vm.Status.Ready
		})
		e.stillNoVMI("switch", "Halted")
		e.setStrategy("switch", virtv1.RunStrategyAlways)
		e.waitRunningVMI(vm, first.UID)
		e.waitVM("switch", "Running", printable(virtv1.VirtualMachineStatusRunning))
	})

	t.Run("RerunOnFailure reruns a failed VMI but not a succeeded one", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		vm := e.createVM("rerun", virtv1.RunStrategyRerunOnFailure, nil)
		first := e.waitRunningVMI(vm, "")
		e.endVMI(first, virtv1.Failed)
		second := e.waitRunningVMI(vm, first.UID)
		e.waitVM("rerun", "its Start request consumed", func(vm *virtv1.VirtualMachine) bool {
			return len(vm.Status.StateChangeRequests) == 0 && vm.Status.PrintableStatus == virtv1.VirtualMachineStatusRunning
		})
		e.endVMI(second, virtv1.Succeeded)
		e.waitVM("rerun", "Stopped", printable(virtv1.VirtualMachineStatusStopped))
		// As KubeVirt's (vm.go, RunStrategyRerunOnFailure): the VMI that
		// ended is deleted either way, and only a failed one is replaced.
		if vmi := e.vmi("rerun"); vmi != nil && vmi.UID != second.UID {
			t.Errorf("after success a new VMI %s (phase %s), want none", vmi.UID, vmi.Status.Phase)
		}
		e.waitNoVMI("rerun")
		e.stillNoVMI("rerun", "RerunOnFailure does not rerun a VMI that succeeded")
	})

	t.Run("Once runs the VMI once", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		vm := e.createVM("once", virtv1.RunStrategyOnce, nil)
		first := e.waitRunningVMI(vm, "")
		e.endVMI(first, virtv1.Failed)
		e.waitVM("once", "Stopped", printable(virtv1.VirtualMachineStatusStopped))
		time.Sleep(2 * time.Second)
		if vmi := e.vmi("once"); vmi == nil || vmi.UID != first.UID || vmi.Status.Phase != virtv1.Failed {
			t.Errorf("after the failure the VMI is %+v, want the failed one, not rerun", vmi)
		}
	})

	t.Run("Manual follows start and stop requests", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		vm := e.createVM("manual", virtv1.RunStrategyManual, nil)
		e.waitVM("manual", "Stopped", printable(virtv1.VirtualMachineStatusStopped))
		e.stillNoVMI("manual", "Manual without a start request")
		e.request("manual", virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StartRequest})
		vmi := e.waitRunningVMI(vm, "")
		e.request("manual", virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: &vmi.UID})
		e.waitNoVMI("manual")
		e.waitVM("manual", "Stopped with no request left", func(vm *virtv1.VirtualMachine) bool {
			return vm.Status.PrintableStatus == virtv1.VirtualMachineStatusStopped && len(vm.Status.StateChangeRequests) == 0
		})
	})

	t.Run("Halted never starts the VM", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		e.createVM("halted", virtv1.RunStrategyHalted, nil)
		vm := e.waitVM("halted", "Stopped", printable(virtv1.VirtualMachineStatusStopped))
		if c := vmCondition(vm, virtv1.VirtualMachineReady); c == nil || c.Status != "False" || c.Reason != "VMINotExists" {
			t.Errorf("Ready condition %+v, want False, VMINotExists", c)
		}
		e.stillNoVMI("halted", "Halted")
	})

	t.Run("a VMI failing before it runs backs off", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		// No node carries this label: the VMI never leaves Scheduling.
		vm := e.createVM("crashloop", virtv1.RunStrategyAlways, func(vmi *virtv1.VirtualMachineInstance) {
			vmi.Spec.NodeSelector = map[string]string{"virtshard.io/test": "nowhere"}
		})
		var first *virtv1.VirtualMachineInstance
		if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			first = e.vmi("crashloop")
			return first != nil, nil
		}); err != nil {
			t.Fatal("no VMI created")
		}
		e.checkSameRange(vm, first)
		e.endVMI(first, virtv1.Failed)
		looping := e.waitVM("crashloop", "CrashLoopBackOff", printable(virtv1.VirtualMachineStatusCrashLoopBackOff))
		f := looping.Status.StartFailure
		if f == nil || f.ConsecutiveFailCount != 1 || f.LastFailedVMIUID != first.UID || f.RetryAfterTimestamp == nil {
			t.Fatalf("start failure %+v, want 1 failure of %s with a retry time", f, first.UID)
		}
		var second *virtv1.VirtualMachineInstance
		if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			second = e.vmi("crashloop")
			return second != nil && second.UID != first.UID, nil
		}); err != nil {
			t.Fatal("no VMI re-created after the backoff")
		}
		// Timestamps have whole seconds: allow the truncation.
		if second.CreationTimestamp.Add(time.Second).Before(f.RetryAfterTimestamp.Time) {
			t.Errorf("re-created at %s, before the retry time %s", second.CreationTimestamp, f.RetryAfterTimestamp)
		}
	})

	t.Run("deleting the VM deletes its VMI first", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		vm := e.createVM("doomed", virtv1.RunStrategyAlways, nil)
		e.waitRunningVMI(vm, "")
		if err := e.kv.VirtualMachines(e.ns).Delete(context.Background(), "doomed", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := e.kv.VirtualMachines(e.ns).Get(ctx, "doomed", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Fatal("the VM is still there a minute after its deletion")
		}
		if vmi := e.vmi("doomed"); vmi != nil && vmi.DeletionTimestamp == nil {
			t.Errorf("the VM is gone but its VMI %s is not being deleted", vmi.UID)
		}
	})

	t.Run("an orphan VMI of its name is adopted and moves to the VM's range", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		orphan, err := e.kv.VirtualMachineInstances(e.ns).Create(context.Background(), workload.VMI("orphan"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Running on its own first, with a launcher pod on its own range.
		if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			vmi := e.vmi("orphan")
			return vmi != nil && vmi.Status.Phase == virtv1.Running, nil
		}); err != nil {
			t.Fatal("the orphan VMI never ran")
		}
		vm := e.createVM("orphan", virtv1.RunStrategyAlways, nil)
		// Usually elsewhere: 63 of 64 VMs hash to another range than the
		// VMI they adopt. The log says which case this run proved.
		t.Logf("orphan on range %d, its VM on range %d", e.ranges.Owner(orphan), e.ranges.Of(vm))
		var adopted *virtv1.VirtualMachineInstance
		if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			adopted = e.vmi("orphan")
			return adopted != nil && metav1.IsControlledBy(adopted, vm), nil
		}); err != nil {
			t.Fatalf("the VM never adopted its orphan; VMI %+v", adopted)
		}
		if adopted.UID != orphan.UID {
			t.Fatalf("VMI %s, want the orphan %s adopted, not replaced", adopted.UID, orphan.UID)
		}
		e.waitVM("orphan", "Running", printable(virtv1.VirtualMachineStatusRunning))
		// The launcher pod follows the VMI to its new range.
		if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: virtv1.CreatedByLabel + "=" + string(orphan.UID)})
			if err != nil || len(pods.Items) == 0 {
				return false, err
			}
			for _, pod := range pods.Items {
				if pod.Labels[shard.LabelRange] != strconv.Itoa(e.ranges.Of(vm)) {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			t.Errorf("the orphan's launcher pods never moved to the VM's range: %v", err)
		}
		e.checkSameRange(vm, e.vmi("orphan"))
		if vmi := e.vmi("orphan"); vmi.Status.Phase != virtv1.Running {
			t.Errorf("the adopted VMI is %s, want it still Running", vmi.Status.Phase)
		}
	})

	t.Run("a VMI of the same name that another owner controls is reported", func(t *testing.T) {
		t.Parallel()
		e := *e
		e.t = t
		// A real owner, so that the garbage collector keeps its VMI.
		owner, err := e.kube.CoreV1().ConfigMaps(e.ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "squatter-owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		squatter := workload.VMI("squatter")
		squatter.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, corev1.SchemeGroupVersion.WithKind("ConfigMap"))}
		if _, err := e.kv.VirtualMachineInstances(e.ns).Create(context.Background(), squatter, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.createVM("squatter", virtv1.RunStrategyAlways, nil)
		vm := e.waitVM("squatter", "a Failure condition", func(vm *virtv1.VirtualMachine) bool {
			return vmCondition(vm, virtv1.VirtualMachineFailure) != nil
		})
		if c := vmCondition(vm, virtv1.VirtualMachineFailure); c.Status != "True" || c.Reason != "FailedCreate" {
			t.Errorf("Failure condition %+v, want True, FailedCreate", c)
		}
		if vmi := e.vmi("squatter"); vmi == nil || !metav1.IsControlledBy(vmi, owner) {
			t.Errorf("the foreign VMI was touched: %+v", vmi)
		}
	})
}

// TestTemplateChanges: on the real cluster, under 3 replicas, a running
// VM's template change that the VMI cannot take live reports
// RestartRequired until a restart starts the new template; a new node
// selector reaches the running VMI without one.
func TestTemplateChanges(t *testing.T) {
	e := newEnv(t)
	patchVM := func(name, patch string) {
		t.Helper()
		if _, err := e.kv.VirtualMachines(e.ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	restartRequired := func(vm *virtv1.VirtualMachine) bool {
		c := vmCondition(vm, virtv1.VirtualMachineRestartRequired)
		return c != nil && c.Status == corev1.ConditionTrue
	}

	vm := e.createVM("resize", virtv1.RunStrategyAlways, nil)
	first := e.waitRunningVMI(vm, "")
	e.waitVM("resize", "Running", printable(virtv1.VirtualMachineStatusRunning))

	// A selector every simulated node matches: the restarted VMI below
	// runs with it.
	patchVM("resize", `{"spec":{"template":{"spec":{"nodeSelector":{"type":"kwok"}}}}}`)
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		vmi := e.vmi("resize")
		return vmi != nil && vmi.Spec.NodeSelector["type"] == "kwok", nil
	}); err != nil {
		t.Fatalf("the new node selector never reached the running VMI: %+v", e.vmi("resize").Spec.NodeSelector)
	}
	live := e.waitVM("resize", "the live change observed", func(vm *virtv1.VirtualMachine) bool { return vm.Status.DesiredGeneration == vm.Generation })
	if restartRequired(live) || e.vmi("resize").UID != first.UID {
		t.Fatalf("a live change: RestartRequired %v, VMI %s (want %s, no restart)", restartRequired(live), e.vmi("resize").UID, first.UID)
	}

	patchVM("resize", `{"spec":{"template":{"spec":{"domain":{"resources":{"requests":{"memory":"96Mi"}}}}}}}`)
	changed := e.waitVM("resize", "RestartRequired", restartRequired)
	if c := vmCondition(changed, virtv1.VirtualMachineRestartRequired); c.Message != "a non-live-updatable field was changed in the template spec" {
		t.Errorf("RestartRequired message %q, want KubeVirt's", c.Message)
	}
	if changed.Status.ObservedGeneration >= changed.Generation {
		t.Errorf("observed generation %d of %d: the VMI does not run the change", changed.Status.ObservedGeneration, changed.Generation)
	}

	e.request("resize", virtv1.VirtualMachineStateChangeRequest{Action: virtv1.StopRequest, UID: &first.UID})
	second := e.waitRunningVMI(vm, first.UID)
	if got := second.Spec.Domain.Resources.Requests[corev1.ResourceMemory]; got.String() != "96Mi" {
		t.Errorf("the restarted VMI asks for %s, want the new template's 96Mi", got.String())
	}
	e.waitVM("resize", "RestartRequired gone, the new generation observed", func(vm *virtv1.VirtualMachine) bool {
		return !restartRequired(vm) && vm.Status.ObservedGeneration == vm.Generation
	})
}

func hasFinalizer(finalizers []string) bool {
	for _, f := range finalizers {
		if f == virtv1.VirtualMachineControllerFinalizer {
			return true
		}
	}
	return false
}

func vmCondition(vm *virtv1.VirtualMachine, t virtv1.VirtualMachineConditionType) *virtv1.VirtualMachineCondition {
	for i := range vm.Status.Conditions {
		if vm.Status.Conditions[i].Type == t {
			return &vm.Status.Conditions[i]
		}
	}
	return nil
}

// A VM's dataVolumeTemplates on the real cluster and the simulated CDI,
// with 3 replicas: the DataVolume is made first, owned by the VM, and the
// VM says Provisioning while it imports, then runs on it; a template whose
// import failed says DataVolumeError and starts nothing; deleting the VM
// takes its DataVolume with it.
func TestDataVolumeTemplates(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dvs := dynamic.NewForConfigOrDie(clustertest.Config(t)).Resource(cdi.DataVolumes).Namespace(e.ns)
	withTemplate := func(name string, annotations map[string]string) {
		t.Helper()
		vmi := workload.AsWritten(name)
		vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, virtv1.Disk{Name: "root", DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{}}})
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, virtv1.Volume{Name: "root", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: name + "-root"}}})
		always := virtv1.RunStrategyAlways
		vm := &virtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: virtv1.VirtualMachineSpec{
				RunStrategy: &always,
				Template:    &virtv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: vmi.ObjectMeta, Spec: vmi.Spec},
				DataVolumeTemplates: []virtv1.DataVolumeTemplateSpec{{
					ObjectMeta: metav1.ObjectMeta{Name: name + "-root", Annotations: annotations},
					Spec: cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
						Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}},
				}},
			},
		}
		if _, err := e.kv.VirtualMachines(e.ns).Create(ctx, vm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	withTemplate("imported", map[string]string{cdi.HeldAnnotation: ""})
	vm := e.waitVM("imported", "Provisioning", printable(virtv1.VirtualMachineStatusProvisioning))
	dv, err := dvs.Get(ctx, "imported-root", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(dv); ref == nil || ref.UID != vm.UID || dv.GetLabels()[virtv1.CreatedByLabel] != string(vm.UID) {
		t.Errorf("DataVolume owned by %+v, labels %v: want the VM as controller and its UID", ref, dv.GetLabels())
	}
	if _, err := e.kv.VirtualMachineInstances(e.ns).Get(ctx, "imported", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the VMI exists (%v) while its DataVolume imports", err)
	}
	body := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, cdi.HeldAnnotation)
	if _, err := dvs.Patch(ctx, "imported-root", types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitVM("imported", "Running", printable(virtv1.VirtualMachineStatusRunning))

	withTemplate("broken", map[string]string{cdi.FailedAnnotation: "the source is gone"})
	e.waitVM("broken", "DataVolumeError", printable(virtv1.VirtualMachineStatusDataVolumeError))
	e.stillNoVMI("broken", "its DataVolume failed")

	if err := e.kv.VirtualMachines(e.ns).Delete(ctx, "imported", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := dvs.Get(ctx, "imported-root", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Error("the deleted VM's DataVolume is still there after two minutes")
	}
}
