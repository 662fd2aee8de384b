// Package kubevirtcontroller_test runs KubeVirt v1.8.1's own virt-controller
// (bench/kubevirt), the bench's baseline, on the local cluster: it must run
// the workload's VMIs there as virtshard does, with the cluster's simulated
// virt-handler, or the side-by-side figures compare nothing.
package kubevirtcontroller_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/bench/kubevirt"
	"github.com/virtshard/virtshard/bench/proc"
	"github.com/virtshard/virtshard/bench/workload"
	kvclient "github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/test/clustertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// KubeVirt's virt-controller leads, gives each workload VMI exactly one
// launcher pod, which the simulated virt-handler starts, counts those pod
// creates in its metrics, finishes the VMIs' deletion, and leaves no
// leader Lease once stopped.
func TestKubeVirtControllerRunsTheWorkload(t *testing.T) {
	const count = 5
	cfg := clustertest.Config(t)
	opts := clustertest.Options(t)
	ns := clustertest.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(cfg)
	kv, err := kvclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	begin := time.Now()
	c, err := kubevirt.Start(ctx, opts, kubevirt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop(context.Background())
		}
	})
	t.Logf("virt-controller (pid %d, log %s) led %.2f s after Start", c.Pid(), c.LogPath(), time.Since(begin).Seconds())

	vmis := kv.VirtualMachineInstances(ns)
	created := time.Now()
	for i := range count {
		if _, err := vmis.Create(ctx, workload.VMI(fmt.Sprintf("kv-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create VMI: %v", err)
		}
	}
	var phases map[string]virtv1.VirtualMachineInstancePhase
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := vmis.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil // transient: try again
		}
		phases = map[string]virtv1.VirtualMachineInstancePhase{}
		running := 0
		for _, vmi := range list.Items {
			phases[vmi.Name] = vmi.Status.Phase
			if vmi.Status.Phase == virtv1.Running {
				running++
			}
		}
		return running == count, nil
	})
	if err != nil {
		t.Fatalf("%d VMIs not all Running (phases %v; see %s and the simulated virt-handler's log): %v", count, phases, c.LogPath(), err)
	}
	t.Logf("%d VMIs Running %.2f s after their creation", count, time.Since(created).Seconds())

	list, err := vmis.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, vmi := range list.Items {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: virtv1.CreatedByLabel + "=" + string(vmi.UID)})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 {
			t.Errorf("VMI %s has %d launcher pods, want 1", vmi.Name, len(pods.Items))
			continue
		}
		if image := pods.Items[0].Spec.Containers[0].Image; image != kubevirt.DefaultLauncherImage {
			t.Errorf("launcher pod %s runs %s, want %s", pods.Items[0].Name, image, kubevirt.DefaultLauncherImage)
		}
	}

	families, err := c.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	requests := kubevirt.Requests(families)
	if creates := requests["CREATE pods"]; creates < count {
		t.Errorf("%s counts %v pod creates, want at least %d: %v", kubevirt.RequestsMetric, creates, count, requests)
	}
	t.Logf("virt-controller's API requests: %v", requests)

	// Deleted while the controller runs: it deletes the launcher pods and,
	// once the simulated virt-handler has ended the domains, takes its
	// finalizer off, which nothing else would.
	deleted := time.Now()
	if err := vmis.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := vmis.List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("VMIs not gone 30 s after their deletion: %v", err)
	} else {
		t.Logf("%d VMIs gone %.2f s after their deletion", count, time.Since(deleted).Seconds())
	}

	cpu, err := proc.CPUSeconds(c.Pid())
	if err != nil {
		t.Fatal(err)
	}
	rss, err := proc.PeakRSSBytes(c.Pid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("virt-controller used %.2f CPU seconds, peak RSS %.0f MiB", cpu, float64(rss)/(1<<20))

	stopped = true
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	default:
		t.Error("virt-controller still runs after Stop")
	}
	_, err = kube.CoordinationV1().Leases(kubevirt.Namespace).Get(ctx, kubevirt.LeaseName, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("Lease %s/%s after Stop: %v, want NotFound", kubevirt.Namespace, kubevirt.LeaseName, err)
	}
}
