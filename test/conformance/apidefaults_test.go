package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/apidefaults"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/instancetype"
	"github.com/virtshard/virtshard/controllers/template"
)

// referenceTime is the clock the reference module gives virt-api's
// defaults, and the creationTimestamp of VMIs without one.
var referenceTime = metav1.NewTime(time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC))

// randomFirmwareUUID replaces, in the reference's output, the firmware
// UUID virt-api draws at random for a VMI without one.
const randomFirmwareUUID = "RANDOM_FIRMWARE_UUID"

// TestAPIDefaults applies virtshard's copy of virt-api's create-time
// defaults (controllers/apidefaults, which virtshard-render --api-defaults
// uses) to every corpus VMI as written, and compares the result field by
// field with the VMI virt-api stores. There is no list of known
// differences: every field must be equal.
func TestAPIDefaults(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join(corpusDir, "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no corpus in %s: %v", corpusDir, err)
	}
	var equal, total int
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		f, err := os.Open(in)
		if err != nil {
			t.Fatal(err)
		}
		bundle, err := template.DecodeBundle(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		cluster, err := clusterconfig.FromKubeVirt(deployed(bundle.KubeVirt), arch)
		if err != nil {
			t.Fatalf("%s: cluster config: %v", in, err)
		}
		vmi := bundle.VMI
		if vmi.CreationTimestamp.IsZero() {
			vmi.CreationTimestamp = referenceTime
		}
		inputPhase := vmi.Status.Phase
		gotErr := applyInstancetype(bundle, vmi)
		if gotErr == nil {
			gotErr = apidefaults.Apply(vmi, cluster, referenceTime)
		}

		prefix := filepath.Join(kubevirtDir, name)
		want := &virtv1.VirtualMachineInstance{}
		wantErr := readYAML(prefix+".vmi.yaml", want)
		if wantErr != nil {
			total++
			if _, err := os.Stat(prefix + ".error.txt"); err != nil {
				t.Fatalf("%s: neither a defaulted VMI nor an error (run make generate): %v", name, wantErr)
			}
			if gotErr == nil {
				t.Errorf("%s: virt-api refuses the VMI, virtshard's defaults accept it", name)
			} else {
				equal++
			}
			continue
		}
		if gotErr != nil {
			total++
			t.Errorf("%s: virt-api accepts the VMI, virtshard's defaults refuse it: %v", name, gotErr)
			continue
		}
		if fw := vmi.Spec.Domain.Firmware; fw != nil && want.Spec.Domain.Firmware != nil && want.Spec.Domain.Firmware.UUID == randomFirmwareUUID {
			fw.UUID = randomFirmwareUUID
		}
		// An input VMI with a phase stands for one created earlier (a
		// running VMI, for a migration): the reference keeps its phase over
		// virt-api's Pending.
		if inputPhase != "" {
			vmi.Status.Phase = inputPhase
		}
		got, wantFields := flatten(vmi), flatten(want)
		for p, w := range wantFields {
			total++
			if g, ok := got[p]; ok && g == w {
				equal++
			} else {
				t.Errorf("%s: %s: virt-api %s, virtshard %s", name, p, w, orAbsent(g, ok))
			}
		}
		for p, g := range got {
			if _, ok := wantFields[p]; !ok {
				total++
				t.Errorf("%s: %s: virt-api (absent), virtshard %s", name, p, g)
			}
		}
	}
	fmt.Printf("api defaults: %d of %d VMI fields equal virt-api's (%.1f%%) over %d corpus files\n",
		equal, total, 100*float64(equal)/float64(max(total, 1)), len(inputs))
}

// applyInstancetype applies the bundle's instance type and preference to
// the VMI as virtshard's VM controller does before it creates it.
func applyInstancetype(bundle *template.Bundle, vmi *virtv1.VirtualMachineInstance) error {
	if bundle.Instancetype == nil && bundle.Preference == nil {
		return nil
	}
	instancetype.ApplyAutoattach(bundle.Preference, &vmi.Spec)
	if conflicts := instancetype.Apply("spec", bundle.Instancetype, bundle.Preference, &vmi.Spec, &vmi.ObjectMeta); len(conflicts) > 0 {
		return conflicts.VMIError()
	}
	return nil
}

func orAbsent(v string, ok bool) string {
	if !ok {
		return "(absent)"
	}
	return v
}
