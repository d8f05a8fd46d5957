package sinks

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a
// keep-alive connection, a NATS connection or an embedded server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
