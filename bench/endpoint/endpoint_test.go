package endpoint

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMetricsCountsByVerbAndResource(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.Error(w, "no such page", http.StatusNotFound)
			return
		}
		w.Write([]byte(`# TYPE writes_total counter
writes_total{verb="create",resource="pods",code="201"} 3
writes_total{verb="create",resource="pods",code="409"} 1
writes_total{verb="patch",resource="virtualmachineinstances",code="200"} 2
`))
	}))
	defer server.Close()
	ctx := context.Background()

	families, err := Metrics(ctx, server.Client(), server.URL+"/metrics", "test server")
	if err != nil {
		t.Fatal(err)
	}
	got := CountByVerbResource(families, "writes_total")
	if len(got) != 2 || got["create pods"] != 4 || got["patch virtualmachineinstances"] != 2 {
		t.Errorf("counts %v, want create pods 4 and patch virtualmachineinstances 2", got)
	}
	if got := CountByVerbResource(families, "absent_total"); len(got) != 0 {
		t.Errorf("an absent family counted %v", got)
	}

	_, err = Get(ctx, server.Client(), server.URL+"/other", "test server")
	if err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "test server") {
		t.Errorf("a 404 gave %v, want an error naming the status and the server", err)
	}
}
