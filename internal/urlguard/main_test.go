package urlguard

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind, such as
// the fake DNS server or the HTTP test server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
