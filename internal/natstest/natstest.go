// Package natstest starts a real, embedded nats-server with JetStream on
// loopback for tests, the way net/http/httptest starts an HTTP server.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  storeDir,
		NoLog:     true,
		NoSigs:    true,
	})
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
