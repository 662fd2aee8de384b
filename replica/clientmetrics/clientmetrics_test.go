package clientmetrics

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWriteOf(t *testing.T) {
	tests := []struct {
		method, path   string
		resource, verb string
	}{
		{http.MethodPost, "/api/v1/namespaces/ns/pods", "pods", "create"},
		{http.MethodDelete, "/api/v1/namespaces/ns/pods/p", "pods", "delete"},
		{http.MethodDelete, "/api/v1/namespaces/ns/pods", "pods", "deletecollection"},
		{http.MethodPatch, "/api/v1/namespaces/ns/pods/p/status", "pods/status", "patch"},
		{http.MethodPatch, "/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances/v", "virtualmachineinstances", "patch"},
		{http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", "leases", "update"},
		{http.MethodPost, "/api/v1/namespaces", "namespaces", "create"},
		{http.MethodPut, "/api/v1/nodes/n", "nodes", "update"},
		{http.MethodPost, "/apis/events.k8s.io/v1/namespaces/ns/events", "events", "create"},
		{http.MethodPost, "/apis/authorization.k8s.io/v1/subjectaccessreviews", "subjectaccessreviews", "create"},
		{http.MethodPost, "/healthz", "other", "post"},
	}
	for _, tc := range tests {
		resource, verb := writeOf(httptest.NewRequest(tc.method, tc.path, nil))
		if resource != tc.resource || verb != tc.verb {
			t.Errorf("%s %s: %s %s, want %s %s", tc.method, tc.path, verb, resource, tc.verb, tc.resource)
		}
	}
}
