// Package limiters compares the cost of one rate-limiter decision in
// shaper's limiter with golang.org/x/time/rate and go.uber.org/ratelimit.
// It holds benchmarks only; `go run ./bench` runs them with -count and feeds
// the output to benchstat.
package limiters

import (
	"sync/atomic"
	"testing"
	"time"

	uber "go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/shaper-dev/shaper/limiter"
)

// limit is high enough that every limiter hands out a slot close to now:
// the benchmarks measure the bookkeeping of one decision, not a growing
// backlog or a sleep.
const limit = 1e9

// step advances a fake clock per decision, one slot's worth at limit, so
// that time.Now is never part of what is measured.
const step = time.Nanosecond

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeClock is go.uber.org/ratelimit's clock: uber's Take reads the time
// itself, so the benchmark hands it a clock that moves one nanosecond per
// reading (an atomic add, shared by every goroutine of a parallel run) and
// never sleeps.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time        { return epoch.Add(time.Duration(c.ns.Add(int64(step)))) }
func (c *fakeClock) Sleep(d time.Duration) {}

// implementations are the limiters side by side: each returns a function
// that takes one slot at now. uber's ignores now and reads its fake clock.
var implementations = []struct {
	name string
	make func(b *testing.B) func(now time.Time)
}{
	{"shaper-leaky", func(b *testing.B) func(time.Time) {
		l := newShaper(b, limiter.Config{Mode: limiter.Leaky, Limit: limit, Burst: 1})
		return func(now time.Time) { l.Reserve(now) }
	}},
	{"shaper-token", func(b *testing.B) func(time.Time) {
		l := newShaper(b, limiter.Config{Mode: limiter.Token, Limit: limit, Burst: 100})
		return func(now time.Time) { l.Reserve(now) }
	}},
	{"x-time-rate", func(b *testing.B) func(time.Time) {
		// A finite limit: rate.Inf would skip the bookkeeping entirely.
		l := rate.NewLimiter(rate.Limit(limit), 100)
		return func(now time.Time) { l.ReserveN(now, 1) }
	}},
	{"uber-ratelimit", func(b *testing.B) func(time.Time) {
		l := uber.New(int(limit), uber.WithoutSlack, uber.WithClock(&fakeClock{}))
		return func(time.Time) { l.Take() }
	}},
}

func newShaper(b *testing.B, cfg limiter.Config) *limiter.Limiter {
	b.Helper()
	l, err := limiter.New(cfg, epoch)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkReserve is one goroutine taking slot after slot.
func BenchmarkReserve(b *testing.B) {
	for _, impl := range implementations {
		b.Run(impl.name, func(b *testing.B) {
			reserve := impl.make(b)
			now := epoch
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(step)
				reserve(now)
			}
		})
	}
}

// BenchmarkReserveParallel is every goroutine taking slots from the same
// limiter, each on its own fake clock: the cost under contention.
func BenchmarkReserveParallel(b *testing.B) {
	for _, impl := range implementations {
		b.Run(impl.name, func(b *testing.B) {
			reserve := impl.make(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				now := epoch
				for pb.Next() {
					now = now.Add(step)
					reserve(now)
				}
			})
		})
	}
}
