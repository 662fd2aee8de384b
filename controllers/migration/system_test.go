package migration

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

// A failed system migration is followed by one of another name, and two
// replicas that see the same migrations pick the same one.
func TestSystemNameTakesTheFirstAttemptNoMigrationHas(t *testing.T) {
	vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a", UID: "uid-a"}}
	s := System{Prefix: "kubevirt-evacuation-", NameParts: []string{"node-1"}}
	first := s.Name(vmi, nil)
	second := s.Name(vmi, map[string]bool{first: true})
	if second == first || s.Name(vmi, map[string]bool{first: true, "other": true}) != second {
		t.Errorf("names %q then %q: want a new name once the first is taken, the same for the same migrations", first, second)
	}
	if other := (System{Prefix: s.Prefix, NameParts: []string{"node-2"}}).Name(vmi, nil); other == first {
		t.Errorf("evacuations off two nodes share the name %q", first)
	}
}
