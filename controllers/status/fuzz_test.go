package status

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// FuzzMergePatch builds patches for arbitrary VMIs and mutations: the patch
// is nil exactly when nothing changes, carries the object's resourceVersion
// as precondition, and applied to the object gives the mutated object.
func FuzzMergePatch(f *testing.F) {
	f.Add("Scheduling", "Scheduled", "node-1", "app", "db", "Ready", "", "41")
	f.Add("Running", "Running", "", "", "", "", "", "1")
	f.Add("", "Failed", "n", "virtshard.io/range", "7", "Synchronized", "InvalidSpec", "")
	f.Add("Pending", "Pending", "x", "k", "", "c", "r\x00\"}", "9")
	f.Fuzz(func(t *testing.T, phase, newPhase, node, labelKey, labelValue, condition, reason, rv string) {
		// Objects come from the API server as JSON: their strings are UTF-8.
		for _, s := range []string{phase, newPhase, node, labelKey, labelValue, condition, reason, rv} {
			if !utf8.ValidString(s) {
				return
			}
		}
		vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "v", Namespace: "ns", ResourceVersion: rv}}
		vmi.Status.Phase = virtv1.VirtualMachineInstancePhase(phase)
		if labelKey != "" {
			vmi.Labels = map[string]string{labelKey: "old"}
		}
		mutations := []Mutation[*virtv1.VirtualMachineInstance]{
			func(v *virtv1.VirtualMachineInstance) bool {
				if string(v.Status.Phase) == newPhase {
					return false
				}
				v.Status.Phase, v.Status.NodeName = virtv1.VirtualMachineInstancePhase(newPhase), node
				return true
			},
			func(v *virtv1.VirtualMachineInstance) bool {
				if labelKey == "" || v.Labels[labelKey] == labelValue {
					return false
				}
				v.Labels[labelKey] = labelValue
				return true
			},
			func(v *virtv1.VirtualMachineInstance) bool {
				if condition == "" {
					return false
				}
				v.Status.Conditions = append(v.Status.Conditions, virtv1.VirtualMachineInstanceCondition{
					Type: virtv1.VirtualMachineInstanceConditionType(condition), Status: "False", Reason: reason})
				return true
			},
		}
		want := vmi.DeepCopy()
		changed := false
		for _, m := range mutations {
			changed = m(want) || changed
		}
		before, _ := json.Marshal(vmi)
		original := string(before)
		patch, err := mergePatch(vmi, mutations)
		if err != nil {
			t.Fatal(err)
		}
		if after, _ := json.Marshal(vmi); string(after) != original {
			t.Fatal("mergePatch modified its input")
		}
		if !changed {
			if patch != nil {
				t.Fatalf("nothing changed but the patch is %s", patch)
			}
			return
		}
		var fields struct {
			Metadata struct {
				ResourceVersion *string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(patch, &fields); err != nil || fields.Metadata.ResourceVersion == nil || *fields.Metadata.ResourceVersion != rv {
			t.Fatalf("patch %s lacks the precondition resourceVersion %q (%v)", patch, rv, err)
		}
		applied, err := jsonpatch.MergePatch(before, patch)
		if err != nil {
			t.Fatalf("patch %s does not apply: %v", patch, err)
		}
		got := &virtv1.VirtualMachineInstance{}
		if err := json.Unmarshal(applied, got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("patch %s gives a different object (-want +got):\n%s", patch, diff)
		}
	})
}
