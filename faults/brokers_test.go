package faults_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shaper-dev/shaper/internal/kafkatest"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// deadLetter is one message found on a dead-letter subject or topic.
type deadLetter struct {
	source   string // Shaper-Source: the original's stream/sequence or topic/partition/offset
	reason   string // Shaper-Reason
	attempts string // Shaper-Attempts
	errText  string // Shaper-Error
	omitted  string // Shaper-Payload-Omitted: set when the payload was too large for the target
	payload  []byte
}

// natsBroker is an embedded nats-server with JetStream that can be stopped
// and started again on the same port with the same store directory.
type natsBroker struct {
	t    testing.TB
	srv  *server.Server
	port int
	dir  string
	url  string
}

func startNATS(t testing.TB) *natsBroker {
	t.Helper()
	b := &natsBroker{t: t, dir: t.TempDir()}
	b.srv = natstest.StartAt(t, -1, b.dir)
	b.port = b.srv.Addr().(*net.TCPAddr).Port
	b.url = b.srv.ClientURL()
	return b
}

// stop shuts the server down; start brings it back on the same address and
// store.
func (b *natsBroker) stop() {
	b.srv.Shutdown()
	b.srv.WaitForShutdown()
}

func (b *natsBroker) start() {
	b.t.Helper()
	b.srv = natstest.StartAt(b.t, b.port, b.dir)
}

// js connects a short-lived client; the caller closes nc.
func (b *natsBroker) js() (*nats.Conn, jetstream.JetStream) {
	b.t.Helper()
	nc, err := nats.Connect(b.url, nats.Timeout(5*time.Second))
	if err != nil {
		b.t.Fatalf("nats: connect: %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		b.t.Fatalf("nats: jetstream: %v", err)
	}
	return nc, js
}

// stream creates a file-backed stream on subjects.
func (b *natsBroker) stream(name string, subjects ...string) {
	b.t.Helper()
	nc, js := b.js()
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects}); err != nil {
		b.t.Fatalf("nats: create stream %s: %v", name, err)
	}
}

// publish publishes the messages msg(0) .. msg(n-1) to JetStream and waits
// for every ack.
func (b *natsBroker) publish(n int, msg func(i int) *nats.Msg) {
	b.t.Helper()
	nc, js := b.js()
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const window = 4096
	for from := 0; from < n; from += window {
		for i := from; i < min(from+window, n); i++ {
			if _, err := js.PublishMsgAsync(msg(i)); err != nil {
				b.t.Fatalf("nats: publish %d: %v", i, err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			b.t.Fatalf("nats: publish acks: %v", ctx.Err())
		}
	}
}

// numbered is a payload `{"n":i}` on subject.
func numbered(subject string) func(int) *nats.Msg {
	return func(i int) *nats.Msg {
		return &nats.Msg{Subject: subject, Data: []byte(`{"n":` + strconv.Itoa(i) + `}`)}
	}
}

// consumerInfo returns the durable consumer's state, on a short-lived
// connection.
func (b *natsBroker) consumerInfo(stream, durable string) (*jetstream.ConsumerInfo, error) {
	nc, err := nats.Connect(b.url, nats.Timeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// consumer returns how many messages the durable consumer has still to
// deliver and how many are delivered but not acked.
func (b *natsBroker) consumer(stream, durable string) (pending uint64, ackPending int, err error) {
	info, err := b.consumerInfo(stream, durable)
	if err != nil {
		return 0, 0, err
	}
	return info.NumPending, info.NumAckPending, nil
}

// ackedIDs returns the ids (stream/sequence) of the messages at or below
// the consumer's ack floor: those the server takes as finished for good.
func (b *natsBroker) ackedIDs(stream, durable string) ([]string, error) {
	info, err := b.consumerInfo(stream, durable)
	if err != nil {
		return nil, err
	}
	var ids []string
	for seq := uint64(1); seq <= info.AckFloor.Stream; seq++ {
		ids = append(ids, stream+"/"+strconv.FormatUint(seq, 10))
	}
	return ids, nil
}

// settled waits until the durable consumer has nothing pending and nothing
// unacked: every message of the stream has been acked.
func (b *natsBroker) settled(stream, durable string, timeout time.Duration) {
	b.t.Helper()
	var pending uint64
	var ackPending int
	var err error
	testwait.For(b.t, timeout, "every message acked on "+stream, func() bool {
		pending, ackPending, err = b.consumer(stream, durable)
		return err == nil && pending == 0 && ackPending == 0
	})
}

// deadLetters reads every message of stream (the dead-letter stream).
func (b *natsBroker) deadLetters(stream string) []deadLetter {
	b.t.Helper()
	nc, js := b.js()
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		b.t.Fatalf("nats: stream %s: %v", stream, err)
	}
	info := s.CachedInfo()
	var out []deadLetter
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			b.t.Fatalf("nats: get %s/%d: %v", stream, seq, err)
		}
		out = append(out, deadLetter{
			source: m.Header.Get("Shaper-Source"), reason: m.Header.Get("Shaper-Reason"),
			attempts: m.Header.Get("Shaper-Attempts"), errText: m.Header.Get("Shaper-Error"),
			omitted: m.Header.Get("Shaper-Payload-Omitted"), payload: m.Data,
		})
	}
	return out
}

// streamCount returns how many messages stream holds (0 while unreachable).
func (b *natsBroker) streamCount(stream string) int {
	nc, err := nats.Connect(b.url, nats.Timeout(2*time.Second))
	if err != nil {
		return 0
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0
	}
	return int(s.CachedInfo().State.Msgs)
}

// natsSource is the source block of a JetStream pipeline on stream IN.
func natsSource(url string) string {
	return fmt.Sprintf(`{nats: {url: "%s", subject: in.faults, stream: IN, durable: shaper-faults, ack_wait: 2s}}`, url)
}

// natsDeadLetter is the dead_letter block for subject dlq.faults (stream DLQ).
func natsDeadLetter(url string) string {
	return fmt.Sprintf(`{nats: {url: "%s", subject: dlq.faults}}`, url)
}

// kafkaBroker is an in-process Kafka (kfake) with a fixed port and a data
// directory, so that it can be closed and started again on the same address
// with its topics, records and committed offsets.
type kafkaBroker struct {
	*kafkatest.Cluster
	t testing.TB
}

// startKafka starts kfake with topic "in" of 4 partitions and topic "dlq"
// of 1, plus opts.
func startKafka(t testing.TB, opts ...kfake.Opt) *kafkaBroker {
	t.Helper()
	opts = append([]kfake.Opt{kfake.SeedTopics(4, "in"), kfake.SeedTopics(1, "dlq")}, opts...)
	return &kafkaBroker{Cluster: kafkatest.Start(t, opts...), t: t}
}

// kafkaClient returns a kafka-go admin client on its own transport.
func (k *kafkaBroker) admin() (*kafka.Client, func()) {
	tr := &kafka.Transport{DialTimeout: 2 * time.Second}
	return &kafka.Client{Addr: kafka.TCP(k.Addr), Transport: tr, Timeout: 5 * time.Second}, tr.CloseIdleConnections
}

// offsets returns, per partition of topic "in", the offset group has
// committed (0 when none) and the end offset.
func (k *kafkaBroker) offsets(group string) (committed, ends map[int]int64, err error) {
	c, done := k.admin()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	parts := []int{0, 1, 2, 3}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, p := range parts {
		req.Topics["in"] = append(req.Topics["in"], kafka.LastOffsetOf(p))
	}
	lo, err := c.ListOffsets(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	of, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{"in": parts}})
	if err != nil {
		return nil, nil, err
	}
	if of.Error != nil {
		return nil, nil, of.Error
	}
	committed, ends = map[int]int64{}, map[int]int64{}
	for _, p := range of.Topics["in"] {
		if p.Error != nil {
			return nil, nil, p.Error
		}
		committed[p.Partition] = max(p.CommittedOffset, 0)
	}
	for _, p := range lo.Topics["in"] {
		if p.Error != nil {
			return nil, nil, p.Error
		}
		ends[p.Partition] = p.LastOffset
	}
	return committed, ends, nil
}

// lag returns the records of topic "in" that group has not committed.
func (k *kafkaBroker) lag(group string) (int64, error) {
	committed, ends, err := k.offsets(group)
	if err != nil {
		return 0, err
	}
	var lag int64
	for p, end := range ends {
		lag += end - committed[p]
	}
	return lag, nil
}

// committedIDs returns the ids (topic/partition/offset) of every record
// below group's committed offsets: those the broker takes as finished.
func (k *kafkaBroker) committedIDs(group string) ([]string, error) {
	committed, _, err := k.offsets(group)
	if err != nil {
		return nil, err
	}
	var ids []string
	for p, upTo := range committed {
		for o := range upTo {
			ids = append(ids, fmt.Sprintf("in/%d/%d", p, o))
		}
	}
	return ids, nil
}

// settled waits until group has committed every record of topic "in".
func (k *kafkaBroker) settled(group string, timeout time.Duration) {
	k.t.Helper()
	var lag int64
	var err error
	testwait.For(k.t, timeout, "group "+group+" to commit every offset", func() bool {
		lag, err = k.lag(group)
		return err == nil && lag == 0
	})
}

// dlqEnd returns the end offset of topic "dlq" (one partition).
func (k *kafkaBroker) dlqEnd() (int64, error) {
	c, done := k.admin()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lo, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{"dlq": {kafka.LastOffsetOf(0)}}})
	if err != nil {
		return 0, err
	}
	for _, p := range lo.Topics["dlq"] {
		if p.Error != nil {
			return 0, p.Error
		}
		return p.LastOffset, nil
	}
	return 0, fmt.Errorf("kafka: no offsets for dlq")
}

// deadLetters reads every record of topic "dlq": at least want, waiting up
// to timeout for them, and at least as many as the topic holds.
func (k *kafkaBroker) deadLetters(want int, timeout time.Duration) []deadLetter {
	k.t.Helper()
	end, err := k.dlqEnd()
	if err != nil {
		k.t.Fatalf("kafka: dlq end offset: %v", err)
	}
	want = max(want, int(end))
	c := k.Client(kgo.ConsumeTopics("dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer c.Close()
	var out []deadLetter
	deadline := time.Now().Add(timeout)
	for len(out) < want && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := c.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			d := deadLetter{payload: r.Value}
			for _, h := range r.Headers {
				switch h.Key {
				case "Shaper-Source":
					d.source = string(h.Value)
				case "Shaper-Reason":
					d.reason = string(h.Value)
				case "Shaper-Attempts":
					d.attempts = string(h.Value)
				case "Shaper-Error":
					d.errText = string(h.Value)
				case "Shaper-Payload-Omitted":
					d.omitted = string(h.Value)
				}
			}
			out = append(out, d)
		})
	}
	return out
}

// kafkaSource is the source block of a pipeline on topic "in" with timings
// that make a group settle in about a second.
func kafkaSource(addr, group string, commit time.Duration) string {
	return kafkatest.SourceYAML(addr, "in", group, "commit_interval: "+commit.String())
}

func kafkaDeadLetter(addr string) string {
	return fmt.Sprintf(`{kafka: {brokers: ["%s"], topic: dlq}}`, addr)
}

// produceTo writes recs, each to its own Partition of topic "in".
func (k *kafkaBroker) produceTo(recs []*kgo.Record) {
	k.t.Helper()
	k.Produce("in", recs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
}
