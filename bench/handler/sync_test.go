package handler

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	kvfake "github.com/virtshard/virtshard/client/kubevirt/fake"
	"github.com/virtshard/virtshard/client/optimisticfake"
)

const (
	ns       = "default"
	node1    = "node-1"
	node2    = "node-2"
	vmiUID   = "vmi-uid"
	vmiName  = "vmi"
	vmiKey   = ns + "/" + vmiName
	podIP    = "10.1.0.7"
	targetIP = "10.2.0.9"
)

// fixture runs one node's agents on fake clientsets: sync is called by
// the test, as a worker would.
type fixture struct {
	t      *testing.T
	kube   *kubefake.Clientset
	kv     *kvfake.Clientset
	clock  *clocktesting.FakeClock
	events *record.FakeRecorder
	agents map[string]*agent
}

func newFixture(t *testing.T, kubeObjects []runtime.Object, kvObjects ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{
		t: t,
		kube: kubefake.NewClientset(append(kubeObjects,
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node1}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node2}})...),
		kv:     kvfake.NewClientset(kvObjects...),
		clock:  clocktesting.NewFakeClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)),
		events: record.NewFakeRecorder(100),
		agents: map[string]*agent{},
	}
	optimisticfake.Install(&f.kube.Fake, f.kube.Tracker())
	optimisticfake.Install(&f.kv.Fake, f.kv.Tracker())
	h, err := New(Options{Kube: f.kube, KubeVirt: f.kv, Clock: f.clock,
		Recorder: func(string) record.EventRecorder { return f.events }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, name := range []string{node1, node2} {
		a, err := h.newAgent(name)
		if err != nil {
			t.Fatal(err)
		}
		// The fake's watches do not select: the agent checks the node.
		a.start(ctx)
		t.Cleanup(a.stop)
		f.agents[name] = a
	}
	if !cache.WaitForCacheSync(ctx.Done(), f.agents[node1].synced, f.agents[node2].synced) {
		t.Fatal("caches did not sync")
	}
	return f
}

// sync runs node's agent on the VMI once its caches hold what the fakes
// hold, and returns the writes it sent.
func (f *fixture) sync(node string) (time.Duration, []k8stesting.Action) {
	f.t.Helper()
	f.settle()
	f.kube.ClearActions()
	f.kv.ClearActions()
	after, err := f.agents[node].sync(context.Background(), vmiKey)
	if err != nil {
		f.t.Fatalf("sync on %s: %v", node, err)
	}
	var writes []k8stesting.Action
	for _, a := range append(f.kv.Actions(), f.kube.Actions()...) {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			writes = append(writes, a)
		}
	}
	return after, writes
}

// settle waits until every agent's caches hold the fakes' VMI and pods.
func (f *fixture) settle() {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		want := map[string]string{}
		if vmi, err := f.kv.VirtualMachineInstances(ns).Get(ctx, vmiName, metav1.GetOptions{}); err == nil {
			want[vmiKey] = vmi.ResourceVersion
		}
		pods, _ := f.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			want["pod/"+p.Name] = p.ResourceVersion
		}
		// The fakes list by label but watch everything: a store must hold
		// the newest VMI where its selector would select it, and may hold
		// it elsewhere too.
		var labels map[string]string
		if vmi, err := f.kv.VirtualMachineInstances(ns).Get(ctx, vmiName, metav1.GetOptions{}); err == nil {
			labels = vmi.Labels
		}
		for _, a := range f.agents {
			for key, rv := range want {
				type held struct {
					store    cache.Store
					selected bool // by its watch's selector: it must hold the object
				}
				var stores []held
				k := key
				if name, ok := strings.CutPrefix(key, "pod/"); ok {
					stores, k = []held{{a.pods.GetStore(), true}}, ns+"/"+name
				} else {
					stores = []held{{a.vmis.GetStore(), labels[virtv1.NodeNameLabel] == a.node},
						{a.targets.GetStore(), labels[virtv1.MigrationTargetNodeNameLabel] == a.node}}
				}
				for _, h := range stores {
					obj, ok, _ := h.store.GetByKey(k)
					if (ok || h.selected) && (!ok || obj.(metav1.Object).GetResourceVersion() != rv) {
						return false, nil
					}
				}
			}
		}
		return true, nil
	})
	if err != nil {
		f.t.Fatal("caches did not catch up with the fakes")
	}
}

func (f *fixture) vmi() *virtv1.VirtualMachineInstance {
	f.t.Helper()
	vmi, err := f.kv.VirtualMachineInstances(ns).Get(context.Background(), vmiName, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return vmi
}

func (f *fixture) event() string {
	select {
	case e := <-f.events.Events:
		return e
	default:
		return ""
	}
}

// scheduledVMI is the realistic VMI as virt-controller hands it to node1.
func scheduledVMI() *virtv1.VirtualMachineInstance {
	virtio := virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}
	guest := resource.MustParse("128Mi")
	return &virtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: vmiName, Namespace: ns, UID: vmiUID, ResourceVersion: "1",
			Labels: map[string]string{virtv1.NodeNameLabel: node1}},
		Spec: virtv1.VirtualMachineInstanceSpec{
			Domain: virtv1.DomainSpec{
				Machine: &virtv1.Machine{Type: "q35"},
				Devices: virtv1.Devices{
					Disks:      []virtv1.Disk{{Name: "containerdisk", DiskDevice: virtio}, {Name: "cloudinitdisk", DiskDevice: virtio}},
					Interfaces: []virtv1.Interface{{Name: "default", InterfaceBindingMethod: virtv1.InterfaceBindingMethod{Masquerade: &virtv1.InterfaceMasquerade{}}}},
				},
			},
			Networks: []virtv1.Network{*virtv1.DefaultPodNetwork()},
			Volumes: []virtv1.Volume{
				{Name: "containerdisk", VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{Image: "registry/disk:v1"}}},
				{Name: "cloudinitdisk", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{UserData: "#cloud-config"}}},
			},
		},
		Status: virtv1.VirtualMachineInstanceStatus{
			Phase:        virtv1.Scheduled,
			NodeName:     node1,
			Memory:       &virtv1.MemoryStatus{GuestAtBoot: &guest, GuestRequested: &guest},
			VolumeStatus: []virtv1.VolumeStatus{{Name: "cloudinitdisk"}, {Name: "containerdisk"}},
			Interfaces:   []virtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", PodInterfaceName: "eth0"}},
		},
	}
}

func launcherPod(name, node, ip string, phase corev1.PodPhase, created time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(name + "-uid"), ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(created),
			Labels:            map[string]string{virtv1.AppLabel: "virt-launcher", virtv1.CreatedByLabel: vmiUID},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance",
				Name: vmiName, UID: vmiUID, Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: phase, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "compute", Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(created)}}}}},
	}
}

func onlyUpdate(t *testing.T, writes []k8stesting.Action, resource string) {
	t.Helper()
	if len(writes) != 1 || writes[0].GetVerb() != "update" || writes[0].GetResource().Resource != resource {
		t.Fatalf("writes %v, want one update of %s", kvfake.Writes(writes), resource)
	}
}

func condition(vmi *virtv1.VirtualMachineInstance, c virtv1.VirtualMachineInstanceConditionType) corev1.ConditionStatus {
	for _, x := range vmi.Status.Conditions {
		if x.Type == c {
			return x.Status
		}
	}
	return ""
}

func TestAHandedOffVMIIsDefinedThenStartedThenSizedInThreeUpdates(t *testing.T) {
	start := time.Now()
	f := newFixture(t, []runtime.Object{launcherPod("virt-launcher-vmi-abcde", node1, podIP, corev1.PodRunning, start)}, scheduledVMI())

	_, writes := f.sync(node1)
	onlyUpdate(t, writes, "virtualmachineinstances")
	vmi := f.vmi()
	if vmi.Status.Phase != virtv1.Scheduled || vmi.Status.SelinuxContext != "none" || vmi.Status.MigrationMethod != virtv1.BlockMigration ||
		condition(vmi, virtv1.VirtualMachineInstanceIsMigratable) != corev1.ConditionTrue ||
		condition(vmi, virtv1.VirtualMachineInstanceIsStorageLiveMigratable) != corev1.ConditionTrue {
		t.Errorf("defined VMI status %+v, want Scheduled, SELinux none, BlockMigration, (Storage)LiveMigratable", vmi.Status)
	}
	if cd := vmi.Status.VolumeStatus[1].ContainerDiskVolume; cd == nil || cd.Checksum == 0 || cd.Checksum > 1<<31-1 {
		t.Errorf("container disk volume status %+v, want a checksum within the CRD's int32", cd)
	}
	if e := f.event(); e != "Normal Created VirtualMachineInstance defined." {
		t.Errorf("event %q, want Created", e)
	}

	_, writes = f.sync(node1)
	onlyUpdate(t, writes, "virtualmachineinstances")
	vmi = f.vmi()
	s := vmi.Status
	if s.Phase != virtv1.Running || s.Machine == nil || s.Machine.Type != MachineType || s.Memory.GuestCurrent == nil ||
		s.Memory.GuestCurrent.Cmp(resource.MustParse("128Mi")) != 0 {
		t.Errorf("started VMI status %+v, want Running, machine %s, guest memory 128Mi", s, MachineType)
	}
	if last := s.PhaseTransitionTimestamps[len(s.PhaseTransitionTimestamps)-1]; last.Phase != virtv1.Running || !last.PhaseTransitionTimestamp.Equal(&metav1.Time{Time: f.clock.Now()}) {
		t.Errorf("phase transitions %+v, want Running at %v last", s.PhaseTransitionTimestamps, f.clock.Now())
	}
	if len(s.Interfaces) != 1 || s.Interfaces[0].IP != podIP || s.Interfaces[0].PodInterfaceName != "eth0" || s.Interfaces[0].InfoSource != "domain" ||
		!strings.HasPrefix(s.Interfaces[0].MAC, "52:54:00:") || s.Interfaces[0].LinkState != "up" {
		t.Errorf("interfaces %+v, want the pod's IP on eth0 from the domain, a QEMU MAC, link up", s.Interfaces)
	}
	if s.VolumeStatus[0].Target != "vdb" || s.VolumeStatus[1].Target != "vda" {
		t.Errorf("volume targets %q %q, want vdb (cloud-init) and vda (container disk)", s.VolumeStatus[0].Target, s.VolumeStatus[1].Target)
	}
	if e := f.event(); e != "Normal Started VirtualMachineInstance started." {
		t.Errorf("event %q, want Started", e)
	}

	_, writes = f.sync(node1)
	onlyUpdate(t, writes, "virtualmachineinstances")
	if vs := f.vmi().Status.VolumeStatus; vs[0].Size != isoSize || vs[1].Size != 0 {
		t.Errorf("volume sizes %d %d, want the cloud-init ISO's only", vs[0].Size, vs[1].Size)
	}
	if _, writes = f.sync(node1); len(writes) != 0 {
		t.Errorf("a running VMI with nothing new got %v", kvfake.Writes(writes))
	}
}

func TestWhatTheAgentLeavesAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		edit func(*virtv1.VirtualMachineInstance)
		node string
	}{
		{name: "a VMI whose launcher pod does not run yet",
			pod: launcherPod("virt-launcher-vmi-abcde", node1, "", corev1.PodPending, time.Now()), node: node1},
		{name: "a VMI of another node",
			pod: launcherPod("virt-launcher-vmi-abcde", node1, podIP, corev1.PodRunning, time.Now()), node: node2},
		{name: "a final VMI",
			pod:  launcherPod("virt-launcher-vmi-abcde", node1, podIP, corev1.PodRunning, time.Now()),
			edit: func(v *virtv1.VirtualMachineInstance) { v.Status.Phase = virtv1.Failed }, node: node1},
		{name: "a VMI not handed off yet",
			edit: func(v *virtv1.VirtualMachineInstance) {
				v.Status.Phase, v.Status.NodeName, v.Labels = virtv1.Scheduling, "", nil
			}, node: node1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := scheduledVMI()
			if tc.edit != nil {
				tc.edit(vmi)
			}
			var pods []runtime.Object
			if tc.pod != nil {
				pods = append(pods, tc.pod)
			}
			f := newFixture(t, pods, vmi)
			if _, writes := f.sync(tc.node); len(writes) != 0 {
				t.Errorf("writes %v, want none", kvfake.Writes(writes))
			}
		})
	}
}

func TestADeletedRunningVMIEndsSucceeded(t *testing.T) {
	vmi := scheduledVMI()
	vmi.Status.Phase = virtv1.Running
	vmi.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	vmi.Finalizers = []string{virtv1.VirtualMachineInstanceFinalizer}
	f := newFixture(t, []runtime.Object{launcherPod("virt-launcher-vmi-abcde", node1, podIP, corev1.PodRunning, time.Now())}, vmi)
	_, writes := f.sync(node1)
	onlyUpdate(t, writes, "virtualmachineinstances")
	got := f.vmi()
	if got.Status.Phase != virtv1.Succeeded || len(got.Finalizers) != 1 {
		t.Errorf("phase %s, finalizers %q: want Succeeded and the finalizer left to virt-controller", got.Status.Phase, got.Finalizers)
	}
	if e := f.event(); e != "Normal Stopped The VirtualMachineInstance was shut down." {
		t.Errorf("event %q, want Stopped", e)
	}
}

// A migration from node1 to node2, once virt-controller handed it over:
// each step is one write by the node whose turn it is.
func TestAMigrationIsPlayedByTheTargetAndTheSource(t *testing.T) {
	start := time.Now().Add(-time.Minute)
	vmi := scheduledVMI()
	vmi.Status.Phase = virtv1.Running
	vmi.Status.MigrationMethod = virtv1.BlockMigration
	vmi.Labels[virtv1.MigrationTargetNodeNameLabel] = node2
	vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-uid",
		SourceNode: node1, SourcePod: "virt-launcher-vmi-abcde", TargetNode: node2, TargetPod: "virt-launcher-vmi-fghij"}
	source := launcherPod("virt-launcher-vmi-abcde", node1, podIP, corev1.PodRunning, start)
	target := launcherPod("virt-launcher-vmi-fghij", node2, targetIP, corev1.PodRunning, start.Add(time.Second))
	f := newFixture(t, []runtime.Object{source, target}, vmi)

	if _, writes := f.sync(node1); len(writes) != 0 {
		t.Fatalf("the source started before the target was prepared: %v", kvfake.Writes(writes))
	}
	_, writes := f.sync(node2)
	onlyUpdate(t, writes, "virtualmachineinstances")
	ms := f.vmi().Status.MigrationState
	if ms.TargetNodeAddress != targetIP || len(ms.TargetDirectMigrationNodePorts) != 3 {
		t.Fatalf("prepared target %+v, want its address and three proxy ports (block migration)", ms)
	}
	if _, writes = f.sync(node2); len(writes) != 0 {
		t.Fatalf("the target went on before the source started: %v", kvfake.Writes(writes))
	}

	_, writes = f.sync(node1)
	onlyUpdate(t, writes, "virtualmachineinstances")
	if ms = f.vmi().Status.MigrationState; ms.StartTimestamp == nil || ms.Mode != virtv1.MigrationPreCopy {
		t.Fatalf("started migration %+v, want a start and PreCopy", ms)
	}
	after, writes := f.sync(node2)
	if len(writes) != 0 || after != DefaultMigrationDuration {
		t.Fatalf("the target detected the domain at once (%v, look again in %v); want it after %v", kvfake.Writes(writes), after, DefaultMigrationDuration)
	}
	f.clock.Step(DefaultMigrationDuration)
	_, writes = f.sync(node2)
	onlyUpdate(t, writes, "virtualmachineinstances")
	if ms = f.vmi().Status.MigrationState; !ms.TargetNodeDomainDetected || ms.TargetNodeDomainReadyTimestamp == nil {
		t.Fatalf("after the migration's duration %+v, want the domain detected and ready", ms)
	}
	_, writes = f.sync(node2)
	onlyUpdate(t, writes, "virtualmachineinstances")
	got := f.vmi()
	if got.Status.NodeName != node2 || got.Labels[virtv1.NodeNameLabel] != node2 || got.Status.MigrationState.EndTimestamp == nil ||
		got.Status.MigrationTransport != virtv1.MigrationTransportUnix {
		t.Fatalf("taken over: node %s, label %s, migration %+v; want node2 and an end", got.Status.NodeName, got.Labels[virtv1.NodeNameLabel], got.Status.MigrationState)
	}
	if e := f.events; len(e.Events) == 0 {
		t.Error("no events recorded")
	}

	// The source's launcher exits once the VMI has left its node.
	_, writes = f.sync(node1)
	if len(writes) != 1 || writes[0].GetResource().Resource != "pods" || writes[0].GetSubresource() != "status" {
		t.Fatalf("writes %v, want the source pod's status", kvfake.Writes(writes))
	}
	pod, err := f.kube.CoreV1().Pods(ns).Get(context.Background(), source.Name, metav1.GetOptions{})
	if err != nil || pod.Status.Phase != corev1.PodSucceeded || pod.Status.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("source pod %+v (%v), want Succeeded with its container terminated", pod.Status, err)
	}

	// Once the VMI left node1's watch (label moved), node2 completes it.
	_, writes = f.sync(node2)
	onlyUpdate(t, writes, "virtualmachineinstances")
	if !f.vmi().Status.MigrationState.Completed {
		t.Fatal("migration not completed")
	}
	_, writes = f.sync(node2)
	onlyUpdate(t, writes, "virtualmachineinstances")
	if label, ok := f.vmi().Labels[virtv1.MigrationTargetNodeNameLabel]; ok {
		t.Fatalf("target label %q kept after the migration completed", label)
	}
	if target, err := f.kube.CoreV1().Pods(ns).Get(context.Background(), target.Name, metav1.GetOptions{}); err != nil || target.Status.Phase != corev1.PodRunning {
		t.Errorf("target pod %v (%v), want it left running", target.Status.Phase, err)
	}
}

// TestAMigrationTheVMIAsksToFailIsReportedFailedBySource: with
// FailMigrationAnnotation the target never sees the domain, and the source
// reports the failure with its reason after the migration's duration, as
// virt-handler's setMigrationProgressStatus does; the target then lets go.
// startedMigration is a Running VMI on node1 whose migration to node2
// the target prepared and the source started; annotations go on the VMI.
func startedMigration(t *testing.T, annotations map[string]string) (f *fixture, target *corev1.Pod) {
	t.Helper()
	start := time.Now().Add(-time.Minute)
	vmi := scheduledVMI()
	vmi.Status.Phase = virtv1.Running
	vmi.Annotations = annotations
	vmi.Labels[virtv1.MigrationTargetNodeNameLabel] = node2
	vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-uid",
		SourceNode: node1, SourcePod: "virt-launcher-vmi-abcde", TargetNode: node2, TargetPod: "virt-launcher-vmi-fghij"}
	source := launcherPod("virt-launcher-vmi-abcde", node1, podIP, corev1.PodRunning, start)
	target = launcherPod("virt-launcher-vmi-fghij", node2, targetIP, corev1.PodRunning, start.Add(time.Second))
	f = newFixture(t, []runtime.Object{source, target}, vmi)

	f.sync(node2) // prepare the target
	f.sync(node1) // start
	if ms := f.vmi().Status.MigrationState; ms.StartTimestamp == nil {
		t.Fatalf("migration %+v not started", ms)
	}
	return f, target
}

func TestAMigrationTheVMIAsksToFailIsReportedFailedBySource(t *testing.T) {
	f, target := startedMigration(t, map[string]string{FailMigrationAnnotation: "the guest refused"})
	f.clock.Step(DefaultMigrationDuration)
	if _, writes := f.sync(node2); len(writes) != 0 {
		t.Fatalf("the target detected a domain that never arrives: %v", kvfake.Writes(writes))
	}
	_, writes := f.sync(node1)
	onlyUpdate(t, writes, "virtualmachineinstances")
	ms := f.vmi().Status.MigrationState
	if !ms.Failed || ms.EndTimestamp == nil || ms.FailureReason != "the guest refused" || ms.Completed {
		t.Fatalf("migration %+v, want Failed with the reason and an end, not Completed", ms)
	}
	if f.vmi().Status.NodeName != node1 {
		t.Errorf("the VMI moved to %s; it stays on the source", f.vmi().Status.NodeName)
	}
	// The target's launcher waits for the migration controller to see
	// the failure, then exits; then the target lets go of the VMI.
	m := &virtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: ns, UID: "m-uid"},
		Status: virtv1.VirtualMachineInstanceMigrationStatus{Phase: virtv1.MigrationRunning}}
	m, err := f.kv.Migrations(ns).Create(context.Background(), m, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after, writes := f.sync(node2); len(writes) != 0 || after <= 0 {
		t.Fatalf("with the migration still running the target wrote %v and looks again after %v; want no write and a wait",
			kvfake.Writes(writes), after)
	}
	m.Status.Phase = virtv1.MigrationFailed
	if _, err := f.kv.Migrations(ns).UpdateStatus(context.Background(), m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, writes = f.sync(node2)
	if len(writes) != 1 || writes[0].GetResource().Resource != "pods" || writes[0].GetSubresource() != "status" {
		t.Fatalf("writes %v, want the target pod's status", kvfake.Writes(writes))
	}
	if pod, err := f.kube.CoreV1().Pods(ns).Get(context.Background(), target.Name, metav1.GetOptions{}); err != nil || pod.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("target pod %v (%v), want Succeeded", pod.Status.Phase, err)
	}
	_, writes = f.sync(node2)
	onlyUpdate(t, writes, "virtualmachineinstances")
	if _, ok := f.vmi().Labels[virtv1.MigrationTargetNodeNameLabel]; ok {
		t.Error("the target kept its label after the migration failed")
	}
}

// TestAMigrationAskedToAbortIsReportedFailedBySource: once the VMI's
// migration state asks for an abort (its migration was deleted), the
// source reports the migration failed with the abort succeeded, and the
// VMI stays on the source.
func TestAMigrationAskedToAbortIsReportedFailedBySource(t *testing.T) {
	f, _ := startedMigration(t, nil)
	asked := f.vmi()
	asked.Status.MigrationState.AbortRequested = true
	if _, err := f.kv.VirtualMachineInstances(ns).Update(context.Background(), asked, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, writes := f.sync(node1)
	onlyUpdate(t, writes, "virtualmachineinstances")
	ms := f.vmi().Status.MigrationState
	if !ms.Failed || ms.AbortStatus != virtv1.MigrationAbortSucceeded || ms.EndTimestamp == nil || ms.Completed {
		t.Fatalf("migration %+v, want Failed with the abort succeeded and an end, not Completed", ms)
	}
	if f.vmi().Status.NodeName != node1 {
		t.Errorf("the VMI moved to %s; it stays on the source", f.vmi().Status.NodeName)
	}
}

// TestAVMIsMigrationDurationAnnotationSetsHowLongItsDomainTakes: the
// target waits the VMI's own duration before it sees the domain.
func TestAVMIsMigrationDurationAnnotationSetsHowLongItsDomainTakes(t *testing.T) {
	start := time.Now().Add(-time.Minute)
	vmi := scheduledVMI()
	vmi.Status.Phase = virtv1.Running
	vmi.Annotations = map[string]string{MigrationDurationAnnotation: "30s"}
	vmi.Labels[virtv1.MigrationTargetNodeNameLabel] = node2
	vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "m-uid",
		SourceNode: node1, SourcePod: "virt-launcher-vmi-abcde", TargetNode: node2, TargetPod: "virt-launcher-vmi-fghij"}
	source := launcherPod("virt-launcher-vmi-abcde", node1, podIP, corev1.PodRunning, start)
	target := launcherPod("virt-launcher-vmi-fghij", node2, targetIP, corev1.PodRunning, start.Add(time.Second))
	f := newFixture(t, []runtime.Object{source, target}, vmi)

	f.sync(node2) // prepare the target
	f.sync(node1) // start
	if after, writes := f.sync(node2); len(writes) != 0 || after != 30*time.Second {
		t.Fatalf("writes %v, look again in %v; want none for the VMI's 30s", kvfake.Writes(writes), after)
	}
	f.clock.Step(30 * time.Second)
	_, writes := f.sync(node2)
	onlyUpdate(t, writes, "virtualmachineinstances")
	if !f.vmi().Status.MigrationState.TargetNodeDomainDetected {
		t.Error("the domain is not detected once the VMI's duration passed")
	}
}

// As virt-handler: Hyper-V passthrough and a claim not shared between nodes
// make a VMI not migratable, with KubeVirt's reasons.
func TestMigratabilityFollowsVirtHandler(t *testing.T) {
	shared := &virtv1.VirtualMachineInstance{Spec: virtv1.VirtualMachineInstanceSpec{
		Volumes: []virtv1.Volume{{Name: "disk", VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim"}}}}}},
		Status: virtv1.VirtualMachineInstanceStatus{VolumeStatus: []virtv1.VolumeStatus{{Name: "disk",
			PersistentVolumeClaimInfo: &virtv1.PersistentVolumeClaimInfo{ClaimName: "claim", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}}}}}
	if c := migratability(shared); c.Status != corev1.ConditionTrue {
		t.Errorf("a VMI on a shared claim: %+v", c)
	}
	rwo := shared.DeepCopy()
	rwo.Status.VolumeStatus[0].PersistentVolumeClaimInfo.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	if c := migratability(rwo); c.Status != corev1.ConditionFalse || c.Reason != virtv1.VirtualMachineInstanceReasonDisksNotMigratable ||
		c.Message != "cannot migrate VMI: PVC claim is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)" {
		t.Errorf("a VMI on a ReadWriteOnce claim: %+v", c)
	}
	hyperv := shared.DeepCopy()
	hyperv.Spec.Domain.Features = &virtv1.Features{HypervPassthrough: &virtv1.HyperVPassthrough{Enabled: ptr.To(true)}}
	if c := migratability(hyperv); c.Status != corev1.ConditionFalse || c.Reason != virtv1.VirtualMachineInstanceReasonHypervPassthroughNotMigratable {
		t.Errorf("a VMI with Hyper-V passthrough: %+v", c)
	}
}

// TestAMigrationPlugsInWhatTheVMIAsksFor: the target, finishing a
// migration, takes the VMI's new sockets and guest memory and removes the
// marks and labels; memory the target pod was given too little for is
// refused (the mark goes, the guest keeps what it had).
func TestAMigrationPlugsInWhatTheVMIAsksFor(t *testing.T) {
	for _, tc := range []struct {
		given string
		fits  bool
	}{{"3Gi", true}, {"1Gi", false}} {
		vmi := scheduledVMI()
		vmi.Spec.Domain.CPU = &virtv1.CPU{Sockets: 3, Cores: 2, Threads: 1}
		vmi.Spec.Domain.Memory = &virtv1.Memory{Guest: ptr.To(resource.MustParse("3Gi"))}
		vmi.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("3Gi")}
		vmi.Status.CurrentCPUTopology = &virtv1.CPUTopology{Sockets: 2, Cores: 2, Threads: 1}
		vmi.Status.Memory = &virtv1.MemoryStatus{GuestRequested: ptr.To(resource.MustParse("2Gi")), GuestCurrent: ptr.To(resource.MustParse("2Gi"))}
		vmi.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{
			{Type: virtv1.VirtualMachineInstanceVCPUChange, Status: corev1.ConditionTrue},
			{Type: virtv1.VirtualMachineInstanceMemoryChange, Status: corev1.ConditionTrue},
		}
		vmi.Labels[virtv1.VirtualMachinePodMemoryRequestsLabel] = tc.given
		hotplugged(vmi)
		if len(vmi.Status.Conditions) != 0 || vmi.Labels[virtv1.VirtualMachinePodMemoryRequestsLabel] != "" {
			t.Errorf("given %s: conditions %+v, labels %v; want the marks gone", tc.given, vmi.Status.Conditions, vmi.Labels)
		}
		if vmi.Status.CurrentCPUTopology.Sockets != 3 {
			t.Errorf("given %s: topology %+v, want 3 sockets", tc.given, vmi.Status.CurrentCPUTopology)
		}
		if got := vmi.Status.Memory.GuestRequested.String(); (got == "3Gi") != tc.fits {
			t.Errorf("given %s: guest requested %s, fits %v", tc.given, got, tc.fits)
		}
	}
}

// TestAMigrationMovesTheVolumesTheVMIAsksFor: the target, finishing a
// volume migration, describes each moved claim by its destination and
// takes the VolumesChange mark and the list of moves away.
func TestAMigrationMovesTheVolumesTheVMIAsksFor(t *testing.T) {
	vmi := scheduledVMI()
	dest := &virtv1.PersistentVolumeClaimInfo{ClaimName: "new", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}
	vmi.Status.MigratedVolumes = []virtv1.StorageMigratedVolumeInfo{{VolumeName: "data",
		SourcePVCInfo: &virtv1.PersistentVolumeClaimInfo{ClaimName: "old"}, DestinationPVCInfo: dest}}
	vmi.Status.VolumeStatus = []virtv1.VolumeStatus{{Name: "data", PersistentVolumeClaimInfo: &virtv1.PersistentVolumeClaimInfo{ClaimName: "old"}}}
	vmi.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceVolumesChange, Status: corev1.ConditionTrue}}
	volumesMoved(vmi)
	if len(vmi.Status.Conditions) != 0 || vmi.Status.MigratedVolumes != nil {
		t.Errorf("conditions %+v, migrated volumes %+v: want both gone", vmi.Status.Conditions, vmi.Status.MigratedVolumes)
	}
	if got := vmi.Status.VolumeStatus[0].PersistentVolumeClaimInfo; got != dest {
		t.Errorf("volume status %+v, want the destination's", got)
	}
}
