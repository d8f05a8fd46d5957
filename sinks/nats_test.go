package sinks

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/internal/freeport"
	"github.com/shaper-dev/shaper/internal/natstest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
)

// deadLetter is a message as the core hands it to a dead-letter target.
func deadLetter(payload string) *shaper.Message {
	return &shaper.Message{
		ID:      "psp.callbacks/0/7",
		Payload: []byte(payload),
		Header: map[string][]string{
			"Shaper-Reason":   {"rejected"},
			"Shaper-Error":    {"status 400: bad signature"},
			"Shaper-Attempts": {"1"},
			"Shaper-Pipeline": {"psp-callbacks"},
			"Shaper-Source":   {"psp.callbacks/0/7"},
			"X-Multi":         {"one", "two"},
		},
	}
}

func newNATS(t *testing.T, url, subject string) *NATS {
	t.Helper()
	n, err := NewNATS(NATSPublisherConfig{URL: url, Subject: subject}, "sinks-test")
	if err != nil {
		t.Fatalf("NewNATS: %v", err)
	}
	closeAtEnd(t, n)
	return n
}

// connect returns a plain client of s for the test's own checks.
func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// createStream creates the stream cfg on the server nc is connected to, and
// returns the JetStream context it used and the stream.
func createStream(t *testing.T, nc *nats.Conn, cfg jetstream.StreamConfig) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(testCtx(t), cfg)
	if err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
	return js, stream
}

// subscribe returns a core subscription to subject, in place on the server.
func subscribe(t *testing.T, nc *nats.Conn, subject string) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatalf("subscribe %s: %v", subject, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	return sub
}

// expectOnce checks that sub receives want next, and then next; as the two
// were sent in order on one connection, a second copy of want would arrive
// between them.
func expectOnce(t *testing.T, sub *nats.Subscription, want, next *shaper.Message) {
	t.Helper()
	for i, m := range []*shaper.Message{want, next} {
		got, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
		if string(got.Data) != string(m.Payload) {
			t.Fatalf("message %d = %q; want %q (the first sent exactly once, then the second)", i+1, got.Data, m.Payload)
		}
		if !reflect.DeepEqual(got.Header, nats.Header(m.Header)) {
			t.Errorf("message %d header = %v; want %v", i+1, got.Header, m.Header)
		}
	}
}

func send(t *testing.T, n *NATS, m *shaper.Message) {
	t.Helper()
	if code, err := sendCode(testCtx(t), n, m); code != "ok" || err != nil {
		t.Fatalf("Send(%q) = %q, %v; want \"ok\", nil", m.Payload, code, err)
	}
}

func TestNATSSendToStreamSubjectStoresPayloadAndHeadersOnce(t *testing.T) {
	s := natstest.Start(t)
	nc := connect(t, s.ClientURL())
	_, stream := createStream(t, nc, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}})
	ctx := testCtx(t)
	// A core subscriber sees the JetStream publish too: it must see it once.
	sub := subscribe(t, nc, "dlq.psp")
	n := newNATS(t, s.ClientURL(), "dlq.psp")

	first, second := deadLetter("payload \x00 one"), deadLetter("payload two")
	send(t, n, first)
	if n.route != routeStream {
		t.Errorf("route = %d; want routeStream (%d): a stream covers the subject", n.route, routeStream)
	}
	// Send returned after the PubAck: the message is in the stream now.
	got, err := stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("GetMsg(1) right after Send: %v", err)
	}
	if string(got.Data) != string(first.Payload) {
		t.Errorf("stored payload = %q; want %q", got.Data, first.Payload)
	}
	if !reflect.DeepEqual(got.Header, nats.Header(first.Header)) {
		t.Errorf("stored header = %v; want %v", got.Header, first.Header)
	}
	send(t, n, second)

	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("stream holds %d messages; want 2", info.State.Msgs)
	}
	expectOnce(t, sub, first, second)
}

func TestNATSSendToPlainSubjectReachesCoreSubscriberOnceAsSent(t *testing.T) {
	tests := []struct {
		name          string
		first, second *shaper.Message
	}{
		{"with headers", deadLetter("one"), deadLetter("two")},
		// expectOnce wants a nil header: not even an empty header block.
		{"without headers, payload only", &shaper.Message{ID: "1", Payload: []byte("bare")}, &shaper.Message{ID: "2", Payload: []byte("bare too")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := natstest.Start(t)
			sub := subscribe(t, connect(t, s.ClientURL()), "callbacks.smooth")
			n := newNATS(t, s.ClientURL(), "callbacks.smooth")

			send(t, n, tt.first)
			if n.route != routeCore {
				t.Errorf("route = %d; want routeCore (%d): no stream covers the subject", n.route, routeCore)
			}
			send(t, n, tt.second)
			expectOnce(t, sub, tt.first, tt.second)
		})
	}
}

func TestNATSSendOverMaxPayloadIsMalformed(t *testing.T) {
	s := natstest.Start(t) // default max_payload: 1 MiB
	n := newNATS(t, s.ClientURL(), "big")
	code, err := sendCode(testCtx(t), n, &shaper.Message{ID: "1", Payload: make([]byte, 2<<20)})
	if code != "" || !errors.Is(err, shaper.ErrMalformed) {
		t.Errorf("Send(2 MiB) = %q, %v; want \"\", ErrMalformed", code, err)
	}
}

func TestNATSSendOverStreamMaxMsgSizeIsMalformed(t *testing.T) {
	s := natstest.Start(t)
	createStream(t, connect(t, s.ClientURL()), jetstream.StreamConfig{Name: "SMALL", Subjects: []string{"small"}, MaxMsgSize: 64})
	n := newNATS(t, s.ClientURL(), "small")
	code, err := sendCode(testCtx(t), n, &shaper.Message{ID: "1", Payload: make([]byte, 128)})
	if code != "error" || !errors.Is(err, shaper.ErrMalformed) {
		t.Errorf("Send(128 bytes) = %q, %v; want \"error\", ErrMalformed", code, err)
	}
}

func TestNATSStartsWhileServerDownAndSendsOnceItIsUp(t *testing.T) {
	port := freeport.Get(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	n, err := NewNATS(NATSPublisherConfig{URL: url, Subject: "late"}, "sinks-test")
	if err != nil {
		t.Fatalf("NewNATS with the server down = %v; want nil", err)
	}
	defer closeSink(t, n) // before the server stops

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if code, err := sendCode(ctx, n, deadLetter("while down")); code != "error" || err == nil {
		t.Fatalf("Send with the server down = %q, %v; want \"error\" and an error", code, err)
	} else {
		t.Logf("Send with the server down: %v", err)
	}

	s := natstest.StartAt(t, port, t.TempDir())
	sub := subscribe(t, connect(t, s.ClientURL()), "late")
	sendUntilOK(t, n, deadLetter("after start"), "the server started")
	got, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Data) != "after start" {
		t.Errorf("received %q; want \"after start\"", got.Data)
	}
}

func TestNATSCloseReturnsWhileServerDown(t *testing.T) {
	url := "nats://127.0.0.1:" + strconv.Itoa(freeport.Get(t))
	n, err := NewNATS(NATSPublisherConfig{URL: url, Subject: "x"}, "sinks-test")
	if err != nil {
		t.Fatalf("NewNATS: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- n.Close(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close = %v; want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close still running after 30s")
	}
}

func TestNATSSendFailedWhileDisconnectedIsNotPublishedLater(t *testing.T) {
	port, dir := freeport.Get(t), t.TempDir()
	s := natstest.StartAt(t, port, dir)
	// The stream records every publish that reaches the server, whenever
	// it comes, and survives the restart in dir.
	createStream(t, connect(t, s.ClientURL()), jetstream.StreamConfig{Name: "OBS", Subjects: []string{"obs"}})
	n := newNATS(t, s.ClientURL(), "obs")
	send(t, n, deadLetter("before"))

	s.Shutdown()
	s.WaitForShutdown()
	// Wait until the client knows: that is when a publish could be buffered.
	if !testwait.Until(30*time.Second, n.nc.IsReconnecting) {
		t.Fatalf("connection status %v 30s after the server stopped; want RECONNECTING", n.nc.Status())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	code, err := sendCode(ctx, n, deadLetter("while down"))
	cancel()
	if code != "error" || err == nil {
		t.Fatalf("Send while down = %q, %v; want \"error\" and an error", code, err)
	}

	s = natstest.StartAt(t, port, dir)
	sendUntilOK(t, n, deadLetter("after"), "the restart")

	js, err := jetstream.New(connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(testCtx(t), "OBS")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for seq := uint64(1); seq <= stream.CachedInfo().State.LastSeq; seq++ {
		m, err := stream.GetMsg(testCtx(t), seq)
		if err != nil {
			t.Fatalf("GetMsg(%d): %v", seq, err)
		}
		got = append(got, string(m.Data))
	}
	if want := []string{"before", "after"}; !reflect.DeepEqual(got, want) {
		t.Errorf("stream holds %q; want %q: a failed Send must not go out later", got, want)
	}
}

func TestNewNATSRejectsSubjectsThatCannotBePublishedTo(t *testing.T) {
	for _, subject := range []string{"", "dlq.*", "dlq.>", "dlq..psp", ".dlq", "dlq.", "dlq psp"} {
		n, err := NewNATS(NATSPublisherConfig{URL: "nats://127.0.0.1:1", Subject: subject}, "sinks-test")
		if err == nil {
			n.Close(context.Background())
			t.Errorf("NewNATS(subject %q) = nil error; want one", subject)
		}
	}
}

func TestNATSLooksUpTheStreamAgainAfterAFailure(t *testing.T) {
	s := natstest.Start(t)
	js, _ := createStream(t, connect(t, s.ClientURL()), jetstream.StreamConfig{Name: "GONE", Subjects: []string{"gone"}})
	n := newNATS(t, s.ClientURL(), "gone")
	send(t, n, deadLetter("stored"))
	if n.route != routeStream {
		t.Fatalf("route = %d; want routeStream (%d)", n.route, routeStream)
	}

	if err := js.DeleteStream(testCtx(t), "GONE"); err != nil {
		t.Fatalf("delete stream: %v", err)
	}
	// The cached route still says JetStream: nobody acks, the Send fails.
	if code, err := sendCode(testCtx(t), n, deadLetter("no ack")); code != "error" || err == nil {
		t.Fatalf("Send after the stream was deleted = %q, %v; want \"error\" and an error", code, err)
	}
	// The failure dropped the cached route: the next Send finds no stream.
	send(t, n, deadLetter("core"))
	if n.route != routeCore {
		t.Errorf("route = %d; want routeCore (%d) once the stream is gone", n.route, routeCore)
	}
}
