package shaper

import (
	"errors"
	"math/rand/v2"
	"time"
)

// Reason says why a message is dead-lettered, sent as the Shaper-Reason
// header.
type Reason string

// Reasons a message is dead-lettered.
const (
	ReasonExpired   Reason = "expired"   // it would have waited longer than max_queue_time
	ReasonRejected  Reason = "rejected"  // the sink answered with a permanent error (4xx), or its URL was refused
	ReasonExhausted Reason = "exhausted" // retries ran out: max_attempts or max_elapsed
	ReasonMalformed Reason = "malformed" // it cannot become a request
)

// retryableStatus lists the statuses worth another attempt; every other
// non-2xx status is permanent.
var retryableStatus = map[int]bool{408: true, 425: true, 429: true, 500: true, 502: true, 503: true, 504: true}

// RetryPolicy decides what follows a failed attempt: another attempt, and
// when, or a dead letter, and why.
type RetryPolicy struct {
	cfg RetryConfig
	// jitter returns a uniform value in [0, n); rand.Int64N unless a test
	// replaces it.
	jitter func(n int64) int64
}

// NewRetryPolicy returns the policy of a validated RetryConfig.
func NewRetryPolicy(cfg RetryConfig) *RetryPolicy {
	return &RetryPolicy{cfg: cfg, jitter: rand.Int64N}
}

// Decision is the verdict of a RetryPolicy on a failed attempt.
type Decision struct {
	// Retry is true when another attempt should be made at At.
	Retry bool
	At    time.Time
	// Reason is the dead-letter reason when Retry is false.
	Reason Reason
}

// Decide judges the failure err of attempt number attempts (1 for the first)
// of a task whose first attempt was at first, at now.
func (p *RetryPolicy) Decide(err error, attempts int, first, now time.Time) Decision {
	var status *StatusError
	isStatus := errors.As(err, &status)
	switch {
	case errors.Is(err, ErrMalformed):
		return Decision{Reason: ReasonMalformed}
	case isStatus && !retryableStatus[status.Code], errors.Is(err, ErrRefused):
		return Decision{Reason: ReasonRejected}
	case attempts >= p.cfg.MaxAttempts:
		return Decision{Reason: ReasonExhausted}
	}
	at := now.Add(p.Backoff(attempts))
	if isStatus && status.RetryAfter.After(at) {
		at = status.RetryAfter
		if limit := now.Add(p.cfg.MaxBackoff); at.After(limit) {
			at = limit
		}
	}
	if at.Sub(first) > p.cfg.MaxElapsed {
		return Decision{Reason: ReasonExhausted}
	}
	return Decision{Retry: true, At: at}
}

// Backoff returns the wait after attempt number attempts (1 for the first):
// exponential with full jitter, uniform in [0, min(max_backoff,
// initial_backoff × 2^(attempts-1))].
func (p *RetryPolicy) Backoff(attempts int) time.Duration {
	bound := p.cfg.InitialBackoff
	for i := 1; i < attempts && bound < p.cfg.MaxBackoff; i++ {
		bound *= 2
	}
	bound = min(bound, p.cfg.MaxBackoff)
	return time.Duration(p.jitter(int64(bound) + 1))
}
