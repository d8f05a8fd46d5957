package limiter_test

import (
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/shaper-dev/shaper/limiter"
)

// benchLimit is high enough that every limiter hands out a slot close to
// now, so the benchmarks measure bookkeeping, not a growing backlog.
const benchLimit = 1e9

// benchStep advances the fake clock per iteration: one slot's worth at
// benchLimit, so time.Now is never measured.
const benchStep = time.Nanosecond

// reservers are the implementations compared side by side: each returns a
// function that takes one slot at now.
var reservers = []struct {
	name string
	make func(b *testing.B) func(now time.Time)
}{
	{"shaper-leaky", func(b *testing.B) func(time.Time) {
		l := newLimiter(b, limiter.Config{Mode: limiter.Leaky, Limit: benchLimit, Burst: 1})
		return func(now time.Time) { l.Reserve(now) }
	}},
	{"shaper-token", func(b *testing.B) func(time.Time) {
		l := newLimiter(b, limiter.Config{Mode: limiter.Token, Limit: benchLimit, Burst: 100})
		return func(now time.Time) { l.Reserve(now) }
	}},
	{"x-time-rate", func(b *testing.B) func(time.Time) {
		// A finite limit: rate.Inf would skip the bookkeeping entirely.
		l := rate.NewLimiter(rate.Limit(benchLimit), 100)
		return func(now time.Time) { l.ReserveN(now, 1) }
	}},
}

func BenchmarkReserve(b *testing.B) {
	for _, r := range reservers {
		b.Run(r.name, func(b *testing.B) {
			reserve := r.make(b)
			now := start
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(benchStep)
				reserve(now)
			}
		})
	}
}

// BenchmarkReserveParallel measures contention on the limiter's mutex: every
// goroutine reserves from the same limiter, each on its own fake clock.
func BenchmarkReserveParallel(b *testing.B) {
	for _, r := range reservers {
		b.Run(r.name, func(b *testing.B) {
			reserve := r.make(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				now := start
				for pb.Next() {
					now = now.Add(benchStep)
					reserve(now)
				}
			})
		})
	}
}
