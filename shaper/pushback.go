package shaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// This file holds what makes a pipeline yield (docs/multi-tenant.md): the
// operator's pause of every departure, each destination's gate that holds
// its departures while the sink asked to wait (Retry-After) or its circuit
// breaker is open, and the adaptive rate that lowers the limit in force at
// each push-back and raises it again while there is none.

// pause is the operator's hold on every departure of a pipeline (Pause,
// Resume): its end is not known, so a message held by it expires at its
// deadline.
type pause struct {
	// changed wakes the scheduler when the pause ends.
	changed func()
	// since is when the operator paused (a time.Time in an atomic, read
	// before every departure without a lock); nil: not paused.
	since atomic.Pointer[time.Time]
}

// pause holds departures until resume; it reports false when already paused.
func (s *pause) pause(now time.Time) bool {
	return s.since.CompareAndSwap(nil, &now)
}

// resume ends a pause, and returns how long it lasted (false: not paused).
func (s *pause) resume(now time.Time) (time.Duration, bool) {
	since := s.since.Swap(nil)
	if since == nil {
		return 0, false
	}
	s.changed()
	return now.Sub(*since), true
}

// on reports whether the pipeline is paused.
func (s *pause) on() bool { return s.since.Load() != nil }

// gate holds a destination's departures back. The scheduler asks it before
// every departure (shut) and tells it when one goes (departing); every attempt reports its
// result (result), and a 429 or 503 whose Retry-After is still to come
// throttles it. Its log lines (a throttle begins or ends, the breaker opens
// or closes) are counted summaries, at most one of each kind per
// summaryWindow (see pushbackLog), never a line per answer.
//
// The circuit breaker tells a sink that is down from one that is degraded:
// it opens only once the sink has answered nothing but failures, at least
// breaker.failures of them, for breaker.window (see BreakerConfig.opens);
// a degraded sink, which answers some requests with success, keeps it
// closed, since any success closes it and starts the count again.
type gate struct {
	log *slog.Logger
	// changed wakes the scheduler when a hold ends or changes.
	changed func()
	// jitter returns a uniform value in [0, n): rand.Int64N.
	jitter func(n int64) int64

	mu sync.Mutex
	// throttledUntil is when the sink's Retry-After ends; throttledSince
	// when the current throttle began (zero: none).
	throttledUntil, throttledSince time.Time
	throttled                      int64 // attempts throttled, ever

	failures     int       // retryable failures in a row
	failingSince time.Time // when the first of them was answered
	// recent holds the last answers, the latest in bit 0: 1 when the
	// sink answered (anything but a breaker failure).
	recent    uint32
	breaker   breakerState
	openUntil time.Time     // while open: when the probe may go
	openFor   time.Duration // the current opening's length
	openSince time.Time     // when the breaker opened (zero: closed)

	lines pushbackLog // the log lines, counted; written by unlock
}

type breakerState int

const (
	breakerClosed  breakerState = iota
	breakerOpen                 // no departure until openUntil
	breakerProbing              // one probe in flight; no other departure
)

// hold is why departures wait, for the pipeline's state.
type hold string

const (
	holdNone      hold = ""
	holdPaused    hold = StatePaused
	holdOpen      hold = StateOpen
	holdThrottled hold = StateThrottled
)

// Log lines of the gate, each a counted summary (see pushbackLog).
const (
	msgThrottles     = "sink throttles (Retry-After): departures pause"
	msgThrottleOver  = "sink throttle over: departures resume"
	msgBreakerOpen   = "circuit breaker open: the sink fails every request; departures stop, messages wait in the bucket"
	msgBreakerClosed = "circuit breaker closed: the sink answers again"
)

// unlock releases g.mu, then writes the log lines taken under it.
func (g *gate) unlock() {
	lines := g.lines.take()
	g.mu.Unlock()
	for _, l := range lines {
		g.log.Log(context.Background(), l.level, l.msg, l.args...)
	}
}

// shut reports whether departures must wait at now, why, and until when
// (zero when the end is not known: a probe in flight). A
// throttle that has ended is counted here, and the summary lines due are
// written.
func (g *gate) shut(now time.Time) (until time.Time, why hold) {
	g.mu.Lock()
	defer g.unlock()
	if !g.throttledSince.IsZero() && !now.Before(g.throttledUntil) {
		g.lines.event(now, slog.LevelInfo, msgThrottleOver, "throttled_for", now.Sub(g.throttledSince).Round(time.Millisecond))
		g.throttledSince = time.Time{}
	}
	g.lines.due(now)
	switch {
	case g.breaker == breakerProbing:
		return time.Time{}, holdOpen
	case g.breaker == breakerOpen && now.Before(g.openUntil):
		return later(g.openUntil, g.throttledUntil), holdOpen
	case now.Before(g.throttledUntil):
		return g.throttledUntil, holdThrottled
	}
	return time.Time{}, holdNone
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// departing tells the gate a request goes at now, and reports whether it is
// the breaker's probe.
func (g *gate) departing(now time.Time) (probe bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.breaker == breakerOpen && !now.Before(g.openUntil) {
		g.breaker = breakerProbing
		return true
	}
	return false
}

// result takes the outcome of an attempt that ended at now (probe: it was
// the breaker's probe), under breaker settings b, and reports whether the
// attempt must not use up one of the message's attempts (spare): it was in
// flight when the breaker opened, or failed while the breaker suspected the
// sink was down (more than Failures failures in a row, not yet over
// Window), when it had opened without the wait that tells down from
// degraded. The attempt that opens the breaker and every probe count: each
// is a request the sink refused, and a message the sink refuses on its own
// (a poison message, while nothing else is sent) must still end, as
// exhausted.
func (g *gate) result(now time.Time, err error, probe bool, b BreakerConfig) (spare bool) {
	g.mu.Lock()
	defer g.unlock()
	failed := breakerFailure(err, now)
	g.recent <<= 1
	if !failed {
		// The sink answered (a success, a permanent refusal, a
		// throttle): it is not down, whatever else it fails.
		g.recent |= 1
		g.failures = 0
		if g.breaker != breakerClosed {
			g.lines.event(now, slog.LevelInfo, msgBreakerClosed, "open_for", now.Sub(g.openSince).Round(time.Millisecond))
			g.breaker, g.openSince = breakerClosed, time.Time{}
			g.changed()
		}
		return false
	}
	if g.failures == 0 {
		g.failingSince = now
	}
	g.failures++
	switch {
	case probe && g.breaker == breakerProbing:
		g.openFor = min(2*g.openFor, b.MaxOpen)
		g.breaker, g.openUntil = breakerOpen, now.Add(g.stretch(g.openFor))
		g.changed()
	case g.breaker != breakerClosed:
		return true
	case b.opens(g.failures, now.Sub(g.failingSince), bits.OnesCount32(g.recent&(1<<breakerRecent-1))):
		g.breaker, g.openFor, g.openSince = breakerOpen, b.OpenFor, now
		g.openUntil = now.Add(g.stretch(g.openFor))
		g.lines.event(now, slog.LevelWarn, msgBreakerOpen,
			"failures_in_a_row", g.failures, "failing_for", now.Sub(g.failingSince).Round(time.Millisecond), "probe_in", g.openFor, "err", err)
		g.changed()
	case b.Failures != nil && *b.Failures > 0 && g.failures > *b.Failures:
		return true
	}
	return false
}

// breakerRecent is how many of the last answers the breaker looks at.
const breakerRecent = 20

// opens reports whether failures retryable failures in a row, the first
// answered failingFor ago, with succeeded successes among the last
// breakerRecent answers, open the breaker: at least Failures of them (not
// 0), over at least Window, and at most one success among the last
// answers. A sink that is down fails every request. One that is degraded
// answers some with success: within Window, even when it fails every
// message's first attempts, since the retries of the messages it failed
// keep coming; and among its last answers, even when it is seldom called
// and fails a few in a row.
func (b BreakerConfig) opens(failures int, failingFor time.Duration, succeeded int) bool {
	return b.Failures != nil && *b.Failures > 0 && failures >= *b.Failures && failingFor >= b.Window && succeeded <= 1
}

// stretch lengthens an opening of the breaker by up to a tenth, at random:
// probes at exact multiples of open_for would keep landing in the same
// phase of a sink that fails periodically, and replicas that opened
// together would keep probing together. It is never shorter than d.
func (g *gate) stretch(d time.Duration) time.Duration {
	return d + time.Duration(g.jitter(int64(d/10)+1))
}

// breakerFailure reports whether err, answered at now, counts toward the
// breaker: a network error, a timeout, a 5xx, or a 429 without a
// Retry-After still to come; never a message that cannot become a request,
// nor one whose URL was refused.
func breakerFailure(err error, now time.Time) bool {
	if err == nil || errors.Is(err, ErrMalformed) || errors.Is(err, ErrRefused) {
		return false
	}
	var status *StatusError
	if !errors.As(err, &status) {
		return true
	}
	if throttle(status, now) {
		return false
	}
	return status.Code == 429 || status.Code >= 500
}

// throttle reports whether a sink's answer at now asks every departure to
// wait: a 429 or a 503 whose Retry-After is after now. A Retry-After of 0,
// or a date already past, asks for no wait: the answer is an ordinary
// retryable failure, as if it had none.
func throttle(status *StatusError, now time.Time) bool {
	return (status.Code == 429 || status.Code == 503) && status.RetryAfter.After(now)
}

// throttle holds departures until until (a Retry-After, already capped).
func (g *gate) throttle(now, until time.Time, err error) {
	g.mu.Lock()
	defer g.unlock()
	g.throttled++
	if !until.After(g.throttledUntil) {
		return
	}
	if g.throttledSince.IsZero() {
		g.throttledSince = now
		g.lines.event(now, slog.LevelWarn, msgThrottles, "until", until, "err", err)
	}
	g.throttledUntil = until
	g.changed()
}

// counts returns the attempts throttled ever, and whether the breaker is
// open (or probing) now.
func (g *gate) counts() (throttled int64, open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.throttled, g.breaker != breakerClosed
}

// adaptive decides the limit in force of rate.adaptive: it falls by Decrease at
// a push-back, at most once per round trip, and rises while none comes,
// between Min and the ceiling. The rise probes: Increase per second for the
// first adaptiveProbeFor after a push-back, then a rate of rise that grows
// fivefold each second (5×Increase, 25×Increase, ... per second) until
// the next push-back starts again from Increase. It is applied every
// adaptEvery, so the rise follows the time without push-back, not whole
// seconds: a second cut short by a push-back or a Retry-After costs only
// what was held. Near a capacity the sink has just shown, the limit creeps
// up to it, as an additive rise does, and a sink that pushes back every few
// seconds is probed as gently; a sink that takes more than it did is found
// within five seconds (a step from 30 to 80/s:
// TestTheAdaptiveRateFindsARaisedCapacityWithinFiveSecondsOnAFakeClock)
// rather than one Increase a second.
type adaptive struct {
	cfg AdaptiveConfig

	mu      sync.Mutex
	ceiling float64
	// decreased is when the limit last fell: a push-back to an attempt
	// that started before it answers the old limit, already lowered.
	decreased time.Time
	// pushed is whether a push-back came since the last tick; lowSince
	// when the limit first fell below the ceiling (zero: at the ceiling).
	pushed   bool
	lowSince time.Time
	// ticked is the last tick or hold (zero: none yet); quiet how long the
	// limit has risen since the last push-back; set is the limit it last
	// put in force (0: none).
	ticked time.Time
	quiet  time.Duration
	set    float64
}

// adaptiveProbeFor is how long the limit rises by Increase per second
// after a push-back before its rate of rise grows by adaptiveStepGrowth
// each second; adaptEvery is how often the rise is applied.
const (
	adaptiveProbeFor   = 2 * time.Second
	adaptiveStepGrowth = 5
	adaptEvery         = 250 * time.Millisecond
)

func newAdaptive(cfg AdaptiveConfig, ceiling float64) *adaptive {
	return &adaptive{cfg: cfg, ceiling: ceiling}
}

// pushback takes a push-back to an attempt that started at start, at now,
// with the limit in force cur, and returns the new limit (false: unchanged).
func (a *adaptive) pushback(start, now time.Time, cur float64) (float64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pushed = true
	a.quiet = 0
	if start.Before(a.decreased) {
		return 0, false
	}
	next := max(a.cfg.Min, cur*a.cfg.Decrease)
	a.decreased, a.set = now, next
	if a.lowSince.IsZero() {
		a.lowSince = now
	}
	return next, true
}

// tick is called every adaptEvery with the limit in force cur; it returns
// the new limit (false: unchanged), and when the limit is back at the
// ceiling, how long it was below it. The tick after a push-back rises
// nothing: the time before it is not time without push-back.
func (a *adaptive) tick(now time.Time, cur float64) (limit float64, changed bool, recovered time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	elapsed := time.Second
	if !a.ticked.IsZero() {
		elapsed = min(now.Sub(a.ticked), time.Second)
	}
	a.ticked = now
	if a.pushed {
		a.pushed = false
		return 0, false, 0
	}
	if cur >= a.ceiling || elapsed <= 0 {
		return 0, false, 0
	}
	if cur < a.set*(1-1e-9) {
		// Lowered by someone else: another replica's push-back, under
		// rate.shared. The rise starts again, as at a push-back here.
		a.quiet = 0
	}
	perSecond := a.cfg.Increase
	if a.quiet >= adaptiveProbeFor {
		for range int((a.quiet-adaptiveProbeFor)/time.Second) + 1 {
			perSecond *= adaptiveStepGrowth
		}
	}
	a.quiet += elapsed
	limit = min(a.ceiling, cur+perSecond*elapsed.Seconds())
	a.set = limit
	if limit >= a.ceiling && !a.lowSince.IsZero() {
		recovered = now.Sub(a.lowSince)
		a.lowSince = time.Time{}
	}
	return limit, true, recovered
}

// hold marks the time since the last tick as held (the destination paused
// by a Retry-After, the pipeline by its operator): nothing could be sent,
// so it says nothing of what the sink takes, and the limit neither rises
// nor starts its rise again.
func (a *adaptive) hold(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ticked = now
}

// atCeiling reports whether the limit in force cur is at the ceiling.
func (a *adaptive) atCeiling(cur float64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return cur >= a.ceiling
}

// setCeilingIfChanged changes the ceiling (a new rate.limit) when it is
// not limit already, and the rise starts again from Increase; the caller
// puts it in force.
func (a *adaptive) setCeilingIfChanged(limit float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ceiling != limit {
		a.ceiling, a.lowSince = limit, time.Time{}
		a.quiet = 0
	}
}

// setCeiling changes the ceiling (a new rate.limit), and the rise starts
// again from Increase; the caller puts it in force.
func (a *adaptive) setCeiling(limit float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ceiling, a.lowSince = limit, time.Time{}
	a.quiet = 0
}

// pushedBack tells the gate and the adaptive rate how an attempt of t (the
// breaker's probe, or not) that ran from start to end under set ended with
// err, and reports whether the attempt must not count toward max_attempts:
// it was throttled, or in flight when the breaker opened.
func (p *Pipeline) pushedBack(t *task, probe bool, start, end time.Time, err error, set *settings) bool {
	g := t.dest.gate
	inFlightAtOpen := g.result(end, err, probe, set.delivery.Breaker)
	var status *StatusError
	isStatus := errors.As(err, &status)
	throttled := isStatus && throttle(status, end)
	if throttled {
		until := status.RetryAfter
		if limit := end.Add(set.delivery.Retry.MaxBackoff); until.After(limit) {
			until = limit
		}
		g.throttle(end, until, err)
	}
	p.bucket.wake(t.dest) // lanes waiting for its probe's answer look again
	if a := p.cfg.Rate.Adaptive; a != nil {
		if isStatus && (status.Code == 429 || status.Code == 503) || a.LatencyTarget > 0 && end.Sub(start) > a.LatencyTarget {
			if d := t.dest; d.adaptive != nil {
				p.lowerDestinationLimit(d, start, end)
			} else {
				p.lowerLimit(start, end)
			}
		}
	}
	return throttled || inFlightAtOpen
}

// newDestination makes the state of one destination at now: its own
// Retry-After pause and circuit breaker, so that a destination that pushes
// back holds back only its own messages, and under rate.adaptive its own
// limit in force. The operator's pause stays the pipeline's.
func (p *Pipeline) newDestination(name string, now time.Time) *destination {
	log := p.log
	if name != "" {
		log = log.With("destination", name)
	}
	d := &destination{name: name, gate: &gate{log: log, changed: p.alarm.Ring, jitter: rand.Int64N}}
	if p.destLimiter != nil {
		d.lim = p.destLimiter(name, now)
		d.adaptive = newAdaptive(*p.cfg.Rate.Adaptive, d.lim.Limit(now))
	}
	return d
}

// lowerDestinationLimit lowers d's own limit in force at a push-back to an
// attempt that started at start.
func (p *Pipeline) lowerDestinationLimit(d *destination, start, now time.Time) {
	cur := d.lim.Limit(now)
	limit, ok := d.adaptive.pushback(start, now, cur)
	if !ok || limit >= cur {
		return
	}
	d.lim.SetRate(limit, p.destinationBurst())
	p.summary.event(slog.LevelWarn, "adaptive rate: a destination pushes back; its limit in force goes down", "adaptive", d.name,
		fmt.Errorf("limit %.4g/s, was %.4g/s", limit, cur))
}

// destinationBurst is the burst of a destination's own limiter: the
// per-key burst under rate.per_key, else the pipeline's.
func (p *Pipeline) destinationBurst() int {
	if pk := p.cfg.Rate.PerKey; pk != nil {
		return *pk.Burst
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return *p.rate.Burst
}

// destinationCeiling is the highest limit of a destination's own: the
// per-key limit under rate.per_key, else the pipeline's: with a shared
// limit the fleet's, as a rate change on any replica set it, unless this
// replica has fallen back to its own.
func (p *Pipeline) destinationCeiling() float64 {
	if pk := p.cfg.Rate.PerKey; pk != nil {
		return pk.Limit
	}
	if fr, shared := p.lim.(FallbackReporter); shared && !fr.Fallback() {
		return p.lim.Limit(p.clock.Now())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rate.Limit
}

// lowerLimit lowers the limit in force at a push-back to an attempt that
// started at start.
func (p *Pipeline) lowerLimit(start, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.lim.Limit(now)
	first := cur >= p.rate.Limit
	limit, ok := p.adaptive.pushback(start, now, cur)
	if !ok || limit >= cur {
		return
	}
	p.applyLimitLocked(limit)
	if first {
		p.log.Warn("adaptive rate: the sink pushes back; the limit in force goes down", "limit", limit, "rate_limit", p.rate.Limit, "min", p.adaptive.cfg.Min)
	}
}

// adapt raises the limit in force every adaptEvery without push-back (and
// without a hold of the gate), until ctx ends.
func (p *Pipeline) adapt(ctx context.Context) {
	for {
		if !sleep(ctx, p.clock, adaptEvery) {
			return
		}
		now := p.clock.Now()
		if p.adaptive == nil {
			p.adaptDestinations(now)
			continue
		}
		if p.paused.on() || p.fallenBack() {
			// Time in which nothing could be sent says nothing
			// about what the sink takes: no increase. Nor does a
			// shared limiter's fallback, whose limit in force is
			// not the shared one: a rise from it, written to Redis
			// once it answers, would lower every replica's limit.
			p.adaptive.hold(now)
			continue
		}
		p.mu.Lock()
		limit, changed, recovered := p.adaptive.tick(now, p.lim.Limit(now))
		if changed {
			p.applyLimitLocked(limit)
		}
		if recovered > 0 {
			p.log.Info("adaptive rate: back at rate.limit", "limit", limit, "below_for", recovered.Round(time.Millisecond), "waiting", p.bucket.Held())
		}
		p.mu.Unlock()
	}
}

// fallenBack reports whether the pipeline's limiter is shared and has
// fallen back to its local limit.
func (p *Pipeline) fallenBack() bool {
	fr, ok := p.lim.(FallbackReporter)
	return ok && fr.Fallback()
}

// adaptDestinations raises each destination's own limit while no
// push-back comes, as adapt does the pipeline's, and forgets those back
// at their ceiling that hold nothing.
func (p *Pipeline) adaptDestinations(now time.Time) {
	ceiling, burst := p.destinationCeiling(), p.destinationBurst()
	paused := p.paused.on()
	p.bucket.eachDestination(func(d *destination) bool {
		d.adaptive.setCeilingIfChanged(ceiling)
		if cs, ok := d.lim.(CeilingSetter); ok {
			cs.SetCeiling(ceiling)
		}
		if _, why := d.gate.shut(now); why != holdNone || paused {
			d.adaptive.hold(now)
			return false
		}
		if limit, changed, _ := d.adaptive.tick(now, d.lim.Limit(now)); changed {
			d.lim.SetRate(limit, burst)
		}
		return d.idle(now)
	})
	p.alarm.Ring() // a departure waiting for a destination's slot asks again
}

// applyLimitLocked puts a limit in force from now without changing the
// configured rate: the limiter (a shared one under the fleet's rate.limit),
// a scheduler waiting under the old limit, and the bucket capacity, which
// follows it. It requires that p.mu is held.
func (p *Pipeline) applyLimitLocked(limit float64) {
	if a, ok := p.lim.(Adapter); ok {
		a.Adapt(limit)
	} else {
		p.lim.SetRate(limit, *p.rate.Burst)
	}
	p.alarm.Ring()
	p.fitCapacityLocked(limit)
}

// fitCapacityLocked makes the bucket's capacity what limit lets depart
// within max_queue_time (capped by bucket.capacity). It requires that p.mu
// is held.
func (p *Pipeline) fitCapacityLocked(limit float64) {
	capacity := effectiveCapacity(p.settings.Load().bucket, limit)
	if capacity == p.bucket.Capacity() {
		return
	}
	p.bucket.SetCapacity(capacity)
	p.m.capacity.Set(float64(capacity))
}

// followFleet follows what other replicas change in a shared limit, every
// adaptEvery until ctx ends: the fleet's rate.limit (a rate change through
// another replica's admin API) becomes this pipeline's, and the adaptive
// rate's ceiling; and the bucket's capacity fits the limit in force (which
// another replica's adaptive rate moves too): a replica that kept the
// capacity of a higher limit would hold messages until they expire
// instead of leaving them in the source. While the limiter has fallen back
// nothing changes: the fallback limit lasts only until Redis answers
// again.
func (p *Pipeline) followFleet(ctx context.Context, fr FallbackReporter) {
	fleet, ceilinged := p.lim.(Adapter)
	for sleep(ctx, p.clock, adaptEvery) {
		if fr.Fallback() {
			continue
		}
		p.mu.Lock()
		if ceilinged {
			p.followCeilingLocked(fleet.Ceiling())
		}
		p.fitCapacityLocked(p.lim.Limit(p.clock.Now()))
		p.mu.Unlock()
	}
}

// followCeilingLocked makes limit, the fleet's rate.limit, this pipeline's
// rate.limit and its adaptive rate's ceiling. It requires that p.mu is
// held.
func (p *Pipeline) followCeilingLocked(limit float64) {
	if limit == p.rate.Limit {
		return
	}
	p.log.Info("rate changed on another replica", "limit", limit, "old_limit", p.rate.Limit)
	p.rate.Limit = limit
	if p.adaptive != nil {
		p.adaptive.setCeilingIfChanged(limit)
	}
}

// Pause holds every departure until Resume; requests in flight finish.
// Messages wait in the bucket (the source stops when it is full), and
// max_queue_time still expires what waits too long. It reports false when
// the pipeline was paused already.
func (p *Pipeline) Pause() bool {
	if !p.paused.pause(p.clock.Now()) {
		return false
	}
	p.log.Warn("pipeline paused: no departures until resumed", "waiting", p.bucket.Held())
	return true
}

// Resume ends a pause. It reports false when the pipeline was not paused.
func (p *Pipeline) Resume() bool {
	d, ok := p.paused.resume(p.clock.Now())
	if ok {
		p.log.Info("pipeline resumed", "paused_for", d.Round(time.Millisecond), "waiting", p.bucket.Held())
	}
	return ok
}
