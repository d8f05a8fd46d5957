package faults_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/kafkatest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// fixture is a broker with n messages waiting, seen from a test: the
// source block of the config, and what the broker has as finished.
type fixture struct {
	kind       string
	source     string                   // the source: block
	deadLetter string                   // a dead_letter: block on the same broker
	finished   func() ([]string, error) // ids the broker has as finished (acked, committed)
	settled    func(timeout time.Duration)
	dlq        func(want int) []deadLetter // the dead letters, waiting until want arrived (or a while)
	allIDs     func() []string             // the ids of every message the broker holds
	nats       *natsBroker
	kafka      *kafkaBroker
}

// restart runs a second shaper on config until the sink has delivered all
// n (two minutes at most) and the broker has every message as finished (so
// nothing can come again: a duplicate has shown), and drains it. It returns
// the keys answered 2xx and how many 2xx answers there were
// (sinktest.Sink.Delivered).
func (f fixture) restart(t testing.TB, sink *sinktest.Sink, config string, n int) (map[string]int, int) {
	t.Helper()
	second := startShaper(t, "second", config)
	testwait.For(t, 2*time.Minute, "every message delivered after the restart", func() bool { return sink.DeliveredCount() >= n })
	f.settled(30 * time.Second)
	second.Stop()
	return sink.Delivered()
}

// fixtureCommitInterval is the Kafka commit_interval of newFixture.
const fixtureCommitInterval = 200 * time.Millisecond

// newFixture returns a "jetstream" or "kafka" fixture holding n messages.
func newFixture(t testing.TB, kind string, n int) fixture {
	t.Helper()
	if kind == "kafka" {
		return kafkaFixture(t, n, fixtureCommitInterval)
	}
	return jetstreamFixture(t, n)
}

// eachBroker runs test as a parallel subtest per broker, "jetstream" and
// "kafka", each with its own newFixture of n messages.
func eachBroker(t *testing.T, n int, test func(t *testing.T, f fixture)) {
	t.Parallel()
	for _, kind := range []string{"jetstream", "kafka"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			test(t, newFixture(t, kind, n))
		})
	}
}

// jetstreamFixture is a JetStream stream IN holding n messages `{"n":i}`,
// with a stream DLQ on dlq.> for dead letters.
func jetstreamFixture(t testing.TB, n int) fixture {
	t.Helper()
	b := startNATS(t)
	b.stream("IN", "in.>")
	b.stream("DLQ", "dlq.>")
	if n > 0 {
		b.publish(n, numbered("in.faults"))
	}
	return fixture{
		kind: "jetstream", nats: b,
		source:     natsSource(b.url),
		deadLetter: natsDeadLetter(b.url),
		finished:   func() ([]string, error) { return b.ackedIDs("IN", "shaper-faults") },
		settled:    func(d time.Duration) { b.settled("IN", "shaper-faults", d) },
		dlq: func(want int) []deadLetter {
			testwait.Until(30*time.Second, func() bool { return b.streamCount("DLQ") >= want })
			return b.deadLetters("DLQ")
		},
		allIDs: func() []string { return streamIDs(b.streamCount("IN")) },
	}
}

// kafkaFixture is topic "in" (4 partitions) holding n records, consumed by
// group "faults" with commit_interval commit, and topic "dlq".
func kafkaFixture(t testing.TB, n int, commit time.Duration) fixture {
	t.Helper()
	k := startKafka(t)
	if n > 0 {
		k.Produce("in", kafkatest.Records(n))
	}
	return fixture{
		kind: "kafka", kafka: k,
		source:     kafkaSource(k.Addr, "faults", commit),
		deadLetter: kafkaDeadLetter(k.Addr),
		finished:   func() ([]string, error) { return k.committedIDs("faults") },
		settled:    func(d time.Duration) { k.settled("faults", d) },
		dlq:        func(want int) []deadLetter { return k.deadLetters(want, 30*time.Second) },
		allIDs: func() []string {
			_, ends, err := k.offsets("faults")
			if err != nil {
				t.Fatalf("kafka: end offsets: %v", err)
			}
			var ids []string
			for p, end := range ends {
				for o := range end {
					ids = append(ids, fmt.Sprintf("in/%d/%d", p, o))
				}
			}
			return ids
		},
	}
}

// checkFinishedWereDelivered fails the test if the broker has as finished
// a message that was neither delivered (2xx at the sink) nor dead-lettered:
// one acked or committed before its outcome was final.
func checkFinishedWereDelivered(t testing.TB, f fixture, sink *sinktest.Sink, deadLettered map[string]bool, when string) {
	t.Helper()
	ids, err := f.finished()
	if err != nil {
		t.Fatalf("%s: what the broker has as finished: %v", when, err)
	}
	delivered, _ := sink.Delivered()
	var early []string
	for _, id := range ids {
		if delivered[id] == 0 && !deadLettered[id] {
			early = append(early, id)
		}
	}
	if len(early) > 0 {
		t.Errorf("%s: the broker has %d messages as finished that were neither delivered nor dead-lettered (acked too early): %v",
			when, len(early), early[:min(10, len(early))])
	}
}
