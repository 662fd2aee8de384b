package profiling_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/virtshard/virtshard/replica/profiling"
	"github.com/virtshard/virtshard/test/profilingtest"
)

func spin(ctx context.Context) {
	x := 0
	for ctx.Err() == nil {
		for i := range 100000 {
			x += i * i
		}
	}
	_ = x
}

func TestProfilesArriveTaggedWithTheReplicaAndLabelledByController(t *testing.T) {
	server := profilingtest.New()
	defer server.Close()
	stop, err := profiling.Start(profiling.Options{ServerAddress: server.URL, Replica: "virtshard-7", UploadRate: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go profiling.Do(ctx, "vmi", spin)
	for !server.Labels("cpu", "controller")["vmi"] && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	if err := stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	uploads, errs := server.Uploads()
	if len(errs) > 0 {
		t.Errorf("the server could not read what was sent: %v", errs)
	}
	if !server.Labels("cpu", "controller")["vmi"] {
		t.Fatalf("no CPU samples labelled controller=vmi in 30 s (%d uploads)", len(uploads))
	}
	types := map[string]bool{}
	for _, u := range uploads {
		if !strings.HasPrefix(u.Name, profiling.Application+"{") || !strings.Contains(u.Name, "replica=virtshard-7") {
			t.Errorf("upload named %q, want application %s tagged replica=virtshard-7", u.Name, profiling.Application)
		}
		for _, st := range u.Profile.SampleType {
			types[st.Type] = true
		}
	}
	t.Logf("%d uploads, sample types %v", len(uploads), types)
	for _, want := range []string{"cpu", "goroutine", "alloc_objects", "inuse_space", "contentions", "delay"} {
		if !types[want] {
			t.Errorf("no %s samples among the uploads (sample types %v)", want, types)
		}
	}
}

func TestNoServerNoProfiling(t *testing.T) {
	stop, err := profiling.Start(profiling.Options{})
	if err != nil || stop == nil || stop() != nil {
		t.Errorf("Start without a server: %v", err)
	}
}
