package bench

import (
	"context"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// mutatingVerbs are the apiserver_request_total verbs that write.
var mutatingVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "APPLY": true, "DELETECOLLECTION": true}

// serverCounters are API server counters the bench reads around a run.
type serverCounters struct {
	// writes is how many mutating requests the API server has served in
	// all, from its own apiserver_request_total: everyone's writes — the
	// bench's creates, the scheduler, kwok, the controllers.
	writes float64
	// terminatedWatchers is apiserver_terminated_watchers_total by
	// resource: watchers its watch cache closed because their buffers
	// were full (every client's, not only the controller's).
	terminatedWatchers map[string]float64
}

func readServerCounters(ctx context.Context, kube kubernetes.Interface) (serverCounters, error) {
	c := serverCounters{terminatedWatchers: map[string]float64{}}
	body, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return c, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return c, err
	}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "verb" && mutatingVerbs[l.GetValue()] {
				c.writes += m.GetCounter().GetValue()
			}
		}
	}
	for _, m := range families["apiserver_terminated_watchers_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "resource" {
				c.terminatedWatchers[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return c, nil
}

// since is what the counters grew by after before.
func (c serverCounters) since(before serverCounters) serverCounters {
	out := serverCounters{writes: c.writes - before.writes, terminatedWatchers: map[string]float64{}}
	for resource, v := range c.terminatedWatchers {
		if d := v - before.terminatedWatchers[resource]; d > 0 {
			out.terminatedWatchers[resource] = d
		}
	}
	return out
}
