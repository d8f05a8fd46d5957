package shaper

import (
	"errors"
	"fmt"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/shaper-dev/shaper/internal/check"
)

// Status is a pipeline's state, as GET /v1/pipelines shows it.
type Status struct {
	Name string `json:"name"`
	// State is running; paused (through the admin API); throttled
	// (waiting out a sink's Retry-After); open (the circuit breaker holds
	// departures); draining; or stalled: over the last 10s more messages
	// expired than requests were sent (NotReady says more).
	State string `json:"state"`
	Mode  string `json:"mode"`
	// Limit is rate.limit: the configured rate, or the last rate change
	// (with a shared limiter, through any replica); LimitNow the rate in
	// force (they differ during warm-up, a shared limiter's fallback, and
	// while the adaptive rate holds it lower).
	Limit    float64 `json:"limit"`
	LimitNow float64 `json:"limit_now"`
	Burst    int     `json:"burst"`
	// Limiter is local, shared (through Redis), or fallback (shared, but
	// Redis cannot be reached and the local fallback_limit is in force).
	Limiter string `json:"limiter"`
	// Depth is every message held (queued, retrying, in flight); Queued
	// those waiting for a departure.
	Depth    int    `json:"depth"`
	Queued   int    `json:"queued"`
	Capacity int    `json:"capacity"`
	InFlight int    `json:"in_flight"`
	Ready    bool   `json:"ready"`
	NotReady string `json:"not_ready,omitempty"`
	// Received counts the messages taken from the source, as
	// shaper_messages_received_total does (handed-back ones included);
	// Outcomes counts those whose outcome is final. A client that reads
	// them twice has the rates in and out between its two reads.
	Received int64             `json:"received"`
	Outcomes map[Outcome]int64 `json:"outcomes"`
	// OldestWait is how long, in seconds, the message that has waited
	// longest for its departure has waited (0 when none waits). It counts
	// as max_queue_time does: from admission, or from when a retry became
	// due. MaxQueueTime is bucket.max_queue_time in force, in seconds.
	OldestWait   float64 `json:"oldest_wait_seconds"`
	MaxQueueTime float64 `json:"max_queue_time_seconds"`
	// KeyFrom is key.from when the pipeline keeps a lane per key (GET
	// /v1/pipelines/{name}/keys lists the deepest), empty without key:.
	KeyFrom string `json:"key_from,omitempty"`
	// ExpiredPerSecond is the expirations per second over the last 10s.
	ExpiredPerSecond float64 `json:"expired_per_second"`
}

// States of Status.State.
const (
	StateRunning   = "running"
	StatePaused    = "paused"
	StateThrottled = "throttled"
	StateOpen      = "open"
	StateDraining  = "draining"
	StateStalled   = "stalled"
)

// Status returns the pipeline's current state.
func (p *Pipeline) Status() Status {
	p.mu.Lock()
	rate := p.rate
	p.mu.Unlock()
	now := p.clock.Now()
	_, expired := p.recent.counts(now)
	s := Status{
		Name:     p.cfg.Name,
		State:    StateRunning,
		Mode:     rate.Mode,
		Limit:    rate.Limit,
		LimitNow: p.limitNow(now),
		Burst:    *rate.Burst,
		Depth:    p.bucket.Held(),
		Queued:   p.bucket.Queued(),
		Capacity: p.bucket.Capacity(),
		InFlight: int(p.attempting.Load()),
		Limiter:  "local",
		Ready:    true,
		Received: p.received(),
		Outcomes: map[Outcome]int64{},

		OldestWait:       p.bucket.oldestWait(now).Seconds(),
		MaxQueueTime:     p.settings.Load().bucket.MaxQueueTime.Seconds(),
		ExpiredPerSecond: float64(expired) / recentWindow,
	}
	if p.cfg.Key != nil {
		s.KeyFrom = p.cfg.Key.From
	}
	hold := holdPaused
	if !p.paused.on() {
		hold = p.bucket.destinationHold(now)
	}
	switch {
	case p.draining.Load():
		s.State = StateDraining
	case hold != holdNone:
		s.State = string(hold)
	case p.stalled(now) != nil:
		s.State = StateStalled
	}
	if fr, ok := p.lim.(FallbackReporter); ok {
		s.Limiter = "shared"
		if fr.Fallback() {
			s.Limiter = "fallback"
		}
	}
	if err := p.Ready(); err != nil {
		s.Ready, s.NotReady = false, err.Error()
	}
	for i, o := range outcomes {
		s.Outcomes[o] = p.count[i].Load()
	}
	return s
}

// limitNow is the limit in force at now: the pipeline's, or under
// rate.adaptive with one destination, that destination's when lower.
// With several destinations, GET /v1/pipelines/{name}/keys shows each.
func (p *Pipeline) limitNow(now time.Time) float64 {
	limit := p.lim.Limit(now)
	if d, ok := p.bucket.soleLimit(now); ok {
		limit = min(limit, d)
	}
	return limit
}

// received returns how many messages the pipeline has taken from its
// source: its series of shaper_messages_received_total, which the fetcher
// counts, so that the API and the metric cannot disagree.
func (p *Pipeline) received() int64 {
	var m dto.Metric
	_ = p.m.received.Write(&m) // a counter's Write does not fail
	return int64(m.GetCounter().GetValue())
}

// oldestWait returns how long, at now, the message that has waited longest
// for its departure has waited: the head of a lane's FIFO, or a lane's
// first retry once it is due (a retry waits from its due time, as
// max_queue_time counts). It looks at every lane, as top does.
func (b *bucket) oldestWait(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var oldest time.Duration
	for _, l := range b.lanes {
		if l.queued() > 0 {
			oldest = max(oldest, now.Sub(l.fifo[l.head].queued))
		}
		if len(l.retries) > 0 && !l.retries[0].due.After(now) {
			oldest = max(oldest, now.Sub(l.retries[0].due))
		}
	}
	return oldest
}

// Keys returns the n deepest lanes of the bucket, deepest first.
func (p *Pipeline) Keys(n int) []KeyStatus {
	return p.bucket.top(n, p.clock.Now())
}

// ErrInvalidRate is returned by SetRate for a limit or burst it refuses.
var ErrInvalidRate = errors.New("invalid rate")

// SetRate changes the pipeline's rate at run time, from now on; the next
// departure uses it. A burst of 0 keeps the current burst. The effective
// bucket capacity follows the new limit. It refuses, changing nothing, a
// rate that a config file could not hold (the same rules as validate).
func (p *Pipeline) SetRate(limit float64, burst int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if burst == 0 {
		burst = *p.rate.Burst
	}
	if err := checkRate(p.rate.Mode, limit, burst, p.settings.Load().bucket.MaxQueueTime); err != nil {
		return err
	}
	p.setRateLocked(limit, burst)
	return nil
}

// checkRate is validateRate for a rate given at run time, as an error
// wrapping ErrInvalidRate.
func checkRate(mode string, limit float64, burst int, maxQueueTime time.Duration) error {
	var ps check.Problems
	validateRate("rate", mode, limit, &burst, maxQueueTime, &ps)
	if err := ps.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRate, err)
	}
	return nil
}

// setRateLocked puts a checked rate in force from now: the limiter, a
// scheduler waiting under the old rate, and the bucket capacity, which
// follows the limit and the bucket settings in force. It requires that
// p.mu is held.
func (p *Pipeline) setRateLocked(limit float64, burst int) {
	old := p.rate
	p.lim.SetRate(limit, burst)
	p.alarm.Ring() // a scheduler waiting for a slot of the old rate asks again
	p.rate.Limit, p.rate.Burst = limit, &burst
	if p.adaptive != nil {
		p.adaptive.setCeiling(limit) // the adaptive rate starts again from the new limit
	}
	p.fitCapacityLocked(limit)
	p.log.Info("rate changed", "limit", limit, "burst", burst, "old_limit", old.Limit, "old_burst", *old.Burst, "capacity", p.bucket.Capacity())
}
