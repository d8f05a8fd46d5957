package sources

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

// The Source contract: one table of behaviours that every implementation
// passes on its real broker (an embedded nats-server, kfake), the way
// go.uber.org/ratelimit runs one suite against every limiter. Where a
// behaviour does not apply to an implementation, its capabilities say so and
// the behaviour checks what the implementation promises instead, or skips
// with the reason; nothing is left out silently.

// sourceImpl is one implementation of shaper.Source with what it can do.
type sourceImpl struct {
	name string
	// redelivers is set when the broker keeps a message until it is acked:
	// a Nack, or a restart of the source on the same durable or group,
	// brings back what was not acked. Core NATS is at-most-once: a nacked
	// message, or one buffered at a restart, is lost.
	redelivers bool
	// nackDelay is set when Nack(delay) holds the message back for delay
	// (JetStream NakWithDelay; Kafka's own delay queue).
	nackDelay bool
	// errClosed is what Ready returns after Close.
	errClosed error
	// start starts a broker for one test.
	start func(t *testing.T) contractBroker
}

// contractBroker is one implementation's broker, as a behaviour uses it.
type contractBroker struct {
	// open starts a source on the broker, on the same durable or group each
	// time, that the server knows of when it returns; it is closed when the
	// test ends, if the test has not closed it.
	open func(t *testing.T) shaper.Source
	// publish publishes the messages "msg-<i>", i from first, in order (to
	// one Kafka partition), and waits until the broker has them.
	publish func(t *testing.T, first, n int)
	// stop takes the broker down.
	stop func(t *testing.T)
}

var sourceImpls = []sourceImpl{
	{name: "jetstream", redelivers: true, nackDelay: true, errClosed: errClosed, start: startJetStreamBroker},
	{name: "core-nats", redelivers: false, nackDelay: false, errClosed: errClosed, start: startCoreNATSBroker},
	{name: "kafka", redelivers: true, nackDelay: true, errClosed: errKafkaClosed, start: startKafkaBroker},
}

func startJetStreamBroker(t *testing.T) contractBroker {
	s, js := startJetStream(t)
	return contractBroker{
		open:    func(t *testing.T) shaper.Source { return newSource(t, jsConfig(s.ClientURL(), 30*time.Second), 100) },
		publish: func(t *testing.T, first, n int) { publish(t, js, first, n, nil) },
		stop:    func(*testing.T) { s.Shutdown(); s.WaitForShutdown() },
	}
}

func startCoreNATSBroker(t *testing.T) contractBroker {
	s := natstest.Start(t)
	pub, _ := client(t, s)
	return contractBroker{
		open: func(t *testing.T) shaper.Source { return coreSourceAt(t, s, 100) },
		publish: func(t *testing.T, first, n int) {
			t.Helper()
			for i := first; i < first+n; i++ {
				if err := pub.Publish(testSubject, []byte("msg-"+strconv.Itoa(i))); err != nil {
					t.Fatalf("publish: %v", err)
				}
			}
			if err := pub.Flush(); err != nil { // the server has routed them
				t.Fatalf("flush: %v", err)
			}
		},
		stop: func(*testing.T) { s.Shutdown(); s.WaitForShutdown() },
	}
}

func startKafkaBroker(t *testing.T) contractBroker {
	c, cl, cfg := startKafkaGroup(t)
	return contractBroker{
		open: func(t *testing.T) shaper.Source {
			src, _ := newKafkaSource(t, cfg, 100)
			return src
		},
		publish: func(t *testing.T, first, n int) {
			t.Helper()
			var recs []*kgo.Record
			for i := first; i < first+n; i++ {
				recs = append(recs, &kgo.Record{Partition: 0, Value: []byte("msg-" + strconv.Itoa(i))})
			}
			produceRecords(t, cl, recs...)
		},
		stop: func(*testing.T) { c.Close() },
	}
}

// sourceBehaviours is the contract. Each runs on a broker of its own.
var sourceBehaviours = []struct {
	name string
	run  func(t *testing.T, impl sourceImpl, b contractBroker)
}{
	{"FetchReturnsAtMostMax", testFetchReturnsAtMostMax},
	{"FetchBlocksUntilAMessageOrCtxEnds", testFetchBlocksUntilAMessageOrCtxEnds},
	{"AckedNeverComesBackAfterARestart", testAckedNeverComesBackAfterARestart},
	{"NackRedeliversNoSoonerThanDelay", testNackRedeliversNoSoonerThanDelay},
	{"ReadyReportsTheBrokerDown", testReadyReportsTheBrokerDown},
	{"CloseAfterEverythingIsSettled", testCloseAfterEverythingIsSettled},
	{"CloseBeforeAnyFetch", testCloseBeforeAnyFetch},
}

func TestSourceContract(t *testing.T) {
	for _, impl := range sourceImpls {
		for _, bh := range sourceBehaviours {
			t.Run(impl.name+"/"+bh.name, func(t *testing.T) {
				t.Parallel()
				bh.run(t, impl, impl.start(t))
			})
		}
	}
}

// payloads returns the payloads of msgs, sorted (Kafka and JetStream keep
// order; the behaviours do not depend on it).
func payloads(msgs []*shaper.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Payload)
	}
	slices.Sort(out)
	return out
}

func msgNames(first, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "msg-" + strconv.Itoa(first+i)
	}
	slices.Sort(out)
	return out
}

func testFetchReturnsAtMostMax(t *testing.T, _ sourceImpl, b contractBroker) {
	src := b.open(t)
	b.publish(t, 0, 10)
	got := fetchN(t, src, 10, 3) // fails on any Fetch(3) of more than 3
	if want := msgNames(0, 10); !slices.Equal(payloads(got), want) {
		t.Errorf("fetched %q; want %q", payloads(got), want)
	}
	ack(t, got...)
	if _, err := fetch(src, 0, time.Second); err == nil {
		t.Errorf("Fetch(0) = nil error; want one")
	}
}

func testFetchBlocksUntilAMessageOrCtxEnds(t *testing.T, _ sourceImpl, b contractBroker) {
	src := b.open(t)
	const wait = 300 * time.Millisecond
	start := time.Now()
	msgs, err := fetch(src, 10, wait)
	// Soon after ctx ends: a Fetch waiting on the broker (a JetStream pull
	// request waits natsIdleWait at the server) does not wait for it to
	// give up.
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || len(msgs) != 0 || took < wait || took > wait+natsIdleWait/2 {
		t.Errorf("Fetch with nothing published = %d messages, %v after %v; want none, context.DeadlineExceeded after %v and soon after",
			len(msgs), err, took, wait)
	}

	type result struct {
		msgs []*shaper.Message
		err  error
	}
	done := make(chan result, 1)
	go func() {
		msgs, err := fetch(src, 10, 20*time.Second)
		done <- result{msgs, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Fetch returned %d messages, %v before anything was published; want it to block", len(r.msgs), r.err)
	case <-time.After(wait):
	}
	b.publish(t, 0, 1)
	r := <-done
	if r.err != nil || len(r.msgs) != 1 || string(r.msgs[0].Payload) != "msg-0" {
		t.Fatalf("blocked Fetch = %q, %v; want [msg-0], nil", payloads(r.msgs), r.err)
	}
	ack(t, r.msgs...)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if msgs, err := src.Fetch(ctx, 10); !errors.Is(err, context.Canceled) || len(msgs) != 0 {
		t.Errorf("Fetch on a cancelled ctx = %d messages, %v; want none, context.Canceled", len(msgs), err)
	}
}

// A source is restarted on the same durable or group with two messages
// acked and two nacked: the acked ones never come back; the nacked ones do
// where the broker keeps messages, and are lost where it does not (core NATS).
func testAckedNeverComesBackAfterARestart(t *testing.T, impl sourceImpl, b contractBroker) {
	first := b.open(t)
	b.publish(t, 0, 4)
	got := fetchN(t, first, 4, 10)
	slices.SortFunc(got, func(x, y *shaper.Message) int { return strings.Compare(string(x.Payload), string(y.Payload)) })
	ack(t, got[0], got[2])
	for _, m := range []*shaper.Message{got[1], got[3]} {
		if err := m.Receipt.Nack(context.Background(), 0); err != nil {
			t.Fatalf("Nack(%s): %v", m.ID, err)
		}
	}
	closeSource(t, first)

	second := b.open(t)
	if !impl.redelivers {
		t.Logf("%s is at-most-once: the nacked messages are lost, as documented", impl.name)
		expectNothing(t, second, 2*time.Second)
		return
	}
	again := fetchN(t, second, 2, 10)
	if want := []string{"msg-1", "msg-3"}; !slices.Equal(payloads(again), want) {
		t.Errorf("after a restart fetched %q; want %q (the nacked ones, never the acked)", payloads(again), want)
	}
	for i, m := range again {
		if want := []*shaper.Message{got[1], got[3]}[i]; m.ID != want.ID {
			t.Errorf("redelivered %q with ID %q; want %q (stable across redeliveries)", m.Payload, m.ID, want.ID)
		}
	}
	ack(t, again...)
	expectNothing(t, second, 2*time.Second)
}

// A message is nacked at once (Nack(0)), then with a delay. Where the broker
// keeps messages it comes back each time, with the same ID; within fetchN's
// 20s after Nack(0), which for JetStream (AckWait 30s) only the Nak can do.
func testNackRedeliversNoSoonerThanDelay(t *testing.T, impl sourceImpl, b contractBroker) {
	src := b.open(t)
	b.publish(t, 0, 1)
	m := fetchN(t, src, 1, 10)[0]
	for _, delay := range []time.Duration{0, time.Second} {
		start := time.Now()
		if err := m.Receipt.Nack(context.Background(), delay); err != nil {
			t.Fatalf("Nack(%v): %v", delay, err)
		}
		if !impl.redelivers {
			t.Logf("%s is at-most-once: a Nack cannot bring the message back, as documented", impl.name)
			expectNothing(t, src, 2*time.Second)
			return
		}
		again := fetchN(t, src, 1, 10)[0]
		if waited := time.Since(start); impl.nackDelay && waited < delay {
			t.Errorf("Nack(%v) redelivered after %v; want no sooner than %v", delay, waited, delay)
		}
		if again.ID != m.ID || string(again.Payload) != "msg-0" {
			t.Errorf("after Nack(%v) redelivered %s %q; want %s %q", delay, again.ID, again.Payload, m.ID, "msg-0")
		}
		m = again
	}
	ack(t, m)
}

func testReadyReportsTheBrokerDown(t *testing.T, _ sourceImpl, b contractBroker) {
	src := b.open(t)
	b.publish(t, 0, 1)
	ack(t, fetchN(t, src, 1, 10)...)
	testwait.For(t, 10*time.Second, "Ready() = nil with the broker up", func() bool { return src.Ready() == nil })
	b.stop(t)
	testwait.For(t, 10*time.Second, "Ready() to report the broker down", func() bool { return src.Ready() != nil })
	t.Logf("Ready() with the broker down: %v", src.Ready())
}

func testCloseAfterEverythingIsSettled(t *testing.T, impl sourceImpl, b contractBroker) {
	src := b.open(t)
	b.publish(t, 0, 3)
	msgs := fetchN(t, src, 3, 10)
	ack(t, msgs[:2]...)
	if err := msgs[2].Receipt.Nack(context.Background(), 0); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	checkClose(t, impl, src)
}

func testCloseBeforeAnyFetch(t *testing.T, impl sourceImpl, b contractBroker) {
	checkClose(t, impl, b.open(t))
}

// checkClose closes src twice, and checks that both calls return nil and
// that the source then says it is closed.
func checkClose(t *testing.T, impl sourceImpl, src shaper.Source) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 2 {
		if err := src.Close(ctx); err != nil {
			t.Errorf("Close #%d = %v; want nil", i+1, err)
		}
	}
	if err := src.Ready(); !errors.Is(err, impl.errClosed) {
		t.Errorf("Ready() after Close = %v; want %v", err, impl.errClosed)
	}
	if msgs, err := fetch(src, 10, 5*time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) || len(msgs) != 0 {
		t.Errorf("Fetch after Close = %d messages, %v; want none and an error at once", len(msgs), err)
	}
}

// The helpers below drive any shaper.Source, for the contract and for each
// implementation's own tests alike.

// closeSource closes src, and fails the test if it takes more than 20s.
func closeSource(t testing.TB, src shaper.Source) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := src.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// fetch calls Fetch once under a timeout.
func fetch(src shaper.Source, max int, timeout time.Duration) ([]*shaper.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return src.Fetch(ctx, max)
}

// fetchN fetches until it has n messages, asking for max at a time, and
// fails the test if a Fetch returns more than max or an error, or if n do not
// come within 20s.
func fetchN(t *testing.T, src shaper.Source, n, max int) []*shaper.Message {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var got []*shaper.Message
	for len(got) < n && time.Now().Before(deadline) {
		msgs, err := fetch(src, max, time.Until(deadline))
		if err != nil {
			t.Fatalf("Fetch(%d) after %d messages: %v", max, len(got), err)
		}
		if len(msgs) < 1 || len(msgs) > max {
			t.Fatalf("Fetch(%d) returned %d messages; want 1..%d", max, len(msgs), max)
		}
		got = append(got, msgs...)
	}
	if len(got) != n {
		t.Fatalf("fetched %d messages; want %d", len(got), n)
	}
	return got
}

// expectNothing checks that Fetch returns no message for d.
func expectNothing(t *testing.T, src shaper.Source, d time.Duration) {
	t.Helper()
	msgs, err := fetch(src, 100, d)
	if !errors.Is(err, context.DeadlineExceeded) || len(msgs) != 0 {
		t.Fatalf("Fetch = %d messages (%v), %v; want none and context.DeadlineExceeded", len(msgs), ids(msgs), err)
	}
}

// ack acks ms, and fails the test if an Ack fails or takes more than 5s.
func ack(t *testing.T, ms ...*shaper.Message) {
	t.Helper()
	for _, m := range ms {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := m.Receipt.Ack(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Ack(%s): %v", m.ID, err)
		}
	}
}

func ids(msgs []*shaper.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}
