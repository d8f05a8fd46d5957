package shaper

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/logtest"
)

// The breaker opens after failures in a row, lets one probe through once
// open_for has passed (stretched by at most a tenth), doubles on each failed
// probe up to max_open, and closes when the sink answers.
func TestTheBreakerOpensProbesDoublesAndCloses(t *testing.T) {
	failures := 3
	cfg := BreakerConfig{Failures: &failures, OpenFor: time.Second, MaxOpen: 3 * time.Second}
	wakes := 0
	g := gate{log: slog.New(slog.DiscardHandler), changed: func() { wakes++ },
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
	if _, open := g.counts(); open {
		t.Error("counts says open after the breaker closed")
	}
}

// defaultBreaker is the breaker's default config.
func defaultBreaker() BreakerConfig {
	var d DeliveryConfig
	d.SetDefaults()
	return d.Breaker
}

// answerErr is an answer to a request at now, for the breaker: F a failure
// (a 503), S a success, A a 429 whose Retry-After is its own time (0).
func answerErr(c byte, now time.Time) error {
	switch c {
	case 'F':
		return &StatusError{Code: 503}
	case 'A':
		return &StatusError{Code: 429, RetryAfter: now}
	}
	return nil
}

// The breaker's rule with its defaults, on explicit times: it opens when
// the sink fails every request for window (at least failures of them, at
// most one success among the last 20 answers), never for a sink that
// answers some with success, however it fails the others.
func TestTheBreakerOpensForADownSinkNeverForADegradedOne(t *testing.T) {
	tests := []struct {
		name string
		give string        // the answers, repeated, one every each
		each time.Duration // between two answers
		for_ time.Duration // how long they come
		want time.Duration // when the breaker opens, from the first answer; -1: never
	}{
		{name: "down", give: "F", each: 20 * time.Millisecond, for_: 10 * time.Second, want: 500 * time.Millisecond},
		{name: "down, seldom called: failures in a row", give: "F", each: time.Second, for_: time.Minute, want: 4 * time.Second},
		{name: "down, answering 429 Retry-After: 0", give: "A", each: 5 * time.Millisecond, for_: 10 * time.Second, want: 500 * time.Millisecond},
		{name: "nearly down: 1 success in 40", give: "S" + strings.Repeat("F", 39), each: 20 * time.Millisecond, for_: 10 * time.Second, want: 520 * time.Millisecond},
		{name: "five failures within the window", give: "FFFFF", each: 20 * time.Millisecond, for_: 80 * time.Millisecond, want: -1},
		{name: "degraded: each message 503, 503, then 200", give: "FFS", each: 5 * time.Millisecond, for_: time.Minute, want: -1},
		{name: "degraded: half", give: "FS", each: 10 * time.Millisecond, for_: time.Minute, want: -1},
		{name: "degraded: 1 success in 20", give: "S" + strings.Repeat("F", 19), each: 20 * time.Millisecond, for_: time.Minute, want: -1},
		{name: "degraded, seldom called: five failures in a row between successes", give: "SFSFSFFFFF", each: 200 * time.Millisecond, for_: time.Minute, want: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := gate{log: slog.New(slog.DiscardHandler), changed: func() {}, jitter: func(int64) int64 { return 0 }}
			t0 := time.Unix(0, 0)
			got := time.Duration(-1)
			for i := 0; time.Duration(i)*tt.each <= tt.for_; i++ {
				now := t0.Add(time.Duration(i) * tt.each)
				g.result(now, answerErr(tt.give[i%len(tt.give)], now), false, defaultBreaker())
				if _, open := g.counts(); open {
					got = now.Sub(t0)
					break
				}
			}
			if got != tt.want {
				t.Errorf("%q every %v: opens at %v; want %v (-1: never)", tt.give, tt.each, got, tt.want)
			}
		})
	}
}

// The failures in a row after the first failures (5), until the breaker
// opens, spend no attempt: with the old rule the breaker would have opened
// at the fifth, and the wait that tells down from degraded must not
// exhaust messages. The fifth counts, as the one that opens it does.
func TestFailuresWhileTheBreakerSuspectsSpendNoAttempt(t *testing.T) {
	g := gate{log: slog.New(slog.DiscardHandler), changed: func() {}, jitter: func(int64) int64 { return 0 }}
	now := time.Unix(0, 0)
	var spare []bool
	for range 27 {
		spare = append(spare, g.result(now, &StatusError{Code: 503}, false, defaultBreaker()))
		now = now.Add(20 * time.Millisecond)
	}
	// Answers 1-5 count, 6-25 (until 480ms) are spare, 26 (500ms) opens
	// and counts, 27 is in flight at the opening.
	for i, got := range spare {
		want := i >= 5 && i != 25
		if got != want {
			t.Errorf("failure %d: spare = %v; want %v", i+1, got, want)
		}
	}
	if _, open := g.counts(); !open {
		t.Error("not open after 500ms of failures")
	}
}

// Any success closes the breaker: the probe's, or one of a request in
// flight at the opening; a failed probe doubles the opening, up to
// max_open (default 2s).
func TestAnySuccessClosesTheBreakerAndAFailedProbeDoublesUpToMaxOpen(t *testing.T) {
	b := defaultBreaker()
	open := func() (*gate, time.Time) {
		g := &gate{log: slog.New(slog.DiscardHandler), changed: func() {}, jitter: func(int64) int64 { return 0 }}
		now := time.Unix(0, 0)
		for ; !now.After(time.Unix(0, 0).Add(b.Window)); now = now.Add(20 * time.Millisecond) {
			g.result(now, &StatusError{Code: 503}, false, b)
		}
		return g, now
	}
	g, now := open()
	g.result(now, nil, false, b) // a request in flight at the opening
	if _, why := g.shut(now); why != holdNone {
		t.Errorf("after a success of a request in flight: %q; want closed", why)
	}

	g, now = open()
	for _, want := range []time.Duration{2 * time.Second, 2 * time.Second} {
		now = g.openUntil
		if !g.departing(now) {
			t.Fatal("the first departure after the opening is not the probe")
		}
		g.result(now, &StatusError{Code: 503}, true, b)
		if until, why := g.shut(now); why != holdOpen || until.Sub(now) != want {
			t.Fatalf("after a failed probe: %q for %v; want open for %v", why, until.Sub(now), want)
		}
	}
	now = g.openUntil
	g.departing(now)
	g.result(now, nil, true, b)
	if _, why := g.shut(now); why != holdNone {
		t.Errorf("after a probe answered with success: %q; want closed", why)
	}
}

// A sink that throttles every second for a minute, and a breaker that
// opens and closes every second: the log holds at most one line of each
// kind per summaryWindow, whose counts add up to the events; each event
// is a line at DEBUG.
func TestPushBackIsLoggedAsCountedSummaries(t *testing.T) {
	var buf logtest.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	failures := 1
	b := BreakerConfig{Failures: &failures, OpenFor: 100 * time.Millisecond, MaxOpen: 100 * time.Millisecond}
	g := gate{log: log, changed: func() {}, jitter: func(int64) int64 { return 0 }}
	t0 := time.Unix(0, 0)
	const events = 60
	for i := range events {
		now := t0.Add(time.Duration(i) * time.Second)
		g.throttle(now, now.Add(100*time.Millisecond), &StatusError{Code: 429})
		g.shut(now.Add(100 * time.Millisecond)) // the throttle is over
		// The first opens the breaker, the others were in flight.
		for j := range 20 {
			g.result(now.Add(200*time.Millisecond+time.Duration(j)*time.Millisecond), &StatusError{Code: 503}, false, b)
		}
		g.result(now.Add(300*time.Millisecond), nil, false, b)
	}
	g.shut(t0.Add(events*time.Second + summaryWindow)) // the last counts are due

	counts := map[string]int{}
	lines := map[string]int{}
	for l := range strings.Lines(buf.String()) {
		var line struct {
			Msg   string `json:"msg"`
			Count int    `json:"count"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		lines[line.Msg]++
		counts[line.Msg] += line.Count
	}
	for _, msg := range []string{msgThrottles, msgThrottleOver, msgBreakerOpen, msgBreakerClosed} {
		if want := events/int(summaryWindow/time.Second) + 1; lines[msg] > want || counts[msg] != events {
			t.Errorf("%q: %d lines counting %d; want at most %d lines counting %d", msg, lines[msg], counts[msg], want, events)
		}
	}
	if t.Failed() {
		t.Log(buf.String())
	}
}
