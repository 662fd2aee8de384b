// Package clientmetrics counts a client's API writes on the client side, by
// resource and verb, as KubeVirt's kubevirt_rest_client_requests_total does:
// the figure behind "writes per VMI".
package clientmetrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
)

// Writes is virtshard_api_writes_total{resource,verb}.
type Writes struct {
	counter *prometheus.CounterVec
}

// NewWrites creates the counter and registers it with reg.
func NewWrites(reg prometheus.Registerer) *Writes {
	w := &Writes{counter: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "virtshard_api_writes_total",
		Help: "API writes (create, update, patch, delete, deletecollection) sent by this process, by resource and verb, counted client-side.",
	}, []string{"resource", "verb"})}
	reg.MustRegister(w.counter)
	return w
}

// Instrument makes every write through clients built from cfg count.
func (w *Writes) Instrument(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &counting{next: rt, writes: w} })
}

// Count returns the writes counted for resource and verb.
func (w *Writes) Count(resource, verb string) float64 {
	c, err := w.counter.GetMetricWithLabelValues(resource, verb)
	if err != nil {
		return 0
	}
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

type counting struct {
	next   http.RoundTripper
	writes *Writes
}

// requests parses API paths as the API server does (for RBAC and audit).
var requests = &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		c.writes.counter.WithLabelValues(writeOf(r)).Inc()
	}
	return c.next.RoundTrip(r)
}

// writeOf is a write's resource (with its subresource) and verb, as RBAC
// names them: PATCH /api/v1/namespaces/ns/pods/name/status is a patch of
// pods/status. A path that names no resource is "other".
func writeOf(r *http.Request) (resource, verb string) {
	info, err := requests.NewRequestInfo(r)
	switch {
	case err != nil || !info.IsResourceRequest:
		return "other", info.Verb
	case info.Subresource != "":
		return info.Resource + "/" + info.Subresource, info.Verb
	default:
		return info.Resource, info.Verb
	}
}
