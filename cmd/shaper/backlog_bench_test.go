package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
				sink, srv := newSinkLog(b)
				admin := freeAddr(b)
				config := writeConfig(b, fmt.Sprintf(`
admin: {listen: "%s"}
shutdown: {drain_timeout: 5s}
pipelines:
  - name: backlog
    source:
      kafka:
        brokers: ["%s"]
        topic: callbacks
        group: shaper-backlog
        session_timeout: 6s
        heartbeat_interval: 100ms
        rebalance_timeout: 2s
        max_wait: 200ms
    bucket: {capacity: 1000, max_queue_time: 1m}
    rate: {limit: 1000000}
    sink:
      http: {url: "%s", max_in_flight: 64}
`, admin, broker, srv.URL))
				start := time.Now()
				c := startChild(b, config)
				var maxHeap, maxRSS float64
				for {
					if heap, rss, ok := scrapeMemory(admin); ok {
						maxHeap, maxRSS = max(maxHeap, heap), max(maxRSS, rss)
					}
					if u, _ := sink.counts(); u >= n || time.Since(start) > 5*time.Minute {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				took := time.Since(start)
				_ = c.cmd.Process.Signal(syscall.SIGTERM)
				c.wait(b, 30*time.Second)
				unique, _ := sink.counts()
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

// freeAddr returns a loopback address with a port free at the time of asking.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scrapeMemory reads go_memstats_heap_inuse_bytes and
// process_resident_memory_bytes from a shaper's /metrics.
func scrapeMemory(admin string) (heap, rss float64, ok bool) {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, found := strings.Cut(sc.Text(), " ")
		if !found {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			heap, _ = strconv.ParseFloat(value, 64)
		case "process_resident_memory_bytes":
			rss, _ = strconv.ParseFloat(value, 64)
		}
	}
	return heap, rss, heap > 0
}
