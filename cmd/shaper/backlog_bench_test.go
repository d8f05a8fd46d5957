package main

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/freeport"
	"github.com/shaper-dev/shaper/internal/kafkatest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// BenchmarkKafkaBacklogMemory runs a real `shaper run` child process against
// a Kafka topic holding a large backlog, with bucket capacity 1000 and no
// effective rate limit, and reports the most heap and RSS the child used
// while it worked through the backlog (read from its own /metrics). The
// promise: memory is bounded by the bucket, not by the backlog. Run with
// -benchtime=1x.
func BenchmarkKafkaBacklogMemory(b *testing.B) {
	for _, n := range []int{100_000} {
		b.Run(fmt.Sprintf("backlog-%d", n), func(b *testing.B) {
			for range b.N {
				broker := startKafka(b, n)
				sink := sinktest.StartLean(b)
				admin := freeport.Addr(b)
				config := childtest.WriteConfig(b, fmt.Sprintf(`
admin: {listen: "%s"}
shutdown: {drain_timeout: 5s}
pipelines:
  - name: backlog
    source: %s
    bucket: {capacity: 1000, max_queue_time: 1m}
    rate: {limit: 1000000}
    sink:
      http: {url: "%s", max_in_flight: 64}
`, admin, kafkatest.SourceYAML(broker, "callbacks", "shaper-backlog"), sink.URL))
				start := time.Now()
				c := startChild(b, config)
				// A sample every 100ms until the backlog is delivered.
				var maxHeap, maxRSS float64
				testwait.Every(100*time.Millisecond, 5*time.Minute, func() bool {
					if m, err := childtest.Scrape(admin); err == nil && m["go_memstats_heap_inuse_bytes"] > 0 {
						maxHeap = max(maxHeap, m["go_memstats_heap_inuse_bytes"])
						maxRSS = max(maxRSS, m["process_resident_memory_bytes"])
					}
					u, _ := sink.Counts()
					return u >= n
				})
				took := time.Since(start)
				_ = c.Cmd.Process.Signal(syscall.SIGTERM)
				c.Wait(30 * time.Second)
				unique, _ := sink.Counts()
				if unique != n {
					b.Fatalf("delivered %d of %d", unique, n)
				}
				b.ReportMetric(maxHeap/(1<<20), "heap-inuse-MiB-max")
				b.ReportMetric(maxRSS/(1<<20), "rss-MiB-max")
				b.ReportMetric(float64(n)/took.Seconds(), "msgs/s")
			}
		})
	}
}
