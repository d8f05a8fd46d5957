package sources

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/internal/freeport"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

const (
	testStream  = "CALLBACKS"
	testSubject = "callbacks.psp"
	testDurable = "shaper-psp"
)

// jsConfig is the config of a JetStream source on testStream at url.
func jsConfig(url string, ackWait time.Duration) NATSConfig {
	return NATSConfig{
		URL:     url,
		Subject: testSubject,
		Stream:  testStream,
		Durable: testDurable,
		AckWait: ackWait,
	}
}

// client connects the test's own publisher to s.
func client(t testing.TB, s *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// startJetStream starts an embedded server with the test stream, and the
// test's own JetStream client on it.
func startJetStream(t *testing.T) (*server.Server, jetstream.JetStream) {
	t.Helper()
	s := natstest.Start(t)
	_, js := client(t, s)
	createStream(t, js)
	return s, js
}

func createStream(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: testStream, Subjects: []string{"callbacks.>"}})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
}

// publish publishes n messages "msg-<i>" to the stream and waits for the
// stream's acks. id, when not nil, gives a message its Nats-Msg-Id.
func publish(t *testing.T, js jetstream.JetStream, first, n int, id func(i int) string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := first; i < first+n; i++ {
		m := nats.NewMsg(testSubject)
		m.Data = []byte("msg-" + strconv.Itoa(i))
		if id != nil {
			if v := id(i); v != "" {
				m.Header.Set(nats.MsgIdHdr, v)
			}
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

// newSource starts a JetStream source and closes it when the test ends.
func newSource(t *testing.T, cfg NATSConfig, capacity int) *JetStream {
	t.Helper()
	src, err := NewJetStream(cfg, capacity, "shaper-test", nil)
	if err != nil {
		t.Fatalf("NewJetStream: %v", err)
	}
	t.Cleanup(func() { closeSource(t, src) })
	return src
}

func consumerInfo(t *testing.T, js jetstream.JetStream) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, testStream, testDurable)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info
}

func TestJetStreamFetchReturnsAtMostMaxInOrderWithIDsAndOrigins(t *testing.T) {
	s, js := startJetStream(t)
	customID := func(i int) string {
		if i%10 == 3 {
			return "psp-event-" + strconv.Itoa(i)
		}
		return ""
	}
	publish(t, js, 0, 100, customID)
	src := newSource(t, jsConfig(s.ClientURL(), 30*time.Second), 1000)

	got := fetchN(t, src, 100, 10)
	for i, m := range got {
		origin := fmt.Sprintf("%s/%d", testStream, i+1)
		wantID := origin
		if id := customID(i); id != "" {
			wantID = id
			if h := m.Header[nats.MsgIdHdr]; len(h) != 1 || h[0] != id {
				t.Errorf("message %d: Header[Nats-Msg-Id] = %q; want [%q]", i, h, id)
			}
		}
		if string(m.Payload) != "msg-"+strconv.Itoa(i) {
			t.Errorf("message %d: Payload = %q; want %q (in order)", i, m.Payload, "msg-"+strconv.Itoa(i))
		}
		if m.Origin != origin {
			t.Errorf("message %d: Origin = %q; want %q", i, m.Origin, origin)
		}
		if m.ID != wantID {
			t.Errorf("message %d: ID = %q; want %q", i, m.ID, wantID)
		}
	}
	ack(t, got...)
	if err := src.Ready(); err != nil {
		t.Errorf("Ready() = %v; want nil", err)
	}
}

func TestJetStreamAckedAreNotRedeliveredAfterRestartAndUnackedAre(t *testing.T) {
	tests := []struct {
		name    string
		ackWait time.Duration
		// stop ends the first source without settling the un-acked messages.
		stop func(t *testing.T, src *JetStream)
	}{
		{
			// Close Naks what is still held, so it comes back long before
			// this AckWait.
			name:    "close",
			ackWait: 30 * time.Second,
			stop:    func(t *testing.T, src *JetStream) { closeSource(t, src) },
		},
		{
			// A crash settles nothing: the server redelivers after AckWait.
			// What the server has as acked is not redelivered; so the
			// crash comes once the acks, which gather for natsAckEvery
			// before they are published, have reached it.
			name:    "crash",
			ackWait: time.Second,
			stop: func(t *testing.T, src *JetStream) {
				testwait.For(t, 10*time.Second, "the server to count 5 acks", func() bool {
					return consumerInfo(t, src.js).AckFloor.Stream == 5
				})
				src.conn.nc.Close()
				closeSource(t, src)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, js := startJetStream(t)
			publish(t, js, 0, 10, nil)
			cfg := jsConfig(s.ClientURL(), tt.ackWait)

			first, err := NewJetStream(cfg, 100, "shaper-test", nil)
			if err != nil {
				t.Fatalf("NewJetStream: %v", err)
			}
			got := fetchN(t, first, 10, 10)
			ack(t, got[:5]...)
			tt.stop(t, first)

			second := newSource(t, cfg, 100)
			again := fetchN(t, second, 5, 10)
			for i, m := range again {
				if want := got[5+i].ID; m.ID != want {
					t.Errorf("redelivered message %d: ID = %q; want %q (the un-acked ones, in order)", i, m.ID, want)
				}
			}
			ack(t, again...)
			expectNothing(t, second, 2*time.Second) // no acked message comes back
		})
	}
}

// Acks go out in batches: they reach the server within a moment of Ack
// without Close, and those acked just before Close are published by it, so
// none of them is redelivered.
func TestJetStreamAcksReachTheServerInBatchesAndAllBeforeClose(t *testing.T) {
	s, js := startJetStream(t)
	publish(t, js, 0, 40, nil)
	src := newSource(t, jsConfig(s.ClientURL(), 30*time.Second), 100)
	got := fetchN(t, src, 40, 10)
	ack(t, got[:20]...)
	var info *jetstream.ConsumerInfo
	if !testwait.Until(10*time.Second, func() bool {
		info = consumerInfo(t, js)
		return info.AckFloor.Stream == 20
	}) {
		t.Fatalf("ack floor %d after 20 acks; want 20 within 10s", info.AckFloor.Stream)
	}
	ack(t, got[20:]...)
	closeSource(t, src) // at once: the last 20 acks are still gathering
	// Close flushed them to the server, which applies acks on a goroutine
	// of its own, so the floor may move a moment later; an ack Close did
	// not publish would hold it at 20 for AckWait (30s).
	testwait.Until(5*time.Second, func() bool {
		info = consumerInfo(t, js)
		return info.AckFloor.Stream == 40 && info.NumAckPending == 0
	})
	if info.AckFloor.Stream != 40 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Errorf("within 5s of Close: ack floor %d, ack pending %d, redelivered %d; want 40, 0, 0",
			info.AckFloor.Stream, info.NumAckPending, info.NumRedelivered)
	}
}

func TestJetStreamHeldMessageIsNotRedeliveredWhileItWaits(t *testing.T) {
	s, js := startJetStream(t)
	publish(t, js, 0, 1, nil)
	const ackWait = time.Second
	src := newSource(t, jsConfig(s.ClientURL(), ackWait), 100)

	m := fetchN(t, src, 1, 10)[0]
	expectNothing(t, src, 3*ackWait+500*time.Millisecond)
	if info := consumerInfo(t, js); info.NumRedelivered != 0 || info.NumAckPending != 1 {
		t.Errorf("after 3×AckWait held: NumRedelivered = %d, NumAckPending = %d; want 0, 1",
			info.NumRedelivered, info.NumAckPending)
	}
	ack(t, m)
	expectNothing(t, src, 2*ackWait)
	if info := consumerInfo(t, js); info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Errorf("after Ack: NumAckPending = %d, NumRedelivered = %d; want 0, 0", info.NumAckPending, info.NumRedelivered)
	}
}

func TestJetStreamNeverHandsOutMoreThanCapacity(t *testing.T) {
	s, js := startJetStream(t)
	// A consumer left by an older config is updated to the source's.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateConsumer(ctx, testStream, jetstream.ConsumerConfig{
		Durable: testDurable, FilterSubject: testSubject, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1000,
	}); err != nil {
		t.Fatalf("create old consumer: %v", err)
	}
	publish(t, js, 0, 20, nil)
	const capacity = 5
	src := newSource(t, jsConfig(s.ClientURL(), 30*time.Second), capacity)

	var got int
	for round := 0; round < 4; round++ {
		msgs, err := fetch(src, 20, 1500*time.Millisecond)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Fetch: %v", err)
		}
		got += len(msgs) // never settled
	}
	if got != capacity {
		t.Errorf("handed out %d messages with nothing acked; want %d (the capacity)", got, capacity)
	}
	cfg := consumerInfo(t, js).Config
	if cfg.MaxAckPending != capacity || cfg.AckWait != 30*time.Second || cfg.MaxDeliver != -1 ||
		cfg.AckPolicy != jetstream.AckExplicitPolicy || cfg.FilterSubject != testSubject {
		t.Errorf("consumer config: MaxAckPending %d, AckWait %v, MaxDeliver %d, AckPolicy %v, FilterSubject %q; want %d, 30s, -1, explicit, %q",
			cfg.MaxAckPending, cfg.AckWait, cfg.MaxDeliver, cfg.AckPolicy, cfg.FilterSubject, capacity, testSubject)
	}
}

// Replicas under rate.shared share one durable, and each fills a bucket of
// its own: with MaxAckPending unbounded (config's Pending), the second
// replica is handed messages while the first holds its bucket's worth
// unsettled, and each gets no more than its Fetch asks for. With one
// bucket's worth for the durable, the second got nothing until the first
// settled a message, and then one per settled message.
func TestJetStreamReplicasOnOneDurableEachFillTheirOwnBucket(t *testing.T) {
	s, js := startJetStream(t)
	publish(t, js, 0, 30, nil)
	const room = 10 // each replica's bucket
	first := newSource(t, jsConfig(s.ClientURL(), 30*time.Second), -1)
	second := newSource(t, jsConfig(s.ClientURL(), 30*time.Second), -1)
	a := fetchN(t, first, room, room) // never settled
	b := fetchN(t, second, room, room)
	seen := map[string]bool{}
	for _, m := range append(a, b...) {
		if seen[m.ID] {
			t.Errorf("message %s handed to both replicas", m.ID)
		}
		seen[m.ID] = true
	}
	if info := consumerInfo(t, js); info.NumAckPending != 2*room || info.Config.MaxAckPending != -1 {
		t.Errorf("ack pending %d, MaxAckPending %d; want %d (both buckets full), -1", info.NumAckPending, info.Config.MaxAckPending, 2*room)
	}
}

func TestJetStreamMissingStreamIsReportedAndRecovers(t *testing.T) {
	s := natstest.Start(t)
	_, js := client(t, s)
	src := newSource(t, jsConfig(s.ClientURL(), 30*time.Second), 100)

	const want = `nats: stream "CALLBACKS" not found`
	err := src.Ready()
	if err == nil || err.Error() != want || !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("Ready() = %v; want %q matching jetstream.ErrStreamNotFound", err, want)
	}
	if _, err := fetch(src, 10, 10*time.Second); err == nil || err.Error() != want {
		t.Errorf("Fetch = %v; want %q", err, want)
	}

	createStream(t, js)
	publish(t, js, 0, 3, nil)
	var got []*shaper.Message
	if !testwait.Until(time.Minute, func() bool {
		got, err = fetch(src, 10, 5*time.Second)
		return err == nil && len(got) > 0
	}) {
		t.Fatalf("Fetch = %v a minute after the stream was created; want it recovered", err)
	}
	if err := src.Ready(); err != nil {
		t.Errorf("Ready() after recovery = %v; want nil", err)
	}
	ack(t, got...)
}

func TestJetStreamFetchCancelledMidWaitLosesNothing(t *testing.T) {
	s, js := startJetStream(t)
	// Only a Nak brings a message back within fetchN's 20s.
	src := newSource(t, jsConfig(s.ClientURL(), time.Minute), 100)
	if err := src.Ready(); err != nil {
		t.Fatalf("Ready() = %v", err)
	}

	// Fetch gives up well before its pull request expires at the server
	// (natsIdleWait), so the abandoned request takes the next message, and
	// the source must hand it back.
	expectNothing(t, src, 50*time.Millisecond)
	publish(t, js, 0, 1, nil)
	m := fetchN(t, src, 1, 10)[0]
	if string(m.Payload) != "msg-0" {
		t.Errorf("Payload = %q; want %q", m.Payload, "msg-0")
	}
	if info := consumerInfo(t, js); info.NumRedelivered != 1 {
		t.Errorf("NumRedelivered = %d; want 1 (delivered to the abandoned request, nak'ed, delivered again)", info.NumRedelivered)
	}
	ack(t, m)
}

func TestJetStreamResumesAfterServerRestart(t *testing.T) {
	port, dir := freeport.Get(t), t.TempDir()
	s := natstest.StartAt(t, port, dir)
	_, js := client(t, s)
	createStream(t, js)
	src := newSource(t, jsConfig(s.ClientURL(), 30*time.Second), 100)
	publish(t, js, 0, 1, nil)
	ack(t, fetchN(t, src, 1, 10)...)

	s.Shutdown()
	s.WaitForShutdown()
	testwait.For(t, 10*time.Second, "Ready() to report the lost connection", func() bool {
		err := src.Ready()
		return err != nil && strings.Contains(err.Error(), "not connected")
	})
	s = natstest.StartAt(t, port, dir)
	_, js = client(t, s)
	publish(t, js, 1, 1, nil)
	m := fetchN(t, src, 1, 10)[0]
	if string(m.Payload) != "msg-1" {
		t.Errorf("Payload = %q; want %q", m.Payload, "msg-1")
	}
	ack(t, m)
	if err := src.Ready(); err != nil {
		t.Errorf("Ready() = %v; want nil", err)
	}
}

func TestNewJetStreamSucceedsWhileServerIsDownAndConnectsLater(t *testing.T) {
	port := freeport.Get(t)
	url := fmt.Sprintf("nats://shaper:secret@127.0.0.1:%d", port)
	src := newSource(t, jsConfig(url, 30*time.Second), 100)

	err := src.Ready()
	want := fmt.Sprintf("nats: not connected to nats://127.0.0.1:%d", port)
	if err == nil || err.Error() != want {
		t.Errorf("Ready() = %v; want %q (no credentials)", err, want)
	}

	s := natstest.StartAt(t, port, t.TempDir())
	_, js := client(t, s)
	createStream(t, js)
	publish(t, js, 0, 2, nil)
	ack(t, fetchN(t, src, 2, 10)...)
	if err := src.Ready(); err != nil {
		t.Errorf("Ready() = %v; want nil", err)
	}
}

func TestSettlingTwiceIsHarmless(t *testing.T) {
	s, js := startJetStream(t)
	publish(t, js, 0, 2, nil)
	src := newSource(t, jsConfig(s.ClientURL(), 30*time.Second), 100)
	msgs := fetchN(t, src, 2, 10)
	ctx := context.Background()

	tests := []struct {
		name   string
		m      *shaper.Message
		settle func(r shaper.Receipt) error
	}{
		{"ack", msgs[0], func(r shaper.Receipt) error { return r.Ack(ctx) }},
		{"nack", msgs[1], func(r shaper.Receipt) error { return r.Nack(ctx, 0) }},
	}
	for _, tt := range tests {
		if err := tt.settle(tt.m.Receipt); err != nil {
			t.Fatalf("%s: first settle: %v", tt.name, err)
		}
		if err := tt.m.Receipt.Ack(ctx); !errors.Is(err, ErrAlreadySettled) {
			t.Errorf("%s, then Ack = %v; want ErrAlreadySettled", tt.name, err)
		}
		if err := tt.m.Receipt.Nack(ctx, time.Second); !errors.Is(err, ErrAlreadySettled) {
			t.Errorf("%s, then Nack = %v; want ErrAlreadySettled", tt.name, err)
		}
	}
	// The nacked message comes back once, and only once.
	m := fetchN(t, src, 1, 10)[0]
	if m.ID != msgs[1].ID {
		t.Errorf("redelivered %q; want %q", m.ID, msgs[1].ID)
	}
	ack(t, m)
	expectNothing(t, src, time.Second)
}

// coreSourceAt starts a core NATS source on testSubject whose subscription
// the server knows of when it returns.
func coreSourceAt(t *testing.T, s *server.Server, capacity int) *CoreNATS {
	t.Helper()
	src, err := NewCoreNATS(NATSConfig{URL: s.ClientURL(), Subject: testSubject}, capacity, "shaper-test", nil)
	if err != nil {
		t.Fatalf("NewCoreNATS: %v", err)
	}
	t.Cleanup(func() { closeSource(t, src) })
	if err := src.conn.nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	return src
}

func TestCoreFetchesPublishedMessages(t *testing.T) {
	s := natstest.Start(t)
	pub, _ := client(t, s)
	src := coreSourceAt(t, s, 100)

	for i := range 5 {
		m := nats.NewMsg(testSubject)
		m.Data = []byte("msg-" + strconv.Itoa(i))
		if i == 2 {
			m.Header.Set(nats.MsgIdHdr, "psp-event-2")
		}
		if err := pub.PublishMsg(m); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	got := fetchN(t, src, 5, 3)
	seen := map[string]bool{}
	for i, m := range got {
		if string(m.Payload) != "msg-"+strconv.Itoa(i) {
			t.Errorf("message %d: Payload = %q; want %q", i, m.Payload, "msg-"+strconv.Itoa(i))
		}
		if m.Origin != testSubject {
			t.Errorf("message %d: Origin = %q; want %q", i, m.Origin, testSubject)
		}
		switch {
		case i == 2 && m.ID != "psp-event-2":
			t.Errorf("message 2: ID = %q; want the Nats-Msg-Id %q", m.ID, "psp-event-2")
		case i != 2 && !strings.HasPrefix(m.ID, testSubject+"/"):
			t.Errorf("message %d: ID = %q; want %q/<n>", i, m.ID, testSubject)
		case seen[m.ID]:
			t.Errorf("message %d: ID %q repeats", i, m.ID)
		}
		seen[m.ID] = true
		// Receipts are no-ops, however often they are called.
		for _, err := range []error{
			m.Receipt.Ack(context.Background()),
			m.Receipt.Nack(context.Background(), time.Second),
			m.Receipt.Ack(context.Background()),
		} {
			if err != nil {
				t.Errorf("message %d: settle = %v; want nil", i, err)
			}
		}
	}
	if err := src.Ready(); err != nil {
		t.Errorf("Ready() = %v; want nil", err)
	}
	if d := src.Dropped(); d != 0 {
		t.Errorf("Dropped() = %d; want 0", d)
	}
}

func TestCoreDropsAndCountsWhatArrivesWhileItsBufferIsFull(t *testing.T) {
	s := natstest.Start(t)
	pub, _ := client(t, s)
	const capacity, sent = 10, 100
	src := coreSourceAt(t, s, capacity)

	for i := range sent {
		if err := pub.Publish(testSubject, []byte("msg-"+strconv.Itoa(i))); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	if err := pub.Flush(); err != nil { // the server has routed every message
		t.Fatalf("flush publisher: %v", err)
	}
	if err := src.conn.nc.Flush(); err != nil { // and the source has read them all
		t.Fatalf("flush source: %v", err)
	}

	buffered, _, err := src.sub.Pending()
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	dropped := src.Dropped()
	if buffered > capacity {
		t.Errorf("buffered %d messages; want at most %d (the capacity)", buffered, capacity)
	}
	if dropped == 0 || uint64(buffered)+dropped != sent {
		t.Errorf("buffered %d + Dropped() %d; want some dropped and %d in all", buffered, dropped, sent)
	}
	got, err := fetch(src, sent, 5*time.Second)
	if err != nil || len(got) != buffered {
		t.Fatalf("Fetch(%d) = %d messages, %v; want the %d buffered", sent, len(got), err, buffered)
	}
	if string(got[0].Payload) != "msg-0" {
		t.Errorf("first buffered message = %q; want msg-0 (the newest are the ones dropped)", got[0].Payload)
	}
}

func TestRedactURLsDropsCredentials(t *testing.T) {
	tests := []struct{ give, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://user:pass@a:4222, nats://token@b:4222", "nats://a:4222,nats://b:4222"},
		{"127.0.0.1:4222", "nats://127.0.0.1:4222"},
	}
	for _, tt := range tests {
		if got := redactURLs(tt.give); got != tt.want {
			t.Errorf("redactURLs(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}
