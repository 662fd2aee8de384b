package clientmetrics

import "testing"

func TestResourceOf(t *testing.T) {
	tests := map[string]string{
		"/api/v1/namespaces/ns/pods":                                   "pods",
		"/api/v1/namespaces/ns/pods/p":                                 "pods",
		"/api/v1/namespaces/ns/pods/p/status":                          "pods/status",
		"/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances/v": "virtualmachineinstances",
		"/apis/coordination.k8s.io/v1/namespaces/ns/leases":            "leases",
		"/api/v1/namespaces/ns":                                        "namespaces",
		"/api/v1/nodes/n":                                              "nodes",
		"/apis/events.k8s.io/v1/namespaces/ns/events":                  "events",
		"/healthz": "other",
	}
	for path, want := range tests {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}
