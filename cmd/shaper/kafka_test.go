package main

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/kafkatest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// startKafka starts kfake with a four-partition topic "callbacks" holding n
// messages `{"n":i}` keyed by i, and returns its bootstrap address.
func startKafka(t testing.TB, n int) string {
	t.Helper()
	return startKafkaCluster(t, n).Addr
}

// startKafkaCluster is startKafka, returning the cluster.
func startKafkaCluster(t testing.TB, n int) *kafkatest.Cluster {
	t.Helper()
	k := kafkatest.Start(t, kfake.SeedTopics(4, "callbacks"))
	k.Produce("callbacks", kafkatest.Records(n))
	return k
}

// kafkaRun is startKafka's topic of n messages, a sink that answers 200,
// and the config file of kafkaConfig between them with drain_timeout 1s;
// it returns the broker too.
func kafkaRun(t *testing.T, n, limit, inFlight int, commit time.Duration) (*sinktest.Sink, string, *kafkatest.Cluster) {
	t.Helper()
	k := startKafkaCluster(t, n)
	sink := sinktest.Start(t, sinktest.OK)
	return sink, childtest.WriteConfig(t, kafkaConfig(k.Addr, sink.URL, limit, inFlight, commit, time.Second)), k
}

// waitCommitted waits until group shaper-psp has committed all n records
// of startKafka's topic: from then on nothing can be delivered again, so a
// duplicate has shown.
func waitCommitted(t *testing.T, k *kafkatest.Cluster, n int) {
	t.Helper()
	cl := k.Client()
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var total int64
	if !testwait.UntilEach(30*time.Second, 5*time.Second, func(ctx context.Context) bool {
		offsets, err := adm.FetchOffsets(ctx, "shaper-psp")
		if err != nil {
			return false
		}
		total = 0
		offsets.Each(func(o kadm.OffsetResponse) { total += max(o.At, 0) })
		return total == int64(n)
	}) {
		t.Fatalf("timed out after 30s waiting for every one of %d records committed (%d are)", n, total)
	}
}

func kafkaConfig(broker, sinkURL string, limit, inFlight int, commit, drain time.Duration) string {
	return childtest.Pipeline{
		Drain:  drain,
		Source: kafkatest.SourceYAML(broker, "callbacks", "shaper-psp", "commit_interval: "+commit.String()),
		Rate:   fmt.Sprintf("{limit: %d}", limit),
		Sink:   httpSink(sinkURL, inFlight),
	}.YAML()
}

func TestKafkaSIGKILLLosesNothingAndDuplicatesStayWithinTheUncommittedWindow(t *testing.T) {
	const n, limit, inFlight = 400, 200, 8
	const commit = 200 * time.Millisecond
	sink, config, broker := kafkaRun(t, n, limit, inFlight, commit)

	first := startChild(t, config)
	testwait.For(t, 60*time.Second, "100 deliveries", func() bool { u, _ := sink.Counts(); return u >= 100 })
	first.Signal(syscall.SIGKILL)
	first.Wait(10 * time.Second)
	before, _ := sink.Counts()

	second := startChild(t, config)
	testwait.For(t, 60*time.Second, "every message delivered after the restart", func() bool { u, _ := sink.Counts(); return u == n })
	waitCommitted(t, broker, n)
	_ = second.Cmd.Process.Signal(syscall.SIGTERM)
	second.Wait(15 * time.Second)

	unique, total := sink.Counts()
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
	sink, config, broker := kafkaRun(t, n, 100, 4, time.Second)

	first := startChild(t, config)
	testwait.For(t, 60*time.Second, "50 deliveries", func() bool { u, _ := sink.Counts(); return u >= 50 })
	first.StopWithin(15 * time.Second)
	delivered, _ := sink.Counts()
	if delivered >= n {
		t.Fatalf("the first run delivered all %d; the test needs a remainder", n)
	}

	second := startChild(t, config)
	testwait.For(t, 60*time.Second, "every message delivered", func() bool { u, _ := sink.Counts(); return u == n })
	waitCommitted(t, broker, n)
	_ = second.Cmd.Process.Signal(syscall.SIGTERM)
	second.Wait(15 * time.Second)
	if unique, total := sink.Counts(); unique != n || total != n {
		t.Errorf("delivered %d unique in %d requests (first run %d); want exactly %d once each: %v",
			unique, total, delivered, n, sink.Duplicates())
	}
}

func TestTwoShaperProcessesInOneGroupSplitThePartitionsAndDeliverEachMessageOnce(t *testing.T) {
	const n = 400
	sink, config, broker := kafkaRun(t, n, 100, 4, time.Second)

	first := startChild(t, config)
	second := startChild(t, config)
	testwait.For(t, 60*time.Second, "every message delivered", func() bool { u, _ := sink.Counts(); return u == n })
	waitCommitted(t, broker, n)
	for _, c := range []*childtest.Process{first, second} {
		_ = c.Cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range []*childtest.Process{first, second} {
		if code := c.Wait(15 * time.Second); code != exitOK {
			t.Errorf("exit code = %d; want 0; stderr:\n%s", code, c.Stderr)
		}
	}
	// Both members took part: each logged the partitions it was given.
	unique, total := sink.Counts()
	if unique != n || total != n {
		t.Errorf("two members delivered %d unique in %d requests; want %d once each: %v", unique, total, n, sink.Duplicates())
	}
}
