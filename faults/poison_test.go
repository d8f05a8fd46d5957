package faults_test

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// natsMaxPayload is nats-server's default max_payload: headers and data of
// one message together.
const natsMaxPayload = 1 << 20

// poisonRun starts a shaper on a JetStream fixture already holding its
// messages, waits until want messages are complete, stops it and returns
// the final metrics.
func poisonRun(t *testing.T, f fixture, sink *sinktest.Sink, sinkExtra string, want int) childtest.Metrics {
	t.Helper()
	config := childtest.WriteConfig(t, childtest.Pipeline{
		Source: f.source,
		Rate:   "{limit: 200}",
		Sink: fmt.Sprintf(`{http: {url: "%s", max_in_flight: 4, timeout: 2s, retry: {max_attempts: 3, initial_backoff: 50ms, max_backoff: 1s}%s}}`,
			sink.URL, sinkExtra),
		DeadLetter: f.deadLetter,
	}.YAML())
	p := startShaper(t, "shaper", config)
	m := p.WaitMetrics(time.Minute, fmt.Sprintf("%d messages complete", want), func(m childtest.Metrics) bool {
		return m.Sum("shaper_messages_completed_total") >= float64(want)
	})
	p.Stop()
	return m
}

func TestPoisonPayloadsAreDeliveredUnchangedOrDeadLetteredNeverLost(t *testing.T) {
	t.Parallel()
	t.Run("over max_body_bytes is dead-lettered malformed without a request", func(t *testing.T) {
		t.Parallel()
		f := jetstreamFixture(t, 0)
		big := bytes.Repeat([]byte("x"), 100<<10)
		f.nats.publish(20, func(i int) *nats.Msg {
			if i%4 == 0 {
				return &nats.Msg{Subject: "in.faults", Data: big}
			}
			return &nats.Msg{Subject: "in.faults", Data: []byte(strconv.Itoa(i))}
		})
		sink := sinktest.Start(t, sinktest.OK)
		poisonRun(t, f, sink, ", max_body_bytes: 65536", 20)
		f.settled(30 * time.Second)
		dls := f.dlq(5)
		o := account(t, streamIDs(20), sink, dls)
		for _, r := range sink.Requests() {
			if len(r.Body) > 65536 {
				t.Errorf("the sink received a %d-byte body over max_body_bytes (%s)", len(r.Body), r.Key)
			}
		}
		if len(dls) != 5 {
			t.Errorf("%d dead letters; want the 5 large messages", len(dls))
		}
		for _, d := range dls {
			if d.reason != "malformed" || d.attempts != "1" || !bytes.Equal(d.payload, big) {
				t.Errorf("dead letter %s: reason %q, attempts %q, %d-byte payload; want malformed, 1, the original %d bytes",
					d.source, d.reason, d.attempts, len(d.payload), len(big))
			}
		}
		t.Logf("20 messages: %d delivered, %d dead-lettered malformed, %d lost", len(o.delivered), len(o.deadLettered), len(o.lost))
	})

	t.Run("near the broker max is delivered whole", func(t *testing.T) {
		t.Parallel()
		f := jetstreamFixture(t, 0)
		near := bytes.Repeat([]byte("n"), natsMaxPayload-1024)
		f.nats.publish(3, func(int) *nats.Msg { return &nats.Msg{Subject: "in.faults", Data: near} })
		sink := sinktest.Start(t, sinktest.OK)
		poisonRun(t, f, sink, "", 3)
		f.settled(30 * time.Second)
		account(t, streamIDs(3), sink, nil)
		for _, r := range sink.Requests() {
			if !bytes.Equal(r.Body, near) {
				t.Errorf("%s: the sink received %d bytes; want the original %d", r.Key, len(r.Body), len(near))
			}
		}
	})

	t.Run("empty and invalid UTF-8 payloads arrive byte for byte", func(t *testing.T) {
		t.Parallel()
		payloads := [][]byte{
			{}, {0xff, 0xfe, 0xfd}, {0x00}, []byte("\r\n\r\nGET / HTTP/1.1\r\n\r\n"), {0xc3, 0x28}, []byte("ok"), {0xed, 0xa0, 0x80},
		}
		f := jetstreamFixture(t, 0)
		f.nats.publish(len(payloads), func(i int) *nats.Msg { return &nats.Msg{Subject: "in.faults", Data: payloads[i]} })
		sink := sinktest.Start(t, sinktest.OK)
		poisonRun(t, f, sink, "", len(payloads))
		f.settled(30 * time.Second)
		account(t, streamIDs(len(payloads)), sink, nil)
		for _, r := range sink.Requests() {
			i, _ := strconv.Atoi(strings.TrimPrefix(r.Key, "IN/"))
			if i < 1 || i > len(payloads) || !bytes.Equal(r.Body, payloads[i-1]) {
				t.Errorf("%s: the sink received %q; want %q", r.Key, r.Body, payloads[max(0, min(i-1, len(payloads)-1))])
			}
			if r.Header.Get("Content-Length") == "" && len(r.Body) > 0 {
				t.Errorf("%s: no Content-Length", r.Key)
			}
		}
	})

	t.Run("a Nats-Msg-Id with a control character is dead-lettered malformed", func(t *testing.T) {
		t.Parallel()
		f := jetstreamFixture(t, 0)
		ids := []string{"good-1", "bad\x01id", "good-2", "tab\tid", "good-3"}
		f.nats.publish(len(ids), func(i int) *nats.Msg {
			m := nats.NewMsg("in.faults")
			m.Header.Set(nats.MsgIdHdr, ids[i])
			m.Data = []byte(strconv.Itoa(i))
			return m
		})
		sink := sinktest.Start(t, sinktest.OK)
		poisonRun(t, f, sink, "", len(ids))
		f.settled(30 * time.Second)
		dls := f.dlq(2)
		delivered, _ := sink.Delivered()
		for _, id := range []string{"good-1", "good-2", "good-3"} {
			if delivered[id] == 0 {
				t.Errorf("message with Nats-Msg-Id %q not delivered", id)
			}
		}
		if len(dls) != 2 {
			t.Errorf("%d dead letters; want the 2 messages whose id cannot be an Idempotency-Key", len(dls))
		}
		for _, d := range dls {
			if d.reason != "malformed" {
				t.Errorf("dead letter %s: reason %q; want malformed", d.source, d.reason)
			}
		}
		for _, raw := range sink.RawConns() {
			if bytes.ContainsAny(raw, "\x01") {
				t.Errorf("a control character reached the sink: %q", raw)
			}
		}
	})

	t.Run("a sink answering 400 dead-letters once as rejected, never retried", func(t *testing.T) {
		t.Parallel()
		const n = 60
		f := jetstreamFixture(t, n)
		rejected := func(key string) bool { i, _ := strconv.Atoi(strings.TrimPrefix(key, "IN/")); return i%3 == 0 }
		sink := sinktest.Start(t, func(r *http.Request, _ int) sinktest.Action {
			if rejected(r.Header.Get("Idempotency-Key")) {
				return sinktest.Action{Status: http.StatusBadRequest}
			}
			return sinktest.Action{}
		})
		m := poisonRun(t, f, sink, "", n)
		f.settled(30 * time.Second)
		dls := f.dlq(n / 3)
		o := account(t, streamIDs(n), sink, dls)
		for _, r := range sink.Requests() {
			if rejected(r.Key) && r.Attempt > 1 {
				t.Errorf("%s answered 400 was sent again (attempt %d); want it never retried", r.Key, r.Attempt)
			}
		}
		if got := m.Sum("shaper_retries_total"); got != 0 {
			t.Errorf("shaper_retries_total = %v; want 0: a 400 is permanent", got)
		}
		for _, d := range dls {
			if d.reason != "rejected" || d.attempts != "1" {
				t.Errorf("dead letter %s: reason %q attempts %q; want rejected, 1", d.source, d.reason, d.attempts)
			}
		}
		if len(o.deadLettered) != n/3 || len(dls) != n/3 {
			t.Errorf("%d dead letters (%d messages); want %d, once each", len(dls), len(o.deadLettered), n/3)
		}
	})

	t.Run("a dead-letter target that is down gets the message later, never lost", func(t *testing.T) {
		t.Parallel()
		const n = 40
		f := jetstreamFixture(t, n)
		dlqBroker := startNATS(t)
		dlqBroker.stream("DLQ", "dlq.>")
		dlqBroker.stop()
		rejected := func(key string) bool { i, _ := strconv.Atoi(strings.TrimPrefix(key, "IN/")); return i%5 == 0 }
		sink := sinktest.Start(t, func(r *http.Request, _ int) sinktest.Action {
			if rejected(r.Header.Get("Idempotency-Key")) {
				return sinktest.Action{Status: http.StatusBadRequest}
			}
			return sinktest.Action{}
		})
		config := childtest.WriteConfig(t, childtest.Pipeline{
			Source: f.source,
			Rate:   "{limit: 200}",
			Sink: fmt.Sprintf(`{http: {url: "%s", max_in_flight: 4, timeout: 1s, retry: {max_attempts: 3, initial_backoff: 50ms, max_backoff: 1s}}}`,
				sink.URL),
			DeadLetter: natsDeadLetter(dlqBroker.url),
		}.YAML())
		p := startShaper(t, "shaper", config)
		admin := p.Admin()
		testwait.For(t, time.Minute, "the other messages delivered", func() bool { return sink.DeliveredCount() >= n-n/5 })
		p.WaitMetrics(30*time.Second, "dead letters to fail and be nacked", func(m childtest.Metrics) bool {
			return m.Sum("shaper_messages_nacked_total", `reason="dead_letter_failed"`) >= n/5
		})
		// A few more rounds of redelivery while the target is down: three
		// nacks a message on average.
		p.WaitMetrics(30*time.Second, "two more rounds of dead letters failing", func(m childtest.Metrics) bool {
			return m.Sum("shaper_messages_nacked_total", `reason="dead_letter_failed"`) >= 3*(n/5)
		})
		ids, err := f.finished()
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if rejected(id) {
				t.Errorf("%s was acked while its dead letter could not be published", id)
			}
		}
		_, ackPending, _ := f.nats.consumer("IN", "shaper-faults")
		m, _ := childtest.Scrape(admin)
		rounds := m.Sum("shaper_messages_nacked_total", `reason="dead_letter_failed"`)
		t.Logf("dead-letter target down: %v nacks, %d messages unacked", rounds, ackPending)

		dlqBroker.start()
		testwait.For(t, time.Minute, "the dead letters to arrive once the target is back", func() bool { return dlqBroker.streamCount("DLQ") >= n/5 })
		f.settled(30 * time.Second)
		p.Stop()
		dls := dlqBroker.deadLetters("DLQ")
		o := account(t, streamIDs(n), sink, dls)
		for _, d := range dls {
			if d.reason != "rejected" {
				t.Errorf("dead letter %s: reason %q; want rejected", d.source, d.reason)
			}
		}
		t.Logf("%d messages: %d delivered, %d dead-lettered after the target came back (%d dead letters), %d lost",
			n, len(o.delivered), len(o.deadLettered), len(dls), len(o.lost))
	})
}

// injectedLine matches a header line named X-Injected in a raw HTTP/1.1 request.
var injectedLine = regexp.MustCompile(`(?im)^x-injected\s*:`)

func TestPoisonHeadersNeverInjectAnHTTPHeader(t *testing.T) {
	t.Parallel()
	type give struct {
		key     []byte
		headers []kgo.RecordHeader
	}
	gives := []give{
		{key: []byte("k0"), headers: []kgo.RecordHeader{{Key: "X-Ok", Value: []byte("fine")}}},
		{key: []byte("k1"), headers: []kgo.RecordHeader{{Key: "X-Evil", Value: []byte("a\r\nX-Injected: crlf")}}},
		{key: []byte("k2"), headers: []kgo.RecordHeader{{Key: "X-Evil", Value: []byte("b\nX-Injected: lf")}}},
		{key: []byte("k3"), headers: []kgo.RecordHeader{{Key: "X-Evil", Value: []byte("c\rX-Injected: cr")}}},
		{key: []byte("k4"), headers: []kgo.RecordHeader{{Key: "X-Evil\r\nX-Injected", Value: []byte("name")}}},
		{key: []byte("k5"), headers: []kgo.RecordHeader{{Key: "X-Bin", Value: []byte{0xff, 0xfe, 'v'}}, {Key: "X-Nul", Value: []byte("a\x00X-Injected: nul")}}},
		{key: []byte("k6"), headers: []kgo.RecordHeader{{Key: "Host", Value: []byte("evil.example")}, {Key: "Content-Length", Value: []byte("0")},
			{Key: "Transfer-Encoding", Value: []byte("chunked")}, {Key: "Idempotency-Key", Value: []byte("forged")}}},
		{key: []byte("bad\r\nX-Injected: key"), headers: nil}, // key_header: malformed, dead-lettered
		{key: []byte("k8"), headers: []kgo.RecordHeader{{Key: "X-\xffName", Value: []byte("v")}}},
	}
	const n = 9
	f := kafkaFixture(t, 0, 200*time.Millisecond)
	recs := make([]*kgo.Record, len(gives))
	for i, g := range gives {
		// One partition, so the ids are in/0/0 .. in/0/8.
		recs[i] = &kgo.Record{Partition: 0, Key: g.key, Value: []byte(strconv.Itoa(i)), Headers: g.headers}
	}
	f.kafka.produceTo(recs)
	sink := sinktest.Start(t, sinktest.OK)
	config := childtest.WriteConfig(t, childtest.Pipeline{
		Source:     f.source,
		Rate:       "{limit: 200}",
		Sink:       fmt.Sprintf(`{http: {url: "%s", max_in_flight: 4, timeout: 2s, forward_headers: true, key_header: X-Key}}`, sink.URL),
		DeadLetter: f.deadLetter,
	}.YAML())
	p := startShaper(t, "shaper", config)
	p.WaitMetrics(time.Minute, "every record complete", func(m childtest.Metrics) bool {
		return m.Sum("shaper_messages_completed_total") >= n
	})
	p.Stop()
	f.settled(30 * time.Second)
	dls := f.dlq(1)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "in/0/" + strconv.Itoa(i)
	}
	o := account(t, ids, sink, dls)

	for i, raw := range sink.RawConns() {
		if loc := injectedLine.FindIndex(raw); loc != nil {
			t.Errorf("connection %d carried an injected header line: %q", i, raw[max(0, loc[0]-80):min(len(raw), loc[1]+40)])
		}
		if bytes.Contains(raw, []byte("evil.example")) || bytes.Contains(raw, []byte("forged")) || bytes.Contains(raw, []byte("chunked")) {
			t.Errorf("connection %d carried a forwarded framing or identity header: %q", i, raw)
		}
	}
	byKey := map[string]sinktest.Request{}
	for _, r := range sink.Requests() {
		byKey[r.Key] = r
	}
	if got := byKey["in/0/0"].Header.Get("X-Ok"); got != "fine" {
		t.Errorf("X-Ok = %q; want a clean header forwarded", got)
	}
	if got := byKey["in/0/0"].Header.Get("X-Key"); got != "k0" {
		t.Errorf("X-Key = %q; want the record key", got)
	}
	for _, id := range []string{"in/0/1", "in/0/2", "in/0/3"} {
		if v := byKey[id].Header.Values("X-Evil"); len(v) > 0 {
			t.Errorf("%s: X-Evil forwarded as %q; want a value with CR or LF left out", id, v)
		}
	}
	t.Logf("invalid UTF-8: header value X-Bin arrived as %q; header name X-\\xffName forwarded: %v",
		byKey["in/0/5"].Header.Get("X-Bin"), len(byKey["in/0/8"].Header) > 0 && byKey["in/0/8"].Header.Get("X-\xffName") != "")
	if len(dls) != 1 || dls[0].source != "in/0/7" || dls[0].reason != "malformed" {
		t.Errorf("dead letters %+v; want in/0/7 (a key with CR LF for key_header) as malformed", dls)
	}
	t.Logf("%d records: %d delivered, %d dead-lettered, %d lost; no injected header in %d raw connections",
		n, len(o.delivered), len(o.deadLettered), len(o.lost), len(sink.RawConns()))
}

// kfakeMaxMessageBytes is kfake's default message.max.bytes (a produce batch).
const kfakeMaxMessageBytes = 1048588

// TestPoisonADeadLetterTooLargeForItsTargetIsSentWithoutItsPayload: a
// message that fits its broker but whose dead letter (the payload plus the
// Shaper-* headers) does not fit the dead-letter target still ends
// dead-lettered, once: the dead letter goes without its payload, with
// Shaper-Payload-Omitted. Before bfc5572 it was nacked and came back every
// max_backoff forever, sent to the sink again each time (docs/reliability.md,
// finding 1).
func TestPoisonADeadLetterTooLargeForItsTargetIsSentWithoutItsPayload(t *testing.T) {
	t.Parallel()
	rejectAll := func(*http.Request, int) sinktest.Action { return sinktest.Action{Status: http.StatusBadRequest} }
	run := func(t *testing.T, f fixture, size int) {
		sink := sinktest.Start(t, rejectAll)
		p := startShaper(t, "shaper", childtest.WriteConfig(t, childtest.Pipeline{
			Source:     f.source,
			Rate:       "{limit: 100}",
			Sink:       fmt.Sprintf(`{http: {url: "%s", retry: {max_backoff: 1s}}}`, sink.URL),
			DeadLetter: f.deadLetter,
		}.YAML()))
		p.WaitMetrics(30*time.Second, "the message to complete", func(m childtest.Metrics) bool {
			return m.Sum("shaper_messages_completed_total") >= 1
		})
		// Acked or committed at the broker: it cannot come back. A message
		// nacked instead would come back every max_backoff, forever.
		f.settled(30 * time.Second)
		m, _ := childtest.Scrape(p.Admin())
		p.Stop()
		dls := f.dlq(1)
		if got := m.Sum("shaper_messages_completed_total", `outcome="dead_lettered"`); got != 1 || sink.RequestCount() != 1 {
			t.Errorf("%v dead-lettered, %v dead-letter nacks, %d requests to the sink; want 1 dead letter after 1 request",
				got, m.Sum("shaper_messages_nacked_total", `reason="dead_letter_failed"`), sink.RequestCount())
		}
		if len(dls) != 1 {
			t.Fatalf("%d dead letters; want 1", len(dls))
		}
		d := dls[0]
		if d.reason != "rejected" || len(d.payload) != 0 || d.omitted != strconv.Itoa(size)+" bytes" {
			t.Errorf("dead letter: reason %q, %d-byte payload, Shaper-Payload-Omitted %q; want rejected, none, %q",
				d.reason, len(d.payload), d.omitted, strconv.Itoa(size)+" bytes")
		}
		t.Logf("a %d-byte message rejected by the sink: dead-lettered once without its payload (Shaper-Payload-Omitted: %s)", size, d.omitted)
	}
	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		f := jetstreamFixture(t, 0)
		size := natsMaxPayload - 16
		f.nats.publish(1, func(int) *nats.Msg { return &nats.Msg{Subject: "in.faults", Data: bytes.Repeat([]byte("n"), size)} })
		run(t, f, size)
	})
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		f := kafkaFixture(t, 0, fixtureCommitInterval)
		size := kfakeMaxMessageBytes - 90
		f.kafka.produceTo([]*kgo.Record{{Partition: 0, Value: bytes.Repeat([]byte("k"), size)}})
		run(t, f, size)
	})
}
