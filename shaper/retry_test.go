package shaper

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestRetryPolicyClassifiesFailures(t *testing.T) {
	cfg := RetryConfig{MaxAttempts: 3, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, MaxElapsed: time.Minute}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		give      error
		attempts  int
		wantRetry bool
		wantWhy   Reason
	}{
		{"network error retried", errors.New("connection refused"), 1, true, ""},
		{"timeout retried", fmt.Errorf("send: %w", errors.New("context deadline exceeded")), 1, true, ""},
		{"408 retried", &StatusError{Code: 408}, 1, true, ""},
		{"425 retried", &StatusError{Code: 425}, 1, true, ""},
		{"429 retried", &StatusError{Code: 429}, 1, true, ""},
		{"500 retried", &StatusError{Code: 500}, 1, true, ""},
		{"502 retried", &StatusError{Code: 502}, 1, true, ""},
		{"503 retried", &StatusError{Code: 503}, 1, true, ""},
		{"504 retried", &StatusError{Code: 504}, 1, true, ""},
		{"400 rejected", &StatusError{Code: 400}, 1, false, ReasonRejected},
		{"404 rejected", &StatusError{Code: 404}, 1, false, ReasonRejected},
		{"501 rejected", &StatusError{Code: 501}, 1, false, ReasonRejected},
		{"malformed", fmt.Errorf("too big: %w", ErrMalformed), 1, false, ReasonMalformed},
		{"attempts exhausted", &StatusError{Code: 503}, 3, false, ReasonExhausted},
		{"permanent wins over exhausted", &StatusError{Code: 400}, 3, false, ReasonRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewRetryPolicy(cfg)
			d := p.Decide(tt.give, tt.attempts, now, now)
			if d.Retry != tt.wantRetry || d.Reason != tt.wantWhy {
				t.Errorf("Decide(%v, %d) = %+v; want retry %v reason %q", tt.give, tt.attempts, d, tt.wantRetry, tt.wantWhy)
			}
		})
	}
}

func TestBackoffIsExponentialWithFullJitter(t *testing.T) {
	p := NewRetryPolicy(RetryConfig{MaxAttempts: 10, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, MaxElapsed: time.Hour})
	var bounds []int64
	p.jitter = func(n int64) int64 { bounds = append(bounds, n-1); return n - 1 } // always the top of the range
	for attempt := 1; attempt <= 6; attempt++ {
		p.Backoff(attempt)
	}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if time.Duration(bounds[i]) != w*time.Millisecond {
			t.Errorf("Backoff(%d) bound = %v; want %v", i+1, time.Duration(bounds[i]), w*time.Millisecond)
		}
	}
	p.jitter = func(n int64) int64 { return 0 } // the bottom: full jitter reaches zero
	if got := p.Backoff(4); got != 0 {
		t.Errorf("Backoff(4) with zero jitter = %v; want 0", got)
	}
}

func TestBackoffJitterSpreadsUniformly(t *testing.T) {
	p := NewRetryPolicy(RetryConfig{MaxAttempts: 10, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, MaxElapsed: time.Hour})
	var low, high int
	for range 2000 {
		d := p.Backoff(1)
		if d < 0 || d > 100*time.Millisecond {
			t.Fatalf("Backoff(1) = %v; want within [0, 100ms]", d)
		}
		if d < 50*time.Millisecond {
			low++
		} else {
			high++
		}
	}
	if low < 800 || high < 800 {
		t.Errorf("Backoff(1) halves = %d/%d over 2000 draws; want roughly even", low, high)
	}
}

func TestRetryAfterSetsTheNextAttemptCappedAtMaxBackoff(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewRetryPolicy(RetryConfig{MaxAttempts: 5, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 5 * time.Second, MaxElapsed: time.Hour})
	tests := []struct {
		name       string
		retryAfter time.Duration
		want       time.Duration
	}{
		{"honoured", 3 * time.Second, 3 * time.Second},
		{"capped", time.Hour, 5 * time.Second},
	}
	for _, tt := range tests {
		d := p.Decide(&StatusError{Code: 429, RetryAfter: now.Add(tt.retryAfter)}, 1, now, now)
		if !d.Retry || d.At.Sub(now) != tt.want {
			t.Errorf("%s: Decide(429, Retry-After %v) = %+v; want retry after %v", tt.name, tt.retryAfter, d, tt.want)
		}
	}
}

func TestMaxElapsedEndsRetries(t *testing.T) {
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewRetryPolicy(RetryConfig{MaxAttempts: 100, InitialBackoff: time.Second, MaxBackoff: time.Second, MaxElapsed: 10 * time.Second})
	p.jitter = func(n int64) int64 { return n - 1 }
	if d := p.Decide(&StatusError{Code: 503}, 2, first, first.Add(5*time.Second)); !d.Retry {
		t.Errorf("Decide at 5s of 10s = %+v; want retry", d)
	}
	if d := p.Decide(&StatusError{Code: 503}, 2, first, first.Add(9500*time.Millisecond)); d.Retry || d.Reason != ReasonExhausted {
		t.Errorf("Decide at 9.5s of 10s with 1s backoff = %+v; want exhausted", d)
	}
}
