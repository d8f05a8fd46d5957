package limiter_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/limiter"
)

// Next tells the slot Reserve or Allow will take, from the lease while
// Redis is up and from the fallback limiter after Close, and takes nothing;
// Allow takes it only once it has come: a scheduler that asks and then does
// not send has spent no slot.
//
// A shared slot reached more than 2 ms late is given up (the lease's
// maxLate), and a busy machine sometimes wakes the test that late: Allow is
// held to the slot only when it comes within takeLate of it.
func TestSharedNextTellsTheNextSlotAndAllowTakesItOnceItHasCome(t *testing.T) {
	const takeLate = 2 * time.Millisecond
	addr := redistest.Start(t).Addr
	cfg := limiter.SharedConfig{Key: "shaper:next", Mode: limiter.Leaky, Limit: 100, Burst: 1, FallbackLimit: 50, Timeout: loadedTimeout}
	s := newShared(t, newClient(t, &redis.Options{Addr: addr}), cfg, nil)
	check := func(state string) {
		t.Helper()
		onTime := 0 // Allow calls within takeLate of their slot
		defer func() {
			if onTime < 5 {
				t.Fatalf("%s: only %d of 15 Allow calls came within %v of their slot; the check needs at least 5", state, onTime, takeLate)
			}
		}()
		for k := range 30 {
			now := time.Now()
			next := s.Next(now)
			if again := s.Next(now); !again.Equal(next) {
				t.Fatalf("%s: Next(now) twice = %v then %v apart; want the same slot", state, next.Sub(now), again.Sub(now))
			}
			if next.After(now) && s.Allow(now) {
				t.Fatalf("%s: Allow(now) #%d = true for a slot now+%v; want false", state, k, next.Sub(now))
			}
			if k%2 == 0 {
				if got := s.Reserve(now); !got.Equal(next) {
					t.Fatalf("%s: Reserve #%d = now+%v; want now+%v as Next said", state, k, got.Sub(now), next.Sub(now))
				}
				time.Sleep(time.Until(next))
				continue
			}
			time.Sleep(time.Until(next))
			now = time.Now()
			late := now.Sub(next)
			if took := s.Allow(now); late < takeLate {
				onTime++
				if !took {
					t.Fatalf("%s: Allow at the slot Next told (#%d), %v after it = false; want true", state, k, late)
				}
			}
		}
	}
	check("shared")
	if s.Fallback() {
		t.Fatalf("Fallback() = true with Redis up")
	}
	s.Close()
	check("closed (fallback limiter)")
}
