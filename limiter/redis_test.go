package limiter_test

import (
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/freeport"
	"github.com/shaper-dev/shaper/limiter"
)

// newClient returns a go-redis client for addr with default options (so
// ContextTimeoutEnabled is off: the limiter must bound its waits itself),
// closed when the test ends.
func newClient(t testing.TB, opt *redis.Options) *redis.Client {
	t.Helper()
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// A replica whose Redis refuses connections falls back at once: the
// client that RedisConfig builds dials once per call, where go-redis's
// default dials five times 100ms apart, so that a replica would wait up to
// its timeout (here 2s) on a Redis that answered no at the first dial.
func TestSharedFromARedisThatRefusesFallsBackAtOnce(t *testing.T) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freeport.Get(t))) // nobody listens
	o := limiter.SharedOptions{Redis: limiter.RedisConfig{Addr: addr}, FallbackLimit: 10, Timeout: 2 * time.Second}
	o.SetDefaults("refused")
	start := time.Now()
	s, err := limiter.NewSharedFrom(o, limiter.Config{Mode: limiter.Leaky, Limit: 100, Burst: 1}, slog.New(slog.DiscardHandler), start)
	if err != nil {
		t.Fatalf("NewSharedFrom: %v", err)
	}
	took := time.Since(start)
	defer s.Close()
	if !s.Fallback() {
		t.Errorf("Fallback() = false with Redis refusing; want true")
	}
	t.Logf("NewSharedFrom with Redis refusing connections returned after %v (timeout %v)", took.Round(time.Millisecond), o.Timeout)
	if took > 300*time.Millisecond {
		t.Errorf("NewSharedFrom took %v to fall back from a Redis that refuses connections; want well under the 400ms of five dials", took)
	}
}
