package app_test

import (
	"strings"
	"testing"

	"github.com/virtshard/virtshard/cmd/virtshard-controller/app"
)

// Lease timings are checked as the replica will run them: a bad order is
// refused at start, not found when a takeover goes wrong.
func TestLeaseTimingFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // part of the error; empty: valid
	}{
		{nil, ""},
		{[]string{"--suspect-after=6s"}, ""},
		{[]string{"--retry-period=5s", "--renew-deadline=8s", "--lease-duration=15s"}, ""},
		{[]string{"--suspect-after=2s"}, "suspect-after 2s must be longer than the retry period 2s"},
		{[]string{"--suspect-after=10s"}, "shorter than the lease duration 10s"},
		{[]string{"--renew-deadline=10s"}, "renew deadline 10s must be shorter than the lease duration 10s"},
		{[]string{"--retry-period=7s"}, "retry period 7s must be shorter than the renew deadline 7s"},
		{[]string{"--lease-duration=10500ms"}, "must be a whole number of seconds"},
		{[]string{"--handoff-wait=30s"}, ""},
		{[]string{"--handoff-wait=-1s"}, "handoff wait -1s must not be negative"},
	} {
		o := app.NewOptions()
		o.Identity, o.Namespace = "r0", "ns"
		err := o.Parse(tc.args)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one with %q", tc.args, err, tc.want)
		}
	}
}

// KubeVirt's launcher flags: the sync lists are comma-separated and add
// up over repeated flags, the QEMU timeout is in seconds.
func TestLauncherFlags(t *testing.T) {
	o := app.NewOptions()
	o.Identity, o.Namespace = "r0", "ns"
	err := o.Parse([]string{"--additional-launcher-labels-sync=team, tier", "--additional-launcher-labels-sync=owner",
		"--additional-launcher-annotations-sync=note", "--launcher-qemu-timeout=300", "--image-pull-secret=pull"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.SyncedLabels, ",") != "team,tier,owner" || strings.Join(o.SyncedAnnotations, ",") != "note" ||
		o.LauncherQEMUTimeout.Seconds() != 300 || o.ImagePullSecret != "pull" {
		t.Errorf("options %q %q %v %q", o.SyncedLabels, o.SyncedAnnotations, o.LauncherQEMUTimeout, o.ImagePullSecret)
	}
	if err := app.NewOptions().Parse([]string{"--launcher-qemu-timeout=4m"}); err == nil {
		t.Error("--launcher-qemu-timeout=4m accepted, want seconds")
	}
}
