package tlsconf

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind, such as
// the TLS test server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
