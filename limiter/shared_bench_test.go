package limiter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/redistest"
	"github.com/shaper-dev/shaper/limiter"
)

// BenchmarkSharedReserve measures what a shared slot costs next to a local
// one: a backlogged caller asks for slot after slot on a real redis-server
// over loopback. ns/op is the latency Reserve adds per slot, the Redis
// round trip amortised over a lease; redis-calls/slot is measured on the
// server (INFO commandstats); µs/lease-wait is how long the Reserves that
// waited for a lease took, the worst a single slot is delayed.
func BenchmarkSharedReserve(b *testing.B) {
	addr := redistest.Start(b).Addr
	admin := newClient(b, &redis.Options{Addr: addr})
	client := newClient(b, &redis.Options{Addr: addr})

	b.Run("local/limit=1000", func(b *testing.B) {
		l, err := limiter.New(limiter.Config{Mode: limiter.Leaky, Limit: 1000, Burst: 1}, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			now := time.Now()
			l.Reserve(now)
			_ = time.Since(now) // timed like the shared ones, for a fair ns/op
		}
	})
	runs := 0
	for _, limit := range []float64{100, 1000, 10000} {
		b.Run(fmt.Sprintf("shared/limit=%v", limit), func(b *testing.B) {
			runs++ // a fresh key per run, whatever -count says
			s, err := limiter.NewShared(client, limiter.SharedConfig{
				Key: fmt.Sprintf("shaper:bench:%d", runs), Mode: limiter.Leaky, Limit: limit, Burst: 1, FallbackLimit: 1,
				Timeout: time.Second, // a cost measure, not a timeout test: ride out a busy machine
			}, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := admin.ConfigResetStat(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
			var slots, waits int
			var waited time.Duration
			b.ReportAllocs()
			for b.Loop() {
				now := time.Now()
				s.Reserve(now)
				// A local slot takes well under a microsecond and a
				// loopback round trip tens of them: 5µs tells them apart.
				if d := time.Since(now); d > 5*time.Microsecond {
					waits++
					waited += d
				}
				slots++
			}
			b.StopTimer()
			if s.Fallback() {
				b.Fatalf("Fallback() = true during the benchmark; want the shared limit")
			}
			calls := redistest.ScriptCalls(b, admin)
			b.ReportMetric(float64(calls)/float64(slots), "redis-calls/slot")
			if waits > 0 {
				b.ReportMetric(float64(waited.Microseconds())/float64(waits), "µs/lease-wait")
			}
		})
	}
}
