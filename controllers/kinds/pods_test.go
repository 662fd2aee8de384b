package kinds

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/template"
)

// objects holds the secondary network's NetworkAttachmentDefinition.
var objects = &template.StaticObjects{NADs: []*metav1.PartialObjectMetadata{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "blue-net"}}}}

// runningLauncherPod is the launcher pod of a container-disk VMI with a
// secondary network, rendered as virtshard creates it, then run: placed,
// its networks reported by Multus, its containers' images resolved.
func runningLauncherPod(t *testing.T) (*virtv1.VirtualMachineInstance, *corev1.Pod) {
	t.Helper()
	vmi := &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a", UID: "vmi-uid"},
		Spec: virtv1.VirtualMachineInstanceSpec{
			Domain: virtv1.DomainSpec{
				Resources: virtv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
				Devices: virtv1.Devices{
					Disks:      []virtv1.Disk{{Name: "root"}, {Name: "cloudinit"}},
					Interfaces: []virtv1.Interface{{Name: "default"}, {Name: "blue"}},
				},
			},
			Networks: []virtv1.Network{
				{Name: "default", NetworkSource: virtv1.NetworkSource{Pod: &virtv1.PodNetwork{}}},
				{Name: "blue", NetworkSource: virtv1.NetworkSource{Multus: &virtv1.MultusNetwork{NetworkName: "blue-net"}}},
			},
			Volumes: []virtv1.Volume{
				{Name: "root", VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{Image: "registry.example/fedora:41"}}},
				{Name: "cloudinit", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}}},
			},
		},
		Status: virtv1.VirtualMachineInstanceStatus{Phase: virtv1.Running, NodeName: "node-1"},
	}
	pod, err := template.Render(vmi, 0, template.DefaultOptions(), clusterconfig.DefaultConfig("amd64"), objects)
	if err != nil {
		t.Fatal(err)
	}
	pod.UID, pod.ResourceVersion, pod.Spec.NodeName = "pod-uid", "12", "node-1"
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "virtshard", Operation: metav1.ManagedFieldsOperationUpdate}}
	pod.Annotations[template.MultusNetworkStatusAnnotation] = `[{"name":"kindnet","interface":"eth0","default":true},{"name":"default/blue-net","interface":"pod16477688c0e"}]`
	pod.Status = corev1.PodStatus{
		Phase:    corev1.PodRunning,
		QOSClass: corev1.PodQOSBurstable,
		PodIP:    "10.0.0.7",
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		},
	}
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image + "@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		})
	}
	for _, c := range pod.Spec.InitContainers {
		pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, ImageID: c.Image + "@sha256:" + "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}},
		})
	}
	return vmi, pod
}

// What the controllers derive from a launcher pod is the same from the
// trimmed pod the cache keeps: the migration target (which pins the
// source's image digests and interface names), the interfaces' pod names.
func TestTrimPodKeepsWhatControllersRead(t *testing.T) {
	vmi, pod := runningLauncherPod(t)
	obj, err := TrimPod(pod.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	trimmed := obj.(*corev1.Pod)

	m := &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m", UID: "m-uid"},
		Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name}}
	render := func(source *corev1.Pod) *corev1.Pod {
		target, err := template.RenderMigrationTarget(vmi.DeepCopy(), m, source, 0, template.DefaultOptions(), clusterconfig.DefaultConfig("amd64"), objects)
		if err != nil {
			t.Fatal(err)
		}
		return target
	}
	if diff := cmp.Diff(render(pod), render(trimmed)); diff != "" {
		t.Errorf("the migration target rendered from the trimmed source differs (-full +trimmed):\n%s", diff)
	}
	if diff := cmp.Diff(template.PodInterfaceNames(vmi.Spec.Networks, pod), template.PodInterfaceNames(vmi.Spec.Networks, trimmed)); diff != "" {
		t.Errorf("interface names differ (-full +trimmed):\n%s", diff)
	}

	// The rest of what the controllers read, field by field.
	kept := func(p *corev1.Pod) any {
		var images, volumes, statuses []string
		for _, c := range p.Spec.Containers {
			images = append(images, c.Name+"="+c.Image)
		}
		for _, v := range p.Spec.Volumes {
			volumes = append(volumes, v.Name)
		}
		for _, s := range append(p.Status.ContainerStatuses, p.Status.InitContainerStatuses...) {
			statuses = append(statuses, s.Name+"="+s.ImageID)
		}
		meta := p.ObjectMeta
		meta.ManagedFields = nil
		return []any{meta, p.Spec.NodeName, images, volumes, p.Status.Phase, p.Status.QOSClass, p.Status.Conditions, statuses}
	}
	if diff := cmp.Diff(kept(pod), kept(trimmed)); diff != "" {
		t.Errorf("a field the controllers read was dropped (-full +trimmed):\n%s", diff)
	}
	if trimmed.ManagedFields != nil || trimmed.Spec.InitContainers != nil || trimmed.Status.PodIP != "" || trimmed.Spec.Containers[0].Resources.Requests != nil {
		t.Error("the trimmed pod keeps fields no controller reads")
	}

	again, err := TrimPod(trimmed.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(trimmed, again); diff != "" {
		t.Errorf("trimming twice changes the pod (-once +twice):\n%s", diff)
	}
	full, _ := json.Marshal(pod)
	small, _ := json.Marshal(trimmed)
	t.Logf("launcher pod: %d bytes of JSON, %d trimmed", len(full), len(small))
}

// A tombstone, or anything else, passes unchanged.
func TestTrimPodLeavesOtherObjects(t *testing.T) {
	tomb := struct{ Key string }{"default/a"}
	if got, err := TrimPod(tomb); err != nil || got != tomb {
		t.Errorf("TrimPod(tombstone) = %v, %v", got, err)
	}
}
