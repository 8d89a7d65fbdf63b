// Package metricstest reads a /metrics endpoint in tests, with
// Prometheus's own text parser, so that a test checks what a scraper sees.
package metricstest

import (
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape fetches url (a /metrics endpoint) and parses it.
func Scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// Sample is the value of family name's sample whose labels are exactly
// want: a counter's or gauge's value, a histogram's count of observations.
// ok is false when there is no such sample.
func Sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, ok bool) {
	f, found := fams[name]
	if !found {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if w, has := want[l.GetName()]; !has || w != l.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}
