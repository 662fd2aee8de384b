// Package endpoint reads the HTTP endpoints of the processes the bench
// starts, virtshard's replicas and KubeVirt's virt-controller alike: a GET,
// and Prometheus metrics in the text format.
package endpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Get fetches url with client and returns the body of a 200; any other
// status is an error that names who answered.
func Get(ctx context.Context, client *http.Client, url, who string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s from %s: %s: %s", req.URL.Path, who, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// Metrics fetches and parses the metrics at url.
func Metrics(ctx context.Context, client *http.Client, url, who string) (map[string]*dto.MetricFamily, error) {
	body, err := Get(ctx, client, url, who)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse the metrics of %s: %w", who, err)
	}
	return families, nil
}

// Labels returns a series' labels as a map.
func Labels(m *dto.Metric) map[string]string {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

// CountByVerbResource sums the counter family name by "<verb> <resource>",
// from its labels verb and resource.
func CountByVerbResource(families map[string]*dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range families[name].GetMetric() {
		labels := Labels(m)
		out[labels["verb"]+" "+labels["resource"]] += m.GetCounter().GetValue()
	}
	return out
}
