package shaper

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Status is a pipeline's state, as GET /v1/pipelines shows it.
type Status struct {
	Name string `json:"name"`
	Mode string `json:"mode"`
	// Limit is the configured rate; LimitNow the rate in force (they differ
	// during warm-up).
	Limit    float64 `json:"limit"`
	LimitNow float64 `json:"limit_now"`
	Burst    int     `json:"burst"`
	// Limiter is local, shared (through Redis), or fallback (shared, but
	// Redis cannot be reached and the local fallback_limit is in force).
	Limiter string `json:"limiter"`
	// Depth is every message held (queued, retrying, in flight); Queued
	// those waiting for a departure.
	Depth    int              `json:"depth"`
	Queued   int              `json:"queued"`
	Capacity int              `json:"capacity"`
	InFlight int              `json:"in_flight"`
	Ready    bool             `json:"ready"`
	NotReady string           `json:"not_ready,omitempty"`
	Outcomes map[string]int64 `json:"outcomes"`
}

// Status returns the pipeline's current state.
func (p *Pipeline) Status() Status {
	p.mu.Lock()
	rate := p.rate
	p.mu.Unlock()
	s := Status{
		Name:     p.cfg.Name,
		Mode:     rate.Mode,
		Limit:    rate.Limit,
		LimitNow: p.lim.Limit(time.Now()),
		Burst:    *rate.Burst,
		Depth:    p.bucket.Held(),
		Queued:   p.bucket.Queued(),
		Capacity: p.bucket.Capacity(),
		InFlight: int(p.attempting.Load()),
		Limiter:  "local",
		Ready:    true,
		Outcomes: map[string]int64{},
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

// ErrInvalidRate is returned by SetRate for a limit or burst it refuses.
var ErrInvalidRate = errors.New("invalid rate")

// SetRate changes the pipeline's rate at run time; the next departure uses
// it. A burst of 0 keeps the current burst. The effective bucket capacity
// follows the new limit.
func (p *Pipeline) SetRate(limit float64, burst int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if burst == 0 {
		burst = *p.rate.Burst
	}
	switch {
	case !(limit > 0) || math.IsInf(limit, 0):
		return fmt.Errorf("%w: limit must be > 0, got %v", ErrInvalidRate, limit)
	case burst < 1:
		return fmt.Errorf("%w: burst must be >= 1, got %d", ErrInvalidRate, burst)
	case burst > 1 && p.rate.Mode == ModeLeaky:
		return fmt.Errorf("%w: leaky mode never bursts, got burst %d", ErrInvalidRate, burst)
	}
	p.lim.SetRate(limit, burst)
	p.rate.Limit, p.rate.Burst = limit, &burst
	p.bucket.SetCapacity(effectiveCapacity(p.settings.Load().bucket, limit))
	p.m.capacity.Set(float64(p.bucket.Capacity()))
	p.log.Info("rate changed", "limit", limit, "burst", burst, "capacity", p.bucket.Capacity())
	return nil
}
