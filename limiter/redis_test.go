package limiter_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
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

// scriptCalls returns how many EVALSHA and EVAL calls the server at addr
// has run since it started (or since CONFIG RESETSTAT).
func scriptCalls(t testing.TB, admin *redis.Client) int {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	total := 0
	for line := range strings.Lines(info) {
		for _, name := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			rest, ok := strings.CutPrefix(line, name)
			if !ok {
				continue
			}
			rest, _ = strings.CutPrefix(rest, "calls=")
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatalf("parse %q: %v", line, err)
			}
			total += n
		}
	}
	return total
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
