package cluster_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/test/clustertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

func TestServerReportsPinnedVersion(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(clustertest.Config(t))
	info, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if info.GitVersion != "v1.37.2" {
		t.Fatalf("server reports %q, want v1.37.2 (version ldflags missing?)", info.GitVersion)
	}
}

func TestKwokNodesAdvertiseKubeVirtDevices(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(clustertest.Config(t))
	ctx := context.Background()
	node, err := client.CoreV1().Nodes().Get(ctx, cluster.NodeName(0), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	if node.Labels[cluster.SchedulableLabel] != "true" {
		t.Errorf("node labels %v lack %s=true", node.Labels, cluster.SchedulableLabel)
	}
	for _, device := range []corev1.ResourceName{"devices.kubevirt.io/kvm", "devices.kubevirt.io/tun", "devices.kubevirt.io/vhost-net", "devices.kubevirt.io/vhost-vsock"} {
		if q, ok := node.Status.Allocatable[device]; !ok || q.Value() < 1000 {
			t.Errorf("node allocatable %s = %v, want at least 1000", device, q.String())
		}
	}
	if pods := node.Status.Allocatable[corev1.ResourcePods]; pods.Value() < cluster.DefaultPodsPerNode {
		t.Errorf("node allocatable pods = %d, want %d", pods.Value(), cluster.DefaultPodsPerNode)
	}
	// kwok's node stage must have made the node Ready, or nothing schedules.
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		t.Errorf("node %s is not Ready: %v", node.Name, node.Status.Conditions)
	}
}

func TestPodWithKwokTolerationRunsOnKwokNode(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(clustertest.Config(t))
	ns := clustertest.Namespace(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "pause"}},
			Tolerations: []corev1.Toleration{{
				Key: cluster.KwokNodeTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
			}},
		},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	var got *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning, err
	})
	if err != nil {
		t.Fatalf("pod did not reach Running: %v (last status %+v)", err, got.Status)
	}
	if !strings.HasPrefix(got.Spec.NodeName, "kwok-node-") {
		t.Fatalf("pod ran on %q, want a kwok node", got.Spec.NodeName)
	}
	// Its IP comes from its node's own pod CIDR.
	var i int
	if _, err := fmt.Sscanf(got.Spec.NodeName, "kwok-node-%d", &i); err != nil {
		t.Fatal(err)
	}
	_, cidr, err := net.ParseCIDR(cluster.PodCIDR(i))
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(got.Status.PodIP); ip == nil || !cidr.Contains(ip) {
		t.Errorf("pod IP %q on %s, want one of its pod CIDR %s", got.Status.PodIP, got.Spec.NodeName, cidr)
	}
}
