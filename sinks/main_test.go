package sinks

import (
	"context"
	"testing"

	"github.com/shaper-dev/shaper/shaper"
	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a
// keep-alive connection, a NATS connection or an embedded server.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sendCode is Send with the code label the pipeline derives from its result
// for shaper_requests_total ("" when no request was made).
func sendCode(ctx context.Context, s shaper.Sink, m *shaper.Message) (string, error) {
	err := s.Send(ctx, m)
	return shaper.RequestCode(err), err
}
