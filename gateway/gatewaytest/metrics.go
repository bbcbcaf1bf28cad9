package gatewaytest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricSeries finds the first series of metric name whose labels include
// labels, in what g gathers: its value (counter or gauge) and its sample
// count (histogram), and whether there is one.
func MetricSeries(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) (value float64, samples uint64, ok bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), 0, true
			case m.GetHistogram() != nil:
				return 0, m.GetHistogram().GetSampleCount(), true
			}
			return m.GetGauge().GetValue(), 0, true
		}
	}
	return 0, 0, false
}
