package shaper_test

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// BenchmarkShapingPrecision sends a burst through the real pipeline
// (JetStream source, leaky limiter, HTTP sink on loopback) and reports how
// exactly the sink saw the rate: rate error, the most requests in any 100 ms
// window (the promise is limit/10 + 1), and the jitter of the gaps between
// requests. Run it with -benchtime=1x: each iteration shapes 3 s of traffic.
func BenchmarkShapingPrecision(b *testing.B) {
	for _, limit := range []int{100, 1000} {
		b.Run(fmt.Sprintf("leaky-%d", limit), func(b *testing.B) {
			for range b.N {
				n := 3 * limit
				e := newEnv(b)
				rec := sinktest.StartLean(b)
				e.publish(n)
				e.start(e.config(rec.URL, func(c *config.Pipeline) {
					c.Rate.Limit = float64(limit)
					c.Bucket.Capacity = n
				}))
				testwait.For(b, time.Minute, "every message delivered", func() bool { return rec.RequestCount() == n })
				reqs := rec.Requests()
				span := reqs[n-1].At.Sub(reqs[0].At).Seconds()
				rate := float64(n-1) / span
				gaps := make([]float64, n-1)
				want := 1 / float64(limit)
				for i := 1; i < n; i++ {
					gaps[i-1] = math.Abs(reqs[i].At.Sub(reqs[i-1].At).Seconds() - want)
				}
				slices.Sort(gaps)
				b.ReportMetric(100*(rate-float64(limit))/float64(limit), "rate-err-%")
				b.ReportMetric(float64(sinktest.MaxInWindow(sinktest.Arrivals(reqs), 100*time.Millisecond)), "max-per-100ms")
				b.ReportMetric(float64(limit/10+1), "allowed-per-100ms")
				b.ReportMetric(gaps[len(gaps)/2]*1e6, "jitter-p50-µs")
				b.ReportMetric(gaps[len(gaps)*99/100]*1e6, "jitter-p99-µs")
			}
		})
	}
}
