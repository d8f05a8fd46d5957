// Package natstest starts a real, embedded nats-server with JetStream on
// loopback for tests, the way net/http/httptest starts an HTTP server.
package natstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Start runs an embedded nats-server with JetStream on 127.0.0.1 and a free
// port, storing streams under t.TempDir(). It is shut down when the test ends.
func Start(t testing.TB) *server.Server {
	t.Helper()
	return StartAt(t, -1, t.TempDir())
}

// StartAt is Start on a fixed port (-1 picks a free one) and store directory,
// so a test can stop a server and start it again on the same address with the
// same streams.
func StartAt(t testing.TB, port int, storeDir string) *server.Server {
	t.Helper()
	return start(t, &server.Options{Port: port, StoreDir: storeDir})
}

// StartWithPassword is Start for a server that accepts only user with
// password: a client connects with nats.UserInfo(user, password), or with
// a URL nats://user:password@host:port (which Stream and Publish take too).
func StartWithPassword(t testing.TB, user, password string) *server.Server {
	t.Helper()
	return start(t, &server.Options{Port: -1, StoreDir: t.TempDir(), Username: user, Password: password})
}

// start runs the server of o on 127.0.0.1 with JetStream, quiet and deaf to
// signals, and shuts it down when the test ends.
func start(t testing.TB, o *server.Options) *server.Server {
	t.Helper()
	o.Host, o.JetStream, o.NoLog, o.NoSigs = "127.0.0.1", true, true, true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatalf("natstest: server not ready after 10s")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Stream creates a JetStream stream on subjects at the server at url.
func Stream(t testing.TB, url, name string, subjects ...string) {
	t.Helper()
	withJetStream(t, url, func(ctx context.Context, js jetstream.JetStream) {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects}); err != nil {
			t.Fatalf("natstest: create stream %s: %v", name, err)
		}
	})
}

// Publish publishes n messages `{"n":i}` to subject through JetStream at
// url and waits for each ack.
func Publish(t testing.TB, url, subject string, n int) {
	t.Helper()
	withJetStream(t, url, func(ctx context.Context, js jetstream.JetStream) {
		for i := range n {
			if _, err := js.Publish(ctx, subject, fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
				t.Fatalf("natstest: publish %d to %s: %v", i, subject, err)
			}
		}
	})
}

// PublishKeyed publishes n messages to subject with header header: key
// and bodies key+"-0"...
func PublishKeyed(t testing.TB, url, subject, header, key string, n int) {
	t.Helper()
	withJetStream(t, url, func(ctx context.Context, js jetstream.JetStream) {
		for i := range n {
			m := &nats.Msg{Subject: subject, Data: fmt.Appendf(nil, "%s-%d", key, i), Header: nats.Header{header: {key}}}
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatalf("natstest: publish %s-%d to %s: %v", key, i, subject, err)
			}
		}
	})
}

// Acked reports whether the durable consumer of stream at url has every
// message acked: none waiting to be delivered, none waiting for its ack.
// From then on it delivers nothing again.
func Acked(t testing.TB, url, stream, durable string) bool {
	t.Helper()
	acked := false
	withJetStream(t, url, func(ctx context.Context, js jetstream.JetStream) {
		c, err := js.Consumer(ctx, stream, durable)
		if err != nil {
			return
		}
		info, err := c.Info(ctx)
		acked = err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	return acked
}

// withJetStream runs f on a short-lived connection, with a minute to do it.
func withJetStream(t testing.TB, url string, f func(context.Context, jetstream.JetStream)) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f(ctx, js)
}
