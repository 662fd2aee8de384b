// Package clientmetrics counts a client's API writes on the client side, by
// resource and verb, as KubeVirt's kubevirt_rest_client_requests_total does:
// the figure behind "writes per VMI".
package clientmetrics

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
		Help: "API writes (create, update, patch, delete) sent by this process, by resource and verb, counted client-side.",
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

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	verb := ""
	switch r.Method {
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}
	if verb != "" {
		c.writes.counter.WithLabelValues(resourceOf(r.URL.Path), verb).Inc()
	}
	return c.next.RoundTrip(r)
}

// resourceOf extracts the resource (and subresource) from an API path:
// /api/v1/namespaces/ns/pods/name/status → pods/status.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// Skip /api/v1 or /apis/group/version.
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "other"
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) != 2 {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "other"
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}
