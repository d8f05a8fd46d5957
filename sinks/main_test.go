package sinks

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/shaper"
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

// closeSink closes s and fails the test if Close does.
func closeSink(t *testing.T, s shaper.Sink) {
	t.Helper()
	if err := s.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// closeAtEnd closes s once the test and its subtests are over, before the
// servers the test started earlier stop.
func closeAtEnd(t *testing.T, s shaper.Sink) {
	t.Helper()
	t.Cleanup(func() { closeSink(t, s) })
}

// sendUntilOK sends m until s delivers it, each attempt bounded to 2s, and
// fails the test if s has not within 30s of when it started (after what
// happened, for the message): a sink waits out a broker starting or a
// reconnect.
func sendUntilOK(t *testing.T, s shaper.Sink, m *shaper.Message, after string) {
	t.Helper()
	var code string
	var err error
	if !testwait.UntilEach(30*time.Second, 2*time.Second, func(ctx context.Context) bool {
		code, err = sendCode(ctx, s, m)
		return code == "ok" && err == nil
	}) {
		t.Fatalf("Send 30s after %s = %q, %v; want \"ok\"", after, code, err)
	}
}
