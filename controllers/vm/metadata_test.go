package vm

import (
	"testing"

	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/template"
)

// TestMetadataPatch: the descheduler's annotations follow the template and
// Velero's skip-hooks annotation the VM, set or removed; other keys do not
// follow.
func TestMetadataPatch(t *testing.T) {
	for _, tc := range []struct {
		name          string
		tmpl, vm, vmi map[string]string
		want          string
	}{
		{name: "in step", tmpl: map[string]string{"descheduler.alpha.kubernetes.io/evict": "true"},
			vmi: map[string]string{"descheduler.alpha.kubernetes.io/evict": "true"}},
		{name: "added to the template", tmpl: map[string]string{"descheduler.alpha.kubernetes.io/evict": "true", "other": "x"},
			want: `{"metadata":{"annotations":{"descheduler.alpha.kubernetes.io/evict":"true"},"uid":"vmi-uid"}}`},
		{name: "removed from the template", vmi: map[string]string{"descheduler.alpha.kubernetes.io/prefer-no-eviction": "true", "other": "x"},
			want: `{"metadata":{"annotations":{"descheduler.alpha.kubernetes.io/prefer-no-eviction":null},"uid":"vmi-uid"}}`},
		{name: "skip hooks on the VM", vm: map[string]string{"kubevirt.io/skip-backup-hooks": "true"},
			want: `{"metadata":{"annotations":{"kubevirt.io/skip-backup-hooks":"true"},"uid":"vmi-uid"}}`},
		{name: "a key added by flag", tmpl: map[string]string{"owner": "a"}, vmi: map[string]string{"owner": "b"},
			want: `{"metadata":{"annotations":{"owner":"a"},"uid":"vmi-uid"}}`},
		{name: "skip hooks on the template only", tmpl: map[string]string{"kubevirt.io/skip-backup-hooks": "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := newVM(virtv1.RunStrategyAlways)
			vm.Annotations, vm.Spec.Template.ObjectMeta.Annotations = tc.vm, tc.tmpl
			vmi := vmiOf(t, vm, 0)
			vmi.Annotations = tc.vmi
			if got := string(metadataPatch(vm, vmi, template.Options{SyncedAnnotations: []string{"owner"}})); got != tc.want {
				t.Errorf("patch %s, want %s", got, tc.want)
			}
		})
	}
}
