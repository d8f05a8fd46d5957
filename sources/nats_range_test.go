package sources

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

// rangeServer starts an embedded server with stream name on subjects, and
// the test's own JetStream client on it.
func rangeServer(t *testing.T, name string, subjects ...string) (*server.Server, jetstream.JetStream) {
	t.Helper()
	s := natstest.Start(t)
	_, js := client(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects}); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	return s, js
}

// publishMsgs publishes ms through JetStream and waits for each ack.
func publishMsgs(t *testing.T, js jetstream.JetStream, ms ...*nats.Msg) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range ms {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish to %s: %v", m.Subject, err)
		}
	}
}

// payRange publishes n messages m-0, m-1, ... on cb.pay of stream CB, and
// returns the JetStream and a replay of the whole stream.
func payRange(t *testing.T, n int) (jetstream.JetStream, *JetStreamRange) {
	t.Helper()
	s, js := rangeServer(t, "CB", "cb.>")
	publishMsgs(t, js, bodies("cb.pay", "m", n)...)
	return js, newRange(t, s, "CB", "cb.pay", ReplayOptions{})
}

// fetchExactly makes one Fetch of up to n messages, and fails the test
// unless it returns n within 10s.
func fetchExactly(t *testing.T, src shaper.Source, n int) []*shaper.Message {
	t.Helper()
	got, err := fetch(src, n, 10*time.Second)
	if err != nil || len(got) != n {
		t.Fatalf("Fetch(%d) = %d messages, %v; want %d", n, len(got), err, n)
	}
	return got
}

// bodies are n messages to subject with bodies prefix-0...
func bodies(subject, prefix string, n int) []*nats.Msg {
	ms := make([]*nats.Msg, n)
	for i := range ms {
		ms[i] = &nats.Msg{Subject: subject, Data: []byte(prefix + "-" + strconv.Itoa(i))}
	}
	return ms
}

// newRange starts a JetStreamRange and closes it when the test ends.
func newRange(t *testing.T, s *server.Server, stream, subject string, opts ReplayOptions) *JetStreamRange {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := NewJetStreamRange(ctx, s.ClientURL(), stream, subject, 1000, opts, "shaper-test", nil)
	if err != nil {
		t.Fatalf("NewJetStreamRange: %v", err)
	}
	t.Cleanup(func() { closeSource(t, r) })
	return r
}

func payloadsOf(msgs []*shaper.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Payload)
	}
	return out
}

func consumerState(t *testing.T, js jetstream.JetStream, stream, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, name)
	if err != nil {
		t.Fatalf("consumer %s: %v", name, err)
	}
	i, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer %s info: %v", name, err)
	}
	return fmt.Sprintf("delivered %d/%d, ack floor %d/%d, ack pending %d, pending %d",
		i.Delivered.Consumer, i.Delivered.Stream, i.AckFloor.Consumer, i.AckFloor.Stream, i.NumAckPending, i.NumPending)
}

func consumerNames(t *testing.T, js jetstream.JetStream, stream string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	var names []string
	l := st.ConsumerNames(ctx)
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("consumer names: %v", err)
	}
	slices.Sort(names)
	return names
}

func TestJetStreamRangeHandsOutItsSubjectOnceAndMovesNoConsumer(t *testing.T) {
	s, js := rangeServer(t, "CB", "cb.>")
	pay, other := bodies("cb.pay", "pay", 100), bodies("cb.other", "other", 20)
	for i := range 100 {
		publishMsgs(t, js, pay[i])
		if i%5 == 4 {
			publishMsgs(t, js, other[i/5])
		}
	}
	// The live pipeline's durable consumer: 10 acked, 5 held.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	live, err := js.CreateOrUpdateConsumer(ctx, "CB", jetstream.ConsumerConfig{
		Durable: "live", FilterSubject: "cb.pay", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatalf("live consumer: %v", err)
	}
	b, err := live.Fetch(15, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatalf("live fetch: %v", err)
	}
	n := 0
	for m := range b.Messages() {
		if n < 10 {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatalf("live ack: %v", err)
			}
		}
		n++
	}
	before := consumerState(t, js, "CB", "live")

	r := newRange(t, s, "CB", "cb.pay", ReplayOptions{})
	if p := r.Progress(); p.Total != 100 || p.Read != 0 {
		t.Errorf("Progress() before = total %d, read %d; want 100, 0", p.Total, p.Read)
	}
	got := readRange(t, r, 7)
	want := payloadsOf(nil)
	for i := range 100 {
		want = append(want, "pay-"+strconv.Itoa(i))
	}
	if p := payloadsOf(got); !slices.Equal(p, want) {
		t.Fatalf("payloads = %v; want pay-0..pay-99 in order, once each", p)
	}
	seen := map[string]bool{}
	for _, m := range got {
		if m.ID != m.Origin || !strings.HasPrefix(m.ID, "CB/") || seen[m.ID] {
			t.Errorf("message %s: ID = %q, Origin = %q; want one stream/sequence each", m.Payload, m.ID, m.Origin)
		}
		seen[m.ID] = true
	}
	ack(t, got...)
	p := r.Progress()
	if p.Total != 100 || p.Read != 100 || p.Skipped != 0 || p.Finished != 100 || !p.Exhausted || p.Places["CB"] != 100 {
		t.Errorf("Progress() = %+v; want total, read, finished 100, places CB:100, exhausted", p)
	}
	if after := consumerState(t, js, "CB", "live"); after != before {
		t.Errorf("live consumer after the replay: %s; want unchanged: %s", after, before)
	}
	closeSource(t, r)
	if names := consumerNames(t, js, "CB"); !slices.Equal(names, []string{"live"}) {
		t.Errorf("consumers after Close = %v; want only [live]", names)
	}
}

func TestJetStreamRangeByTimeSelectsTheMiddleBandToExclusive(t *testing.T) {
	s, js := rangeServer(t, "CB", "cb.>")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "CB")
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	// Three bands of 5, one after the other; each band's first time as
	// stored. The bounds are those times themselves, with nothing between
	// the bands: from takes its message in, to leaves its message out.
	var firsts []time.Time
	for band, name := range []string{"a", "b", "c"} {
		publishMsgs(t, js, bodies("cb.pay", name, 5)...)
		m, err := st.GetMsg(ctx, uint64(band*5+1))
		if err != nil {
			t.Fatalf("get message %d: %v", band*5+1, err)
		}
		firsts = append(firsts, m.Time)
	}
	from, to := firsts[1].Format(time.RFC3339Nano), firsts[2].Format(time.RFC3339Nano)

	r := newRange(t, s, "CB", "cb.pay", bounds(t, from, to))
	got := readRange(t, r, 100)
	if p, want := payloadsOf(got), payloadsOf(nil); !slices.Equal(p, append(want, "b-0", "b-1", "b-2", "b-3", "b-4")) {
		t.Errorf("range %s..%s = %v; want b-0..b-4", from, to, p)
	}
	checkUnacked(t, r, 5, "seq:6", "seq:11")
	ack(t, got...)
}

func TestJetStreamRangeResumesAtTheFirstUnfinishedMessage(t *testing.T) {
	s, js := rangeServer(t, "CB", "cb.>")
	publishMsgs(t, js, bodies("cb.pay", "m", 20)...) // m-i at seq i+1

	r := newRange(t, s, "CB", "cb.pay", bounds(t, "seq:5", "seq:15"))
	if f, e := r.Resume(); f != "seq:5" || e != "seq:15" {
		t.Errorf("Resume() before reading = %q, %q; want seq:5, seq:15", f, e)
	}
	got := readRange(t, r, 3)
	if p := payloadsOf(got); !slices.Equal(p, []string{"m-4", "m-5", "m-6", "m-7", "m-8", "m-9", "m-10", "m-11", "m-12", "m-13"}) {
		t.Fatalf("range seq:5..seq:15 = %v; want m-4..m-13 (seqs 5..14)", p)
	}
	ack(t, got[:3]...) // seqs 5, 6, 7
	if err := got[3].Receipt.Nack(context.Background(), 0); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	// Seqs 9..14 stay unsettled.
	p := r.Progress()
	if p.Total != 10 || p.Finished != 3 || p.Unfinished != 1 {
		t.Errorf("Progress() = total %d, finished %d, unfinished %d; want 10, 3, 1", p.Total, p.Finished, p.Unfinished)
	}
	from, to := r.Resume()
	if from != "seq:8" || to != "seq:15" {
		t.Fatalf("Resume() = %q, %q; want seq:8, seq:15", from, to)
	}

	again := newRange(t, s, "", "cb.pay", bounds(t, from, to))
	rest := readRange(t, again, 100)
	if p := payloadsOf(rest); !slices.Equal(p, payloadsOf(got[3:])) {
		t.Errorf("resumed range = %v; want what was not finished: %v", p, payloadsOf(got[3:]))
	}
	if p := again.Progress(); p.Total != 7 {
		t.Errorf("resumed Progress().Total = %d; want 7", p.Total)
	}
	ack(t, rest...)
}

// deadLetter is a dead-letter record to dlq.callbacks as pipeline psp
// writes one; h may set another Shaper-Pipeline, or "" to leave it out.
func deadLetter(body string, h map[string]string) *nats.Msg {
	m := nats.NewMsg("dlq.callbacks")
	m.Data = []byte(body)
	m.Header.Set("X-Trace", "trace-"+body)
	m.Header.Set("Shaper-Pipeline", "psp")
	for k, v := range h {
		m.Header.Set(k, v)
	}
	if m.Header.Get("Shaper-Pipeline") == "" {
		m.Header.Del("Shaper-Pipeline")
	}
	return m
}

// checkOriginal checks that m went out as the message that was
// dead-lettered: its id, origin and attempts, its own headers and none of
// the dead letter's.
func checkOriginal(t *testing.T, m *shaper.Message, id, origin string, attempts int) {
	t.Helper()
	if m.ID != id || m.Origin != origin || m.Attempts != attempts {
		t.Errorf("%s: ID, Origin, Attempts = %q, %q, %d; want %q, %q, %d", m.Payload, m.ID, m.Origin, m.Attempts, id, origin, attempts)
	}
	for k := range m.Header {
		if strings.HasPrefix(strings.ToLower(k), "shaper-") || strings.EqualFold(k, nats.MsgIdHdr) {
			t.Errorf("%s: header %s is the dead letter's; want it gone", m.Payload, k)
		}
	}
	if h := m.Header["X-Trace"]; len(h) != 1 || h[0] != "trace-"+string(m.Payload) {
		t.Errorf("%s: X-Trace = %q; want it kept", m.Payload, h)
	}
}

func TestJetStreamRangeOfDeadLettersHandsOutTheReasonAskedForAsTheOriginals(t *testing.T) {
	s, js := rangeServer(t, "DLQ", "dlq.>")
	publishMsgs(t, js,
		deadLetter("e0", map[string]string{"Shaper-Reason": "expired", "Shaper-Source": "CB/10", "Shaper-Attempts": "3", nats.MsgIdHdr: "orig-10"}),
		deadLetter("x1", map[string]string{"Shaper-Reason": "exhausted", "Shaper-Source": "CB/11", "Shaper-Attempts": "5", "Shaper-Id": "sid-11"}),
		deadLetter("e2", map[string]string{"Shaper-Reason": "expired", "Shaper-Source": "CB/12", "Shaper-Attempts": "1", "Shaper-Id": "sid-12", nats.MsgIdHdr: "dl-12"}),
		deadLetter("x3", map[string]string{"Shaper-Reason": "exhausted", "Shaper-Source": "CB/13", nats.MsgIdHdr: "orig-13"}),
		deadLetter("e4", map[string]string{"Shaper-Reason": "expired", "Shaper-Source": "CB/14", "Shaper-Attempts": "2"}),
		deadLetter("e5", map[string]string{"Shaper-Reason": "expired", "Shaper-Source": "CB/15", "Shaper-Payload-Omitted": "true"}),
		deadLetter("b6", map[string]string{"Shaper-Reason": "expired", "Shaper-Source": "CB/16", "Shaper-Pipeline": "merchantB"}),
		deadLetter("n7", map[string]string{"Shaper-Reason": "expired", "Shaper-Source": "CB/17", "Shaper-Pipeline": ""}),
	)
	opts := ReplayOptions{DeadLetters: true, Pipeline: "psp", Reason: "expired"}
	r := newRange(t, s, "", "dlq.callbacks", opts) // the stream found by subject

	got := readRange(t, r, 2)
	if p := payloadsOf(got); !slices.Equal(p, []string{"e0", "e2", "e4"}) {
		t.Fatalf("dead letters handed out = %v; want the expired ones with payloads: e0 e2 e4", p)
	}
	checkOriginal(t, got[0], "orig-10", "CB/10", 3)
	checkOriginal(t, got[1], "sid-12", "CB/12", 1)
	checkOriginal(t, got[2], "CB/14", "CB/14", 2)
	ack(t, got...)
	p := r.Progress()
	wantSkipped := map[string]int64{SkipOtherPipeline: 2, SkipOtherReason: 2, SkipPayloadOmitted: 1}
	if p.Total != 8 || p.Read != 8 || p.Skipped != 5 || p.Reasons["expired"] != 4 || p.Reasons["exhausted"] != 2 || !maps.Equal(p.SkippedBy, wantSkipped) || !p.Exhausted {
		t.Errorf("Progress() = %+v; want total, read 8, skipped 5 %v, reasons (psp's own) expired:4 exhausted:2, exhausted", p, wantSkipped)
	}
}

func TestJetStreamRangePauseStopsFetchUntilResumed(t *testing.T) {
	_, r := payRange(t, 3)
	first := fetchExactly(t, r, 1)
	p, ok := first[0].Receipt.(shaper.Pausable)
	if !ok {
		t.Fatalf("receipt %T is not shaper.Pausable", first[0].Receipt)
	}
	resume1, resume2 := p.Pause(), p.Pause()
	expectNothing(t, r, 100*time.Millisecond)
	resume1()
	expectNothing(t, r, 100*time.Millisecond) // pauses nest
	resume2()
	rest := readRange(t, r, 10)
	if got := payloadsOf(append(first, rest...)); !slices.Equal(got, []string{"m-0", "m-1", "m-2"}) {
		t.Errorf("payloads = %v; want m-0 m-1 m-2", got)
	}
	ack(t, append(first, rest...)...)
}

func TestJetStreamRangeGoesOnWhenItsConsumerIsGone(t *testing.T) {
	js, r := payRange(t, 10)
	first := fetchExactly(t, r, 3)
	// As the server does after InactiveThreshold.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := js.DeleteConsumer(ctx, "CB", r.consumer.CachedInfo().Name); err != nil {
		t.Fatalf("delete the replay's consumer: %v", err)
	}
	rest := readRange(t, r, 100)
	all := append(first, rest...)
	want := payloadsOf(nil)
	for i := range 10 {
		want = append(want, "m-"+strconv.Itoa(i))
	}
	if got := payloadsOf(all); !slices.Equal(got, want) {
		t.Errorf("payloads = %v; want m-0..m-9 once each", got)
	}
	ack(t, all...)
}

func TestNewJetStreamRangeRefusesWhatItCannotRead(t *testing.T) {
	s, _ := rangeServer(t, "CB", "cb.>")
	offset, _ := ParseBound("offset:5")
	at := func(s string) ReplayOptions {
		b, err := ParseBound(s)
		if err != nil {
			t.Fatal(err)
		}
		return ReplayOptions{From: b}
	}
	tests := []struct {
		name            string
		stream, subject string
		opts            ReplayOptions
		want            string
	}{
		{"kafka offset", "CB", "cb.pay", ReplayOptions{From: offset}, "offset:N is for Kafka; use seq:N or a time"},
		{"no stream covers the subject", "", "nowhere.pay", ReplayOptions{}, `no stream covers subject "nowhere.pay"`},
		{"missing stream", "NOPE", "cb.pay", ReplayOptions{}, `stream "NOPE" not found`},
		{"a time past int64 nanoseconds", "CB", "cb.pay", at("2502-11-30T14:00:00Z"), "--from: 2502-11-30T14:00:00Z is outside 1970-01-01T00:00:00Z to 2262-04-11T23:47:16Z"},
		{"the day past int64 nanoseconds", "CB", "cb.pay", at("2262-04-12T00:00:00Z"), "--from: 2262-04-12T00:00:00Z is outside"},
		{"a time before 1970", "CB", "cb.pay", at("1677-09-20T00:00:00Z"), "--from: 1677-09-20T00:00:00Z is outside"},
		{"dead letters of no pipeline", "CB", "cb.pay", ReplayOptions{DeadLetters: true}, "its name is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r, err := NewJetStreamRange(ctx, s.ClientURL(), tt.stream, tt.subject, 10, tt.opts, "shaper-test", nil)
			if err == nil {
				closeSource(t, r)
				t.Fatalf("NewJetStreamRange = nil error; want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewJetStreamRange = %v; want %q", err, tt.want)
			}
		})
	}
}

func TestJetStreamDeadLettersGoOutAsTheOriginals(t *testing.T) {
	src, js := deadLetterSource(t,
		dl("omitted", map[string]string{"Shaper-Reason": "malformed", "Shaper-Source": "CB/1", "Shaper-Payload-Omitted": "true"}),
		dl("a", map[string]string{"Shaper-Reason": "exhausted", "Shaper-Source": "CB/2", "Shaper-Attempts": "4", "Shaper-Id": "orig-2", nats.MsgIdHdr: "dl-2"}),
		dl("b", map[string]string{"Shaper-Reason": "expired", "Shaper-Source": "CB/3", nats.MsgIdHdr: "orig-3"}),
	)
	got := fetchN(t, src, 2, 10)
	checkOriginal(t, got[0], "orig-2", "CB/2", 4)
	checkOriginal(t, got[1], "orig-3", "CB/3", 0)
	ack(t, got...)
	// The one without its payload was acked by the source itself.
	waitEveryAck(t, js, 3)
}

// dl is a dead letter of pipeline psp (see deadLetter) on the test subject.
func dl(body string, h map[string]string) *nats.Msg {
	m := deadLetter(body, h)
	m.Subject = testSubject
	return m
}

// deadLetterSource publishes msgs to a new JetStream server and returns a
// source that reads them as pipeline psp's dead letters.
func deadLetterSource(t *testing.T, msgs ...*nats.Msg) (*JetStream, jetstream.JetStream) {
	t.Helper()
	s, js := startJetStream(t)
	publishMsgs(t, js, msgs...)
	cfg := jsConfig(s.ClientURL(), 30*time.Second)
	cfg.DeadLetters, cfg.Pipeline = true, "psp"
	return newSource(t, cfg, 100), js
}

// waitEveryAck waits until the server counts the stream's n records acked
// and none pending. An ack has no reply (Ack, not DoubleAck): the server
// counts it a moment after Ack returns.
func waitEveryAck(t *testing.T, js jetstream.JetStream, n uint64) {
	t.Helper()
	var info *jetstream.ConsumerInfo
	if !testwait.Until(10*time.Second, func() bool {
		info = consumerInfo(t, js)
		return info.AckFloor.Stream == n && info.NumAckPending == 0
	}) {
		t.Errorf("ack floor %d, ack pending %d; want %d (every record), 0", info.AckFloor.Stream, info.NumAckPending, n)
	}
}

func TestCoreNATSDeadLettersGoOutAsTheOriginals(t *testing.T) {
	s := natstest.Start(t)
	pub, _ := client(t, s)
	src, err := NewCoreNATS(NATSConfig{URL: s.ClientURL(), Subject: testSubject, DeadLetters: true, Pipeline: "psp"}, 10, "shaper-test", nil)
	if err != nil {
		t.Fatalf("NewCoreNATS: %v", err)
	}
	t.Cleanup(func() { closeSource(t, src) })
	if err := src.conn.nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	for _, m := range []*nats.Msg{
		dl("omitted", map[string]string{"Shaper-Reason": "malformed", "Shaper-Source": "CB/1", "Shaper-Payload-Omitted": "true"}),
		dl("secret-for-merchantB", map[string]string{"Shaper-Reason": "exhausted", "Shaper-Source": "CB/7", "Shaper-Pipeline": "merchantB"}),
		dl("secret-for-nobody", map[string]string{"Shaper-Reason": "exhausted", "Shaper-Source": "CB/8", "Shaper-Pipeline": ""}),
		dl("a", map[string]string{"Shaper-Reason": "exhausted", "Shaper-Source": "CB/2", "Shaper-Attempts": "4", "Shaper-Id": "orig-2"}),
	} {
		if err := pub.PublishMsg(m); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	got := fetchN(t, src, 1, 10)
	checkOriginal(t, got[0], "orig-2", "CB/2", 4)
}

// Two pipelines may share a dead-letter stream: a JetStream dead-letter
// source hands out only its pipeline's own records, and acks those of
// another pipeline or of none, so none comes back.
func TestJetStreamDeadLettersSourceAcksOtherPipelinesWithoutHandingThemOut(t *testing.T) {
	src, js := deadLetterSource(t,
		dl("secret-for-merchantB", map[string]string{"Shaper-Reason": "exhausted", "Shaper-Source": "CB/1", "Shaper-Pipeline": "merchantB", "Shaper-Id": "b-1"}),
		dl("a", map[string]string{"Shaper-Reason": "exhausted", "Shaper-Source": "CB/2", "Shaper-Id": "orig-2"}),
		dl("secret-for-nobody", map[string]string{"Shaper-Reason": "exhausted", "Shaper-Source": "CB/3", "Shaper-Pipeline": "", "Shaper-Id": "n-3"}),
		dl("b", map[string]string{"Shaper-Reason": "expired", "Shaper-Source": "CB/4", "Shaper-Id": "orig-4"}),
	)
	got := fetchN(t, src, 2, 10)
	checkOriginal(t, got[0], "orig-2", "CB/2", 0)
	checkOriginal(t, got[1], "orig-4", "CB/4", 0)
	expectNothing(t, src, 300*time.Millisecond)
	ack(t, got...)
	waitEveryAck(t, js, 4)

	cfg := jsConfig(src.cfg.URL, 30*time.Second)
	cfg.DeadLetters = true // and no Pipeline
	if _, err := NewJetStream(cfg, 10, "shaper-test", nil); err == nil || !strings.Contains(err.Error(), "the pipeline's name is required") {
		t.Errorf("NewJetStream(dead_letters, no Pipeline) = %v; want an error: it could tell no dead letter its own", err)
	}
}
