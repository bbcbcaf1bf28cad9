package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// The /metrics page passes Prometheus' own metric lint (what `promtool check
// metrics` runs): gauges without _total, counters with it, base units.
func TestMetricsPagePassesPromlint(t *testing.T) {
	base := startGateway(t)
	// Something of every kind on the page: an accepted event, a stream.
	resp := do(t, http.MethodPost, base+"/events", "application/json",
		`{"aep_version":"0.1","id":"01J00000000000000000000001","type":"run.started","source":"agent://lint","session_id":"s1","time":"2026-01-01T00:00:00Z","data":{}}`)
	resp.Body.Close()
	_, page := exportedNames(t, base)
	problems, err := promlint.New(strings.NewReader(page)).Lint()
	if err != nil {
		t.Fatalf("lint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
