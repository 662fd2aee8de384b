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

// serverWrites reads how many mutating requests the API server has served
// in all, from its own apiserver_request_total: everyone's writes — the
// bench's creates, the scheduler, kwok, the controllers.
func serverWrites(ctx context.Context, kube kubernetes.Interface) (float64, error) {
	body, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, m := range families["apiserver_request_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "verb" && mutatingVerbs[l.GetValue()] {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total, nil
}
