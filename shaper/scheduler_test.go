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

// The scheduler on a fake clock (runFake, in harness_test.go): every
// departure falls exactly where the limiter put it.

func TestLeakyDeparturesAreExactlyOneIntervalApartOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(200)
		runFake(t, f, nil, func(*shaper.Pipeline) { elapse(3 * time.Second) })
		sends := f.of("send")
		if len(sends) != 200 || len(f.of("ack")) != 200 {
			t.Fatalf("%d sends, %d acks; want 200 of each", len(sends), len(f.of("ack")))
		}
		for i, g := range gaps(sends) {
			if g != 10*time.Millisecond {
				t.Fatalf("gap %d between departures = %v; want exactly 10ms at 100/s", i, g)
			}
		}
	})
}

func TestTokenModeSendsTheBurstAtOnceThenOneIntervalApartOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(20)
		burst := 5
		runFake(t, f, func(c *config.Pipeline) {
			c.Rate.RateConfig = shaper.RateConfig{Mode: shaper.ModeToken, Limit: 10, Burst: &burst}
			c.Sink.HTTP.MaxInFlight = 8
		}, func(*shaper.Pipeline) { elapse(3 * time.Second) })
		sends := f.of("send")
		if len(sends) != 20 {
			t.Fatalf("%d sends; want 20", len(sends))
		}
		for i, g := range gaps(sends) {
			want := 100 * time.Millisecond
			if i < burst-1 {
				want = 0
			}
			if g != want {
				t.Errorf("gap %d = %v; want %v (a burst of %d, then 10/s)", i, g, want, burst)
			}
		}
	})
}

// The reproducer of the jam a lowered rate caused, to the nanosecond: a full bucket at
// 200/s, 0.01/s for 2s, 200/s again. The first request after the restore
// goes within one interval, and nothing expires.
func TestARestoredRateIsInForceWithinOneIntervalOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(1000)
		var restored time.Time
		runFake(t, f, func(c *config.Pipeline) {
			c.Rate.Limit = 200
			c.Bucket.MaxQueueTime = 2 * time.Minute
		}, func(p *shaper.Pipeline) {
			elapse(501 * time.Millisecond)
			if err := p.SetRate(0.01, 0); err != nil {
				t.Fatal(err)
			}
			elapse(2 * time.Second)
			if err := p.SetRate(200, 0); err != nil {
				t.Fatal(err)
			}
			restored = time.Now()
			elapse(time.Second)
			if got := p.Status().Outcomes[shaper.OutcomeExpired]; got != 0 {
				t.Errorf("expired = %d; want 0", got)
			}
		})
		var before, after []event
		for _, e := range f.of("send") {
			if e.at.Before(restored) {
				before = append(before, e)
			} else {
				after = append(after, e)
			}
		}
		if len(before) > 102 {
			t.Errorf("%d requests before the restore; want about 100 in 0.5s at 200/s and none at 0.01/s", len(before))
		}
		if len(after) < 200 || after[0].at.Sub(restored) > 5*time.Millisecond {
			t.Fatalf("after the restore: %d requests, the first %v after it; want 200/s from within 5ms", len(after), after[0].at.Sub(restored))
		}
		for i, g := range gaps(after[:200]) {
			if g != 5*time.Millisecond {
				t.Fatalf("gap %d after the restore = %v; want exactly 5ms", i, g)
			}
		}
	})
}

// While a slow sink holds every in-flight slot, messages expire in a row;
// none takes a rate slot, so once the sink is fast the departures keep
// exactly the limit's spacing.
func TestExpiredMessagesSpendNoRateSlotOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(500)
		start := time.Now()
		f.respond = func(*shaper.Message, int) (time.Duration, error) {
			if time.Since(start) < time.Second {
				return 1500 * time.Millisecond, nil
			}
			return 0, nil
		}
		var expired int64
		runFake(t, f, func(c *config.Pipeline) {
			c.Rate.Limit = 50
			c.Bucket.MaxQueueTime = 500 * time.Millisecond
			c.Bucket.OnExpire = shaper.OnExpireDrop // no dead-letter target: acked as dropped
			c.Sink.HTTP.MaxInFlight = 4
			c.Sink.HTTP.Timeout = 5 * time.Second
		}, func(p *shaper.Pipeline) {
			elapse(5 * time.Second)
			expired = p.Status().Outcomes[shaper.OutcomeDropped]
		})
		if expired == 0 {
			t.Fatal("nothing expired; want the messages queued behind the slow sink to expire")
		}
		var late []event
		for _, e := range f.of("send") {
			if e.at.Sub(start) > 2*time.Second {
				late = append(late, e)
			}
		}
		if len(late) < 100 {
			t.Fatalf("%d requests in the last 3s; want about 150 at 50/s", len(late))
		}
		for i, g := range gaps(late) {
			if g != 20*time.Millisecond {
				t.Fatalf("gap %d once the sink is fast = %v; want exactly 20ms (expired %d)", i, g, expired)
			}
		}
	})
}

// A 503 asking for 3s holds every departure to its destination for those
// 3s, not only the message that got it; the retry then goes within one
// interval, and its attempt was not spent (max_attempts 1) but counted in
// shaper_throttled_total: every message is acked once, after its outcome.
func TestARetryAfterHoldsEveryDepartureExactlyOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(3)
		var throttledAt time.Time
		f.respond = func(m *shaper.Message, n int) (time.Duration, error) {
			if m.ID == "m1" && n == 1 {
				throttledAt = time.Now()
				return 0, &shaper.StatusError{Code: 503, RetryAfter: time.Now().Add(3 * time.Second)}
			}
			return 0, nil
		}
		f.reg = prometheus.NewRegistry()
		var throttled float64
		runFake(t, f, func(c *config.Pipeline) { c.Sink.HTTP.Retry.MaxAttempts = 1 }, func(*shaper.Pipeline) {
			elapse(5 * time.Second)
			throttled = gather.Sum(f.reg, "shaper_throttled_total")
		})
		if throttled != 1 {
			t.Errorf("shaper_throttled_total = %v; want 1", throttled)
		}
		var m1 []event
		for _, e := range f.of("send") {
			if e.id == "m1" {
				m1 = append(m1, e)
			}
			if e.at.After(throttledAt) && e.at.Before(throttledAt.Add(3*time.Second)) {
				t.Errorf("%s sent %v after the 503; want nothing within its Retry-After of 3s", e.id, e.at.Sub(throttledAt))
			}
		}
		if len(m1) != 2 {
			t.Fatalf("m1 sent %d times; want twice", len(m1))
		}
		if wait := m1[1].at.Sub(m1[0].at); wait < 3*time.Second || wait > 3*time.Second+10*time.Millisecond {
			t.Errorf("m1 retried %v after its 503; want 3s, and at most one interval (10ms) more", wait)
		}
		if acks := f.of("ack"); len(acks) != 3 {
			t.Errorf("%d acks; want 3", len(acks))
		}
	})
}

// A drain keeps sending at the rate until the drain timeout, then nacks
// what is left, and Run returns: nothing acked that was not delivered.
func TestADrainSendsAtTheRateForItsTimeoutThenNacksTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(100)
		var drained time.Time
		runFake(t, f, func(c *config.Pipeline) { c.Rate.Limit = 10 }, func(*shaper.Pipeline) {
			elapse(1050 * time.Millisecond) // between two slots: no tie with a departure
			drained = time.Now()
		})
		sends, acks, nacks := f.of("send"), f.of("ack"), f.of("nack")
		if len(sends) != len(acks) || len(acks)+len(nacks) != 100 {
			t.Fatalf("%d sends, %d acks, %d nacks; want every send acked and the rest nacked", len(sends), len(acks), len(nacks))
		}
		last := sends[len(sends)-1].at.Sub(drained)
		if len(sends) != 31 || last != 1950*time.Millisecond {
			t.Errorf("%d sent, the last %v after the drain began; want 31 (11 before, 20 in the 2s drain at 10/s), the last at 1.95s", len(sends), last)
		}
	})
}

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
