package main

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// startKafka starts an in-process Kafka (kfake) with a four-partition topic
// holding n messages, and returns its bootstrap address.
func startKafka(t testing.TB, n int) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "callbacks"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	transport := &kafka.Transport{} // its own, closed below: the default one would outlive the test
	defer transport.CloseIdleConnections()
	w := &kafka.Writer{
		Addr: kafka.TCP(c.ListenAddrs()...), Topic: "callbacks", Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: 5 * time.Millisecond, Transport: transport,
	}
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return c.ListenAddrs()[0]
}

func kafkaConfig(broker, sinkURL string, limit, inFlight int, commit, drain time.Duration) string {
	return fmt.Sprintf(`
admin: {listen: "127.0.0.1:0"}
shutdown: {drain_timeout: %s}
pipelines:
  - name: psp
    source:
      kafka:
        brokers: ["%s"]
        topic: callbacks
        group: shaper-psp
        commit_interval: %s
        session_timeout: 6s
        heartbeat_interval: 100ms
        rebalance_timeout: 2s
        max_wait: 200ms
    bucket: {capacity: 1000, max_queue_time: 1m}
    rate: {limit: %d}
    sink:
      http: {url: "%s", max_in_flight: %d}
`, drain, broker, commit, limit, sinkURL, inFlight)
}

func TestKafkaSIGKILLLosesNothingAndDuplicatesStayWithinTheUncommittedWindow(t *testing.T) {
	const n, limit, inFlight = 400, 200, 8
	const commit = 200 * time.Millisecond
	broker := startKafka(t, n)
	sink, srv := newSinkLog(t)
	config := writeConfig(t, kafkaConfig(broker, srv.URL, limit, inFlight, commit, time.Second))

	first := startChild(t, config)
	waitUntil(t, 60*time.Second, "100 deliveries", func() bool { u, _ := sink.counts(); return u >= 100 })
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.wait(t, 10*time.Second)
	before, _ := sink.counts()

	second := startChild(t, config)
	waitUntil(t, 60*time.Second, "every message delivered after the restart", func() bool { u, _ := sink.counts(); return u == n })
	time.Sleep(500 * time.Millisecond) // room for late duplicates to show
	_ = second.cmd.Process.Signal(syscall.SIGTERM)
	second.wait(t, 15*time.Second)

	unique, total := sink.counts()
	dups := total - unique
	// Redelivered after a crash: what was in flight plus what finished since
	// the last commit (rate × commit_interval), with room for one commit
	// round trip.
	bound := inFlight + int(float64(limit)*commit.Seconds()*1.5)
	t.Logf("SIGKILL after %d delivered: %d unique, %d requests, %d duplicates (bound %d)", before, unique, total, dups, bound)
	if unique != n {
		t.Errorf("delivered %d unique messages; want all %d", unique, n)
	}
	if dups > bound {
		t.Errorf("%d duplicates; want at most in-flight + uncommitted window = %d", dups, bound)
	}
}

func TestKafkaSIGTERMDrainLosesNothingAndDuplicatesNothing(t *testing.T) {
	const n = 300
	broker := startKafka(t, n)
	sink, srv := newSinkLog(t)
	config := writeConfig(t, kafkaConfig(broker, srv.URL, 100, 4, time.Second, time.Second))

	first := startChild(t, config)
	waitUntil(t, 60*time.Second, "50 deliveries", func() bool { u, _ := sink.counts(); return u >= 50 })
	_ = first.cmd.Process.Signal(syscall.SIGTERM)
	if code := first.wait(t, 15*time.Second); code != exitOK {
		t.Fatalf("exit code after SIGTERM = %d; want 0; stderr:\n%s", code, first.stderr)
	}
	delivered, _ := sink.counts()
	if delivered >= n {
		t.Fatalf("the first run delivered all %d; the test needs a remainder", n)
	}

	second := startChild(t, config)
	waitUntil(t, 60*time.Second, "every message delivered", func() bool { u, _ := sink.counts(); return u == n })
	time.Sleep(500 * time.Millisecond)
	_ = second.cmd.Process.Signal(syscall.SIGTERM)
	second.wait(t, 15*time.Second)
	if unique, total := sink.counts(); unique != n || total != n {
		t.Errorf("delivered %d unique in %d requests (first run %d); want exactly %d once each: %v",
			unique, total, delivered, n, sink.duplicates())
	}
}

func TestTwoShaperProcessesInOneGroupSplitThePartitionsAndDeliverEachMessageOnce(t *testing.T) {
	const n = 400
	broker := startKafka(t, n)
	sink, srv := newSinkLog(t)
	config := writeConfig(t, kafkaConfig(broker, srv.URL, 100, 4, time.Second, time.Second))

	first := startChild(t, config)
	second := startChild(t, config)
	waitUntil(t, 60*time.Second, "every message delivered", func() bool { u, _ := sink.counts(); return u == n })
	time.Sleep(500 * time.Millisecond) // room for a duplicate to show
	for _, c := range []*child{first, second} {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range []*child{first, second} {
		if code := c.wait(t, 15*time.Second); code != exitOK {
			t.Errorf("exit code = %d; want 0; stderr:\n%s", code, c.stderr)
		}
	}
	// Both members took part: each logged the partitions it was given.
	unique, total := sink.counts()
	if unique != n || total != n {
		t.Errorf("two members delivered %d unique in %d requests; want %d once each: %v", unique, total, n, sink.duplicates())
	}
}
