package shaper

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

// The breaker opens after failures in a row, lets one probe through once
// open_for has passed (stretched by at most a tenth), doubles on each failed
// probe up to max_open, and closes when the sink answers.
func TestTheBreakerOpensProbesDoublesAndCloses(t *testing.T) {
	failures := 3
	cfg := BreakerConfig{Failures: &failures, OpenFor: time.Second, MaxOpen: 3 * time.Second}
	wakes := 0
	g := gate{log: slog.New(slog.DiscardHandler), changed: func() { wakes++ }, waiting: func() int { return 0 },
		jitter: func(n int64) int64 { return n - 1 }} // the longest stretch
	down := errors.New("connection refused")
	now := time.Unix(0, 0)

	for i := range failures {
		if g.result(now, down, false, cfg) {
			t.Fatalf("failure %d counted as in flight at the opening", i+1)
		}
	}
	if until, why := g.shut(now); why != holdOpen || until != now.Add(1100*time.Millisecond) {
		t.Fatalf("after %d failures: shut = %v, %q; want open until 1.1s", failures, until.Sub(now), why)
	}
	if !g.result(now, down, false, cfg) {
		t.Errorf("a failure while open was not counted as in flight at the opening")
	}
	for _, want := range []time.Duration{2200 * time.Millisecond, 3300 * time.Millisecond, 3300 * time.Millisecond} {
		if _, held := g.shut(now); held != holdOpen {
			t.Fatalf("during the opening: %q; want open", held)
		}
		now = g.openUntil
		if _, why := g.shut(now); why != holdNone {
			t.Fatalf("at the end of the opening: %q; want the probe let through", why)
		}
		if !g.departing(now) {
			t.Fatal("the first departure after the opening is not the probe")
		}
		if _, why := g.shut(now); why != holdOpen {
			t.Fatalf("with the probe in flight: %q; want open (one probe at a time)", why)
		}
		g.result(now, down, true, cfg)
		if until, _ := g.shut(now); until.Sub(now) != want {
			t.Fatalf("after a failed probe: open for %v; want %v (doubled, capped at max_open, stretched by a tenth)", until.Sub(now), want)
		}
	}
	now = g.openUntil
	g.departing(now)
	g.result(now, &StatusError{Code: 400}, true, cfg) // the sink answers, if not with a success
	if _, why := g.shut(now); why != holdNone {
		t.Errorf("after a probe the sink answered: %q; want closed", why)
	}
	if _, open, _ := g.counts(); open {
		t.Error("counts says open after the breaker closed")
	}
}
