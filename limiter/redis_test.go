package limiter_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
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
