// Package gather reads a metric's value straight from a Prometheus
// registry in the same process, for the demo's one-line-a-second report
// and for tests; a scrape over HTTP is childtest's.
package gather

import "github.com/prometheus/client_golang/prometheus"

// Sum returns the sum over every series of the counter or gauge called
// name in g (0 when there is none).
func Sum(g prometheus.Gatherer, name string) float64 {
	families, _ := g.Gather() // in-process collectors do not fail
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
