package vmi

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// The expected interfaces are what KubeVirt v1.8.1's UpdateVMIStatus
// (pkg/network/controllers/vmi.go) computes for the same VMI and pod.
func TestSetInterfaces(t *testing.T) {
	sum := sha256.Sum256([]byte("blue"))
	blueHashed := "pod" + hex.EncodeToString(sum[:])[:11]
	podNet := virtv1.Network{Name: "default", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}}
	blue := virtv1.Network{Name: "blue", NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{NetworkName: "blue-net"}}}
	multusDefault := virtv1.Network{Name: "main", NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{NetworkName: "main-net", Default: true}}}
	withStatus := func(status string) *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if status != "" {
			pod.Annotations["k8s.v1.cni.cncf.io/network-status"] = status
		}
		return pod
	}
	fromHandler := virtv1.VirtualMachineInstanceNetworkInterface{Name: "default", IP: "10.0.0.7", InfoSource: "domain, guest-agent"}
	unspecified := virtv1.VirtualMachineInstanceNetworkInterface{InterfaceName: "eth9", IP: "10.9.9.9", InfoSource: "guest-agent"}
	blueFromHandler := virtv1.VirtualMachineInstanceNetworkInterface{Name: "blue", MAC: "02:00:00:00:00:01", InfoSource: "domain, multus-status"}

	for _, tc := range []struct {
		name     string
		networks []virtv1.Network
		before   []virtv1.VirtualMachineInstanceNetworkInterface
		pod      *corev1.Pod
		want     []virtv1.VirtualMachineInstanceNetworkInterface
	}{
		{name: "no networks", pod: withStatus("")},
		{name: "pod network without Multus", networks: []virtv1.Network{podNet}, pod: withStatus(""),
			want: []virtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", PodInterfaceName: "eth0"}}},
		{name: "unreadable network status", networks: []virtv1.Network{podNet}, pod: withStatus("{not json"),
			want: []virtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", PodInterfaceName: "eth0"}}},
		{name: "secondary network Multus reports, hashed naming", networks: []virtv1.Network{podNet, blue},
			pod: withStatus(`[{"name":"k8s-pod-network","interface":"eth0","default":true},{"name":"ns/blue-net","interface":"` + blueHashed + `"}]`),
			want: []virtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", PodInterfaceName: "eth0"},
				{Name: "blue", InfoSource: "multus-status", PodInterfaceName: blueHashed}}},
		{name: "secondary network of a pre-v1.1 pod, ordinal naming", networks: []virtv1.Network{podNet, blue},
			pod: withStatus(`[{"name":"k8s-pod-network","interface":"eth0","default":true},{"name":"ns/blue-net","interface":"net1"}]`),
			want: []virtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", PodInterfaceName: "eth0"},
				{Name: "blue", InfoSource: "multus-status", PodInterfaceName: "net1"}}},
		{name: "secondary network Multus does not report", networks: []virtv1.Network{podNet, blue},
			pod:  withStatus(`[{"name":"k8s-pod-network","interface":"eth0","default":true}]`),
			want: []virtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", PodInterfaceName: "eth0"}}},
		{name: "virt-handler's statuses are kept, Multus' source updated", networks: []virtv1.Network{podNet, blue},
			before: []virtv1.VirtualMachineInstanceNetworkInterface{fromHandler, blueFromHandler, unspecified},
			pod:    withStatus(`[{"name":"k8s-pod-network","interface":"eth0","default":true}]`),
			want: []virtv1.VirtualMachineInstanceNetworkInterface{
				{Name: "default", IP: "10.0.0.7", InfoSource: "domain, guest-agent", PodInterfaceName: "eth0"},
				{Name: "blue", MAC: "02:00:00:00:00:01", InfoSource: "domain", PodInterfaceName: blueHashed},
				unspecified}},
		{name: "Multus default network names the primary interface", networks: []virtv1.Network{multusDefault},
			pod:  withStatus(`[{"name":"ns/main-net","interface":"ens3","default":true}]`),
			want: []virtv1.VirtualMachineInstanceNetworkInterface{{Name: "main", PodInterfaceName: "ens3"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &virtv1.VirtualMachineInstance{Spec: virtv1.VirtualMachineInstanceSpec{Networks: tc.networks}}
			v.Status.Interfaces = tc.before
			setInterfaces(v, tc.pod)
			if diff := cmp.Diff(tc.want, v.Status.Interfaces); diff != "" {
				t.Errorf("status.interfaces (-want +got):\n%s", diff)
			}
		})
	}
}
