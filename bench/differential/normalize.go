package differential

import (
	"fmt"
	"slices"
	"strings"
	"time"

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
}

// Tokens of values no two runs share.
const (
	TimeToken            = "<time>"
	ResourceVersionToken = "<resourceVersion>"
	NamespaceToken       = "<namespace>"
)

// serverFields are metadata the API server writes whatever a controller
// does; they say nothing about its behaviour.
var serverFields = []string{"managedFields", "resourceVersion", "selfLink", "creationTimestamp"}

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
	names := make([]string, len(objs))
	byStem := map[string][]int{}
	for i, obj := range objs {
		names[i] = obj.GetName()
		if n.GeneratedName != nil {
			if stem, ok := n.GeneratedName(obj); ok {
				byStem[stem] = append(byStem[stem], i)
			}
		}
	}
	for stem, idx := range byStem {
		slices.SortFunc(idx, func(a, b int) int {
			ta, tb := objs[a].GetCreationTimestamp().Time, objs[b].GetCreationTimestamp().Time
			if c := ta.Compare(tb); c != 0 {
				return c
			}
			return strings.Compare(objs[a].GetName(), objs[b].GetName())
		})
		for k, i := range idx {
			names[i] = fmt.Sprintf("<%s#%d>", stem, k+1)
			n.replace[objs[i].GetName()] = names[i]
		}
	}
	for i, obj := range objs {
		if uid := string(obj.GetUID()); uid != "" {
			n.replace[uid] = fmt.Sprintf("<uid:%s/%s>", obj.GetKind(), strings.Trim(names[i], "<>"))
		}
	}
	if n.Namespace != "" {
		n.replace[n.Namespace] = NamespaceToken
	}
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
		out[i] = Object{Kind: obj.GetKind(), Name: names[i], Content: n.value(content).(map[string]any)}
	}
	return out
}

// value normalizes one value of an object's tree.
func (n *Normalizer) value(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
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
	return s
}

// isTime reports whether s is a timestamp as the API writes them.
func isTime(s string) bool {
	if len(s) < len("2006-01-02T15:04:05Z") || s[4] != '-' || s[10] != 'T' {
		return false
	}
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}

// GeneratedName is the stem of the names controllers generate: a launcher
// pod's VMI and role (the VMI's pod, a migration's target, a temporary
// provisioning pod), an event's involved object and reason. KubeVirt
// generates a launcher pod's suffix, virtshard derives it (a deliberate
// difference, docs/architecture.md): either way the pod is known by its
// VMI and role. Events are numbered by creation within their stem, as
// pods are.
func GeneratedName(obj *unstructured.Unstructured) (string, bool) {
	switch obj.GetKind() {
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
	case "Event":
		kind, _, _ := unstructured.NestedString(obj.Object, "involvedObject", "kind")
		name, _, _ := unstructured.NestedString(obj.Object, "involvedObject", "name")
		reason, _, _ := unstructured.NestedString(obj.Object, "reason")
		return "event:" + kind + "/" + name + "/" + reason, true
	}
	return "", false
}
