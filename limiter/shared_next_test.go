package limiter_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/limiter"
)

// Next tells the slot Reserve will take, from the lease while Redis is up
// and from the fallback limiter after Close, and takes nothing: a
// scheduler that asks and then does not send has spent no slot.
func TestSharedNextTellsTheNextSlotWithoutTakingIt(t *testing.T) {
	addr, _, _ := startRedis(t)
	cfg := limiter.SharedConfig{Key: "shaper:next", Mode: limiter.Leaky, Limit: 100, Burst: 1, FallbackLimit: 50, Timeout: loadedTimeout}
	s := newShared(t, newClient(t, &redis.Options{Addr: addr}), cfg, nil)
	check := func(state string) {
		t.Helper()
		for k := range 30 {
			now := time.Now()
			next := s.Next(now)
			if again := s.Next(now); !again.Equal(next) {
				t.Fatalf("%s: Next(now) twice = %v then %v apart; want the same slot", state, next.Sub(now), again.Sub(now))
			}
			if got := s.Reserve(now); !got.Equal(next) {
				t.Fatalf("%s: Reserve #%d = now+%v; want now+%v as Next said", state, k, got.Sub(now), next.Sub(now))
			}
			time.Sleep(time.Until(next))
		}
	}
	check("shared")
	if s.Fallback() {
		t.Fatalf("Fallback() = true with Redis up")
	}
	s.Close()
	check("closed (fallback limiter)")
}
