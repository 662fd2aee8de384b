package differential

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCountWrites counts the audited user's completed writes in the runs'
// namespaces, by resource and subresource, refused ones included; reads,
// other users, other namespaces and other stages are left out.
func TestCountWrites(t *testing.T) {
	log := strings.Join([]string{
		`{"stage":"ResponseComplete","verb":"create","user":{"username":"virtshard-audited"},"objectRef":{"resource":"pods","namespace":"diff-kv-a"},"responseStatus":{"code":201}}`,
		`{"stage":"ResponseComplete","verb":"patch","user":{"username":"virtshard-audited"},"objectRef":{"resource":"virtualmachineinstances","namespace":"diff-kv-a","name":"x"},"responseStatus":{"code":200}}`,
		`{"stage":"ResponseComplete","verb":"patch","user":{"username":"virtshard-audited"},"objectRef":{"resource":"virtualmachineinstances","namespace":"diff-kv-a","name":"x"},"responseStatus":{"code":409}}`,
		`{"stage":"ResponseComplete","verb":"update","user":{"username":"virtshard-audited"},"objectRef":{"resource":"virtualmachines","subresource":"status","namespace":"diff-kv-b","name":"y"},"responseStatus":{"code":200}}`,
		`{"stage":"ResponseComplete","verb":"get","user":{"username":"virtshard-audited"},"objectRef":{"resource":"pods","namespace":"diff-kv-a"},"responseStatus":{"code":200}}`,
		`{"stage":"ResponseComplete","verb":"patch","user":{"username":"admin"},"objectRef":{"resource":"pods","namespace":"diff-kv-a"},"responseStatus":{"code":200}}`,
		`{"stage":"ResponseComplete","verb":"update","user":{"username":"virtshard-audited"},"objectRef":{"resource":"leases","namespace":"kube-system"},"responseStatus":{"code":200}}`,
		`{"stage":"ResponseStarted","verb":"create","user":{"username":"virtshard-audited"},"objectRef":{"resource":"pods","namespace":"diff-kv-a"}}`,
	}, "\n")
	got, err := countWrites(bytes.NewBufferString(log), []string{"diff-kv-a", "diff-kv-b", "diff-kv-c"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Writes{
		"diff-kv-a": {"pods": 1, "virtualmachineinstances": 2},
		"diff-kv-b": {"virtualmachines/status": 1},
		"diff-kv-c": {},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if n := got["diff-kv-a"].Total(); n != 3 {
		t.Errorf("total %d, want 3", n)
	}
}
