package shaper_test

import (
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/gather"
	"github.com/shaper-dev/shaper/internal/logtest"
	"github.com/shaper-dev/shaper/shaper"
)

// The circuit breaker's acceptance (docs/multi-tenant.md) on a fake clock, with the
// default breaker: it tells a sink that is down from one that is degraded.
// Each test runs the whole pipeline in a testing/synctest bubble, so 20s of
// shaping take milliseconds and every figure is exact.

// breakerLatency is how long the fake sink takes to answer in these tests:
// with a latency, requests are in flight when the breaker opens.
const breakerLatency = 20 * time.Millisecond

// waitFor sleeps on the bubble's clock until done, or until limit has
// passed.
func waitFor(limit time.Duration, done func() bool) {
	for end := time.Now().Add(limit); !done() && time.Now().Before(end); {
		elapse(10 * time.Millisecond)
	}
}

// jsonLog returns a logger that writes JSON lines to buf, from level.
func jsonLog(buf *logtest.Buffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: level}))
}

// (a) A sink that answers each message 503, 503, then 200 is degraded, not
// down: 100 messages at 200/s are delivered in under 5s.
func TestTheBreakerLetsASinkThatFailsEachMessageTwiceDeliverOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 100
		f := newFakes(n)
		f.respond = func(_ *shaper.Message, try int) (time.Duration, error) {
			if try <= 2 {
				return breakerLatency, &shaper.StatusError{Code: 503}
			}
			return breakerLatency, nil
		}
		var log logtest.Buffer
		f.log = jsonLog(&log, slog.LevelInfo)
		start := time.Now()
		runFake(t, f, func(c *config.Pipeline) { c.Rate.Limit = 200 }, func(*shaper.Pipeline) {
			waitFor(20*time.Second, func() bool { return len(f.of("ack")) == n })
		})
		acks := f.of("ack")
		if len(acks) != n {
			t.Fatalf("%d of %d messages delivered in 20s (%d requests; breaker opened %d times); want all in under 5s",
				len(acks), n, len(f.of("send")), log.Count("circuit breaker open"))
		}
		took := acks[len(acks)-1].at.Sub(start)
		t.Logf("%d delivered in %v, %d requests; breaker opened %d times", n, took, len(f.of("send")), log.Count("circuit breaker open"))
		if took >= 5*time.Second {
			t.Errorf("%d messages delivered in %v; want under 5s", n, took)
		}
	})
}

// coin is a sink's fair coin for the try-th request of message id, from a
// seeded source: the same for the same request whatever order requests
// come in.
func coin(id string, try int) bool {
	h := fnv.New64a()
	h.Write([]byte(id))
	return rand.New(rand.NewPCG(1, h.Sum64()+uint64(try))).IntN(2) == 0
}

// (b) A sink that fails each request with probability 0.5 (503, no
// Retry-After) is degraded, not down: the breaker never opens, and 300
// messages at 100/s are settled within 15s, every one the sink accepted
// within max_attempts delivered.
func TestTheBreakerStaysClosedForASinkThatFailsHalfOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 300
		f := newFakes(n)
		f.respond = func(m *shaper.Message, try int) (time.Duration, error) {
			if coin(m.ID, try) {
				return breakerLatency, &shaper.StatusError{Code: 503}
			}
			return breakerLatency, nil
		}
		// The messages whose first max_attempts coins all come up 503 are
		// exhausted whatever the breaker does (about 1 in 32).
		accepted := 0
		for i := range n {
			for try := 1; try <= shaper.DefaultMaxAttempts; try++ {
				if !coin(f.queue[i].ID, try) {
					accepted++
					break
				}
			}
		}
		var log logtest.Buffer
		f.log = jsonLog(&log, slog.LevelInfo)
		start := time.Now()
		runFake(t, f, nil, func(*shaper.Pipeline) {
			waitFor(20*time.Second, func() bool { return len(f.of("ack"))+len(f.of("nack")) == n })
		})
		acks, nacks := f.of("ack"), f.of("nack")
		opened := log.Count("circuit breaker open")
		if len(acks)+len(nacks) != n {
			t.Fatalf("%d delivered, %d exhausted of %d in 20s (%d requests; breaker opened %d times); want all settled within 15s",
				len(acks), len(nacks), n, len(f.of("send")), opened)
		}
		last := acks[len(acks)-1].at
		if len(nacks) > 0 {
			last = later(last, nacks[len(nacks)-1].at)
		}
		took := last.Sub(start)
		t.Logf("%d delivered, %d exhausted in %v, %d requests; breaker opened %d times", len(acks), len(nacks), took, len(f.of("send")), opened)
		if took > 15*time.Second || len(acks) < accepted {
			t.Errorf("%d delivered in %v; want the %d the sink accepted within max_attempts, within 15s", len(acks), took, accepted)
		}
		if opened > 0 {
			t.Errorf("the breaker opened %d times; want never, for a sink that answers half the requests with success", opened)
		}
	})
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// (c) A sink that fails every request for 15s is down: at 50/s it gets at
// most 40 requests in that time, and the rate is back within 2.5s of its
// recovery; every message is delivered. An outage of 20s ends in another
// phase of the probes, and the rate is back as soon.
func TestTheBreakerHoldsADownSinkAndResumesWithinTwoAndAHalfSecondsOnAFakeClock(t *testing.T) {
	for _, outage := range []time.Duration{15 * time.Second, 20 * time.Second} {
		t.Run(outage.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { downFor(t, outage) })
		})
	}
}

// downFor runs (c) with a sink that fails every request for outage from
// the first.
func downFor(t *testing.T, outage time.Duration) {
	const n, limit = 300, 50
	f := newFakes(n)
	var mu sync.Mutex
	var down time.Time // the first request: the outage starts there
	f.respond = func(*shaper.Message, int) (time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		if down.IsZero() {
			down = time.Now()
		}
		if time.Since(down) < outage {
			return breakerLatency, &shaper.StatusError{Code: 503}
		}
		return breakerLatency, nil
	}
	runFake(t, f, func(c *config.Pipeline) { c.Rate.Limit = limit }, func(*shaper.Pipeline) {
		waitFor(outage+20*time.Second, func() bool { return len(f.of("ack")) == n })
	})
	up := down.Add(outage)
	var early, after []event // the first 15s of the outage; after it
	for _, e := range f.of("send") {
		switch {
		case e.at.Before(down.Add(15 * time.Second)):
			early = append(early, e)
		case !e.at.Before(up):
			after = append(after, e)
		}
	}
	var back time.Duration // from the recovery to the first request after it
	if len(after) > 0 {
		back = after[0].at.Sub(up)
	}
	// The rate is back: the limit's spacing from 2.5s after the recovery.
	var steady int
	for _, e := range after {
		if !e.at.Before(up.Add(2500*time.Millisecond)) && e.at.Before(up.Add(4500*time.Millisecond)) {
			steady++
		}
	}
	t.Logf("outage of %v: %d requests in its first 15s at %v; first request after it %v after the recovery; %d requests in the 2s from 2.5s after it",
		outage, len(early), offsets(early, down), back, steady)
	if len(early) > 40 {
		t.Errorf("%d requests in the first 15s of the outage; want at most 40", len(early))
	}
	if len(after) == 0 || back > 2500*time.Millisecond {
		t.Errorf("first request %v after the recovery (%d after it); want within 2.5s", back, len(after))
	}
	if steady != 2*limit {
		t.Errorf("%d requests in the 2s from 2.5s after the recovery; want %d (the rate, %d/s)", steady, 2*limit, limit)
	}
	if acks := f.of("ack"); len(acks) != n {
		t.Errorf("%d of %d messages delivered; want all (no message spends its attempts while the breaker is open)", len(acks), n)
	}
}

// offsets lists when events happened, from t0, for a log line.
func offsets(events []event, t0 time.Time) []time.Duration {
	var out []time.Duration
	for _, e := range events {
		out = append(out, e.at.Sub(t0).Round(time.Millisecond))
	}
	return out
}

// A Retry-After of 0 (or a date already past) asks for no wait: 1000
// answers 429 Retry-After: 0 pause nothing, the departures keep exactly
// the rate's spacing, none counts as throttled, and the log holds a
// handful of lines, not one per answer. Each such attempt is an ordinary
// retryable failure: retried after its backoff.
func TestARetryAfterOfZeroIsNoPauseAndNoLogLineOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 1000
		f := newFakes(n)
		f.respond = func(_ *shaper.Message, try int) (time.Duration, error) {
			if try == 1 {
				return 0, &shaper.StatusError{Code: 429, RetryAfter: time.Now()}
			}
			return 0, nil
		}
		var log logtest.Buffer
		f.log = jsonLog(&log, slog.LevelInfo)
		f.reg = prometheus.NewRegistry()
		var throttled float64
		runFake(t, f, func(c *config.Pipeline) { c.Rate.Limit = 200 }, func(*shaper.Pipeline) {
			waitFor(time.Minute, func() bool { return len(f.of("ack")) == n })
			throttled = gather.Sum(f.reg, "shaper_throttled_total") // while the pipeline runs
		})
		sends, lines := f.of("send"), log.Count("\n")
		t.Logf("%d requests, %d acks, %d throttled; %d log lines:\n%s", len(sends), len(f.of("ack")), int(throttled), lines, log.Tail(2000))
		if len(sends) != 2*n || len(f.of("ack")) != n {
			t.Fatalf("%d requests, %d acks; want %d requests (each message answered 429 once), %d acks", len(sends), len(f.of("ack")), 2*n, n)
		}
		// Until the last fresh messages, something is always ready.
		for i, g := range gaps(sends[:3*n/2]) {
			if g != 5*time.Millisecond {
				t.Fatalf("gap %d between departures = %v; want exactly 5ms at 200/s: Retry-After: 0 pauses nothing", i, g)
			}
		}
		if throttled != 0 {
			t.Errorf("throttled = %v; want 0", throttled)
		}
		if lines > 5 {
			t.Errorf("%d log lines for %d answers 429 Retry-After: 0; want at most 5", lines, n)
		}
	})
}
