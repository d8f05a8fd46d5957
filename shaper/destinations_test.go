package shaper_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/sinks"
)

// Destinations on a fake clock: what one destination's push-back does to
// the others, and when held messages expire.

// destSink is a fakeSink that names each message's destination from its
// Dest header, as the HTTP sink does from the URL a message names.
type destSink struct{ fakeSink }

func (s destSink) Destination(m *shaper.Message) string { return m.Header["Dest"][0] }

var _ shaper.Destinations = destSink{}

const (
	goodHost = "https://good.example:443"
	badHost  = "https://bad.example:443"
)

// addFor queues n messages for destination dest (ids prefix0..), with key
// header Key set to key when not empty.
func (f *fakes) addFor(prefix, dest, key string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range n {
		id := fmt.Sprintf("%s%d", prefix, i)
		h := map[string][]string{"Dest": {dest}}
		if key != "" {
			h["Key"] = []string{key}
		}
		f.queue = append(f.queue, &shaper.Message{ID: id, Header: h, Payload: []byte("x"), Receipt: receipt{f, id}})
	}
}

// retryAfterFor answers 429 with a Retry-After of after to the messages
// whose header name is value, and accepts the others.
func retryAfterFor(name, value string, after time.Duration) func(*shaper.Message, int) (time.Duration, error) {
	return func(m *shaper.Message, _ int) (time.Duration, error) {
		if m.Header[name][0] == value {
			return 0, &shaper.StatusError{Code: 429, RetryAfter: time.Now().Add(after)}
		}
		return 0, nil
	}
}

// messageURLs makes a pipeline take each message's URL from it, as the
// destSink names it.
func messageURLs(p *config.Pipeline) {
	p.Sink.HTTP = &sinks.HTTPConfig{URLFrom: "header:Dest", AllowedHosts: []string{"good.example", "bad.example"}}
}

// settledAt returns when each message was settled (acked or nacked), by id.
func (f *fakes) settledAt() map[string]time.Time {
	out := map[string]time.Time{}
	for _, e := range append(f.of("ack"), f.of("nack")...) {
		if _, twice := out[e.id]; twice {
			out[e.id+" (again)"] = e.at
			continue
		}
		out[e.id] = e.at
	}
	return out
}

// A destination that answers 429 with a long Retry-After holds back only
// its own messages: the other destination gets every slot meanwhile, and
// the held messages expire at their deadline, each settled once.
func TestARetryAfterHoldsOnlyItsDestinationAndItsMessagesExpireOnTimeOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(0)
		f.addFor("bad", badHost, "", 50)
		f.addFor("good", goodHost, "", 100)
		f.sink = destSink{fakeSink{f}}
		f.respond = retryAfterFor("Dest", badHost, 99999*time.Second)
		start := time.Now()
		runFake(t, f, func(p *config.Pipeline) {
			messageURLs(p)
			p.Rate.Limit = 20
			p.Bucket.MaxQueueTime = 10 * time.Second
		}, func(*shaper.Pipeline) { elapse(15 * time.Second) })

		var good, bad int
		var lastGood time.Time
		for _, e := range f.of("send") {
			if e.id[:3] == "bad" {
				bad++
				continue
			}
			good++
			lastGood = e.at
		}
		if bad != 1 {
			t.Errorf("the throttled destination got %d requests; want 1 (its Retry-After holds the rest)", bad)
		}
		// 100 at 20/s take 5s; the first slot went to the bad host.
		if good != 100 || lastGood.Sub(start) > 5100*time.Millisecond {
			t.Errorf("the good destination got %d requests, the last %v after the start; want 100 within 5.1s", good, lastGood.Sub(start))
		}
		settled := f.settledAt()
		if len(settled) != 150 {
			t.Errorf("%d settlements; want each of the 150 messages settled once", len(settled))
		}
		// bad0 was sent and throttled: it waits for its retry, due when
		// the Retry-After (capped at max_backoff, 30s) ends, and is nacked
		// by the drain. The others were admitted at the start, so they
		// expire 10s later.
		for i := 1; i < 50; i++ {
			id := fmt.Sprintf("bad%d", i)
			at, ok := settled[id]
			if !ok {
				t.Errorf("%s never settled", id)
				continue
			}
			if d := at.Sub(start); d < 10*time.Second || d > 10100*time.Millisecond {
				t.Errorf("%s settled %v after the start; want within 100ms after its max_queue_time of 10s", id, d)
			}
		}
	})
}

// A lane under its own per-key limit does not keep its backlog past the
// deadline: what cannot leave in time expires at max_queue_time, all
// together, not one message per per-key slot.
func TestABacklogBehindAPerKeyLimitExpiresOnTimeOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(0)
		f.addFor("k", goodHost, "K", 20)
		start := time.Now()
		runFake(t, f, func(p *config.Pipeline) {
			p.Key = &shaper.KeyConfig{From: "header:Key"}
			p.Rate.PerKey = &shaper.PerKeyRate{Limit: 1}
			p.Bucket.MaxQueueTime = 3 * time.Second
		}, func(*shaper.Pipeline) { elapse(25 * time.Second) })

		sends := len(f.of("send"))
		if sends < 3 || sends > 4 {
			t.Errorf("%d requests; want 3 or 4 (one a second until the deadline)", sends)
		}
		settled := f.settledAt()
		if len(settled) != 20 {
			t.Errorf("%d settlements; want each of the 20 messages settled once", len(settled))
		}
		for id, at := range settled {
			if d := at.Sub(start); d > 3100*time.Millisecond {
				t.Errorf("%s settled %v after the start; want by its deadline (3s) + 100ms", id, d)
			}
		}
	})
}

// Under rate.adaptive each destination's limit moves on its own: one that
// answers 429 lowers only its own, and the other keeps the pipeline's
// rate.
func TestOneDestinationsPushBackLowersOnlyItsOwnAdaptiveLimitOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(0)
		for i := range 10 {
			f.addFor(fmt.Sprintf("bad%d-", i), badHost, "", 2)
			f.addFor(fmt.Sprintf("good%d-", i), goodHost, "", 50)
		}
		f.sink = destSink{fakeSink{f}}
		f.respond = retryAfterFor("Dest", badHost, time.Second)
		var limitNow float64
		var bad []shaper.KeyStatus
		start := time.Now()
		runFake(t, f, func(p *config.Pipeline) {
			messageURLs(p)
			p.Rate.Limit = 50
			p.Rate.Adaptive = &shaper.AdaptiveConfig{Min: 5}
		}, func(p *shaper.Pipeline) {
			elapse(9 * time.Second)
			for _, k := range p.Keys(10) {
				if k.Key == badHost {
					bad = append(bad, k)
				}
			}
			limitNow = p.Status().LimitNow
			elapse(3 * time.Second)
		})
		var good []time.Time
		for _, e := range f.of("send") {
			if e.id[:4] == "good" {
				good = append(good, e.at)
			}
		}
		if len(good) != 500 {
			t.Fatalf("the good destination got %d requests; want all 500", len(good))
		}
		// 500 at 50/s take 10s; the bad destination's few requests and
		// its lowered limit may cost the good one a little.
		if took := good[len(good)-1].Sub(start); took > 11*time.Second {
			t.Errorf("the good destination's 500 took %v; want about 10s (50/s), at most 11s", took)
		}
		if len(bad) != 1 || bad[0].Limit >= 50 {
			t.Errorf("the pushing-back destination's lane: %+v; want its own limit in force below 50", bad)
		}
		if limitNow != 50 {
			t.Errorf("limit_now with two destinations = %v; want the pipeline's 50", limitNow)
		}
	})
}

// One API that enforces a quota per tenant: with pushback.scope: key a
// tenant's 429 holds back only that tenant's lane; by default it holds the
// destination, every tenant of it.
func TestPushbackScopeKeyHoldsOnlyTheKeysLaneOnAFakeClock(t *testing.T) {
	for _, tt := range []struct {
		scope     string
		wantOther int // requests of the other tenant within the pause
	}{
		{shaper.ScopeKey, 20},
		{shaper.ScopeDestination, 0},
	} {
		t.Run(tt.scope, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakes(0)
				f.addFor("a", goodHost, "A", 20)
				f.addFor("b", goodHost, "B", 20)
				f.sink = destSink{fakeSink{f}}
				f.respond = retryAfterFor("Key", "A", 5*time.Second)
				start := time.Now()
				runFake(t, f, func(p *config.Pipeline) {
					p.Key = &shaper.KeyConfig{From: "header:Key"}
					p.Pushback.Scope = tt.scope
				}, func(*shaper.Pipeline) { elapse(4 * time.Second) })
				var a, b int
				for _, e := range f.of("send") {
					if e.at.Sub(start) >= 4*time.Second {
						continue
					}
					if e.id[0] == 'a' {
						a++
					} else {
						b++
					}
				}
				if a != 1 || b != tt.wantOther {
					t.Errorf("scope %s: within the 429's pause tenant A got %d requests, tenant B %d; want 1 and %d", tt.scope, a, b, tt.wantOther)
				}
			})
		})
	}
}

// slidingSecond answers as a sink that admits capacity(now) requests in
// any sliding second and answers 429 with Retry-After: 1 above it.
func slidingSecond(capacity func(now time.Time) int) func(*shaper.Message, int) (time.Duration, error) {
	var mu sync.Mutex
	var admitted []time.Time // the last second's 2xx
	return func(*shaper.Message, int) (time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		for len(admitted) > 0 && !admitted[0].After(now.Add(-time.Second)) {
			admitted = admitted[1:]
		}
		if len(admitted) >= capacity(now) {
			return 0, &shaper.StatusError{Code: 429, RetryAfter: now.Add(time.Second)}
		}
		admitted = append(admitted, now)
		return 0, nil
	}
}

// A sink that admits 40 requests in any sliding second and answers 429
// with Retry-After: 1 above it, behind a limit of 100 with the adaptive
// rate: the limit in force settles near what the sink admits, few
// requests are throttled, and nothing is dead-lettered.
func TestTheAdaptiveRateFollowsAThrottlingSinkOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const admits = 40
		f := newFakes(0)
		f.addFor("m", goodHost, "", 3000)
		f.sink = destSink{fakeSink{f}}
		f.respond = slidingSecond(func(time.Time) int { return admits })
		start := time.Now()
		var limitNow float64
		runFake(t, f, func(p *config.Pipeline) {
			p.Rate.Limit = 100
			p.Rate.Adaptive = &shaper.AdaptiveConfig{Min: 5}
			p.Bucket.MaxQueueTime = 5 * time.Minute
		}, func(p *shaper.Pipeline) {
			elapse(40 * time.Second)
			limitNow = p.Status().LimitNow
		})
		// Seconds 15 to 40: the steady state. A send of a message sent
		// before was a retry of a throttled one.
		var delivered, requests, throttled int
		for _, e := range f.of("ack") {
			if d := e.at.Sub(start); d >= 15*time.Second && d < 40*time.Second {
				delivered++
			}
		}
		seen := map[string]bool{}
		for _, e := range f.of("send") {
			again := seen[e.id]
			seen[e.id] = true
			if d := e.at.Sub(start); d >= 15*time.Second && d < 40*time.Second {
				requests++
				if again {
					throttled++
				}
			}
		}
		rate, share := float64(delivered)/25, float64(throttled)/float64(requests)
		t.Logf("seconds 15-40: %.1f/s delivered, %d of %d requests retries of throttled ones (%.1f%%); limit in force at 40s %.1f",
			rate, throttled, requests, 100*share, limitNow)
		// Each push-back comes with a second of Retry-After in which
		// nothing goes: a probe that finds the capacity costs that
		// second, so the rate delivered stays well under what the sink
		// admits (the price of finding a raised capacity within 5 s).
		if rate < 26 || rate > 42 {
			t.Errorf("delivered %.1f/s over seconds 15-40; want 26 to 42 (the sink admits 40)", rate)
		}
		if share > 0.10 {
			t.Errorf("%.1f%% of requests over seconds 15-40 throttled; want at most 10%%", 100*share)
		}
		if limitNow >= 100 || limitNow < 5 {
			t.Errorf("limit in force %.1f; want it lowered toward what the sink admits", limitNow)
		}
		// A throttled attempt spends none: nothing ends before the drain
		// at 40s nacks what is left.
		for _, e := range f.of("nack") {
			if e.at.Sub(start) < 40*time.Second {
				t.Fatalf("%s nacked %v after the start; want nothing given up before the drain", e.id, e.at.Sub(start))
			}
		}
	})
}

// A sink whose capacity steps 30 → 80 requests in any sliding second
// (429 with Retry-After: 1 above it), behind a limit of 100 with the
// adaptive rate, as in the bench's push-back section: after the step up,
// the limit in force is within 10% of 80/s in at most 5 s, and few
// requests are throttled once it has settled. The step up comes at
// offsets spread over the five seconds after the 20th, so it finds the
// rise in each of its phases (just after a push-back, probing, growing).
func TestTheAdaptiveRateFindsARaisedCapacityWithinFiveSecondsOnAFakeClock(t *testing.T) {
	for offset := time.Duration(0); offset < 5*time.Second; offset += 500 * time.Millisecond {
		t.Run(fmt.Sprintf("step up at %v", 20*time.Second+offset), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { raisedCapacity(t, 20*time.Second+offset) })
		})
	}
}

func raisedCapacity(t *testing.T, stepUp time.Duration) {
	f := newFakes(0)
	f.addFor("m", goodHost, "", 3000)
	f.sink = destSink{fakeSink{f}}
	start := time.Now()
	capacity := func(at time.Time) int {
		if at.Sub(start) < stepUp {
			return 30
		}
		return 80
	}
	f.respond = slidingSecond(capacity)
	found := time.Duration(-1) // from the step up until the limit is within 10% of 80
	runFake(t, f, func(p *config.Pipeline) {
		p.Rate.Limit = 100
		p.Rate.Adaptive = &shaper.AdaptiveConfig{Min: 5}
		p.Bucket.MaxQueueTime = 5 * time.Minute
	}, func(p *shaper.Pipeline) {
		for time.Since(start) < stepUp+20*time.Second {
			elapse(100 * time.Millisecond)
			if d := time.Since(start) - stepUp; d > 0 && found < 0 && p.Status().LimitNow >= 72 {
				found = d
			}
		}
	})
	var requests, throttled, delivered int
	seen := map[string]bool{}
	settled := func(at time.Time) bool {
		d := at.Sub(start)
		return d >= stepUp+10*time.Second && d < stepUp+20*time.Second
	}
	for _, e := range f.of("send") {
		again := seen[e.id]
		seen[e.id] = true
		if settled(e.at) {
			requests++
			if again {
				throttled++
			}
		}
	}
	for _, e := range f.of("ack") {
		if settled(e.at) {
			delivered++
		}
	}
	share := float64(throttled) / float64(requests)
	t.Logf("limit within 10%% of 80/s %v after the step up; 10 s from 10 s after it: %.1f/s delivered, %d of %d requests retries of throttled ones (%.1f%%)",
		found, float64(delivered)/10, throttled, requests, 100*share)
	if found < 0 || found > 5*time.Second {
		t.Errorf("the limit in force came within 10%% of the raised capacity %v after the step (-1: never); want at most 5s", found)
	}
	if share >= 0.05 {
		t.Errorf("%.1f%% of requests throttled in the steady state at 80/s; want under 5%%", 100*share)
	}
}

// told records what a pipeline tells a limiter, in order, each value once
// until it changes.
type told[T comparable] struct {
	mu     sync.Mutex
	values []T
}

func (t *told[T]) add(v T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.values); n == 0 || t.values[n-1] != v {
		t.values = append(t.values, v)
	}
}

func (t *told[T]) get() []T {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.values)
}

// ceilingLimiter is a destination's limiter that records the ceilings the
// pipeline tells it, as limiter.SharedKey keeps them.
type ceilingLimiter struct {
	shaper.Limiter
	ceilings told[float64]
}

func (c *ceilingLimiter) SetCeiling(limit float64) { c.ceilings.add(limit) }

var _ shaper.CeilingSetter = (*ceilingLimiter)(nil)

// A rate change at run time moves the ceiling of each destination's own
// limit: a destination's limiter that caps its rate (a shared one, in
// Redis) is told the new rate.limit within a tick of the adaptive rate,
// whether the change came through this replica's API or, with a shared
// limit, another replica's.
func TestARateChangeMovesEachDestinationsCeilingOnAFakeClock(t *testing.T) {
	for _, how := range []string{"this replica", "another replica"} {
		t.Run(how, func(t *testing.T) { testARateChangeMovesEachDestinationsCeiling(t, how) })
	}
}

func testARateChangeMovesEachDestinationsCeiling(t *testing.T, how string) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(0)
		f.addFor("good", goodHost, "", 400)
		f.sink = destSink{fakeSink{f}}
		var mu sync.Mutex
		var lims []*ceilingLimiter
		var fleet *fleetLimiter
		if how == "another replica" {
			fleet = f.joinFleet(50)
		}
		runFake(t, f, func(p *config.Pipeline) {
			messageURLs(p)
			p.Rate.Limit = 50
			p.Rate.Adaptive = &shaper.AdaptiveConfig{Min: 5}
			f.destLimiter = func(name string, now time.Time) shaper.Limiter {
				local, err := limiter.New(limiter.Config{Mode: limiter.Leaky, Limit: 50, Burst: 1}, now)
				if err != nil {
					panic(err)
				}
				l := &ceilingLimiter{Limiter: local}
				mu.Lock()
				lims = append(lims, l)
				mu.Unlock()
				return l
			}
		}, func(p *shaper.Pipeline) {
			elapse(time.Second)
			if how == "another replica" {
				fleet.set(200)
			} else if err := p.SetRate(200, 0); err != nil {
				t.Fatal(err)
			}
			elapse(500 * time.Millisecond)
		})
		mu.Lock()
		defer mu.Unlock()
		if len(lims) != 1 {
			t.Fatalf("%d destination limiters made; want 1", len(lims))
		}
		got := lims[0].ceilings.get()
		if len(got) != 2 || got[0] != 50 || got[1] != 200 {
			t.Errorf("ceilings told to the destination's limiter = %v; want [50 200] (rate.limit, then the new one)", got)
		}
	})
}

// With a shared limit, the bucket's capacity follows the fleet's limit in
// force within a tick, not only this replica's rate changes: a replica that
// kept the capacity of a higher limit after another replica lowered it
// would hold messages until they expire instead of leaving them in the
// source.
func TestTheBucketCapacityFollowsTheFleetsLimitOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(0)
		fleet := f.joinFleet(50)
		var got []int
		runFake(t, f, func(p *config.Pipeline) {
			p.Rate.Limit = 50
			p.Bucket.Capacity = 10_000
			p.Bucket.MaxQueueTime = 10 * time.Second
		}, func(p *shaper.Pipeline) {
			got = append(got, p.Status().Capacity)
			for _, limit := range []float64{10, 200, 2000} {
				fleet.set(limit) // another replica's rate change
				elapse(500 * time.Millisecond)
				got = append(got, p.Status().Capacity)
			}
		})
		// limit × max_queue_time, at most bucket.capacity.
		if want := []int{500, 100, 2000, 10_000}; !slices.Equal(got, want) {
			t.Errorf("capacity at limits 50 (configured), then 10, 200, 2000 set by another replica = %v; want %v", got, want)
		}
	})
}

// fleetLimiter is a fleet's shared limit as limiter.Shared keeps it in
// Redis: the limit in force, which Adapt on any replica moves but never
// above the ceiling, and the ceiling, the fleet's rate.limit, which
// SetRate on any replica moves (set: another replica's rate change).
type fleetLimiter struct {
	*limiter.Limiter
	mu             sync.Mutex
	limit, ceiling float64
}

// joinFleet makes the pipeline f runs use a fleet's shared limit, at limit.
func (f *fakes) joinFleet(limit float64) *fleetLimiter {
	fleet := &fleetLimiter{limit: limit, ceiling: limit}
	f.lim = func(l *limiter.Limiter) shaper.Limiter {
		fleet.Limiter = l
		return fleet
	}
	return fleet
}

func (l *fleetLimiter) Limit(time.Time) float64 { return l.get(&l.limit) }
func (l *fleetLimiter) Ceiling() float64        { return l.get(&l.ceiling) }
func (l *fleetLimiter) SetRate(limit float64, _ int) {
	l.do(func() { l.limit, l.ceiling = limit, limit })
}
func (l *fleetLimiter) Adapt(limit float64) { l.do(func() { l.limit = min(limit, l.ceiling) }) }
func (l *fleetLimiter) Fallback() bool      { return false }
func (l *fleetLimiter) set(limit float64)   { l.SetRate(limit, 1) }

func (l *fleetLimiter) get(v *float64) (f float64) {
	l.do(func() { f = *v })
	return f
}

func (l *fleetLimiter) do(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
}

var (
	_ shaper.Adapter          = (*fleetLimiter)(nil)
	_ shaper.FallbackReporter = (*fleetLimiter)(nil)
)

// With rate.adaptive moving a shared rate.limit, a rate lowered on another
// replica stays lowered: this replica's adaptive rate rises no higher than
// the fleet's rate.limit, and its own rate.limit follows it. Before, its
// rise towards its configured limit was written for the whole fleet and
// undid the change within seconds.
func TestARateLoweredOnAnotherReplicaStaysLoweredUnderTheAdaptiveRateOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(0)
		fleet := f.joinFleet(100)
		f.adaptsLimiter = true
		type seen struct{ limit, now float64 }
		var got []seen
		runFake(t, f, func(p *config.Pipeline) {
			p.Rate.Limit = 100
			p.Rate.Adaptive = &shaper.AdaptiveConfig{Min: 5}
		}, func(p *shaper.Pipeline) {
			look := func() {
				s := p.Status()
				got = append(got, seen{s.Limit, s.LimitNow})
			}
			elapse(time.Second)
			fleet.set(50) // another replica's rate change
			elapse(10 * time.Second)
			look()
			fleet.Adapt(30) // another replica's push-back
			elapse(10 * time.Second)
			look()
			fleet.set(150)
			elapse(time.Second)
			look()
		})
		// After the push-back this replica's rise brings the limit back to
		// the fleet's rate.limit, 50, not its own configured 100.
		want := []seen{{50, 50}, {50, 50}, {150, 150}}
		if !slices.Equal(got, want) {
			t.Errorf("(limit, limit_now) after another replica's rate change to 50, its push-back to 30 and a rate change to 150 = %v; want %v", got, want)
		}
	})
}

// demandLimiter records what the pipeline tells a shared limiter about
// its demand (shaper.Demander) before each slot.
type demandLimiter struct {
	*limiter.Limiter
	waiting told[int]
}

func (l *demandLimiter) Demand(waiting int) { l.waiting.add(waiting) }

var _ shaper.Demander = (*demandLimiter)(nil)

// Before it asks a shared limiter for a slot, the pipeline tells it how many
// messages wait for one, the message it holds included: a backlog of five
// is 5, 4, 3, 2, 1 as they go, so that the limiter leases no more slots
// than they can use.
func TestThePipelineTellsASharedLimiterHowManyMessagesWaitOnAFakeClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakes(5)
		lim := &demandLimiter{}
		f.lim = func(l *limiter.Limiter) shaper.Limiter {
			lim.Limiter = l
			return lim
		}
		runFake(t, f, func(p *config.Pipeline) { p.Rate.Limit = 10 }, func(*shaper.Pipeline) {
			elapse(2 * time.Second)
		})
		if got, want := lim.waiting.get(), []int{5, 4, 3, 2, 1}; !slices.Equal(got, want) {
			t.Errorf("demand told, in order (repeats dropped) = %v; want %v", got, want)
		}
	})
}
