package differential

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/virtshard/virtshard/bench/virtapi"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	virtv1 "kubevirt.io/api/core/v1"
)

// Object is one captured object, normalized: its identity in a form two
// runs share, and its content with every run-specific value replaced by a
// token.
type Object struct {
	// Kind and Name identify the object across runs: the name is the
	// token of a generated name, the name itself otherwise.
	Kind, Name string
	// Content is the object without what the API server alone decides
	// (managedFields, resourceVersion, ...), tokens in place of
	// run-specific values.
	Content map[string]any
	// Generation is the object's metadata.generation: every change of an
	// object without a status subresource (a VMI), the spec changes of
	// one with (a VM, a pod).
	Generation int64
}

// Tokens of values no two runs share.
const (
	TimeToken            = "<time>"
	ResourceVersionToken = "<resourceVersion>"
	NamespaceToken       = "<namespace>"
)

// serverFields are metadata the API server writes whatever a controller
// does; they say nothing about its behaviour. generation counts how often
// the object changed: it is reported apart (Object.Generation), not
// compared, as a controller that batches its writes changes an object
// fewer times for the same outcome.
var serverFields = []string{"managedFields", "resourceVersion", "selfLink", "creationTimestamp", "generation"}

// Normalizer turns one run's captured objects into Objects. It learns
// each object's UID and, for a generated name, the token that stands for
// it, then replaces them wherever they appear: owner references, labels
// (kubevirt.io/created-by), map keys (a VMI's activePods), event messages.
type Normalizer struct {
	// GeneratedName tells a generated name from a chosen one and gives
	// the generated one's stable stem: its owner and role, such as
	// "virt-launcher-<vmi>". ok is false for a name to keep as it is.
	GeneratedName func(obj *unstructured.Unstructured) (stem string, ok bool)
	// Namespace is the run's namespace, which becomes NamespaceToken.
	Namespace string

	replace map[string]string
	// goneMembers match the names a replica set drew for members the
	// capture no longer holds (generateName and a suffix of the server's
	// alphabet), each with its token.
	goneMembers []goneMember
	// longest first, so that a name within a longer one is not replaced
	// first.
	order []string
}

// Normalize normalizes objs, which are one run's capture at one
// checkpoint. Objects with a generated name are numbered within their
// stem by creation time (then name), so that "the VMI's second launcher
// pod" is the same token in both runs.
func (n *Normalizer) Normalize(objs []*unstructured.Unstructured) []Object {
	n.replace = map[string]string{}
	n.goneMembers = replicaSetMembers(objs)
	names := make([]string, len(objs))
	for i, obj := range objs {
		names[i] = obj.GetName()
	}
	// Events are named after the objects they are about, whose own names
	// may be generated: those are numbered first, and an event's stem
	// names its object by that token.
	// So are pods after the VMIs they belong to, whose names may be
	// generated too (a replica set's members).
	n.numberGenerated(objs, names, func(o *unstructured.Unstructured) bool { return o.GetKind() == "VirtualMachineInstance" })
	n.numberGenerated(objs, names, func(o *unstructured.Unstructured) bool {
		return o.GetKind() != "Event" && o.GetKind() != "VirtualMachineInstance"
	})
	n.numberGenerated(objs, names, func(o *unstructured.Unstructured) bool { return o.GetKind() == "Event" })
	for i, obj := range objs {
		if uid := string(obj.GetUID()); uid != "" {
			n.replace[uid] = fmt.Sprintf("<uid:%s/%s>", obj.GetKind(), strings.Trim(names[i], "<>"))
		}
	}
	if n.Namespace != "" {
		n.replace[n.Namespace] = NamespaceToken
	}
	// A firmware UUID the harness's webhook derived from a name (a VM's, a
	// VMI's, a replica set's members') reads as that name: the same token
	// in both runs, whatever order the objects that carry it sort in.
	for _, obj := range objs {
		name := obj.GetName()
		for _, from := range [][2]string{{"vm", name}, {"vmi", name}, {"vmi", "member-of-" + name}} {
			n.replace[string(virtapi.DerivedUUID(from[0], from[1]))] = "<firmware:" + from[0] + "/" + from[1] + ">"
		}
	}
	n.numberPlaces(objs, names)
	n.order = n.order[:0]
	for k := range n.replace {
		n.order = append(n.order, k)
	}
	slices.SortFunc(n.order, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})

	// A name may hold another object's UID (a VM's start revision is
	// revision-start-vm-<VM UID>-<generation>).
	for i := range names {
		names[i] = n.text(names[i])
	}
	out := make([]Object, len(objs))
	for i, obj := range objs {
		content := obj.DeepCopy().Object
		if meta, ok := content["metadata"].(map[string]any); ok {
			for _, f := range serverFields {
				delete(meta, f)
			}
			delete(meta, "uid") // its token is the object's identity
			meta["name"] = names[i]
		}
		switch obj.GetKind() {
		case "Pod":
			jitteredQemuTimeout(content)
		case "VirtualMachineInstance":
			drawnCID(content)
		}
		out[i] = Object{Kind: obj.GetKind(), Name: names[i], Content: n.value(content).(map[string]any), Generation: obj.GetGeneration()}
	}
	return out
}

// Places the scheduler and the network decide, not the controller: which
// kwok node a pod landed on, and the addresses its node gave it.
var (
	nodeName  = regexp.MustCompile(`\bkwok-node-[0-9]+\b`)
	ipAddress = regexp.MustCompile(`\b[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\b`)
	// macAddress: the simulated virt-handler reports a random MAC where
	// the VMI asks for none, as libvirt picks one.
	macAddress = regexp.MustCompile(`\b[0-9a-f]{2}(:[0-9a-f]{2}){5}\b`)
	// uid: the UID of an object the capture does not hold (a VMI a VM
	// deleted and created again, named by its events).
	uid = regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
)

// places are the values numberPlaces numbers, and their tokens' stems.
var places = []struct {
	pattern *regexp.Regexp
	token   string
}{{nodeName, "node"}, {ipAddress, "ip"}, {uid, "uid"}, {macAddress, "mac"}}

// numberPlaces gives each node name, IP and MAC address, and UID of an
// object not captured, found in objs a token, numbered in the order they
// first appear, objects taken by kind and name, an object's fields in key order: "the node the first VMI runs on"
// is the same token in both runs, whichever node the scheduler picked,
// and a pod and its VMI that agree on a node or an address still agree.
func (n *Normalizer) numberPlaces(objs []*unstructured.Unstructured, names []string) {
	order := make([]int, len(objs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if c := strings.Compare(objs[a].GetKind(), objs[b].GetKind()); c != 0 {
			return c
		}
		return strings.Compare(names[a], names[b])
	})
	counts := make([]int, len(places))
	visit := func(s string) {
		for p, place := range places {
			for _, m := range place.pattern.FindAllString(s, -1) {
				if _, ok := n.replace[m]; !ok {
					counts[p]++
					n.replace[m] = fmt.Sprintf("<%s#%d>", place.token, counts[p])
				}
			}
		}
	}
	for _, i := range order {
		walkStrings(objs[i].Object, visit)
	}
}

// walkStrings calls visit on every string of v, map keys included, maps in
// key order.
func walkStrings(v any, visit func(string)) {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			visit(k)
			walkStrings(v[k], visit)
		}
	case []any:
		for _, e := range v {
			walkStrings(e, visit)
		}
	case string:
		visit(v)
	}
}

// numberGenerated names the generated names of the objects picked: the
// token of an object is its stem and its place among the objects of that
// stem by creation time (then name).
func (n *Normalizer) numberGenerated(objs []*unstructured.Unstructured, names []string, pick func(*unstructured.Unstructured) bool) {
	if n.GeneratedName == nil {
		return
	}
	byStem := map[string][]int{}
	for i, obj := range objs {
		if !pick(obj) {
			continue
		}
		if stem, ok := n.GeneratedName(obj); ok {
			stem = n.plainText(stem)
			if obj.GetKind() == "Event" {
				stem = n.gone(stem)
			}
			byStem[stem] = append(byStem[stem], i)
		}
	}
	for stem, idx := range byStem {
		slices.SortFunc(idx, func(a, b int) int {
			if inNoOrder(objs[a]) {
				ma, _, _ := unstructured.NestedString(objs[a].Object, "message")
				mb, _, _ := unstructured.NestedString(objs[b].Object, "message")
				if c := strings.Compare(n.plainText(ma), n.plainText(mb)); c != 0 {
					return c
				}
			} else {
				ta, tb := objs[a].GetCreationTimestamp().Time, objs[b].GetCreationTimestamp().Time
				if c := ta.Compare(tb); c != 0 {
					return c
				}
			}
			return strings.Compare(objs[a].GetName(), objs[b].GetName())
		})
		for k, i := range idx {
			names[i] = fmt.Sprintf("<%s#%d>", stem, k+1)
			n.replace[objs[i].GetName()] = names[i]
		}
	}
}

// inNoOrder reports whether obj is an event whose place among its stem's
// is no one's decision: a replica set's or a pool's creates, deletes and
// updates run side by side, and their events come in whatever order the
// requests finished.
// Those are numbered by their message, the names in it replaced first.
func inNoOrder(obj *unstructured.Unstructured) bool {
	kind, _, _ := unstructured.NestedString(obj.Object, "involvedObject", "kind")
	return obj.GetKind() == "Event" && (kind == "VirtualMachineInstanceReplicaSet" || kind == "VirtualMachinePool")
}

// plainText replaces the names known so far within s, before the
// replacements are ordered.
func (n *Normalizer) plainText(s string) string {
	keys := slices.SortedFunc(maps.Keys(n.replace), func(a, b string) int { return len(b) - len(a) })
	for _, k := range keys {
		s = strings.ReplaceAll(s, k, n.replace[k])
	}
	return s
}

// QemuTimeoutToken stands for a launcher's --qemu-timeout in KubeVirt's
// range.
const QemuTimeoutToken = "<qemu-timeout>"

// jitteredQemuTimeout replaces the --qemu-timeout of a pod's containers
// by QemuTimeoutToken when it is in the range KubeVirt draws it from: 240
// seconds and a random jitter under 120 (services/template.go,
// generateQemuTimeoutWithJitter), which virtshard draws alike. A value
// outside that range stays, and differs.
func jitteredQemuTimeout(pod map[string]any) {
	containers, _, _ := unstructured.NestedSlice(pod, "spec", "containers")
	for _, c := range containers {
		command, _ := c.(map[string]any)["command"].([]any)
		for i := 0; i+1 < len(command); i++ {
			if command[i] != "--qemu-timeout" {
				continue
			}
			if v, ok := command[i+1].(string); ok {
				if d, err := time.ParseDuration(v); err == nil && d >= 240*time.Second && d < 360*time.Second {
					command[i+1] = QemuTimeoutToken
				}
			}
		}
	}
	_ = unstructured.SetNestedSlice(pod, containers, "spec", "containers")
}

// value normalizes one value of an object's tree.
func (n *Normalizer) value(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			if e == nil {
				continue // null and absent read alike to every client
			}
			if k == "resourceVersion" {
				out[k] = ResourceVersionToken
				continue
			}
			out[n.text(k)] = n.value(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = n.value(e)
		}
		return out
	case string:
		if isTime(v) {
			return TimeToken
		}
		return n.text(v)
	}
	return v
}

// text replaces every known UID and generated name within s.
func (n *Normalizer) text(s string) string {
	for _, k := range n.order {
		if strings.Contains(s, k) {
			s = strings.ReplaceAll(s, k, n.replace[k])
		}
	}
	return n.gone(s)
}

// gone replaces the names left in s of objects the capture does not
// hold: launcher pods, then replica set members (a gone member's launcher
// pod name holds the member's).
func (n *Normalizer) gone(s string) string {
	s = goneLaunchers(s)
	for _, m := range n.goneMembers {
		s = m.name.ReplaceAllString(s, m.token)
	}
	return s
}

type goneMember struct {
	name  *regexp.Regexp
	token string
}

// replicaSetMembers are the member names of the replica sets among objs:
// the prefix KubeVirt generates them from (the template's name, else its
// generateName, else the set's) and five characters of the API server's
// name alphabet.
func replicaSetMembers(objs []*unstructured.Unstructured) []goneMember {
	var out []goneMember
	for _, obj := range objs {
		if obj.GetKind() != "VirtualMachineInstanceReplicaSet" {
			continue
		}
		name, _, _ := unstructured.NestedString(obj.Object, "spec", "template", "metadata", "name")
		generateName, _, _ := unstructured.NestedString(obj.Object, "spec", "template", "metadata", "generateName")
		prefix := cmp.Or(name, generateName, obj.GetName())
		out = append(out, goneMember{
			name:  regexp.MustCompile(`\b` + regexp.QuoteMeta(prefix) + `[bcdfghjklmnpqrstvwxz2456789]{5}\b`),
			token: "<member-of-" + obj.GetName() + "-gone>",
		})
	}
	return out
}

// VSOCKCIDToken stands for a VMI's VSOCK context ID.
const VSOCKCIDToken = "<vsock-cid>"

// drawnCID replaces a VMI's status.VSOCKCID by VSOCKCIDToken when it is
// one a guest may have (3 up): KubeVirt draws it at random, virtshard
// from the VMI's range's block (docs/sharding.md), so two runs of either
// differ in the value. Whether a VMI has one is still compared, and a
// host's CID (0-2) stays and differs.
func drawnCID(vmi map[string]any) {
	if cid, found, _ := unstructured.NestedInt64(vmi, "status", "VSOCKCID"); found && cid >= 3 {
		_ = unstructured.SetNestedField(vmi, VSOCKCIDToken, "status", "VSOCKCID")
	}
}

// GoneLauncherToken stands for a launcher pod the capture does not hold,
// which events still name: KubeVirt's generated name and virtshard's
// derived one are not the same text, and nothing left tells the runs'
// pods apart but the events' own order.
const GoneLauncherToken = "<virt-launcher-gone>"

var (
	rawLauncher      = regexp.MustCompile(`\bvirt-launcher-[a-z0-9.-]*[a-z0-9]\b`)
	derivedFromKnown = regexp.MustCompile(`^-[a-z0-9]{5}\b`)
)

// goneLaunchers replaces the launcher pod names left in s once the known
// ones were replaced by tokens: those of pods that are gone, as KubeVirt
// generated them, or as virtshard derived them from a pod still there (a
// migration target's name is its source pod's and a suffix). Text within
// tokens stays.
func goneLaunchers(s string) string {
	if !strings.Contains(s, "virt-launcher-") {
		return s
	}
	var b strings.Builder
	for s != "" {
		open := strings.IndexByte(s, '<')
		if open < 0 {
			b.WriteString(rawLauncher.ReplaceAllString(s, GoneLauncherToken))
			break
		}
		b.WriteString(rawLauncher.ReplaceAllString(s[:open], GoneLauncherToken))
		end := strings.IndexByte(s[open:], '>')
		if end < 0 {
			b.WriteString(s[open:])
			break
		}
		token, rest := s[open:open+end+1], s[open+end+1:]
		if strings.HasPrefix(token, "<virt-launcher-") && derivedFromKnown.MatchString(rest) {
			token, rest = GoneLauncherToken, rest[len("-12345"):]
		}
		b.WriteString(token)
		s = rest
	}
	return b.String()
}

// goTimeLayout is Go's time.Time.String, in which KubeVirt writes some
// times into annotations (kubevirt.io/migration-target-ready-timestamp).
const goTimeLayout = "2006-01-02 15:04:05.999999999 -0700 MST"

// isTime reports whether s is a timestamp as the API writes them, or as
// Go prints them.
func isTime(s string) bool {
	if len(s) < len("2006-01-02T15:04:05Z") || s[4] != '-' {
		return false
	}
	var err error
	switch s[10] {
	case 'T':
		_, err = time.Parse(time.RFC3339Nano, s)
	case ' ':
		_, err = time.Parse(goTimeLayout, s)
	default:
		return false
	}
	return err == nil
}

// GeneratedName is the stem of the names controllers generate: a launcher
// pod's VMI and role (the VMI's pod, a migration's target, a temporary
// provisioning pod), a replica set member's set, an event's involved
// object and reason. KubeVirt
// generates a launcher pod's suffix, virtshard derives it (a deliberate
// difference, docs/architecture.md): either way the pod is known by its
// VMI and role. Events are numbered by creation within their stem, as
// pods are.
func GeneratedName(obj *unstructured.Unstructured) (string, bool) {
	switch obj.GetKind() {
	case "VirtualMachineInstance":
		owner := metav1.GetControllerOf(obj)
		if owner == nil || owner.Kind != "VirtualMachineInstanceReplicaSet" {
			return "", false
		}
		return "member-of-" + owner.Name, true
	case "Pod":
		owner := metav1.GetControllerOf(obj)
		if owner == nil || owner.Kind != "VirtualMachineInstance" {
			return "", false
		}
		role := "pod"
		if _, target := obj.GetLabels()[virtv1.MigrationJobLabel]; target {
			role = "target"
		}
		if _, temporary := obj.GetAnnotations()[virtv1.EphemeralProvisioningObject]; temporary {
			role = "provisioning"
		}
		return "virt-launcher-" + owner.Name + "-" + role, true
	case "VirtualMachineInstanceMigration":
		// An evacuation's or a workload update's: KubeVirt generates its
		// name, virtshard derives it.
		vmi, _, _ := unstructured.NestedString(obj.Object, "spec", "vmiName")
		if _, evacuation := obj.GetAnnotations()[virtv1.EvacuationMigrationAnnotation]; evacuation {
			return "evacuation-of-" + vmi, true
		}
		if _, update := obj.GetAnnotations()[virtv1.WorkloadUpdateMigrationAnnotation]; update {
			return "workload-update-of-" + vmi, true
		}
		return "", false
	case "Event":
		kind, _, _ := unstructured.NestedString(obj.Object, "involvedObject", "kind")
		name, _, _ := unstructured.NestedString(obj.Object, "involvedObject", "name")
		reason, _, _ := unstructured.NestedString(obj.Object, "reason")
		return "event:" + kind + "/" + name + "/" + reason, true
	}
	return "", false
}
