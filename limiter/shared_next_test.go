package limiter_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/internal/testwait"
	"github.com/shaper-dev/shaper/limiter"
)

// Next tells the slot Reserve or Allow will take, from the lease while
// Redis is up and from the fallback limiter after Close, and takes nothing;
// Allow declines the slot until it has come and takes it then: a scheduler
// that asks and then does not send has spent no slot.
//
// A shared slot reached more than 2 ms late is given up (the lease's
// maxLate), and a busy machine sometimes wakes the test that late: Allow is
// held to the slot only when the test asks within takeLate of it.
func TestSharedNextTellsTheNextSlotAndAllowTakesItOnceItHasCome(t *testing.T) {
	const takeLate = 2 * time.Millisecond
	addr := redistest.Start(t).Addr
	cfg := limiter.SharedConfig{Key: "shaper:next", Mode: limiter.Leaky, Limit: 100, Burst: 1, FallbackLimit: 50, Timeout: loadedTimeout}
	s := newShared(t, newClient(t, &redis.Options{Addr: addr}), cfg, nil)
	check := func(state string) {
		t.Helper()
		onTime := 0 // slots Allow took within takeLate of their time
		defer func() {
			if onTime < 5 {
				t.Fatalf("%s: only %d of 15 slots were taken within %v of their time; the check needs at least 5", state, onTime, takeLate)
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
				continue
			}
			// Ask every millisecond until Allow takes a slot: never
			// before the one Next told, and that one when asked within
			// takeLate of it (later, it may be given up for the next).
			var took time.Time
			_, ok := testwait.Every(time.Millisecond, time.Until(next)+time.Second, func() bool {
				now := time.Now()
				if s.Allow(now) {
					took = now
					return true
				}
				if late := now.Sub(next); late >= 0 && late < takeLate {
					t.Fatalf("%s: Allow at the slot Next told (#%d), %v after it = false; want true", state, k, late)
				}
				return false
			})
			switch {
			case !ok:
				t.Fatalf("%s: Allow #%d took no slot within 1s of the one Next told", state, k)
			case took.Before(next):
				t.Fatalf("%s: Allow #%d took a slot %v before the one Next told; want none before it", state, k, next.Sub(took))
			case took.Sub(next) < takeLate:
				onTime++
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
