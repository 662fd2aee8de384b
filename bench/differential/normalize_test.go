package differential

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// run is one run's capture of a VMI and its launcher pod: the same
// behaviour as any other run's, with the UIDs, resourceVersions,
// timestamps and pod name suffix that run happened to get.
func run(vmiUID, podUID, podName, rv, at, phase string) []*unstructured.Unstructured {
	vmi := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": "a", "namespace": "ns", "uid": vmiUID, "resourceVersion": rv,
			"creationTimestamp": at, "managedFields": []any{map[string]any{"manager": "x"}}},
		"status": map[string]any{
			"phase":      phase,
			"activePods": map[string]any{podUID: "node-1"},
			"conditions": []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": at}},
		},
	}}
	pod := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": podName, "namespace": "ns", "uid": podUID, "resourceVersion": rv,
			"creationTimestamp": at,
			"labels":            map[string]any{"kubevirt.io/created-by": vmiUID},
			"ownerReferences":   []any{map[string]any{"kind": "VirtualMachineInstance", "name": "a", "uid": vmiUID, "controller": true}}},
	}}
	event := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Event",
		"metadata": map[string]any{"name": "a.1234", "namespace": "ns"},
		"reason":   "SuccessfulCreate", "message": "Created virtual machine pod " + podName,
		"involvedObject": map[string]any{"kind": "VirtualMachineInstance", "name": "a", "uid": vmiUID},
	}}
	return []*unstructured.Unstructured{vmi, pod, event}
}

func launcherStem(obj *unstructured.Unstructured) (string, bool) {
	if obj.GetKind() == "Pod" && strings.HasPrefix(obj.GetName(), "virt-launcher-") {
		return "virt-launcher-" + obj.GetOwnerReferences()[0].Name, true
	}
	return "", false
}

func TestNormalizeMakesTwoRunsOfTheSameBehaviourEqual(t *testing.T) {
	n := &Normalizer{GeneratedName: launcherStem}
	a := n.Normalize(run("uid-1", "pod-uid-1", "virt-launcher-a-x7k2p", "100", "2026-12-04T10:00:00Z", "Running"))
	b := n.Normalize(run("uid-2", "pod-uid-2", "virt-launcher-a-q9z3m", "257", "2026-12-04T11:30:07Z", "Running"))
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("runs differ:\n%v\n%v", a, b)
	}
	pod := a[1]
	if pod.Name != "<virt-launcher-a#1>" {
		t.Errorf("pod name %q, want the token of the VMI's first launcher pod", pod.Name)
	}
	labels := pod.Content["metadata"].(map[string]any)["labels"].(map[string]any)
	if got := labels["kubevirt.io/created-by"]; got != "<uid:VirtualMachineInstance/a>" {
		t.Errorf("created-by label %q, want the VMI's UID token", got)
	}
	active := a[0].Content["status"].(map[string]any)["activePods"].(map[string]any)
	if _, ok := active["<uid:Pod/virt-launcher-a#1>"]; !ok {
		t.Errorf("activePods %v, want the pod's UID token as key", active)
	}
	if msg := a[2].Content["message"]; msg != "Created virtual machine pod <virt-launcher-a#1>" {
		t.Errorf("event message %q, want the pod's name token", msg)
	}
	if _, ok := a[0].Content["metadata"].(map[string]any)["managedFields"]; ok {
		t.Error("managedFields kept: the server writes them")
	}
}

func TestNormalizeKeepsWhatTheControllerDecided(t *testing.T) {
	n := &Normalizer{GeneratedName: launcherStem}
	a := n.Normalize(run("uid-1", "pod-uid-1", "virt-launcher-a-x7k2p", "100", "2026-12-04T10:00:00Z", "Running"))
	b := n.Normalize(run("uid-2", "pod-uid-2", "virt-launcher-a-q9z3m", "257", "2026-12-04T11:30:07Z", "Scheduled"))
	if reflect.DeepEqual(a[0], b[0]) {
		t.Error("a Running and a Scheduled VMI normalized equal")
	}
}

// Generated names are numbered by creation within their owner and role:
// a VMI's second launcher pod is #2 whatever its suffix.
func TestNormalizeNumbersGeneratedNamesByCreation(t *testing.T) {
	first := run("uid-1", "pod-uid-1", "virt-launcher-a-zzzzz", "1", "2026-12-04T10:00:00Z", "Running")
	second := run("uid-1", "pod-uid-2", "virt-launcher-a-aaaaa", "1", "2026-12-04T10:00:05Z", "Running")
	n := &Normalizer{GeneratedName: launcherStem}
	got := n.Normalize([]*unstructured.Unstructured{second[1], first[1]})
	if got[0].Name != "<virt-launcher-a#2>" || got[1].Name != "<virt-launcher-a#1>" {
		t.Errorf("names %q, %q: want the later pod #2 whatever its suffix sorts as", got[0].Name, got[1].Name)
	}
}

// KubeVirt generates a launcher pod's suffix and virtshard derives it:
// both are the VMI's pod, and a migration's target is another role.
func TestGeneratedNameKnowsALauncherPodByItsVMIAndRole(t *testing.T) {
	pod := func(name, generateName string, labels map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "generateName": generateName, "labels": labels,
				"ownerReferences": []any{map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": "a", "uid": "u", "controller": true}}},
		}}
	}
	kubevirt, _ := GeneratedName(pod("virt-launcher-a-x7k2p", "virt-launcher-a-", nil))
	ours, _ := GeneratedName(pod("virt-launcher-a-c1b41", "", nil))
	target, _ := GeneratedName(pod("virt-launcher-a-9zz1q", "virt-launcher-a-", map[string]any{"kubevirt.io/migrationJobUID": "m"}))
	if kubevirt != ours || kubevirt == target {
		t.Errorf("stems %q, %q and target %q: want the first two equal and the target apart", kubevirt, ours, target)
	}
	if _, ok := GeneratedName(&unstructured.Unstructured{Object: map[string]any{"kind": "Pod", "metadata": map[string]any{"name": "mine"}}}); ok {
		t.Error("a pod nobody controls has a generated name")
	}
}

// placed is a VMI on node with address ip, and its launcher pod on
// podNode: where the scheduler put them and what address the node gave.
func placed(node, podNode, ip string) []*unstructured.Unstructured {
	vmi := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
		"metadata": map[string]any{"name": "a", "labels": map[string]any{"kubevirt.io/nodeName": node}},
		"status":   map[string]any{"nodeName": node, "interfaces": []any{map[string]any{"name": "default", "ipAddress": ip}}},
	}}
	pod := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p"},
		"spec":     map[string]any{"nodeName": podNode},
		"status":   map[string]any{"podIP": ip},
	}}
	event := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Event", "metadata": map[string]any{"name": "e"},
		"message": "Successfully assigned ns/p to " + podNode,
	}}
	return []*unstructured.Unstructured{vmi, pod, event}
}

// The node the scheduler picked and the address it gave are tokens: two
// runs that placed the VMI differently are equal, and a VMI that names
// another node than its pod's still differs from one that agrees.
func TestNodesAndAddressesAreNumberedNotNamed(t *testing.T) {
	n := &Normalizer{}
	a := n.Normalize(placed("kwok-node-3", "kwok-node-3", "10.0.3.7"))
	b := n.Normalize(placed("kwok-node-12", "kwok-node-12", "10.0.12.2"))
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("runs on other nodes differ:\n%v\n%v", a, b)
	}
	if got := a[2].Content["message"]; got != "Successfully assigned ns/p to <node#1>" {
		t.Errorf("event message %q, want the node's token", got)
	}
	c := n.Normalize(placed("kwok-node-1", "kwok-node-10", "10.0.1.2"))
	if reflect.DeepEqual(a, c) {
		t.Errorf("a VMI on another node than its pod normalizes like one on its pod's node: %v", c)
	}
}

// A launcher pod that is gone is named by events only: KubeVirt's
// generated name and virtshard's derived one become one token, and the
// tokens of pods still there stay whole.
func TestGoneLauncherPodsShareOneToken(t *testing.T) {
	for in, want := range map[string]string{
		"Created virtual machine pod virt-launcher-crashy-wcnds":     "Created virtual machine pod " + GoneLauncherToken,
		"Created migration target pod <virt-launcher-a-pod#1>-15add": "Created migration target pod " + GoneLauncherToken,
		"Created virtual machine pod <virt-launcher-a-pod#1>":        "Created virtual machine pod <virt-launcher-a-pod#1>",
		"<uid:Pod/virt-launcher-a-pod#1>":                            "<uid:Pod/virt-launcher-a-pod#1>",
		"image quay.io/kubevirt/virt-launcher:v1.8.1":                "image quay.io/kubevirt/virt-launcher:v1.8.1",
	} {
		if got := goneLaunchers(in); got != want {
			t.Errorf("goneLaunchers(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestIsTime: the API's timestamps and Go's printed times are times; text
// that starts like a date is not.
func TestIsTime(t *testing.T) {
	for s, want := range map[string]bool{
		"2026-12-04T10:00:00Z":               true,
		"2026-12-04T10:00:00.123456Z":        true,
		"2026-12-05 05:43:37 +0000 UTC":      true,
		"2026-12-05 05:43:37.5 +0000 UTC":    true,
		"2026-12-05 is a Saturday, not time": false,
		"2026-12-05":                         false,
		"virt-launcher-a-x7k2p":              false,
	} {
		if got := isTime(s); got != want {
			t.Errorf("isTime(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestNormalizeNamesAnObjectByTheUIDItsNameHolds: a VM's start revision is
// named after the VM's UID, which differs between runs; both runs' revisions
// are one object.
func TestNormalizeNamesAnObjectByTheUIDItsNameHolds(t *testing.T) {
	capture := func(vmUID string) []*unstructured.Unstructured {
		vm := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
			"metadata": map[string]any{"name": "a", "namespace": "ns", "uid": vmUID},
		}}
		revision := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": int64(1),
			"metadata": map[string]any{"name": "revision-start-vm-" + vmUID + "-1", "namespace": "ns", "uid": vmUID + "-cr",
				"ownerReferences": []any{map[string]any{"kind": "VirtualMachine", "name": "a", "uid": vmUID, "controller": true}}},
		}}
		return []*unstructured.Unstructured{vm, revision}
	}
	a := (&Normalizer{}).Normalize(capture("11111111-1111-1111-1111-111111111111"))
	b := (&Normalizer{}).Normalize(capture("22222222-2222-2222-2222-222222222222"))
	if a[1].Name != b[1].Name || a[1].Name != "revision-start-vm-<uid:VirtualMachine/a>-1" {
		t.Errorf("revision names %q and %q, want both revision-start-vm-<uid:VirtualMachine/a>-1", a[1].Name, b[1].Name)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("runs differ after normalizing:\n%v\n%v", a, b)
	}
}

// A replica set's members have names the server drew: two runs' members
// are the set's first and second whatever their suffixes, and so are
// their launcher pods, whose stems name the member's token.
func TestNormalizeNumbersAReplicaSetsMembersAndTheirPods(t *testing.T) {
	capture := func(suffixes ...string) []*unstructured.Unstructured {
		var objs []*unstructured.Unstructured
		for i, s := range suffixes {
			name := "web" + s
			at := fmt.Sprintf("2026-12-04T10:00:0%dZ", i)
			objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
				"metadata": map[string]any{"name": name, "generateName": "web", "uid": "uid-" + s, "creationTimestamp": at,
					"ownerReferences": []any{map[string]any{"kind": "VirtualMachineInstanceReplicaSet", "name": "web", "uid": "rs", "controller": true}}},
			}}, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "Pod",
				"metadata": map[string]any{"name": "virt-launcher-" + name + "-q1w2e", "generateName": "virt-launcher-" + name + "-", "creationTimestamp": at,
					"ownerReferences": []any{map[string]any{"kind": "VirtualMachineInstance", "name": name, "uid": "uid-" + s, "controller": true}}},
			}})
		}
		return objs
	}
	a := (&Normalizer{GeneratedName: GeneratedName}).Normalize(capture("zq9x1", "ab3c4"))
	b := (&Normalizer{GeneratedName: GeneratedName}).Normalize(capture("m7n8p", "kk2j5"))
	var names []string
	for i := range a {
		if a[i].Name != b[i].Name {
			t.Errorf("%s in one run, %s in the other", a[i].Name, b[i].Name)
		}
		names = append(names, a[i].Name)
	}
	want := []string{"<member-of-web#1>", "<virt-launcher-<member-of-web#1>-pod#1>", "<member-of-web#2>", "<virt-launcher-<member-of-web#2>-pod#1>"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}
}

// Events still name members the set deleted, and their launcher pods:
// both stand for a gone member, whatever the server drew.
func TestNormalizeKnowsAGoneMemberInAnEvent(t *testing.T) {
	capture := func(member string) []*unstructured.Unstructured {
		return []*unstructured.Unstructured{{Object: map[string]any{
			"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceReplicaSet",
			"metadata": map[string]any{"name": "web", "uid": "rs-uid-1"},
		}}, {Object: map[string]any{
			"apiVersion": "v1", "kind": "Event", "metadata": map[string]any{"name": "e1"},
			"reason":         "SuccessfulCreate",
			"message":        "Started the virtual machine by creating the new virtual machine instance " + member,
			"involvedObject": map[string]any{"kind": "VirtualMachineInstanceReplicaSet", "name": "web", "uid": "rs-uid-1"},
		}}, {Object: map[string]any{
			"apiVersion": "v1", "kind": "Event", "metadata": map[string]any{"name": "e2"},
			"reason": "SuccessfulCreate", "message": "Created virtual machine pod virt-launcher-" + member + "-x2k4q",
			"involvedObject": map[string]any{"kind": "VirtualMachineInstance", "name": member},
		}}}
	}
	a := (&Normalizer{GeneratedName: GeneratedName}).Normalize(capture("webx7k2p"))
	b := (&Normalizer{GeneratedName: GeneratedName}).Normalize(capture("webq9z4m"))
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("runs differ:\n%v\n%v", a, b)
	}
	if msg := a[1].Content["message"]; msg != "Started the virtual machine by creating the new virtual machine instance <member-of-web-gone>" {
		t.Errorf("message %q", msg)
	}
}

// A VMI's VSOCK CID is drawn (KubeVirt at random, virtshard from its
// range's block): any guest CID reads alike, having none or a host's does
// not.
func TestNormalizeReadsAnyGuestCIDAlike(t *testing.T) {
	withCID := func(cid any) Object {
		objs := run("uid-1", "pod-uid-1", "virt-launcher-a-x7k2p", "100", "2026-12-04T10:00:00Z", "Running")
		if cid != nil {
			_ = unstructured.SetNestedField(objs[0].Object, cid, "status", "VSOCKCID")
		}
		return (&Normalizer{GeneratedName: launcherStem}).Normalize(objs)[0]
	}
	if !reflect.DeepEqual(withCID(int64(3)), withCID(int64(4026531843))) {
		t.Error("two guest CIDs normalized apart")
	}
	if reflect.DeepEqual(withCID(int64(3)), withCID(nil)) || reflect.DeepEqual(withCID(int64(3)), withCID(int64(2))) {
		t.Error("a guest CID normalized like none, or like the host's")
	}
}
