package shaper_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/gather"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
	"github.com/shaper-dev/shaper/sources"
)

// The scheduler on a fake clock: each test runs in a testing/synctest
// bubble, whose time stands still until every goroutine in it waits, then
// jumps to the next timer. With an in-memory source and sink the whole
// pipeline runs there, so a minute of shaping takes milliseconds and every
// departure falls exactly where the limiter put it.

// bubbleClock is shaper.Clock on the bubble's fake time: its alarms wait on
// timers of the bubble, where the machine's clock waits on the kernel's
// (which the bubble cannot see).
type bubbleClock struct{}

func (bubbleClock) Now() time.Time                        { return time.Now() }
func (bubbleClock) NewTimer(d time.Duration) shaper.Timer { return bubbleTimer{time.NewTimer(d)} }
func (bubbleClock) NewAlarm() shaper.Alarm                { return bubbleAlarm{make(chan struct{}, 1)} }

// bubbleAlarm is a shaper.Alarm on a timer of the bubble; ring holds one
// pending Ring.
type bubbleAlarm struct{ ring chan struct{} }

func (a bubbleAlarm) Wait(t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-a.ring:
		return false
	}
}

func (a bubbleAlarm) Ring() {
	select {
	case a.ring <- struct{}{}:
	default:
	}
}

func (bubbleAlarm) Close() {}

type bubbleTimer struct{ t *time.Timer }

func (b bubbleTimer) C() <-chan time.Time { return b.t.C }
func (b bubbleTimer) Stop() bool          { return b.t.Stop() }

// event is something the fake source or sink saw, at the bubble's time.
type event struct {
	at   time.Time
	what string // "send", "ack", "nack"
	id   string
}

// fakes are an in-memory source and sink sharing one record of events.
type fakes struct {
	mu      sync.Mutex
	queue   []*shaper.Message
	more    chan struct{}
	events  []event
	respond func(m *shaper.Message, n int) (time.Duration, error) // latency and answer of the n-th send of m, from 1
	sink    shaper.Sink                                           // the pipeline's sink; nil: fakeSink
	log     *slog.Logger                                          // the pipeline's logger; nil: discarded
	reg     *prometheus.Registry                                  // the pipeline's metrics; nil: a registry of its own
	// destLimiter makes each destination's limiter; nil: the config's.
	destLimiter func(name string, now time.Time) shaper.Limiter
	// lim wraps the pipeline's limiter; nil: the config's as it is.
	lim func(*limiter.Limiter) shaper.Limiter
}

func newFakes(n int) *fakes {
	f := &fakes{more: make(chan struct{}, 1)}
	for i := range n {
		f.queue = append(f.queue, &shaper.Message{ID: fmt.Sprintf("m%d", i), Payload: []byte("x"), Receipt: receipt{f, fmt.Sprintf("m%d", i)}})
	}
	return f
}

func (f *fakes) record(what, id string) {
	f.mu.Lock()
	f.events = append(f.events, event{time.Now(), what, id})
	f.mu.Unlock()
}

// of returns the events of one kind, in order.
func (f *fakes) of(what string) []event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []event
	for _, e := range f.events {
		if e.what == what {
			out = append(out, e)
		}
	}
	return out
}

// Fetch is shaper.Source's: what is queued, at most max, or a wait.
func (f *fakes) Fetch(ctx context.Context, max int) ([]*shaper.Message, error) {
	for {
		f.mu.Lock()
		if n := min(max, len(f.queue)); n > 0 {
			out := f.queue[:n:n]
			f.queue = f.queue[n:]
			f.mu.Unlock()
			return out, nil
		}
		f.mu.Unlock()
		select {
		case <-f.more:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *fakes) Ready() error                { return nil }
func (f *fakes) Close(context.Context) error { return nil }

// fakeSink is the sink side of fakes.
type fakeSink struct{ *fakes }

// Send is shaper.Sink's: it records the request and answers as respond says.
func (f fakeSink) Send(ctx context.Context, m *shaper.Message) error {
	f.record("send", m.ID)
	n := 0
	for _, e := range f.of("send") {
		if e.id == m.ID {
			n++
		}
	}
	var latency time.Duration
	var err error
	if f.respond != nil {
		latency, err = f.respond(m, n)
	}
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func (fakeSink) Close(context.Context) error { return nil }

type receipt struct {
	f  *fakes
	id string
}

func (r receipt) Ack(context.Context) error                 { r.f.record("ack", r.id); return nil }
func (r receipt) Nack(context.Context, time.Duration) error { r.f.record("nack", r.id); return nil }

// elapse lets d pass on the fake clock of the testing/synctest bubble it
// runs in: it returns once d has passed there, which takes no real time
// when every other goroutine of the bubble is blocked. Only for tests in a
// bubble.
func elapse(d time.Duration) { time.Sleep(d) }

// fakeConfig returns the config of a pipeline over fakes (named fake,
// capacity 1000, max_queue_time 1m, 100/s), changed by mutate (nil: none),
// with its defaults and validated, and a limiter of its rate.
func fakeConfig(t *testing.T, mutate func(*config.Pipeline)) (config.Pipeline, *limiter.Limiter) {
	t.Helper()
	cfg := config.File{Pipelines: []config.Pipeline{{
		Name:   "fake",
		Source: config.Source{NATS: &sources.NATSConfig{URL: "nats://127.0.0.1:4222", Subject: "s"}},
		Bucket: shaper.BucketConfig{Capacity: 1000, MaxQueueTime: time.Minute},
		Rate:   config.Rate{RateConfig: shaper.RateConfig{Limit: 100}},
		Sink:   config.Sink{HTTP: &sinks.HTTPConfig{URL: "https://sink.example/"}},
	}}}
	if mutate != nil {
		mutate(&cfg.Pipelines[0])
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	pc := cfg.Pipelines[0]
	lim, err := limiter.New(limiter.Config{Mode: limiter.Mode(pc.Rate.Mode), Limit: pc.Rate.Limit, Burst: *pc.Rate.Burst}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return pc, lim
}

// runFake runs a pipeline over f in the bubble until the test's body
// returns, then drains it and waits for Run.
func runFake(t *testing.T, f *fakes, mutate func(*config.Pipeline), body func(p *shaper.Pipeline)) {
	t.Helper()
	pc, lim := fakeConfig(t, mutate)
	var sink shaper.Sink = fakeSink{f}
	if f.sink != nil {
		sink = f.sink
	}
	reg := f.reg
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	parts := shaper.Parts{Source: f, Sink: sink, Limiter: lim, Clock: bubbleClock{}, Logger: f.log,
		Metrics: shaper.NewMetrics(reg), DrainTimeout: 2 * time.Second}
	if f.lim != nil {
		parts.Limiter = f.lim(lim)
	}
	if pc.Rate.PerKey != nil {
		parts.KeyLimiter = pc.Rate.KeyLimiter()
	}
	parts.DestinationLimiter = pc.Rate.DestinationLimiter()
	if f.destLimiter != nil {
		parts.DestinationLimiter = f.destLimiter
	}
	p := shaper.New(pc.Core(), parts)
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	body(p)
	p.Drain()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// gaps returns the time between consecutive events.
func gaps(events []event) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(events); i++ {
		out = append(out, events[i].at.Sub(events[i-1].at))
	}
	return out
}

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
