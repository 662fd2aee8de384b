package controller_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/virtshard/virtshard/cmd/virtshard-controller/app"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
	"github.com/virtshard/virtshard/test/profilingtest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// A replica run with --pyroscope-address sends its profiles there, tagged
// with the replica, and every controller's workers carry their label.
func TestReplicaProfilesContinuouslyByController(t *testing.T) {
	server := profilingtest.New()
	defer server.Close()
	ns := clustertest.Namespace(t)
	controllertest.Start(t, ns, "replica-p", func(o *app.Options) {
		o.PyroscopeAddress, o.PyroscopeUploadRate = server.URL, time.Second
	})
	want := []string{"vmi", "vmi-status", "vm", "migration", "node"}
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		seen := server.Labels("goroutine", "controller")
		for _, c := range want {
			if !seen[c] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("goroutine profiles label controllers %v, want all of %v", server.Labels("goroutine", "controller"), want)
	}
	uploads, errs := server.Uploads()
	if len(errs) > 0 {
		t.Errorf("the server could not read what was sent: %v", errs)
	}
	for _, u := range uploads {
		if !strings.Contains(u.Name, "replica=replica-p") {
			t.Errorf("upload named %q lacks the replica tag", u.Name)
		}
	}
}
